"""What a provider is: the `Provider` protocol, the `Exchange` it produces.

A provider turns one selected backend + request into an `Exchange` — the
upstream answer up to (and including) its first bytes, before anything has
been sent to the client — so the pipeline can still retry elsewhere. Then
`finish()` / `relay()` give the client's body or stream in OpenAI's wire
format, which each front door renders (router/pipeline.py `Routed`). It also says how
the health probe reaches a backend of its kinds and how the probe's answer
lists models. The registry (`router.providers`) maps kinds to providers.

This module imports no sibling: every provider module imports it, never the
other way round.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

    from ..core.backend import BackendSpec
    from ..core.errors import RouterError
    from ..request import Envelope


# The wire formats an Exchange's body can be in (`Exchange.wire`).
WIRE_OPENAI = "openai"
WIRE_ANTHROPIC = "anthropic"


class Upstreams(Protocol):
    """What a provider needs of the web process: its upstream transport
    (router.runtime.Runtime is one; providers never import the runtime)."""

    transport: httpx.AsyncBaseTransport | None


class UpstreamFailed(Exception):
    """Failed before the first byte reached the client: safe to retry elsewhere.

    `reason` may reach the client (in the final 502/504); `detail` (e.g. a
    command's stderr) goes to the observation only, never to the client.
    `error`: the router error the client is told when this is the last
    failure (an answer head past the cap: `UpstreamResponseTooLarge`)."""

    def __init__(
        self, reason: str, *, timeout: bool = False, detail: str = "", error: type[RouterError] | None = None
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.timeout = timeout
        self.detail = detail
        self.error = error


class AnswerCut(Exception):
    """Raised by a relay after its last bytes when the upstream failed and the
    answer has no way to say so in band (a whole JSON answer relayed as it
    comes, not an event stream): the door must end the client's response
    without its end, so the client sees a cut answer, never a complete one."""


@dataclass(slots=True)
class Exchange:
    spec: BackendSpec
    status: int
    headers: list[tuple[str, str]]
    content_type: str
    body: bytes  # whole body (non-stream / error) or the first chunk (stream)
    stream: AsyncIterator[bytes] | None = None  # the rest of a streaming body
    close: Callable[[], Any] | None = None  # closes the upstream response
    upstream_ms: float = 0.0  # time to the first byte
    info: dict[str, Any] = field(default_factory=dict)  # observation extras
    # The wire format of `body` / `stream`: "openai" (every front door renders
    # it), or "anthropic" when an Anthropic-kind provider answered the
    # Anthropic door's own request as is (router/frontends/messages.py relays
    # it without translating twice).
    wire: str = WIRE_OPENAI
    # False when the provider answered without asking the backend (the
    # count_tokens estimate): the answer says nothing of its health or latency.
    upstream: bool = True


class Renders(Protocol):
    """What renders an exchange for its client: a provider, or a stand-in that
    answers without one (router.respcache's hit and storing miss)."""

    def finish(self, exchange: Exchange, env: Envelope) -> tuple[bytes, dict]:
        """A non-streaming answer: (the client's body in OpenAI's shape, observation info)."""
        ...

    def relay(
        self, exchange: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]
    ) -> AsyncIterator[bytes]:
        """A streaming answer as OpenAI wire bytes, chunk by chunk. Its `finally`
        closes the upstream and calls `done(ok, info)` exactly once (ok: True
        ended, False failed mid-stream, None the consumer left). A failure
        ends an event stream with an error event, anything else with
        `AnswerCut`."""
        ...


class Provider(Renders, Protocol):
    kinds: frozenset[str]  # the `kind:` values this provider serves
    path: str  # the execution path: "passthrough" | "normalized"

    async def start(self, rt: Upstreams, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        """Send to `spec`; read the whole body (non-stream) or the first chunk."""
        ...

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        """The URL the active probe GETs; `path` is health.path (the operator's
        probe path for OpenAI-compatible servers). None = never probed."""
        ...

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        """Model names from a probe's 200 JSON object; None = not a listing."""
        ...

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        """The headers of the probe's GET: the provider's own auth header(s)
        and the backend's configured headers."""
        ...

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        """Where the backend publishes its own load (Prometheus text, read by
        the tasks process); `path` is health.load_path. None = it publishes
        none (only self-hosted OpenAI-compatible servers do)."""
        ...


class Wrapper:
    """A provider around another (`inner`): it probes, reads load and lists
    models as `inner` does, and says how it answers requests itself."""

    def __init__(self, inner: Provider) -> None:
        self.inner = inner
        self.kinds: frozenset[str] = inner.kinds
        self.path: str = inner.path
        # The rest of the OpenAI surface it passes through (providers.serves).
        self.surface: frozenset[str] = getattr(inner, "surface", frozenset())

    def probe_url(self, spec: BackendSpec, path: str) -> str | None:
        return self.inner.probe_url(spec, path)

    def probe_headers(self, spec: BackendSpec) -> dict[str, str]:
        return self.inner.probe_headers(spec)

    def load_url(self, spec: BackendSpec, path: str) -> str | None:
        return self.inner.load_url(spec, path)

    def listed_models(self, data: dict[str, Any]) -> list[str] | None:
        return self.inner.listed_models(data)

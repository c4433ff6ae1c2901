"""`responses_choice(inner)`: an OpenAI-compatible provider whose backends
serve `/v1/responses` natively or through the chat bridge, each as its
`responses:` setting says.

OpenAI's API, vLLM and SGLang serve the Responses API; llama.cpp's server,
TGI and many others serve only chat and answer `/v1/responses` with a 404 (or
a 405), which a client would take for "no such model". Per backend
(`BackendSpec.responses`):

- `native`: the request is passed through as it is (whatever it answers);
- `bridge`: it is converted to a chat request (`bridged(inner)`, as for the
  chat-only providers) and the answer converted back;
- `auto` (the default): passed through until the backend's answer says it
  does not serve the path: a 404 or 405 to a Responses call of a backend not
  yet known to serve it. That same request is then served through the bridge
  at once, and when the bridge got an answer other than 404/405 (so the
  server is there and it was the path it lacked, not the model), the backend
  is remembered as chat-only: its next Responses calls go straight to the
  bridge. Any other answer to a native call proves the path is served, and is
  remembered too, so a later 404 (a model gone) is relayed as it came.

What was learned is this process's, keyed by the backend's name and URL (a
backend moved to another server is learned again), and bounded
(`LEARNED_MAX` backends; the oldest entry makes room). Every other endpoint,
and the probe and model listing, are `inner`'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from ...core.backend import BackendSpec
from ...request import Envelope
from ..base import Exchange, Provider, Wrapper
from .provider import BridgedProvider

NATIVE, BRIDGE, AUTO = "native", "bridge", "auto"
MODES = (NATIVE, BRIDGE, AUTO)
NOT_SERVED = frozenset({404, 405})  # what a server that lacks the path answers
LEARNED_MAX = 10_000


class Learned:
    """What this process learned of each `auto` backend: NATIVE or BRIDGE."""

    def __init__(self, limit: int = LEARNED_MAX) -> None:
        self._limit = limit
        self._modes: dict[tuple[str, str], str] = {}

    def get(self, spec: BackendSpec) -> str | None:
        return self._modes.get((spec.name, spec.url))

    def set(self, spec: BackendSpec, mode: str) -> None:
        key = (spec.name, spec.url)
        if key not in self._modes and len(self._modes) >= self._limit:
            del self._modes[next(iter(self._modes))]
        self._modes[key] = mode

    def __len__(self) -> int:
        return len(self._modes)


LEARNED = Learned()


class ResponsesChoiceProvider(Wrapper):
    """`inner` for every endpoint; `/v1/responses` natively or bridged, per backend."""

    chooses_responses = True  # router.providers.RESPONSES_KINDS: `responses:` applies

    def __init__(self, inner: Provider, learned: Learned = LEARNED) -> None:
        super().__init__(inner)
        self.bridge = BridgedProvider(inner)
        self.learned = learned

    def __repr__(self) -> str:
        return f"responses_choice({self.inner!r})"

    async def start(self, rt, spec: BackendSpec, env: Envelope, model: str) -> Exchange:
        if env.endpoint != "responses":
            return await self.inner.start(rt, spec, env, model)
        mode = spec.responses if spec.responses in MODES else AUTO
        known = self.learned.get(spec) if mode == AUTO else mode
        if known == BRIDGE:
            return await self.bridge.start(rt, spec, env, model)
        native = await self.inner.start(rt, spec, env, model)
        if known == NATIVE:
            return native
        if native.status not in NOT_SERVED:
            if native.status < 500:  # a 5xx may be a proxy's, not the server's
                self.learned.set(spec, NATIVE)
            return native
        if native.close is not None:
            await native.close()
        bridged = await self.bridge.start(rt, spec, env, model)
        if bridged.status not in NOT_SERVED:
            self.learned.set(spec, BRIDGE)
        return bridged

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        return self.bridge.finish(ex, env)  # the inner's own when the exchange was not bridged

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        return self.bridge.relay(ex, env, done)


def responses_choice(inner: Provider) -> Provider:
    """`inner` (an OpenAI-compatible provider) whose backends serve
    `POST /v1/responses` as their `responses:` setting says."""
    return ResponsesChoiceProvider(inner)

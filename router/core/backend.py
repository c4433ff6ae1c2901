"""The immutable description of one backend (a replica or a provider).

Built from YAML (`source="config"`), the admin (`"admin"`) or the AppProxy
reconcile (`"appproxy"`). Runtime facts (health, in-flight, latency) are not
here: they live in `router.core.health.BackendState`, one per process.
`kind` is an opaque string here: which kinds exist, and what each means, is
the provider registry's business (`router.providers`), checked at config load.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .buckets import Quota
from .secret import Secret

# scheme://userinfo@ — greedy up to the last '@' before the path, so a
# password with a stray '@' is masked whole.
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/?#]*@")


def masked_url(url: str) -> str:
    """The URL as it may be shown (pages, JSON, logs): userinfo → `***`.

    `http://user:${PASS}@host:8000/v1` → `http://***@host:8000/v1`; a URL
    without userinfo is returned unchanged.
    """
    return _USERINFO.sub(r"\1***@", url)


@dataclass(frozen=True, slots=True)
class CliSpec:
    """What a `kind: cli` backend runs (router/providers/cli.py): an argv, never a shell."""

    command: tuple[str, ...]
    prompt: str = "stdin"  # "stdin" | "argument" (the argv items holding {prompt})
    env: tuple[str, ...] = ()  # names of the router's variables the child sees
    cwd: str | None = None  # None = the router's working directory
    timeout: float = 300.0  # seconds for the whole run


@dataclass(frozen=True, slots=True)
class BackendSpec:
    name: str
    url: str  # base URL without trailing slash, e.g. http://127.0.0.1:8001
    kind: str = "openai_compat"  # a kind of the provider registry
    models: tuple[str, ...] = ()  # client-facing names (aliases are more names)
    served_model: str | None = None  # the model field sent upstream, if rewritten
    weight: int = 100  # 1..1000
    capacity: int | None = None  # max in flight; None = unlimited
    priority: int = 0  # lower is preferred
    api_key: Secret | None = None
    source: str = "config"  # config | admin | appproxy
    connect_timeout: float = 5.0
    read_timeout: float = 600.0
    headers: tuple[tuple[str, str], ...] = field(default=())
    cli: CliSpec | None = None  # the command of a cli backend
    # How an OpenAI-compatible backend serves /v1/responses: "native",
    # "bridge" (through its chat endpoint) or "auto" (router.providers.bridge.choice).
    responses: str = "auto"
    quota: Quota | None = None  # upstream quota (core.buckets); None: none
    # An operator's drain: never selected for a new request (core/selection);
    # still in the snapshot, so probes, /status and the lists keep it.
    drained: bool = False
    # Disaggregated prefill/decode (docs/disaggregation.md): the phase this
    # replica serves for a model with a `disaggregation` protocol
    # ("prefill" | "decode" | "both"), and an SGLang prefill replica's
    # bootstrap port (None: the server's default, sent as null).
    role: str = "both"
    bootstrap_port: int | None = None

    def served_name(self, requested: str) -> str:
        return self.served_model or requested

    def __repr__(self) -> str:  # the resolved URL may carry a password
        return f"BackendSpec(name={self.name!r}, kind={self.kind!r}, url={masked_url(self.url)!r}, source={self.source!r})"

"""The provider registry: the one table of provider kinds.

Every place that cares about a backend's `kind` derives from `PROVIDERS`:
the dispatch in the pipeline (`provider_for`), config validation of `kind:`
(`KINDS`), the dashboard's path column (`path_of`), and the health probe
task (`probe_url`, `listed_models`). `router.core` stays pure and knows no
kinds: it carries `kind` as an opaque string and the probe path as data.

Invariants:
- Each kind is served by exactly one provider (checked at import).
- A kind no provider claims never passes config validation; one that reaches
  the registry anyway (a hand-edited DB row) is treated as OpenAI-compatible,
  as every kind outside the native list always was.

Adding a provider kind is:
1. one module (or package) under `router/providers/` with an object that
   satisfies `base.Provider`: its `kinds`, its execution `path`
   ("passthrough" or "normalized"), `start()`, `finish()`/`relay()`, `probe_url()`,
   `probe_headers()` and `listed_models()`; shared upstream helpers are in `http.py`;
2. one line in `PROVIDERS` below;
3. its tests (`tests/router/providers/`), and its row in docs/mixed-providers.md
   (the classifier table, checked by tests/mix/test_docs.py).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from ..core.backend import BackendSpec
from .anthropic.provider import ANTHROPIC
from .base import Provider
from .bridge.choice import responses_choice
from .bridge.provider import bridged
from .cli import CLI
from .gemini.provider import GEMINI
from .ollama.provider import OLLAMA
from .openai import OPENAI

PROVIDERS: tuple[Provider, ...] = (
    # OpenAI-compatible servers: /v1/responses as each backend's `responses:` says.
    responses_choice(OPENAI),
    OLLAMA,
    # Chat-only providers: /v1/responses through their chat path (providers/bridge).
    bridged(ANTHROPIC),
    bridged(GEMINI),
    bridged(CLI),
)

_DEFAULT: Provider = PROVIDERS[0]  # the OpenAI-compatible one, for a kind no provider claims (see above)


def _by_kind(providers: tuple[Provider, ...]) -> Mapping[str, Provider]:
    table: dict[str, Provider] = {}
    for provider in providers:
        for kind in provider.kinds:
            if kind in table:
                raise RuntimeError(f"provider kind {kind!r} is claimed twice")
            table[kind] = provider
    return table


BY_KIND: Mapping[str, Provider] = _by_kind(PROVIDERS)
KINDS: frozenset[str] = frozenset(BY_KIND)
# Kinds whose backend is a command run on the router's host (`runs_command`):
# configured in the YAML only (a `cli:` section), never through the admin.
COMMAND_KINDS: frozenset[str] = frozenset(
    kind for provider in PROVIDERS if getattr(provider, "runs_command", False) for kind in provider.kinds
)

# Kinds whose backends choose how they serve /v1/responses (`responses:`
# native | bridge | auto); every other kind serves it one way only.
RESPONSES_KINDS: frozenset[str] = frozenset(
    kind for provider in PROVIDERS if getattr(provider, "chooses_responses", False) for kind in provider.kinds
)


# What each kind serves of the rest of the OpenAI surface (images, audio,
# moderations, rerank, score: router/frontends/surface.py): a provider's
# `surface`, the endpoints it passes through; none for a provider without one.
SURFACE_BY_KIND: Mapping[str, frozenset[str]] = {
    kind: getattr(provider, "surface", frozenset()) for provider in PROVIDERS for kind in provider.kinds
}


def serves(kind: str, endpoint: str) -> bool:
    """A backend of `kind` serves surface endpoint `endpoint` (a kind no
    provider claims is served as OpenAI-compatible, as for every endpoint)."""
    return endpoint in SURFACE_BY_KIND.get(kind, getattr(_DEFAULT, "surface", frozenset()))


def provider_for(kind: str) -> Provider:
    """The provider that executes a request on a backend of `kind`."""
    return BY_KIND.get(kind, _DEFAULT)


def path_of(kind: str) -> str:
    """The execution path of `kind`: "passthrough" or "normalized"."""
    return provider_for(kind).path


def probe_url(spec: BackendSpec, path: str) -> str | None:
    """What the active probe GETs for `spec`; `path` is health.path. None = no probe."""
    return provider_for(spec.kind).probe_url(spec, path)


def load_url(spec: BackendSpec, path: str) -> str | None:
    """Where `spec` publishes its own load (Prometheus text), if it does
    (self-hosted OpenAI-compatible servers); `path` is health.load_path
    ("" reads none)."""
    return provider_for(spec.kind).load_url(spec, path) if path else None


def probe_headers(spec: BackendSpec) -> dict[str, str]:
    """The headers of the probe's GET to `spec` (its provider's auth)."""
    return provider_for(spec.kind).probe_headers(spec)


def listed_models(kind: str, body: bytes) -> list[str] | None:
    """Model names from a probe's 200 answer, as the provider of `kind` lists them."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    return provider_for(kind).listed_models(data)


__all__ = [
    "BY_KIND",
    "COMMAND_KINDS",
    "KINDS",
    "PROVIDERS",
    "RESPONSES_KINDS",
    "SURFACE_BY_KIND",
    "Provider",
    "listed_models",
    "load_url",
    "path_of",
    "probe_headers",
    "probe_url",
    "provider_for",
    "serves",
]

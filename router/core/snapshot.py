"""The routing snapshot: everything a /v1 request reads, immutable.

A web process holds exactly one reference to the current snapshot and swaps
it atomically when the revision changes; a request keeps the snapshot it
started with, so a reload never changes the rules under a running request.

A request that names no scope (any Host but an AppProxy circuit's own) never
uses a backend the ingress *confines* to its own Host (a private circuit's
replica: `open_group`), and never knows or lists a name only such backends
serve (`hidden`, computed once per snapshot by `hidden_names`): it is unknown
there exactly like a name nobody serves.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .backend import BackendSpec
from .buckets import ClientLimits
from .cors import CorsPolicy
from .ipnets import Network
from .prompts import PromptPolicy


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_attempts: int = 3
    backoff_s: float = 0.05
    retry_on_status: frozenset[int] = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    max_wait_s: float = 10.0
    max_waiting: int = 1000


@dataclass(frozen=True, slots=True)
class CacheAwarePolicy:
    """`cache_aware`: prompt blocks of `block_chars` characters, up to
    `max_prompt_chars`; a replica holding `min_match` of them is chosen for
    them; each web process's index keeps at most `max_entries` blocks."""

    block_chars: int = 128
    min_match: float = 0.5
    max_entries: int = 131_072
    max_prompt_chars: int = 65_536


@dataclass(frozen=True, slots=True)
class ResponseCachePolicy:
    """`response_cache` when enabled (router/respcache/): entries live `ttl_s`;
    each web process keeps at most `max_bytes` of them in memory, none larger
    than `max_entry_bytes`; `shared` adds the Redis tier; `scope` "key" keeps
    an entry to the API key that stored it; `deterministic_only` caches only
    requests whose answer is meant to repeat."""

    ttl_s: float = 300.0
    max_bytes: int = 64 * 1024 * 1024
    max_entry_bytes: int = 1024 * 1024
    shared: bool = True
    scope: str = "key"
    deterministic_only: bool = True


@dataclass(frozen=True, slots=True)
class Snapshot:
    revision: int
    backends: Mapping[str, BackendSpec]  # compiled: an immutables.Map (a change shares the rest)
    by_model: Mapping[str, tuple[BackendSpec, ...]]  # every name and alias
    fallback_chains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    strategy: str = "weighted_round_robin"
    # prefix_hash: how far past its share a backend keeps its prefixes, and
    # the request header whose value pins a session ("" for none).
    load_factor: float = 1.25
    session_header: str = "x-session-id"
    cache_aware: CacheAwarePolicy = CacheAwarePolicy()
    retry: RetryPolicy = RetryPolicy()
    queue: QueuePolicy = QueuePolicy()
    health: Any = None  # router.core.health.HealthPolicy
    health_enabled: bool = True  # active probes (the tasks process)
    max_body_bytes: int = 32 * 1024 * 1024
    max_response_bytes: int = 64 * 1024 * 1024  # a whole (non-streamed) upstream answer
    trusted_proxies: tuple[Network, ...] = ()
    cors: CorsPolicy | None = None  # None: no CORS (cors.allow_origins empty)
    # Ask OpenAI-compatible upstreams for usage on every stream (stream_usage).
    stream_usage: bool = True
    response_cache: ResponseCachePolicy | None = None  # None: off (one attribute check per request)
    # rate_limits: global and per-client-address buckets (None: neither set),
    # and where every bucket, backends' quotas too, is kept (cluster | node).
    rate_limits: ClientLimits | None = None
    quota_scope: str = "cluster"
    # Model name → its prefill/decode protocol ("vllm" | "sglang"); empty for
    # most deployments, so a request pays one truthiness check.
    disaggregation: Mapping[str, str] = field(default_factory=dict)
    api_keys_mode: str = "open"
    rate_limit_scope: str = "node"
    prompts: PromptPolicy | None = None  # global_prompts (None: no prompt anywhere)
    keyring: Any = None  # keys.keyring.Keyring
    ingress: Any = None  # appproxy ingress table (legacy Host routing), or None
    # Names of by_model a request with no scope may not know (hidden_names).
    hidden: frozenset[str] = frozenset()
    # Model names known without a backend (ROUTER publications with no live
    # mapping): listed in /v1/models, and they resolve like "all replicas down"
    # (fallback chain, else 503). They are also keys of by_model (empty groups).
    listed: tuple[str, ...] = ()
    # The AppProxy ROUTER worker's own facts as of the compile (readiness,
    # /status); compiled by the appproxy app, never read by the data plane.
    worker: Any = None
    # The validated routing document (router.config_schema.RouterFile) the
    # fields above were compiled from: snapshot parts are updated against it.
    document: Any = None
    created: int = 0  # epoch seconds, the `created` of /v1/models objects

    def known(self, model: str) -> bool:
        """A name a request with no scope may ask for."""
        return model in self.by_model and model not in self.hidden

    def model_names(self) -> list[str]:
        """The names a request with no scope sees, sorted."""
        return sorted(self.by_model.keys() - self.hidden if self.hidden else self.by_model)

    def open_group(self, model: str) -> tuple[BackendSpec, ...]:
        """The backends of `model` a request with no scope may use: all but
        those the ingress confines to their own Host."""
        group = self.by_model.get(model, ())
        ingress = self.ingress
        if not group or ingress is None or not ingress.confined:
            return group
        return tuple(spec for spec in group if not ingress.confines(spec.name))


def group_order(spec: BackendSpec) -> tuple[str, str]:
    """The order of a model's backends, whatever order they were read in."""
    return (spec.source, spec.name)


def group_by_model(backends: Mapping[str, BackendSpec]) -> dict[str, tuple[BackendSpec, ...]]:
    groups: dict[str, list[BackendSpec]] = {}
    for spec in backends.values():
        for name in dict.fromkeys(spec.models):
            groups.setdefault(name, []).append(spec)
    return {name: tuple(sorted(specs, key=group_order)) for name, specs in groups.items()}


def hidden_names(by_model: Mapping[str, tuple[BackendSpec, ...]], ingress: Any) -> frozenset[str]:
    """The names every backend of which the ingress confines to its own Host.

    Only the models the confined circuits serve (`ingress.confined_models`)
    are looked at, so the cost follows their replicas, not the cluster. A
    name also served by any other backend stays known (routed to those), and
    a listed name with no backend at all is not hidden."""
    if ingress is None or not getattr(ingress, "confined", None):
        return frozenset()
    return frozenset(
        name
        for name in ingress.confined_models
        if (group := by_model.get(name)) and all(ingress.confines(spec.name) for spec in group)
    )


def regroup(
    by_model: Mapping[str, tuple[BackendSpec, ...]],
    old: Mapping[str, BackendSpec | None],
    new: Mapping[str, BackendSpec | None],
    listed: tuple[str, ...],
    relisted: frozenset[str] = frozenset(),
) -> dict[str, tuple[BackendSpec, ...]]:
    """`by_model` after the backends named in `old` (their previous specs,
    None = absent) became `new` (None = removed): only the groups of the
    models they serve (and the names in `relisted`) are rebuilt.

    A model with no backend left stays as an empty group when `listed`."""
    changed = old.keys() | new.keys()
    affected = set(relisted)
    for spec in (*old.values(), *new.values()):
        if spec is not None:
            affected.update(spec.models)
    listed_set = frozenset(listed)
    out = dict(by_model)
    for name in affected:
        group = [s for s in by_model.get(name, ()) if s.name not in changed]
        group += [s for s in new.values() if s is not None and name in s.models]
        if group:
            out[name] = tuple(sorted(group, key=group_order))
        elif name in listed_set:
            out[name] = ()
        else:
            out.pop(name, None)
    return out


EMPTY = Snapshot(revision=-1, backends={}, by_model={})

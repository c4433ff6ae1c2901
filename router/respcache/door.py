"""`answer()`: `pipeline.route()` behind the response cache.

A front door calls it instead of `route()` when the snapshot has a
`response_cache` policy, after admission and the model check, so a hit
still needed a valid key and counted against its rate limit. In order:

 1 not cacheable — Cache-Control: no-store, or not deterministic while
   `deterministic_only` (key.deterministic)       → route; `x-cache: bypass`
 2 the entry's name (key.digest: one orjson dump with sorted keys, one hash)
 3 unless Cache-Control: no-cache: the memory tier (one dict lookup), then,
   when `shared`, Redis (async, bounded; a hit fills the memory tier);
   Redis unavailable                              → route; `x-cache: bypass`
 4 a hit: a `Routed` that holds no backend slot, whose answer is the stored
   object (non-streaming) or its replay (streaming, replay.py); observed at
   once with `cache: hit`                         → `x-cache: hit`, `age`
 5 a miss: route; a 200 answer in OpenAI's wire format is stored once it is
   complete — the whole body as the client got it, or the stream assembled
   as it passes (assemble.py) when its relay ended well (never an error
   answer, an error event, a cut stream, or more than max_entry_bytes)
                                                  → `x-cache: miss`

The memory tier (`MEMORY`) is this process's; its size follows the policy
in force.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from .. import observe, tracing
from ..admission import Caller
from ..core.snapshot import ResponseCachePolicy
from ..pipeline import Routed, route
from ..providers.base import WIRE_OPENAI, Exchange, Renders
from ..request import Envelope
from ..runtime import get_runtime, on_channel
from . import replay, shared
from .assemble import assembler, tee
from .key import ENDPOINTS, NO_CACHE, NO_STORE, deterministic, digest, directive
from .memory import Entry, MemoryTier

HIT, MISS, BYPASS = "hit", "miss", "bypass"

MEMORY = MemoryTier(0)


async def answer(
    policy: ResponseCachePolicy, caller: Caller, env: Envelope, target: str, obs: dict[str, Any], started: float,
    *, endpoint: str | None = None, body: dict[str, Any] | None = None,
) -> Routed:
    """The answer of one admitted request, from the cache or routed (module doc).
    `endpoint` / `body`: what names the entry when not the envelope's own (the
    Anthropic door: "messages" and its client's body)."""
    endpoint = endpoint or env.endpoint
    body = env.body if body is None else body
    verdict = directive(env.headers.get("cache-control"))
    if verdict == NO_STORE or endpoint not in ENDPOINTS or (
        policy.deterministic_only and not deterministic(endpoint, body)
    ):
        return await _routed(caller, env, target, obs, started, BYPASS, None)
    key = caller.key
    scope = f"{'' if policy.scope == 'global' or key is None else key.id}|{caller.scope or ''}"
    try:
        name = digest(endpoint, env.model, target, scope, body)
    except (TypeError, orjson.JSONEncodeError):  # nothing a JSON body parses to, but never a 500
        return await _routed(caller, env, target, obs, started, BYPASS, None)
    if MEMORY.max_bytes != policy.max_bytes:
        MEMORY.shrink(policy.max_bytes)
    if verdict != NO_CACHE:
        now = time.time()
        entry = MEMORY.get(name, now)
        tier = "memory"
        if entry is None and policy.shared:
            tier = "redis"
            try:
                entry = await shared.get(target, name, policy.ttl_s)
            except shared.Unavailable:
                return await _routed(caller, env, target, obs, started, BYPASS, None)
            if entry is not None and entry.expires > now and policy.max_bytes:
                MEMORY.put(name, entry)
                observe.CACHE_MEMORY_BYTES.set(MEMORY.bytes)
        if entry is not None and entry.expires > now and (entry.usage or not _wants_usage(env)):
            hit = _hit(entry, endpoint, env, now)
            if hit is not None:
                obs.update(cache=HIT, cache_tier=tier, cache_bytes=len(entry.body), status=200, path="cache",
                           routed_model=target, latency_ms=(time.perf_counter() - started) * 1000.0)
                observe.record(obs)
                if tracing.ENABLED and (trace := env.notes.get("trace")) is not None:
                    trace.end(obs)
                return Routed(get_runtime(), CACHED, hit, env, obs, started, None)
    return await _routed(caller, env, target, obs, started, MISS, _Store(policy, name, target, endpoint, obs))


def _wants_usage(env: Envelope) -> bool:
    """A whole answer always says its usage; a stream only when asked."""
    return not env.stream or replay.include_usage(env.body)


async def _routed(
    caller: Caller, env: Envelope, target: str, obs: dict[str, Any], started: float, result: str,
    store: _Store | None,
) -> Routed:
    obs["cache"] = result
    routed = await route(caller, env, target, obs, started)
    ex = routed.exchange
    ex.headers = [*ex.headers, ("x-cache", result)]
    if store is not None and routed.provider is not None and ex.status == 200 and ex.wire == WIRE_OPENAI:
        routed.provider = _Storing(routed.provider, store)
    return routed


def _hit(entry: Entry, endpoint: str, env: Envelope, now: float) -> Exchange | None:
    """The exchange of an answer from `entry` (None: it cannot be replayed)."""
    headers = [("x-cache", HIT), ("age", str(max(0, int(now - entry.stored_at))))]
    if not env.stream:
        return Exchange(None, 200, headers, "application/json", entry.body, upstream=False)  # type: ignore[arg-type]
    try:
        frames = replay.stream(endpoint, entry.body, env.body)
    except Exception:  # an entry we cannot read: answered by a backend instead
        return None
    if frames is None:
        return None
    return Exchange(None, 200, headers, replay.SSE_CONTENT_TYPE, b"", stream=_once(frames),  # type: ignore[arg-type]
                    upstream=False)


async def _once(frames: bytes) -> AsyncIterator[bytes]:
    yield frames


class _Cached:
    """The provider of an answer from the cache: the exchange says it all."""

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        return ex.body, {}

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        assert ex.stream is not None
        return ex.stream


CACHED = _Cached()


class _Store:
    """Where a miss's answer goes once it is complete."""

    __slots__ = ("endpoint", "model", "name", "obs", "policy")

    def __init__(self, policy: ResponseCachePolicy, name: bytes, model: str, endpoint: str,
                 obs: dict[str, Any]) -> None:
        self.policy = policy
        self.name = name
        self.model = model
        self.endpoint = endpoint
        self.obs = obs

    def save(self, body: bytes | None, usage: bool) -> None:
        policy = self.policy
        if body is None or len(body) > policy.max_entry_bytes:
            return
        now = time.time()
        entry = Entry(body, now, now + policy.ttl_s, self.model, usage)
        if policy.max_bytes and MEMORY.put(self.name, entry):
            observe.CACHE_MEMORY_BYTES.set(MEMORY.bytes)
        if policy.shared:
            shared.put_later(self.name, entry, policy.ttl_s)
        self.obs["cache_stored"] = len(body)


class _Storing:
    """A miss's provider, with what it answers stored on the way out."""

    __slots__ = ("inner", "store")

    def __init__(self, inner: Renders, store: _Store) -> None:
        self.inner = inner
        self.store = store

    def finish(self, ex: Exchange, env: Envelope) -> tuple[bytes, dict]:
        body, info = self.inner.finish(ex, env)
        self.store.save(body if body[:1] == b"{" else None, True)
        return body, info

    def relay(self, ex: Exchange, env: Envelope, done: Callable[[bool | None, dict], None]) -> AsyncIterator[bytes]:
        store = self.store
        asm = assembler(store.endpoint, env.stream, store.policy.max_entry_bytes)

        def finished(ok: bool | None, info: dict) -> None:
            # The relay's last act, after the client got its last chunk and
            # before the observation is recorded: a stream that ended well is
            # stored, one that failed or was cut is not.
            if ok and asm is not None:
                store.save(asm.result(), bool(asm.usage))
            done(ok, info)

        source = self.inner.relay(ex, env, finished)
        return source if asm is None else tee(source, asm)


def purged(data: bytes | str | None) -> None:
    """A purge published by `shared.purge` (another process's command): drop
    this process's entries of the model it names ("" for every model)."""
    model = data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")
    MEMORY.purge(model or None)
    observe.CACHE_MEMORY_BYTES.set(MEMORY.bytes)


# Every web process drops what a purge names, over the runtime's own
# subscription (no connection of its own; resubscribed after an outage; a
# purge published during one reaches only Redis, and this process's entries
# live out their ttl).
on_channel(shared.purge_channel, purged)

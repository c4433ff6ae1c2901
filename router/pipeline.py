"""Routing: one admitted request → one upstream answer, as a `Routed` result.

 5 select ONCE per attempt  (health, capacity, priority, weights, strategy)
 6 dispatch by the selected backend's kind → its provider (registry), the
   global prompt of that model and backend merged into what is sent
 7 retry before the first byte; fallback chain when none is left
 8 observe                  (bounded queue, never in the response)

The pipeline knows no wire format of its callers: `route()` returns a
`Routed` — the provider that got the slot, the upstream answer up to its
first byte, and the observation — and each front door renders it in its own
format (OpenAI bytes as they come, Anthropic events, …). `Routed` owns the
backend slot and the upstream connection until its body is taken or its
events end; `aclose()` (or `async with routed`) frees both in every case,
including a stream that was never read.

No DB query and no blocking call happens here: everything is read from the
snapshot the request started with.

Whatever fails on the way — the provider's own exception types or any other —
gives back the slot it took (and the provider closes its upstream): a
request can end a backend's turn, never keep it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from . import disaggregation, global_prompts, observe, tracing
from .admission import Caller
from .core.buckets import Quota, request_items, token_item
from .core.errors import (
    CapacityExhausted,
    NoBackendAvailable,
    RouterError,
    UnsupportedEndpoint,
    UpstreamError,
    UpstreamQuotaExhausted,
    UpstreamTimeout,
)
from .core.health import BackendState
from .core.kvindex import chain as block_chain
from .core.selection import CACHE_AWARE, KEYED, Candidate, all_at_capacity, prefix_key, prompt_text
from .disaggregation import flow as pd_flow
from .providers import provider_for, serves
from .providers.base import Exchange, Renders, UpstreamFailed
from .quotas import retry_after
from .request import Envelope
from .runtime import Runtime, get_runtime

log = logging.getLogger(__name__)

DETAIL_MAX = 1000  # characters of a failure's detail (a command's stderr tail) an observation keeps


class Routed:
    """A routed request: rendered by a front door, closed exactly once.

    - `streaming` is False: `body()` is the whole answer in OpenAI's shape
      (the verdict and observation are recorded when it is taken).
    - `streaming` is True: `events()` yields the answer's OpenAI wire bytes
      chunk by chunk as they arrive; the upstream is closed and the slot
      freed when they end, fail, or the consumer goes away.
    """

    __slots__ = (
        "_companion", "_finished", "_relay", "_rt", "_started", "_state", "env", "exchange", "obs", "provider",
    )

    def __init__(
        self,
        rt: Runtime,
        provider: Renders | None,
        exchange: Exchange,
        env: Envelope,
        obs: dict[str, Any],
        started: float,
        state: BackendState | None,
        companion: asyncio.Task[None] | None = None,
    ) -> None:
        self.provider = provider
        self.exchange = exchange
        self.env = env
        self.obs = obs
        self._rt = rt
        self._state = state
        self._started = started
        self._finished = state is None  # an as-is error relay holds nothing
        self._relay: AsyncIterator[bytes] | None = None
        # A disaggregated request's prefill leg still being read (SGLang):
        # cancelled with the answer when the client goes.
        self._companion = companion

    @property
    def status(self) -> int:
        return self.exchange.status

    @property
    def content_type(self) -> str:
        return self.exchange.content_type

    @property
    def headers(self) -> list[tuple[str, str]]:
        """Upstream response headers worth relaying (hop-by-hop ones removed)."""
        return self.exchange.headers

    @property
    def streaming(self) -> bool:
        return self.exchange.stream is not None

    def body(self) -> bytes:
        """The whole answer (non-streaming); records the verdict."""
        if self.provider is None:
            return self.exchange.body
        try:
            body, info = self.provider.finish(self.exchange, self.env)
        except BaseException:
            self._done(None, {})  # ours, not the backend's: no verdict, slot freed
            raise
        self._done(self.exchange.status < 500, info)
        return body

    def events(self) -> AsyncIterator[bytes]:
        """The stream's OpenAI wire bytes (created once)."""
        if self._relay is None:
            assert self.provider is not None and self.streaming
            self._relay = self.provider.relay(self.exchange, self.env, self._done)
        return self._relay

    async def aclose(self) -> None:
        """Free the slot and the upstream; idempotent. A stream closed before
        its end records no health verdict (the client left, not the backend)."""
        relay = self._relay
        if relay is not None:
            try:
                await relay.aclose()  # type: ignore[attr-defined]
            except RuntimeError:  # already running: its own finally will finish it
                return
        if not self._finished:
            self._done(None, {})
            close = self.exchange.close
            if close is not None:
                await close()

    def abandon(self) -> None:
        """`aclose()` from synchronous code (a response's close())."""
        if self._finished:  # the body was taken, or the relay's own finally ran
            return
        try:
            asyncio.get_running_loop().create_task(self.aclose())
        except RuntimeError:  # not on the event loop's thread
            loop = self._rt.loop
            if loop is not None:
                loop.call_soon_threadsafe(lambda: loop.create_task(self.aclose()))

    async def __aenter__(self) -> Routed:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _done(self, ok: bool | None, info: dict) -> None:
        if self._finished:
            return
        self._finished = True
        assert self._state is not None
        verdict = ok if self.exchange.upstream else None  # answered without the backend: no verdict
        self._rt.release(self._state, ok=verdict, latency_ms=self.exchange.upstream_ms)
        obs = self.obs
        obs["latency_ms"] = (time.perf_counter() - self._started) * 1000.0
        usage = obs["usage"] = info.get("usage")
        quota = self.exchange.spec.quota
        if quota is not None and quota.tpm is not None and self.exchange.upstream:
            self._charge(quota, usage)
        if ok:
            cached = observe.cached_tokens(usage)
            if cached is not None and isinstance(usage, dict):
                self._cached(cached, usage, obs)
        if ok is False:
            obs["stream_error"] = True
            if info.get("detail"):
                obs["failure_details"] = {self.exchange.spec.name: str(info["detail"])[-DETAIL_MAX:]}
        elif ok is None:
            obs["client_disconnected"] = True
            companion = self._companion
            if companion is not None and not companion.done():
                companion.cancel()
        observe.record(obs)
        if tracing.ENABLED:
            trace = self.env.notes.get("trace")
            if trace is not None:
                trace.end(obs)


    def _charge(self, quota: Quota, usage: object) -> None:
        """The backend's tokens-per-minute bucket pays the answer's tokens
        (prompt and completion, as its usage says; none said, none paid)."""
        if not isinstance(usage, dict):
            return
        tokens = usage.get("total_tokens")
        if not isinstance(tokens, int):
            tokens = sum(v for k in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens")
                         if isinstance(v := usage.get(k), int))
        item = token_item(self.exchange.spec.name, quota, tokens)
        if item is not None:
            self._rt.quotas.charge(item, time.time())

    def _cached(self, cached: int, usage: dict, obs: dict[str, Any]) -> None:
        """The backend said how much of the prompt its cache served: counted
        for its hit ratio; and when cache_aware chose it for the prompt it was
        said to hold, a backend that served none of it from its cache does
        not hold it, and stops being its holder in the index."""
        state = self._state
        assert state is not None
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        if isinstance(prompt, int) and prompt >= cached:
            state.prompt_tokens += prompt
            state.cached_tokens += cached
        if obs.get("prefix") != "cached":
            return
        obs["prefix_confirmed"] = cached > 0
        index = self._rt.prefix_index
        blocks = self.env.notes.get("blocks")
        if cached == 0 and index is not None and blocks:
            index.drop(blocks, self.exchange.spec.name)


def refused(exc: RouterError, obs: dict[str, Any], started: float, trace: tracing.RequestTrace | None = None) -> None:
    """Observe a request the router refused or could not serve."""
    obs["status"] = exc.status
    obs["error"] = exc.code
    obs["latency_ms"] = (time.perf_counter() - started) * 1000.0
    observe.record(obs)
    if trace is not None:
        trace.end(obs)


def _affinity_key(env: Envelope, session_header: str) -> bytes | None:
    """What prefix_hash hashes: the session header's value when the request
    has one (a session pinned by the client, whatever its prompts), else the
    start of the prompt (core.selection.prefix_key)."""
    if session_header:
        session = env.headers.get(session_header)
        if session:
            return b"\x01session\x00" + session[:256].encode("utf-8", "surrogateescape")
    return prefix_key(env.body)


async def route(caller: Caller, env: Envelope, model: str, obs: dict[str, Any], started: float) -> Routed:
    """Select, dispatch, retry and fall back; the first usable answer wins."""
    snap = caller.snap
    if snap.disaggregation and model in snap.disaggregation:
        return await _route_disaggregated(caller, env, model, obs, started)
    return await _route(caller, env, model, obs, started)


async def _route_disaggregated(
    caller: Caller, env: Envelope, model: str, obs: dict[str, Any], started: float
) -> Routed:
    """A model whose prefill and decode run on separate replicas
    (router/disaggregation/): chat and completions in two legs, falling back
    to a unified (`both`) replica; any other endpoint unified. The answer,
    or the error, says which path it took (`x-routing-path`)."""
    snap = caller.snap
    routing = disaggregation.UNIFIED
    try:
        if env.endpoint in disaggregation.ENDPOINTS:
            rt = get_runtime()
            protocol = disaggregation.PROTOCOLS[snap.disaggregation[model]]
            outcome = await pd_flow.run(
                rt, caller, env, model, obs, protocol, _acquire,
                lambda sent, backend: global_prompts.applied(sent, snap.prompts, model, backend, obs),
            )
            if isinstance(outcome, pd_flow.Leg):
                return _two_legs(rt, outcome, model, obs, started)
            routing = disaggregation.FALLBACK
            if not rt.candidates(snap, model, caller.scope, "both"):
                raise outcome.error
            obs["fallback_reason"] = outcome.error.code
        return await _route(caller, env, model, obs, started, routing)
    except RouterError as exc:
        obs["routing_path"] = routing
        exc.headers[disaggregation.HEADER] = routing
        raise


def _two_legs(rt: Runtime, leg: pd_flow.Leg, model: str, obs: dict[str, Any], started: float) -> Routed:
    ex = leg.exchange
    routing = disaggregation.PREFILL_THEN_DECODE
    ex.headers.append((disaggregation.HEADER, routing))
    now = time.perf_counter()
    obs.update(
        provider=ex.spec.name,
        kind=ex.spec.kind,
        path=leg.provider.path,
        served=ex.info.get("served"),
        hops=[],
        attempts=obs.get("disagg_rounds", 1),
        status=ex.status,
        ttft_ms=(now - started) * 1000.0 if leg.sent.stream else None,
        upstream_ms=ex.upstream_ms,
        routed_model=model,
        routing_path=routing,
        prefill_backend=leg.prefill,
        prefill_ms=leg.prefill_ms,
        decode_ttft_ms=ex.upstream_ms,
    )
    return Routed(rt, leg.provider, ex, leg.sent, obs, started, leg.state, leg.companion)


async def _route(
    caller: Caller, env: Envelope, model: str, obs: dict[str, Any], started: float, routing: str | None = None
) -> Routed:
    rt = get_runtime()
    snap = caller.snap
    chain = (model, *snap.fallback_chains.get(model, ()))
    pkey = _affinity_key(env, snap.session_header) if snap.strategy in KEYED else None
    blocks: tuple[int, ...] = ()
    if snap.strategy == CACHE_AWARE:
        blocks = env.notes["blocks"] = _blocks(snap, model, env)
    retry = snap.retry
    attempts = 0
    hops: list[str] = []
    last: Exchange | None = None
    last_failure: UpstreamFailed | None = None
    quota_wait = 0.0  # every candidate left was at its upstream quota: seconds until one has room
    obs.setdefault("queue", "direct")
    trace: tracing.RequestTrace | None = env.notes.get("trace") if tracing.ENABLED else None
    for depth, target in enumerate(chain):
        if depth > 0:
            hops.append(target)
            if trace is not None:
                trace.hop(target, depth)
        tried: set[str] = set()
        # A disaggregated model's unified requests (its own, or another
        # model's falling back to it) go to its `both` replicas.
        role = "both" if snap.disaggregation and target in snap.disaggregation else None
        while attempts < retry.max_attempts:
            scope = caller.scope if depth == 0 else None
            picking = tracing.now_ns() if trace is not None else 0
            cand = await _acquire(rt, caller, target, tried, pkey, blocks, obs, scope, role)
            if trace is not None:
                trace.selected(target, depth, picking, cand.spec.name if cand is not None else None,
                               len(rt.candidates(snap, target, scope, role)), obs.get("queue"))
            if cand is None:
                if wait := _quota_wait(rt, snap, target, scope, role):
                    quota_wait = min(quota_wait or wait, wait)
                break
            spec, state = cand.spec, cand.state
            tried.add(spec.name)
            attempts += 1
            provider = provider_for(spec.kind)
            # The selection is observed even when the provider rejects the
            # request before dispatch (unsupported field, no adapter): MIX-6.
            obs.update(provider=spec.name, kind=spec.kind, path=provider.path)
            if trace is not None:
                trace.upstream(spec.name, spec.kind, target, attempts, env.headers)
            # The client's request, with the prompt of this model and backend:
            # made afresh each attempt, so a retry never gets it twice.
            sent = global_prompts.applied(env, snap.prompts, target, spec.name, obs)
            try:
                if "surface" in env.notes and not serves(spec.kind, env.endpoint):
                    raise UnsupportedEndpoint(
                        f"{env.notes.get('path')} is not served by backends of kind '{spec.kind}' (the backend selected "
                        f"for '{target}'); only OpenAI-compatible kinds pass it through.",
                    )
                ex = await provider.start(rt, spec, sent, target)
            except UpstreamFailed as failure:
                rt.release(state, ok=False)
                if trace is not None:
                    trace.failed("timeout" if failure.timeout else "upstream_failed", detail=failure.reason)
                last_failure = failure
                obs.setdefault("failures", []).append(spec.name)
                if failure.detail:  # for the operator (the observation), never the client
                    obs.setdefault("failure_details", {})[spec.name] = failure.detail[-DETAIL_MAX:]
                if retry.backoff_s and attempts < retry.max_attempts and _untried(rt, snap, target, scope, tried, role):
                    # Only before another backend is tried: with none left, the
                    # answer (a fallback's or the error) is not held back.
                    await asyncio.sleep(retry.backoff_s * attempts)
                continue
            except RouterError as exc:
                rt.release(state, ok=True)  # rejected before dispatch (e.g. unsupported field)
                if trace is not None:
                    trace.failed(exc.code or type(exc).__name__)
                raise
            except asyncio.CancelledError:
                rt.release(state, ok=None)  # the client left while we waited upstream
                if trace is not None:
                    trace.cancelled()
                raise
            except Exception as exc:
                # Not one of the provider's own outcomes: a bug or a fault the
                # request may have caused itself, so no verdict on the backend.
                rt.release(state, ok=None)
                if trace is not None:
                    trace.failed(type(exc).__name__)
                log.error("dispatch to backend %s failed: %s", spec.name, type(exc).__name__, exc_info=exc)
                raise UpstreamError(f"The router could not dispatch the request to a backend of '{target}'.") from exc
            if ex.status in retry.retry_on_status and attempts < retry.max_attempts:
                rt.release(state, ok=ex.status < 500 and ex.status != 429)
                if ex.close is not None:
                    await ex.close()
                last = ex
                obs.setdefault("failures", []).append(f"{spec.name}:{ex.status}")
                if trace is not None:
                    trace.failed(str(ex.status), status=ex.status)
                continue
            obs.update(
                provider=spec.name,
                kind=spec.kind,
                path=provider.path,
                served=ex.info.get("served"),
                hops=hops,
                attempts=attempts,
                status=ex.status,
                ttft_ms=(time.perf_counter() - started) * 1000.0 if env.stream else None,
                upstream_ms=ex.upstream_ms,
                routed_model=target,
            )
            for key in ("adapter", "ignored_fields"):
                if key in ex.info:
                    obs[key] = ex.info[key]
            if routing is not None:
                ex.headers.append((disaggregation.HEADER, routing))
                obs["routing_path"] = routing
            if trace is not None:
                trace.answered(ex.status, env.stream)
            return Routed(rt, provider, ex, sent, obs, started, state)
        if attempts >= retry.max_attempts:
            break
    obs["hops"] = hops
    obs["attempts"] = attempts
    if last is not None:  # relay the provider's own last error as it came
        obs["status"] = last.status
        observe.record(obs)
        if trace is not None:
            trace.end(obs)
        routed_header = [(disaggregation.HEADER, routing)] if routing is not None else []
        if routing is not None:
            obs["routing_path"] = routing
        relayed = Exchange(last.spec, last.status, routed_header, last.content_type, last.body, wire=last.wire)
        return Routed(rt, None, relayed, env, obs, started, None)
    if last_failure is not None:
        if last_failure.error is not None:  # the failure names what the client is told
            raise last_failure.error(f"Every backend tried for '{model}' failed ({last_failure.reason}).")
        if last_failure.timeout:
            raise UpstreamTimeout(f"No backend for '{model}' answered in time.")
        raise UpstreamError(f"Every backend tried for '{model}' failed ({last_failure.reason}).")
    if quota_wait:
        obs["rate_limited"] = "upstream_quota"
        raise UpstreamQuotaExhausted(
            f"Every backend of '{model}' is at its upstream quota; retry in {retry_after(quota_wait)} s.",
            headers={"Retry-After": retry_after(quota_wait)},
        )
    raise NoBackendAvailable(f"No healthy backend is available for '{model}'.")


def _untried(rt: Runtime, snap, target: str, scope: str | None, tried: set[str], role: str | None = None) -> bool:
    return any(c.spec.name not in tried and not c.spec.drained for c in rt.candidates(snap, target, scope, role))


def _blocks(snap, model: str, env: Envelope) -> tuple[int, ...]:
    """cache_aware: the prompt's chained block names (core.kvindex.chain),
    seeded by the model asked for."""
    policy = snap.cache_aware
    text = prompt_text(env.body, policy.max_prompt_chars)
    return block_chain(hash(model), text, policy.block_chars, policy.max_prompt_chars)


def _started(picked: Candidate, rt: Runtime, blocks: tuple[int, ...], obs: dict[str, Any]) -> None:
    """A pick takes its slot, and says what decided it (read right after the
    pick, as Selector.decision asks): a cache_aware pick the replica's
    matched prefix, a keyed one whether it went to the key's own backend or
    spilled past it."""
    picked.state.on_start()
    decision = rt.selector.decision
    if decision is not None:
        obs["prefix"] = decision
        if blocks:
            obs["prefix_blocks"] = (rt.selector.matched, len(blocks))
            index = rt.prefix_index
            if index is not None:
                observe.INDEX_ENTRIES.set(len(index))


async def _within_quota(rt: Runtime, picked: Candidate) -> bool:
    """The picked backend's upstream quota has room for one more request
    (router/quotas.py); if not, it gives its slot back and is skipped by
    selection, here, until its bucket would have room."""
    spec, state = picked.spec, picked.state
    assert spec.quota is not None
    wait, _ = await rt.quotas.take(request_items(spec.name, spec.quota), time.time())
    if not wait:
        return True
    state.limited_until = time.monotonic() + max(wait, 0.001)
    rt.release(state, ok=None)
    return False


def _quota_wait(rt: Runtime, snap, target: str, scope: str | None, role: str | None = None) -> float:
    """Seconds until the first usable candidate of `target` skipped for its
    upstream quota has room again (0: none was skipped for it)."""
    now = time.monotonic()
    waits = [c.state.limited_until - now for c in rt.candidates(snap, target, scope, role)
             if c.state.limited_until > now and c.state.usable(now)]
    return min(waits, default=0.0)


async def _acquire(
    rt: Runtime, caller: Caller, model: str, exclude: set[str], pkey: bytes | None, blocks: tuple[int, ...],
    obs: dict, scope: str | None = None, role: str | None = None,
) -> Candidate | None:
    """Select once and take the slot; queue (bounded) when all are at capacity.
    `role`: among a disaggregated model's replicas of that phase only, with
    the strategy's state (e.g. the round-robin turn) of their own."""
    snap = caller.snap
    candidates = rt.candidates(snap, model, scope, role)
    if not candidates:
        return None
    group = scope or model
    if role is not None:
        group = f"{group}\x00{role}"
    now = time.monotonic()
    while (picked := rt.selector.pick(group, candidates, now=now, prefix_key=pkey, blocks=blocks,
                                      exclude=exclude)) is not None:
        _started(picked, rt, blocks, obs)
        if picked.spec.quota is None or await _within_quota(rt, picked):
            return picked
    if not all_at_capacity([c for c in candidates if c.spec.name not in exclude], now):
        return None
    # Every usable provider is at capacity: wait for a slot, bounded.
    policy = snap.queue
    if rt.waiting >= policy.max_waiting or policy.max_wait_s <= 0:
        obs["queue"] = "rejected"
        raise CapacityExhausted(headers={"Retry-After": "1"})
    obs["queue"] = "queued"
    queued_at = time.monotonic()
    deadline = queued_at + policy.max_wait_s
    cond = rt.capacity_changed
    assert cond is not None
    rt.waiting += 1
    try:
        async with cond:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    obs["queue"] = "timeout"
                    raise CapacityExhausted(
                        f"Every provider of '{model}' stayed at capacity for {policy.max_wait_s:g}s.",
                        headers={"Retry-After": "1"},
                    )
                try:
                    await asyncio.wait_for(cond.wait(), remaining)
                except TimeoutError:
                    continue
                now = time.monotonic()
                while (picked := rt.selector.pick(group, candidates, now=now, prefix_key=pkey, blocks=blocks,
                                                  exclude=exclude)) is not None:
                    _started(picked, rt, blocks, obs)
                    if picked.spec.quota is None or await _within_quota(rt, picked):
                        obs["queue_ms"] = (now - queued_at) * 1000.0
                        return picked
                if not all_at_capacity([c for c in candidates if c.spec.name not in exclude], now):
                    return None
    finally:
        rt.waiting -= 1

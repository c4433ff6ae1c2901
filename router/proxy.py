"""The /v1 request pipeline (ARCHITECTURE.md "The request path").

 1 parse envelope           → 400 / 413
 2 legacy ingress (Host)    → 404 endpoint_not_found, 401 JWT, 403 IP
 3 key gate                 → 401 / 403 / 429
 4 model access             → 403 / 404 model_not_found
 5 select ONCE per attempt  (health, capacity, priority, weights, strategy)
 6 dispatch by kind         passthrough | normalized
 7 relay; retry before the first byte; fallback chain when none is left
 8 observe                  (bounded queue, never in the response)

No DB query and no blocking call happens here: everything is read from the
process's current Snapshot.
"""

from __future__ import annotations

import asyncio
import time
import uuid
import weakref
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse

from . import observe
from .core.errors import (
    CapacityExhausted,
    ModelNotFound,
    NoBackendAvailable,
    NotReady,
    PathSelectorRejected,
    RequestTooLarge,
    RouterError,
    UpstreamError,
    UpstreamTimeout,
)
from .core.selection import Candidate, all_at_capacity, prefix_key
from .core.snapshot import Snapshot
from .providers import provider_for
from .providers.base import Exchange, UpstreamFailed
from .request import Envelope, parse_body, path_selector
from .runtime import Runtime, get_runtime


def error_response(exc: RouterError) -> HttpResponse:
    response = HttpResponse(exc.to_body(), status=exc.status, content_type="application/json")
    for name, value in exc.headers.items():
        response[name] = value
    return response


def _headers(request: HttpRequest) -> dict[str, str]:
    """Lower-case request headers straight from the ASGI scope (cheap)."""
    scope = getattr(request, "scope", None)
    if scope is not None:
        return {k.decode("latin1").lower(): v.decode("latin1") for k, v in scope["headers"]}
    return {k.lower(): v for k, v in request.headers.items()}


def _peer(request: HttpRequest) -> str:
    scope = getattr(request, "scope", None)
    client = scope.get("client") if scope else None
    return client[0] if client else request.META.get("REMOTE_ADDR", "")


async def handle(
    request: HttpRequest, endpoint: str, *, raw: bytes | None = None, frontend: str = "openai"
) -> HttpResponse:
    """Entry point of every POST /v1/<endpoint>.

    `raw` replaces the request body: a front-end adapter (e.g. the Anthropic
    /v1/messages surface) converts its request and runs this same pipeline.
    """
    started = time.perf_counter()
    rt = get_runtime()
    obs: dict[str, Any] = {"endpoint": endpoint, "frontend": frontend}
    try:
        if not rt.ready:
            await rt.start()
            if not await rt.wait_ready(10.0):
                raise NotReady()
        snap = rt.snapshot
        env = _envelope(request, endpoint, snap, raw)
        obs["model"] = env.model
        obs["request_id"] = env.request_id
        selector_field = path_selector(env.body)
        if selector_field:
            raise PathSelectorRejected(
                f"'{selector_field}' is not accepted: the router picks the execution path "
                "from the selected provider's kind.",
                param=selector_field,
            )
        model = env.model
        pinned = False
        scope = None
        if snap.ingress is not None:
            # Host → circuit: auth (JWT, IPs) is checked here, before any
            # fallback; a registered circuit pins its canonical model, which
            # counts as known even while it has no routes (LEG-5/6/7), and
            # scopes selection to that circuit's own replicas.
            target = snap.ingress.resolve_target(env, snap)
            if target is not None:
                (model, scope), pinned = target, True
        known = pinned or snap.known(model)
        # A circuit host is governed by its circuit's own access rules (public,
        # or the circuit JWT in Authorization, plus its IP list); the key gate
        # governs every other host (docs/appproxy.md "API keys and circuits").
        gate = None if pinned else rt.gate
        key = None
        if gate is not None:
            key = await gate.admit(env.headers, env.client_ip, time.time())
            gate.check_model(key, model, known=known)
        elif not known:
            raise ModelNotFound(f"The model '{model}' does not exist.", param="model")
        if key is not None:
            obs["key"] = key.name
        response = await _execute(rt, snap, env, model, obs, started, scope)
        return response
    except RouterError as exc:
        obs["status"] = exc.status
        obs["error"] = exc.code
        obs["latency_ms"] = (time.perf_counter() - started) * 1000.0
        observe.record(obs)
        return error_response(exc)


def _envelope(request: HttpRequest, endpoint: str, snap: Snapshot, raw: bytes | None = None) -> Envelope:
    headers = _headers(request)
    if raw is None:
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > snap.max_body_bytes:
            raise RequestTooLarge(
                f"The request body is {length} bytes; the limit is {snap.max_body_bytes} bytes."
            )
        try:
            raw = request.body
        except RequestDataTooBig:
            raise RequestTooLarge(f"The request body is larger than {snap.max_body_bytes} bytes.") from None
    body, model, stream = parse_body(raw, endpoint, snap.max_body_bytes)
    peer = _peer(request)
    client_ip = peer
    if snap.trusted_proxies:
        from keys.clientip import client_ip as resolve_ip

        client_ip = resolve_ip(peer, headers.get("x-forwarded-for"), snap.trusted_proxies)
    return Envelope(
        endpoint=endpoint,
        raw=raw,
        body=body,
        model=model,
        stream=stream,
        headers=headers,
        client_ip=client_ip,
        host=headers.get("host", ""),
        request_id=headers.get("x-request-id") or uuid.uuid4().hex,
    )


async def _acquire(
    rt: Runtime, snap: Snapshot, model: str, exclude: set[str], pkey: bytes | None, obs: dict,
    scope: str | None = None,
) -> Candidate | None:
    """Select once and take the slot; queue (bounded) when all are at capacity."""
    candidates = rt.candidates(snap, model, scope)
    if not candidates:
        return None
    group = scope or model
    now = time.monotonic()
    picked = rt.selector.pick(group, candidates, now=now, prefix_key=pkey, exclude=exclude)
    if picked is not None:
        picked.state.on_start()
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
                picked = rt.selector.pick(group, candidates, now=now, prefix_key=pkey, exclude=exclude)
                if picked is not None:
                    picked.state.on_start()
                    obs["queue_ms"] = (now - queued_at) * 1000.0
                    return picked
                if not all_at_capacity([c for c in candidates if c.spec.name not in exclude], now):
                    return None
    finally:
        rt.waiting -= 1


async def _execute(
    rt: Runtime, snap: Snapshot, env: Envelope, model: str, obs: dict, started: float, scope: str | None = None
):
    chain = (model, *snap.fallback_chains.get(model, ()))
    pkey = prefix_key(env.body) if snap.strategy == "prefix_hash" else None
    retry = snap.retry
    attempts = 0
    hops: list[str] = []
    last: Exchange | None = None
    last_failure: UpstreamFailed | None = None
    obs.setdefault("queue", "direct")
    for depth, target in enumerate(chain):
        if depth > 0:
            hops.append(target)
        tried: set[str] = set()
        while attempts < retry.max_attempts:
            cand = await _acquire(rt, snap, target, tried, pkey, obs, scope if depth == 0 else None)
            if cand is None:
                break
            spec, state = cand.spec, cand.state
            tried.add(spec.name)
            attempts += 1
            provider = provider_for(spec.kind)
            # The selection is observed even when the provider rejects the
            # request before dispatch (unsupported field, no adapter): MIX-6.
            obs.update(provider=spec.name, kind=spec.kind, path=provider.path)
            try:
                ex = await provider.start(rt, spec, env, target)
            except UpstreamFailed as failure:
                rt.release(state, ok=False)
                last_failure = failure
                obs.setdefault("failures", []).append(spec.name)
                if retry.backoff_s and attempts < retry.max_attempts:
                    await asyncio.sleep(retry.backoff_s * attempts)
                continue
            except RouterError:
                rt.release(state, ok=True)  # rejected before dispatch (e.g. unsupported field)
                raise
            except asyncio.CancelledError:
                rt.release(state, ok=None)  # the client left while we waited upstream
                raise
            if ex.status in retry.retry_on_status and attempts < retry.max_attempts:
                if ex.close is not None:
                    await ex.close()
                rt.release(state, ok=ex.status < 500 and ex.status != 429)
                last = ex
                obs.setdefault("failures", []).append(f"{spec.name}:{ex.status}")
                continue
            return _respond(rt, provider, ex, env, obs, started, state, target, hops, attempts)
        if attempts >= retry.max_attempts:
            break
    obs["hops"] = hops
    obs["attempts"] = attempts
    if last is not None:  # relay the provider's own last error as it came
        obs["status"] = last.status
        observe.record(obs)
        response = HttpResponse(last.body, status=last.status, content_type=last.content_type)
        return response
    if last_failure is not None:
        if last_failure.timeout:
            raise UpstreamTimeout(f"No backend for '{model}' answered in time.")
        raise UpstreamError(f"Every backend tried for '{model}' failed ({last_failure.reason}).")
    raise NoBackendAvailable(f"No healthy backend is available for '{model}'.")


def _respond(rt, provider, ex: Exchange, env: Envelope, obs: dict, started: float, state, target, hops, attempts):
    spec = ex.spec
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
    finished = False

    def done(ok: bool | None, info: dict) -> None:
        nonlocal finished
        if finished:
            return
        finished = True
        rt.release(state, ok=ok, latency_ms=ex.upstream_ms)
        obs["latency_ms"] = (time.perf_counter() - started) * 1000.0
        obs["usage"] = info.get("usage")
        if ok is False:
            obs["stream_error"] = True
        elif ok is None:
            obs["client_disconnected"] = True
        observe.record(obs)

    response = provider.respond(ex, env, done)
    if getattr(response, "streaming", False):
        # A stream that is never iterated (client gone first) still frees its slot.
        close = ex.close
        loop = asyncio.get_running_loop()

        def _abandoned() -> None:
            if not finished:
                done(None, {})
                if close is not None:
                    loop.call_soon_threadsafe(lambda: loop.create_task(close()))

        weakref.finalize(response, _abandoned)
    return response

"""Run a disaggregated request's two legs: a prefill and a decode replica.

`run()` selects each phase with the group's strategy among the healthy
replicas of that role (the caller's `acquire`, the pipeline's one selection),
sends the legs as the protocol says, and returns the decode replica's answer
up to its first byte (`Leg`), or why the two-leg path could not answer
(`Failed`: the pipeline then serves the request on a `both` replica, else
tells the client the phase that failed).

Retries (before the client has a byte):
- a prefill failure (no answer, a 429/5xx, an answer that cannot be handed
  over) is retried on another prefill replica;
- a decode failure retries the whole exchange on another decode replica,
  with a fresh prefill: vLLM's `kv_transfer_params` serve one decode (the
  prefill replica frees its blocks once they were read), and an SGLang
  bootstrap room pairs one prefill with one decode.
A 4xx other than 429 is the request's own fault: relayed to the client as it
came, never retried.

Every slot taken is given back on every way out; a client that leaves while
the legs are in flight cancels both (and the prefill leg still being read
after the decode's first byte is the `Leg.companion`, which the pipeline's
`Routed` cancels when the client goes).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from ..core.errors import DecodeFailed, PhaseUnavailable, PrefillFailed, RouterError, UpstreamError
from ..core.health import BackendState
from ..core.selection import Candidate
from ..providers import provider_for
from ..providers.base import Exchange, Provider, UpstreamFailed
from ..request import Envelope
from .protocol import Protocol

log = logging.getLogger(__name__)

Acquire = Callable[..., Awaitable[Candidate | None]]
# The client's request with the global prompt of a replica merged in (the
# pipeline's; made once per attempt and shared by both legs, so the decode
# replica's prompt is the one the prefill replica read).
Prompted = Callable[[Envelope, str], Envelope]

# Prefill legs still being read after the decode's first byte: held here so
# the event loop keeps them (one per request in flight, no more).
_DRAINING: set[asyncio.Task[None]] = set()


@dataclasses.dataclass(slots=True)
class Leg:
    """The decode replica's answer, to relay; its slot is `state`."""

    provider: Provider
    exchange: Exchange
    sent: Envelope
    state: BackendState
    prefill: str  # the prefill replica's name
    prefill_ms: float
    companion: asyncio.Task[None] | None = None  # the prefill leg still being read


@dataclasses.dataclass(slots=True)
class Failed:
    """The two-leg path could not answer; `error` names the phase."""

    error: RouterError


class _LegFailed(Exception):
    def __init__(self, phase: str, reason: str) -> None:
        super().__init__(reason)
        self.phase = phase
        self.reason = reason


async def run(
    rt: Any, caller: Any, env: Envelope, model: str, obs: dict[str, Any], protocol: Protocol, acquire: Acquire,
    prompted: Prompted, rng: random.Random | None = None,
) -> Leg | Failed:
    snap = caller.snap
    scope = caller.scope
    retry = snap.retry
    failed = {"prefill": set[str](), "decode": set[str]()}
    last = _LegFailed("decode", _NONE_LEFT)
    rounds = 0
    draw = (rng or random).getrandbits
    while rounds < retry.max_attempts:
        rounds += 1
        try:
            if protocol.concurrent:
                leg = await _concurrent(rt, caller, env, model, obs, protocol, acquire, prompted, scope,
                                        failed, draw(63))
            else:
                leg = await _sequential(rt, caller, env, model, obs, protocol, acquire, prompted, scope,
                                        failed, retry.max_attempts)
        except _LegFailed as exc:
            last = exc
            if exc.reason == _NONE_LEFT:  # that phase has no replica left to try
                break
            continue
        obs["disagg_rounds"] = rounds
        return leg
    return Failed(_error(model, last, failed))


_NONE_LEFT = "no healthy replica left to try"


def _error(model: str, last: _LegFailed, failed: dict[str, set[str]]) -> RouterError:
    """The client's error when no unified replica can serve the request
    either: the phase that failed last, and how."""
    phase, reason = last.phase, last.reason
    if reason == _NONE_LEFT and not failed[phase]:
        return PhaseUnavailable(f"No healthy {phase} replica is available for '{model}' (and no unified one).")
    if reason == _NONE_LEFT:
        reason = "every one tried failed"
    cls = PrefillFailed if phase == "prefill" else DecodeFailed
    return cls(f"The {phase} phase of '{model}' failed ({reason}); no unified replica could serve it instead.")


def _leg_env(base: Envelope, body: dict[str, Any], *, stream: bool, relay_whole: bool) -> Envelope:
    # Both legs carry the request's id, as vLLM's proxy sends one X-Request-Id
    # to both: a replica's logs of one request can be joined to the other's.
    headers = base.headers if "x-request-id" in base.headers else {**base.headers, "x-request-id": base.request_id}
    return dataclasses.replace(
        base, raw=orjson.dumps(body), body=body, stream=stream, relay_whole=relay_whole,
        stream_usage=base.stream_usage and stream, headers=headers,
    )


def _client_fault(ex: Exchange) -> bool:
    return 400 <= ex.status < 500 and ex.status != 429


async def _start(rt: Any, provider: Provider, cand: Candidate, sent: Envelope, model: str, phase: str,
                 obs: dict[str, Any]) -> Exchange:
    """One leg's answer up to its first byte; its failure as `_LegFailed`
    (the slot given back with a verdict), anything else with the slot freed."""
    spec = cand.spec
    try:
        return await provider.start(rt, spec, sent, model)
    except UpstreamFailed as failure:
        rt.release(cand.state, ok=False)
        _note(obs, phase, spec.name, failure.reason)
        raise _LegFailed(phase, failure.reason) from None
    except BaseException as exc:
        rt.release(cand.state, ok=None)
        if isinstance(exc, (asyncio.CancelledError, RouterError)):
            raise
        log.error("%s leg to backend %s failed: %s", phase, spec.name, type(exc).__name__, exc_info=exc)
        raise UpstreamError(f"The router could not dispatch the {phase} leg to a backend of '{model}'.") from exc


def _note(obs: dict[str, Any], phase: str, name: str, reason: str) -> None:
    failures = obs.setdefault("failures", [])
    if len(failures) < 20:
        failures.append(f"{phase}:{name}")
    if reason:
        obs.setdefault("failure_details", {})[name] = reason[-1000:]


async def _closed(ex: Exchange) -> None:
    if ex.close is not None:
        await ex.close()


async def _sequential(
    rt: Any, caller: Any, env: Envelope, model: str, obs: dict[str, Any], protocol: Protocol, acquire: Acquire,
    prompted: Prompted, scope: str | None, failed: dict[str, set[str]], attempts: int,
) -> Leg:
    """vLLM: the prefill's whole answer, then the decode leg carrying it."""
    started = time.perf_counter()
    answer: Any = None
    for _ in range(attempts):
        pc = await acquire(rt, caller, model, failed["prefill"], None, (), obs, scope, role="prefill")
        if pc is None:
            raise _LegFailed("prefill", _NONE_LEFT)
        pspec = pc.spec
        base = prompted(env, pspec.name)
        provider = provider_for(pspec.kind)
        sent = _leg_env(base, protocol.prefill_body(base.body, pspec, 0), stream=False, relay_whole=False)
        try:
            ex = await _start(rt, provider, pc, sent, model, "prefill", obs)
        except _LegFailed:
            failed["prefill"].add(pspec.name)
            continue
        if _client_fault(ex):  # the request's own fault: the client hears it as it came
            return Leg(provider, ex, sent, pc.state, pspec.name, (time.perf_counter() - started) * 1000.0)
        why = f"status {ex.status}" if ex.status >= 300 else None
        if why is None:
            try:
                answer = orjson.loads(ex.body)
            except orjson.JSONDecodeError:
                answer = None
            why = protocol.handoff(answer)
        rt.release(pc.state, ok=why is None, latency_ms=ex.upstream_ms)
        await _closed(ex)
        if why is not None:
            failed["prefill"].add(pspec.name)
            _note(obs, "prefill", pspec.name, why)
            continue
        prefill_ms = (time.perf_counter() - started) * 1000.0
        return await _decode(rt, caller, base, model, obs, protocol, acquire, scope, failed, pspec, answer,
                             prefill_ms)
    raise _LegFailed("prefill", "every prefill replica tried failed")


async def _decode(
    rt: Any, caller: Any, base: Envelope, model: str, obs: dict[str, Any], protocol: Protocol, acquire: Acquire,
    scope: str | None, failed: dict[str, set[str]], pspec: Any, answer: Any, prefill_ms: float,
) -> Leg:
    dc = await acquire(rt, caller, model, failed["decode"], None, (), obs, scope, role="decode")
    if dc is None:
        raise _LegFailed("decode", _NONE_LEFT)
    provider = provider_for(dc.spec.kind)
    sent = _leg_env(base, protocol.decode_body(base.body, pspec, 0, answer), stream=base.stream,
                    relay_whole=base.relay_whole)
    try:
        ex = await _start(rt, provider, dc, sent, model, "decode", obs)
    except _LegFailed:
        failed["decode"].add(dc.spec.name)
        raise
    if ex.status in caller.snap.retry.retry_on_status:
        rt.release(dc.state, ok=ex.status < 500 and ex.status != 429)
        await _closed(ex)
        failed["decode"].add(dc.spec.name)
        _note(obs, "decode", dc.spec.name, f"status {ex.status}")
        raise _LegFailed("decode", f"status {ex.status}")
    return Leg(provider, ex, sent, dc.state, pspec.name, prefill_ms)


async def _concurrent(
    rt: Any, caller: Any, env: Envelope, model: str, obs: dict[str, Any], protocol: Protocol, acquire: Acquire,
    prompted: Prompted, scope: str | None, failed: dict[str, set[str]], room: int,
) -> Leg:
    """SGLang: both legs at once, meeting in the bootstrap room; the decode's
    answer is relayed, the prefill's read to its end."""
    snap = caller.snap
    pc = await acquire(rt, caller, model, failed["prefill"], None, (), obs, scope, role="prefill")
    if pc is None:
        raise _LegFailed("prefill", _NONE_LEFT)
    try:
        dc = await acquire(rt, caller, model, failed["decode"], None, (), obs, scope, role="decode")
    except BaseException:
        rt.release(pc.state, ok=None)
        raise
    if dc is None:
        rt.release(pc.state, ok=None)
        raise _LegFailed("decode", _NONE_LEFT)
    pspec, dspec = pc.spec, dc.spec
    base = prompted(env, pspec.name)
    body = protocol.prefill_body(base.body, pspec, room)
    psent = _leg_env(base, body, stream=base.stream, relay_whole=False)
    dsent = _leg_env(base, protocol.decode_body(base.body, pspec, room, None), stream=base.stream,
                     relay_whole=base.relay_whole)
    pprov, dprov = provider_for(pspec.kind), provider_for(dspec.kind)
    started = time.perf_counter()
    ptask = asyncio.ensure_future(_start(rt, pprov, pc, psent, model, "prefill", obs))
    dtask = asyncio.ensure_future(_start(rt, dprov, dc, dsent, model, "decode", obs))
    prefill_ms = 0.0
    try:
        pending = {ptask, dtask}
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if ptask in done:
                prefill_ms = (time.perf_counter() - started) * 1000.0
                perr = ptask.exception()
                if perr is not None and not isinstance(perr, _LegFailed):  # ours, not the replica's
                    await _abandon(rt, dtask, dc)
                    raise perr
                why = _prefill_failure(ptask)
                if why is not None:
                    phase_reason = why
                    if not ptask.exception():  # an answer with a failing status: given back here
                        pex = ptask.result()
                        rt.release(pc.state, ok=pex.status < 500 and pex.status != 429)
                        await _closed(pex)
                        _note(obs, "prefill", pspec.name, why)
                    failed["prefill"].add(pspec.name)
                    await _abandon(rt, dtask, dc)
                    raise _LegFailed("prefill", phase_reason)
            if dtask in done:
                exc = dtask.exception()
                if exc is not None:
                    if isinstance(exc, _LegFailed):
                        failed["decode"].add(dspec.name)
                    await _abandon(rt, ptask, pc)
                    raise exc
                dex = dtask.result()
                if dex.status in snap.retry.retry_on_status:
                    rt.release(dc.state, ok=dex.status < 500 and dex.status != 429)
                    await _closed(dex)
                    failed["decode"].add(dspec.name)
                    _note(obs, "decode", dspec.name, f"status {dex.status}")
                    await _abandon(rt, ptask, pc)
                    raise _LegFailed("decode", f"status {dex.status}")
    except asyncio.CancelledError:  # the client left: neither leg goes on
        await _abandon(rt, ptask, pc)
        await _abandon(rt, dtask, dc)
        raise
    pex, dex = ptask.result(), dtask.result()
    if _client_fault(dex):
        rt.release(pc.state, ok=None)
        await _closed(pex)
        return Leg(dprov, dex, dsent, dc.state, pspec.name, prefill_ms)
    companion = None
    if pex.stream is not None:
        companion = asyncio.ensure_future(_drain(rt, pex, pc.state, pspec.name))
        _DRAINING.add(companion)
        companion.add_done_callback(_DRAINING.discard)
    else:
        rt.release(pc.state, ok=True, latency_ms=pex.upstream_ms)
        await _closed(pex)
    return Leg(dprov, dex, dsent, dc.state, pspec.name, prefill_ms, companion)


def _prefill_failure(task: asyncio.Future[Exchange]) -> str | None:
    exc = task.exception()
    if isinstance(exc, _LegFailed):
        return exc.reason
    ex = task.result()
    if ex.status >= 300:
        return f"status {ex.status}"
    return None


async def _abandon(rt: Any, task: asyncio.Future[Exchange], cand: Candidate) -> None:
    """End a leg the request no longer needs: cancelled while in flight
    (its `_start` frees the slot), or closed with no verdict once answered."""
    if not task.done():
        task.cancel()
        try:
            await task
        except BaseException:
            pass
        return
    if task.cancelled() or task.exception() is not None:
        return  # `_start` gave the slot back
    ex = task.result()
    rt.release(cand.state, ok=None)
    await _closed(ex)


async def _drain(rt: Any, ex: Exchange, state: BackendState, name: str) -> None:
    """Read the prefill leg's answer to its end (SGLang streams it too); its
    failure is the prefill replica's verdict and a log line."""
    ok: bool | None = None
    try:
        assert ex.stream is not None
        async for _ in ex.stream:
            pass
        ok = True
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        ok = False
        log.warning("the prefill leg on backend %s failed while it was read: %s", name, type(exc).__name__)
    finally:
        rt.release(state, ok=ok, latency_ms=ex.upstream_ms)
        await _closed(ex)

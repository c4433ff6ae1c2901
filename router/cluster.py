"""Every router process publishes its live state to Redis: the writing side
of the cluster view (node/cluster.py reads it).

Each web process runs `run_publisher(rt)` next to the observation drainer
(router/runtime.py start()); every PUBLISH_EVERY_S it writes one compact
record (orjson) to `<prefix>cluster:<node>:<pid>` with a TTL of TTL_S and
scores `<node>:<pid>` by heartbeat time in the sorted set
`<prefix>cluster:index`, so a reader never SCANs. A process that stops (or
hangs, or loses Redis) simply lets its key lapse: after TTL_S it is gone
from `node.cluster.cluster_state()`. The tasks process publishes a smaller record (role,
the revision it last applied, heartbeat) from its probe task.

Invariants:
- Nothing here runs on the /v1 path: the record is built in a worker
  thread every few seconds from `StateTable` reads only (as the dashboard
  reads them); BackendStates are never created or mutated.
- Bounded: a record lists at most MAX_BACKENDS backends (the unusable ones
  first, since they are what a disagreement is about) plus the counts; the
  index is pruned by heartbeat time on every write and read, and its own key
  has a TTL; a reader looks at no more than node.cluster.MAX_PROCESSES records.
- Clocks: heartbeats are wall-clock (epoch s, comparable across nodes);
  a breaker's "next trial in" is computed locally from the monotonic clock
  and published as seconds.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
import time
from typing import Any

import orjson
from django.conf import settings

from .aio import check_cancelled
from .core.health import IDLE, BackendState
from .redis import async_client, sync_client

log = logging.getLogger(__name__)

PUBLISH_EVERY_S = 2.5
TTL_S = 12  # a record outlives ~4 missed heartbeats, then the process is gone
MAX_BACKENDS = 500
# Verdicts (the dashboard's Backends page uses the same words).
HEALTHY, TRIAL, BREAKER_OPEN, PROBE_FAILING = "healthy", "trial", "breaker_open", "probe_failing"
# Loading a model after a start: out of rotation, but not a failure.
WARMING_UP = "warming_up"
UNHEALTHY = frozenset({BREAKER_OPEN, PROBE_FAILING})


def index_key() -> str:
    return settings.ROUTER_REDIS_PREFIX + "cluster:index"


def record_key(member: str) -> str:
    """`member` is `<node>:<pid>`."""
    return settings.ROUTER_REDIS_PREFIX + "cluster:" + member


def server_name() -> str | None:
    """The ASGI server this process runs under, when it can tell."""
    for name in ("uvicorn", "daphne"):
        if name in sys.modules:
            return name
    return None


def verdict(state: BackendState, now: float) -> tuple[str, float | None]:
    """(verdict, seconds until the breaker's next trial or None) at monotonic `now`.

    `trial`: the breaker is open but its cooldown has elapsed, so the next
    request is admitted as the half-open trial (usable, not yet healthy).
    `warming_up`: the probe found it starting (router.core.health).
    """
    if state.warming:
        return WARMING_UP, None
    if not state.probe_healthy:
        return PROBE_FAILING, None
    if state.open_until is None:
        return HEALTHY, None
    if state.usable(now):
        return TRIAL, None
    return BREAKER_OPEN, (None if state.trial else round(max(state.open_until - now, 0.0), 1))


def _process_fields(role: str, revision: int, revision_at: float, now: float) -> dict[str, Any]:
    return {
        "node": settings.ROUTER_NODE_ID,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "role": role,
        "revision": revision,
        "revision_at": revision_at,
        "heartbeat": now,
    }


def web_record(
    rt: Any,
    *,
    revision_at: float,
    now: float | None = None,
    mono: float | None = None,
    max_backends: int = MAX_BACKENDS,
) -> dict[str, Any]:
    """The state of web process `rt` (a router.runtime.Runtime; not imported:
    runtime starts this module): its runtime facts and each backend's verdict.

    `revision_at`: when this process first ran its current revision (wall
    clock). Only the backends of the installed snapshot are listed (a state
    of a removed backend is not routing anything)."""
    now = time.time() if now is None else now
    mono = time.monotonic() if mono is None else mono
    snap = rt.snapshot
    backends = snap.backends
    # Only the backends something happened to have a state; every other one
    # is idle and healthy. The cost follows the states and the rows listed,
    # not the cluster: at 20,000 backends a pass over all of them was
    # 12-17 ms of one thread's GIL every PUBLISH_EVERY_S, in every web
    # process, beside its /v1 requests.
    known: dict[str, tuple[BackendState, str, float | None]] = {}
    in_flight = not_healthy = 0
    for name, state in rt.states.items():
        if name in backends:
            word, retry_s = verdict(state, mono)
            known[name] = (state, word, retry_s)
            in_flight += state.in_flight
            not_healthy += word != HEALTHY
    if len(backends) <= max_backends:
        rows = [_row(name, known.get(name)) for name in _by_name(backends)]
    else:  # the unusable first: a disagreement is about them; then by name
        rows = [_row(name, known[name]) for name in sorted(n for n, k in known.items() if k[1] in UNHEALTHY)]
        del rows[max_backends:]
        for name in _by_name(backends):
            if len(rows) >= max_backends:
                break
            k = known.get(name)
            if k is None or k[1] not in UNHEALTHY:
                rows.append(_row(name, k))
    healthy = len(backends) - not_healthy
    return {
        **_process_fields("web", snap.revision, revision_at, now),
        "server": server_name(),
        "started_at": rt.started_at,
        "ready": rt.ready,
        "redis_ok": rt.redis_error is None,
        "in_flight": in_flight,
        "waiting": rt.waiting,
        "backends_total": len(snap.backends),
        "backends_healthy": healthy,
        # cache_aware: this process's prompt index (null under other strategies).
        "prefix_index": _index_facts(rt.prefix_index),
        "backends": rows,
    }


def _index_facts(index: Any) -> dict[str, int] | None:
    if index is None:
        return None
    return {"entries": len(index), "max_entries": index.max_entries, "replicas": index.replicas()}


def _row(name: str, known: tuple[BackendState, str, float | None] | None) -> dict[str, Any]:
    state, word, retry_s = known if known is not None else (IDLE, HEALTHY, None)
    ewma = None if state.ewma_ms is None else round(state.ewma_ms, 1)
    return {"n": name, "v": word, "b": state.breaker, "r": retry_s, "f": state.in_flight, "e": ewma}


_names: list[Any] = [None, ()]  # [a snapshot's backends, their names in order]: the last asked for


def _by_name(backends: Any) -> Any:
    """`backends`' names sorted, kept while the snapshot's mapping is the
    same object (one sort per change, not per record)."""
    held = _names
    if held[0] is not backends:
        names = sorted(backends)
        held[:] = [backends, names]
        return names
    return held[1]


def tasks_record(revision: int, revision_at: float, now: float | None = None) -> dict[str, Any]:
    """The tasks process's smaller record: role, revision applied, heartbeat."""
    now = time.time() if now is None else now
    return {**_process_fields("tasks", revision, revision_at, now), "server": "celery"}


def _member(record: dict[str, Any]) -> str:
    return f"{record['node']}:{record['pid']}"


def _write(pipe: Any, record: dict[str, Any], ttl: float) -> None:
    member = _member(record)
    now = float(record["heartbeat"])
    pipe.set(record_key(member), orjson.dumps(record), px=int(ttl * 1000))
    pipe.zadd(index_key(), {member: now})
    pipe.zremrangebyscore(index_key(), "-inf", now - ttl)
    pipe.expire(index_key(), int(ttl * 5) + 1)


async def publish(record: dict[str, Any], ttl: float = TTL_S) -> None:
    pipe = async_client().pipeline(transaction=False)
    _write(pipe, record, ttl)
    await pipe.execute()


def publish_sync(record: dict[str, Any], ttl: float = TTL_S, client: Any = None) -> None:
    pipe = (client or sync_client()).pipeline(transaction=False)
    _write(pipe, record, ttl)
    pipe.execute()


async def withdraw(member: str) -> None:
    pipe = async_client().pipeline(transaction=False)
    pipe.delete(record_key(member))
    pipe.zrem(index_key(), member)
    await pipe.execute()


class _Revision:
    """When this process first ran its current revision (wall clock)."""

    def __init__(self) -> None:
        self.revision: int | None = None
        self.at = 0.0

    def seen(self, revision: int, now: float) -> float:
        if revision != self.revision:
            self.revision, self.at = revision, now
        return self.at


async def run_publisher(rt: Any, every: float = PUBLISH_EVERY_S) -> None:
    """Publish `rt`'s record every `every` seconds until cancelled; on a
    clean stop, withdraw it at once (a killed process lapses after TTL_S)."""
    rev = _Revision()
    member = None
    failing = False
    try:
        while True:
            try:
                now = time.time()
                at = rev.seen(rt.snapshot.revision, now)
                record = await asyncio.to_thread(web_record, rt, revision_at=at, now=now)
                member = _member(record)
                await publish(record)
                check_cancelled()
                if failing:
                    log.info("cluster state published again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                check_cancelled()
                if not failing:  # once per outage; the listener logs Redis itself
                    log.warning("cluster state not published: %s", type(exc).__name__)
                failing = True
            await asyncio.sleep(every)
    except asyncio.CancelledError:
        if member is not None:
            try:
                await asyncio.wait_for(withdraw(member), 1.0)
            except Exception:
                pass
        raise


_tasks_rev = _Revision()
_tasks_last = 0.0


def tasks_heartbeat(revision: int, client: Any = None) -> None:
    """From the tasks process's periodic task: publish at most every
    PUBLISH_EVERY_S; never raises (the probe round matters more)."""
    global _tasks_last
    now = time.time()
    if now - _tasks_last < PUBLISH_EVERY_S:
        return
    _tasks_last = now
    try:
        publish_sync(tasks_record(revision, _tasks_rev.seen(revision, now), now), client=client)
    except Exception as exc:
        log.warning("cluster state not published: %s", type(exc).__name__)

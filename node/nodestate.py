"""The node's health beyond routing: its processes, Redis, its namespace.

`node_health()` is what /readyz (detail), /status and the dashboard show. It
reads two cheap things and is never called on the /v1 path:

- this process's view of Redis (router.runtime: set by the listener loop,
  logged once per outage and once on recovery);
- the child states `manage.py runnode` writes to ROUTER_NODE_STATE_FILE
  (a small JSON file in the var dir, rewritten every ~2 s and on every change;
  a file, not Redis, so it still reports while Redis is down). An old file
  means no supervisor is running it (e.g. a process started by hand).

Readiness is not lowered by a degraded node: /v1 keeps serving from the
snapshot without Redis and without the tasks process, so /readyz stays 200
and says what is degraded in `node.degraded` (docs/operations.md).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import orjson
from django.conf import settings

from router.runtime import get_runtime

STATE_STALE_S = 10.0  # runnode rewrites the file every ~2 s
KEYSPACE_TTL_S = 30


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Atomic replace: a reader never sees half a file."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_bytes(orjson.dumps({**state, "updated_at": time.time()}))
    os.replace(tmp, path)


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(data, dict) or time.time() - float(data.get("updated_at", 0)) > STATE_STALE_S:
        return None
    return data


def keyspace_heartbeat(client: Any, prefix: str, deployment: str) -> list[str]:
    """Announce this deployment in its Redis keyspace; return the others seen
    writing there recently (two routers with distinct databases sharing one
    prefix would mix recent requests, verdicts and the task queue)."""
    key = prefix + "deployments"
    now = time.time()
    pipe = client.pipeline(transaction=False)
    pipe.hset(key, deployment, str(now))
    pipe.expire(key, KEYSPACE_TTL_S * 2)
    pipe.hgetall(key)
    *_, seen = pipe.execute()
    others = []
    for name, at in seen.items():
        name = name.decode() if isinstance(name, bytes) else name
        try:
            recent = now - float(at) < KEYSPACE_TTL_S
        except ValueError:
            recent = False
        if name != deployment and recent:
            others.append(name)
    return sorted(others)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def node_health() -> dict[str, Any]:
    rt = get_runtime()
    supervised = read_state(settings.ROUTER_NODE_STATE_FILE)
    degraded: list[str] = []
    if rt.redis_error is not None:
        degraded.append("redis")
    processes = None
    shared_with: list[str] = []
    if supervised is not None:
        processes = supervised.get("processes") or {}
        degraded += [name for name, p in processes.items() if p.get("state") != "running"]
        shared_with = list(supervised.get("keyspace_shared_with") or [])
        if shared_with:
            degraded.append("keyspace")
    return {
        "degraded": degraded,
        "redis": {
            "ok": rt.redis_error is None,
            "error": rt.redis_error,
            "down_since": _iso(rt.redis_down_since),
        },
        "namespace": {
            "redis_prefix": settings.ROUTER_REDIS_PREFIX,
            "deployment": settings.ROUTER_DEPLOYMENT_ID,
            "task_queue": settings.CELERY_TASK_DEFAULT_QUEUE,
            "shared_with": shared_with,
        },
        "supervised": supervised is not None,
        "processes": processes,
    }

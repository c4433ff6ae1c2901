"""The cluster view: what the router processes of every node sharing this
Redis prefix published of themselves (router/cluster.py writes the records),
read for the dashboard's Cluster page.

Invariants:
- Read-only apart from pruning: index members whose heartbeat is older than
  the TTL, or whose record lapsed, are removed from the index.
- Bounded: a reader looks at no more than MAX_PROCESSES records (one MGET).
- Clocks: heartbeats are wall-clock (epoch s, comparable across nodes).
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from router.cluster import HEALTHY, PUBLISH_EVERY_S, TTL_S, UNHEALTHY, index_key, record_key
from router.redis import sync_client

LATE_S = 7.5  # a heartbeat older than this (but within the TTL) is flagged late
CATCH_UP_S = 10.0  # a process on an older revision for less than this is catching up
MAX_PROCESSES = 200


def read_records(client: Any = None, now: float | None = None, ttl: float = TTL_S) -> list[dict[str, Any]]:
    """The live records (one MGET); stale index members are pruned."""
    client = client or sync_client()
    now = time.time() if now is None else now
    key = index_key()
    client.zremrangebyscore(key, "-inf", now - ttl)
    members = [m.decode() if isinstance(m, bytes) else m for m in client.zrevrange(key, 0, MAX_PROCESSES - 1)]
    if not members:
        return []
    raws = client.mget([record_key(m) for m in members])
    records, gone = [], []
    for member, raw in zip(members, raws, strict=True):
        if raw is None:
            gone.append(member)  # its TTL lapsed before the index was pruned
            continue
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    if gone:
        client.zrem(key, *gone)
    return records


def cluster_state(
    client: Any = None,
    now: float | None = None,
    *,
    ttl: float = TTL_S,
    late_s: float = LATE_S,
    catch_up_s: float = CATCH_UP_S,
) -> dict[str, Any]:
    """{"processes", "backends" (name × process matrix), "flags", "catching_up", ...}.

    Flags (each a dict with `kind`, the subject and a plain explanation):
    - `backend_split`: a backend healthy on one process and breaker-open or
      probe-failing on another;
    - `revision_behind`: a process on an older revision than the newest one,
      for longer than `catch_up_s` (shorter: listed in `catching_up`);
    - `heartbeat_late`: a process whose last heartbeat is older than `late_s`;
    - `not_ready` / `redis_down`: a web process that says so of itself.
    """
    now = time.time() if now is None else now
    records = read_records(client, now, ttl)
    records.sort(key=lambda r: (r.get("role") != "web", str(r.get("node")), int(r.get("pid") or 0)))
    processes: list[dict[str, Any]] = []
    for r in records:
        pid = f"{r.get('node')}/{r.get('pid')}"
        processes.append(
            {
                "id": pid,
                "node": r.get("node"),
                "pid": r.get("pid"),
                "host": r.get("host"),
                "role": r.get("role"),
                "server": r.get("server"),
                "started_at": r.get("started_at"),
                "revision": r.get("revision"),
                "revision_at": r.get("revision_at"),
                "ready": r.get("ready"),
                "redis_ok": r.get("redis_ok"),
                "heartbeat": r.get("heartbeat"),
                "age_s": round(max(now - float(r.get("heartbeat") or 0), 0.0), 1),
                "in_flight": r.get("in_flight"),
                "waiting": r.get("waiting"),
                "backends_total": r.get("backends_total"),
                "backends_healthy": r.get("backends_healthy"),
                "backends_listed": len(r.get("backends") or ()),
            }
        )
    flags: list[dict[str, Any]] = []
    catching_up: list[dict[str, Any]] = []

    # The matrix: backend → {process id → cell}.
    matrix: dict[str, dict[str, dict[str, Any]]] = {}
    for r, p in zip(records, processes, strict=True):
        for row in r.get("backends") or ():
            matrix.setdefault(row["n"], {})[p["id"]] = {
                "verdict": row.get("v"),
                "breaker": row.get("b"),
                "retry_s": row.get("r"),
                "in_flight": row.get("f"),
                "ewma_ms": row.get("e"),
            }
    backends = []
    for name in sorted(matrix):
        cells = matrix[name]
        good = sorted(pid for pid, c in cells.items() if c["verdict"] == HEALTHY)
        bad = sorted(pid for pid, c in cells.items() if c["verdict"] in UNHEALTHY)
        split = bool(good and bad)
        if split:
            for pid in bad:
                cells[pid]["flagged"] = True
            flags.append(
                {
                    "kind": "backend_split",
                    "backend": name,
                    "healthy_on": good,
                    "unhealthy_on": bad,
                    "explanation": (
                        f"Backend {name} is healthy on {', '.join(good)} but "
                        f"{' / '.join(sorted({cells[p]['verdict'].replace('_', ' ') for p in bad}))} on "
                        f"{', '.join(bad)}. Each web process keeps its own circuit breaker: the backend failed "
                        "real requests from those processes (or their network path to it differs). Check the "
                        "backend from those hosts; the breaker retries by itself after its cooldown."
                    ),
                }
            )
        backends.append({"name": name, "cells": cells, "split": split})

    revisions = [p for p in processes if isinstance(p["revision"], int)]
    if revisions:
        newest = max(p["revision"] for p in revisions)
        since = min(float(p["revision_at"] or now) for p in revisions if p["revision"] == newest)
        for p in revisions:
            if p["revision"] >= newest:
                continue
            entry = {"process": p["id"], "revision": p["revision"], "newest": newest}
            if now - since < catch_up_s:
                catching_up.append(entry)
                continue
            p["revision_behind"] = True
            flags.append(
                {
                    "kind": "revision_behind",
                    **entry,
                    "explanation": (
                        f"Process {p['id']} ({p['role']}) runs revision {p['revision']}, while revision {newest} "
                        f"has been live elsewhere for {now - since:.0f} s. It missed the change notice and its "
                        "safety poll has not caught up: check its log for database or Redis errors, or restart it."
                    ),
                }
            )
    for p in processes:
        if p["age_s"] > late_s:
            p["late"] = True
            flags.append(
                {
                    "kind": "heartbeat_late",
                    "process": p["id"],
                    "age_s": p["age_s"],
                    "explanation": (
                        f"Process {p['id']} ({p['role']}) last reported {p['age_s']:.0f} s ago (every "
                        f"{PUBLISH_EVERY_S:g} s is normal). Its event loop may be blocked or it is losing Redis; "
                        f"if it stays silent it drops off this page after {ttl:g} s."
                    ),
                }
            )
        if p["role"] == "web" and p["ready"] is False:
            flags.append(
                {
                    "kind": "not_ready",
                    "process": p["id"],
                    "explanation": f"Process {p['id']} has not loaded its routing state yet (its /readyz is 503).",
                }
            )
        if p["role"] == "web" and p["redis_ok"] is False:
            flags.append(
                {
                    "kind": "redis_down",
                    "process": p["id"],
                    "explanation": (
                        f"Process {p['id']} reports its Redis subscription down: it serves from its current "
                        "snapshot, reloads only by the DB poll and does not see probe verdicts."
                    ),
                }
            )
    return {
        "generated_at": now,
        "ttl_s": ttl,
        "publish_every_s": PUBLISH_EVERY_S,
        "processes": processes,
        "backends": backends,
        "flags": flags,
        "catching_up": catching_up,
    }

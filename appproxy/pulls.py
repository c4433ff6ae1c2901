"""Pulls that found nothing changed are recorded in Redis, not in the DB.

A ROUTER node pulls every ``reconcile_interval``; at cluster size almost
every pull finds the same circuits and a 304 router-config. Writing the
node's ``WorkerState`` row for each (pull time, result, count) would make a
DB write of what is, by definition, no change. So an unchanged pull writes
one small Redis hash instead, and every reader of the row (the schedule in
``worker.view``, /status, the dashboard) overlays it with ``overlay``.

- The hash holds the time of the last unchanged pull and how many there
  were; it expires after a day without one (the count is for display).
- A pull that changes something writes the row as before, so the DB stays
  the record of every change; the hash's time only counts when it is later
  than the row's.
- With Redis down, ``note_unchanged`` returns False and the caller writes the
  row instead: slower, never wrong.
- The hash also holds the CPU the node's last pull took (its own thread's,
  ``time.thread_time``), full or unchanged, for /status: the figure the
  reconcile's cost targets are about, measured where it is spent.
"""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any

from django.conf import settings

from router.redis import sync_client

log = logging.getLogger(__name__)

TTL_S = 86_400


def _key(authority: str, node_id: str) -> str:
    return f"{settings.ROUTER_REDIS_PREFIX}appproxy:pull:{authority}:{node_id}"


def note_unchanged(authority: str, node_id: str, cpu_ms: float) -> bool:
    """Record one unchanged pull (and its CPU); False when Redis could not take it."""
    key = _key(authority, node_id)
    try:
        pipe = sync_client().pipeline(transaction=True)
        pipe.hset(key, mapping={"at": repr(time.time()), "cpu_ms": f"{cpu_ms:.1f}"})
        pipe.hincrby(key, "unchanged", 1)
        pipe.expire(key, TTL_S)
        pipe.execute()
    except Exception as exc:  # redis down: the caller writes the row instead
        log.warning("appproxy: unchanged pull not recorded in Redis (%s); writing the row", type(exc).__name__)
        return False
    return True


def note_cost(authority: str, node_id: str, cpu_ms: float) -> None:
    """The CPU of a pull that applied (or compared) the full state: shown
    beside the unchanged ones' (/status ``last_pull_cpu_ms``)."""
    try:
        pipe = sync_client().pipeline(transaction=True)
        pipe.hset(_key(authority, node_id), "cpu_ms", f"{cpu_ms:.1f}")
        pipe.expire(_key(authority, node_id), TTL_S)
        pipe.execute()
    except Exception:  # display only
        pass


def overlay(row: Any) -> Any:
    """The row (a ``WorkerState``, in memory only) with the unchanged pulls
    Redis holds for it: a later pull time, result "304", the count added."""
    if row is None or not getattr(row, "node_id", ""):
        return row
    try:
        raw = sync_client().hgetall(_key(row.authority, row.node_id))
    except Exception:
        return row
    try:
        row.last_pull_cpu_ms = float(raw[b"cpu_ms"]) if b"cpu_ms" in raw else None
        at = float(raw[b"at"])
        unchanged = int(raw.get(b"unchanged", 0))
    except (KeyError, ValueError):
        return row
    when = datetime.fromtimestamp(at, tz=UTC)
    if row.last_pull_at is None or when > row.last_pull_at:
        row.last_pull_at = when
        row.last_pull_result = "304"
    row.pulls_unchanged = (row.pulls_unchanged or 0) + unchanged
    return row

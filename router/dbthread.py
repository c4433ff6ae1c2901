"""One thread for a long-lived process's ORM work, its DB connection kept.

With Django's default ``CONN_MAX_AGE=0`` every unit of work that closes old
connections opens a new one, and on PostgreSQL a connection is a new server
process (~10-20 ms here). The events process applies a burst of route
updates one batch after another, and recorded each event in a call of its
own: a new connection per event made a 100-events/s burst fall ~15 s behind.
A web process reloads its snapshot after every change the same way.

``DbThread`` runs calls on one thread whose connection stays open between
them. Before a call it is checked as Django's ``CONN_HEALTH_CHECKS`` would:
a connection whose last query failed, or that sat idle for longer than
``IDLE_CHECK_S``, is tested with a trivial query and replaced when it is no
longer usable (the database restarted, a proxy dropped it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.db import connections

T = TypeVar("T")

IDLE_CHECK_S = 5.0


def _usable_connections(idle_s: float) -> None:
    for conn in connections.all(initialized_only=True):
        if conn.connection is None:
            continue
        if conn.in_atomic_block or not conn.get_autocommit():
            conn.close()  # a call left a transaction open: never carry it into the next
        elif conn.errors_occurred or idle_s > IDLE_CHECK_S:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()


class DbThread:
    def __init__(self, name: str) -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._last = 0.0

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...], kwargs: dict[str, Any]) -> T:
        _usable_connections(time.monotonic() - self._last)
        try:
            return fn(*args, **kwargs)
        finally:
            self._last = time.monotonic()

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self._call, fn, args, kwargs)

    def shutdown(self) -> None:
        """Close the thread's connections and stop it."""
        self._pool.submit(connections.close_all).result()
        self._pool.shutdown(wait=True)

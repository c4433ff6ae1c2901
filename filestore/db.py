"""The one thread this web process runs the Files API's queries on.

Its DB connection is kept between calls and checked when it sat idle
(router.dbthread), instead of one new connection per request, and no
request's query waits behind another's file transfer: bytes are moved on
other threads (asyncio.to_thread).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from router.dbthread import DbThread

T = TypeVar("T")

_thread: DbThread | None = None


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    global _thread
    if _thread is None:  # made on first use, in the serving process (never before a fork)
        _thread = DbThread("router-files-db")
    return await _thread.run(fn, *args, **kwargs)

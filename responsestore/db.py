"""The one thread this process runs stored-response queries on (router.dbthread):
its connection kept between calls, never the event loop's time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from router.dbthread import DbThread

T = TypeVar("T")

_thread: DbThread | None = None


async def run(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    global _thread
    if _thread is None:  # made on first use, in the serving process (never before a fork)
        _thread = DbThread("router-responses-db")
    return await _thread.run(fn, *args, **kwargs)

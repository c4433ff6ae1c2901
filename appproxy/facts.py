"""Live facts of a /status section, read from the DB without blocking the
web process's event loop: every mode's /status section uses ``LiveFacts``.

A read runs in one short-lived worker thread per section, is cached
``STATUS_TTL`` seconds per key, and a read that fails or takes over 2 s
becomes ``{"live_error": …}``: the page answers anyway.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["STATUS_TTL", "LiveFacts"]

STATUS_TTL = 1.0


class LiveFacts:
    """Facts a /status section reads from the DB: off the event loop, in one
    short-lived thread, cached ``STATUS_TTL`` seconds per key; a read that
    fails or takes over 2 s becomes ``{"live_error": …}`` (the page answers)."""

    def __init__(self, thread_name: str) -> None:
        self.lock = threading.Lock()
        self.cache: dict[str, Any] = {"at": 0.0, "key": None, "value": None}
        self.pool = ThreadPoolExecutor(1, thread_name_prefix=thread_name)

    def get(self, key: Any, read: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        now = time.monotonic()
        with self.lock:
            fresh = self.cache["key"] == key and now - self.cache["at"] < STATUS_TTL
            live = self.cache["value"] if fresh else None
        if live is None:
            try:
                live = self.pool.submit(read, *args).result(timeout=2.0)
            except Exception as exc:  # the status page must answer anyway
                live = {"live_error": type(exc).__name__}
            with self.lock:
                self.cache.update(at=now, key=key, value=live)
        return live

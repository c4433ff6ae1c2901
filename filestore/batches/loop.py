"""The tasks process's event loop for batches, with its routing runtime.

Batch lines go through the same door as `/v1` requests
(router.frontends.openai), which needs a started `router.runtime.Runtime`:
the snapshot kept current by the change notices, the backends' health and
capacity, the selector, the upstream client, the observation drainer (per-key
usage). The tasks process serves no HTTP, so it gets one such runtime on an
event loop in a thread of its own, started on the first batch and kept for
the process's life (not published in the cluster view: that lists web
processes; router.runtime `start(publish=False)`).

Its backend states are this process's own, as every web process's are: a
batch's lines count against a backend's `capacity` in this process
only, and ROUTER_BATCH_NODE_CONCURRENCY bounds what it adds to the fleet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from router.runtime import get_runtime

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def submit(fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> concurrent.futures.Future:
    """Run `fn(*args)` on the batch loop (started on first use)."""
    return asyncio.run_coroutine_threadsafe(fn(*args), _ensure())


def _ensure() -> asyncio.AbstractEventLoop:
    global _loop
    with _lock:
        if _loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="router-batches", daemon=True).start()
            asyncio.run_coroutine_threadsafe(get_runtime().start(publish=False), loop).result(30)
            _loop = loop
        return _loop

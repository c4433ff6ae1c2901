"""The cyclic garbage collector around bulk work.

A pull at cluster size builds hundreds of thousands of objects (parsed
circuits, rows, plans) that all live until it ends and that reference
counting frees. Every 700 allocations the collector walks the young ones,
and every so often all of them and everything older: at 5,000 circuits it
was 0.65 s of a first pull's 3.2 s of CPU, and 1.4 s of a restart's 2.5 s
(measured with gc.callbacks). `paused()` keeps it off while such work
runs; `settle()` moves what a process keeps for its life (the imports, the
app's setup) out of its reach for good.

Collection resumes when the last paused() block of the process ends (they
may overlap in threads); garbage with cycles made meanwhile is collected
then, so a pause is as bounded as the work it wraps. Never around a request.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["paused", "settle"]

_lock = threading.Lock()
_holders = 0
_was_enabled = False


@contextlib.contextmanager
def paused() -> Iterator[None]:
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


def settle() -> None:
    """Collect once, then freeze everything alive (gc.freeze): later
    collections walk only what was made after."""
    gc.collect()
    gc.freeze()

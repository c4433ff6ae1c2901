"""An asyncio workaround the router's background loops share.

On Python 3.11, `asyncio.wait_for` returns the inner result and drops a
cancellation that lands just as that result arrives (fixed in 3.12). redis-py
writes each command under `wait_for` when a socket timeout is set, as every
client of ours has: measured, a task cancelled while it loops on Redis
commands ran on, uncancelled, about every other time. A background loop that
awaits Redis would then outlive its cancel, and a process's stop would wait
on it. The task still counts the cancel (`Task.cancelling()`), so a loop
calls `check_cancelled()` after such an await to take it back up.
"""

from __future__ import annotations

import asyncio


def check_cancelled() -> None:
    """Raise CancelledError when this task was cancelled and an await swallowed it."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError()

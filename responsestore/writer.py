"""The answers waiting to be stored: a bounded queue, drained off the event loop.

A stored answer is handed over once the client has it whole (a whole answer
when its body is taken, a stream after its last event) and written by one
drainer task on the app's DB thread, up to `BATCH` rows per insert: the
answer is never held back by the database. At most
ROUTER_RESPONSES_QUEUE_MAX records wait in a process; past that an answer is
not stored (logged, counted in `dropped`) rather than growing memory while
the database is slow or away. A record stays findable by its id (`pending`)
until its write has run, so a continuation or a GET that follows the answer
at once — before the drainer got to it — finds it in this process.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque

from django.conf import settings

from . import db, services
from .record import Record

log = logging.getLogger(__name__)
BATCH = 100


class Writer:
    def __init__(self) -> None:
        self.pending: dict[str, Record] = {}
        self.dropped = 0
        self._queue: deque[Record] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    def put(self, record: Record) -> bool:
        """Queue `record` (on the event loop); False when the queue is full."""
        if len(self.pending) >= settings.ROUTER_RESPONSES_QUEUE_MAX:
            self.dropped += 1
            log.warning("stored responses: the write queue is full; response %s is not stored", record.id)
            return False
        self.pending[record.id] = record
        self._queue.append(record)
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._drain(), name="responsestore-writer")
        assert self._wake is not None
        self._wake.set()
        return True

    def find(self, owner: str, response_id: str) -> Record | None:
        record = self.pending.get(response_id)
        return record if record is not None and record.owner == owner and not record.deleted else None

    async def _drain(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while True:
            await wake.wait()
            wake.clear()
            while self._queue:
                batch = [self._queue.popleft() for _ in range(min(BATCH, len(self._queue)))]
                try:
                    await db.run(services.responses_save, batch)
                except Exception as exc:  # the database is away: these answers are lost, never the drainer
                    log.error("stored responses: writing %d failed: %s", len(batch), type(exc).__name__, exc_info=exc)
                finally:
                    for record in batch:
                        if self.pending.get(record.id) is record:
                            del self.pending[record.id]


WRITER = Writer()

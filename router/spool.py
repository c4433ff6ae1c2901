"""A request body kept in memory while it is small, on disk once it is not.

The surface's forms (router/frontends/surface.py: an audio file to
transcribe, an image to edit) may be as large as server.max_body_bytes, and
a retry on another backend sends the body again, so the router must keep it
until the answer is chosen — but not in memory. A `Spool` keeps the first
`MEMORY_MAX` bytes in memory; past that everything goes to an anonymous
temporary file under ROUTER_SPOOL_DIR (the node's var dir by default; it has
no name, so nothing is left behind by a crash), written and read in a worker
thread (`asyncio.to_thread`) in pieces of at most `PIECE` bytes, so the event
loop never waits on the disk and memory never holds more than about
`MEMORY_MAX + PIECE` bytes of one body.

`Upload` is what goes upstream: the spooled body, optionally with one span
replaced (the form's `model` value when the backend serves the model under
another name), of known length, read afresh for every attempt.

All the spools of a process together hold at most ROUTER_MAX_SPOOLED_BYTES
(memory and disk; `BUDGET`): past it a new or growing body is refused 503 with
Retry-After. What a form holds in memory while it arrives also counts in the
bound on bodies still arriving (ROUTER_MAX_PENDING_BODY_BYTES,
router/frontends/direct.py `PENDING`), as a JSON body does, so many slow
clients each sending a form of under 1 MiB cannot fill the memory either.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from typing import IO

MEMORY_MAX = 1024 * 1024
PIECE = 256 * 1024


class Budget:
    """Bytes held at once by the request bodies of one kind in this process:
    every spool (`BUDGET`), or the `/v1` bodies still arriving in memory
    (router/frontends/direct.py `PENDING`). Only the event loop's thread
    touches it; 0 as `limit`: no bound."""

    __slots__ = ("held", "limit", "refused")

    def __init__(self) -> None:
        self.limit = 0
        self.held = 0
        self.refused = 0

    def room(self, more: int) -> bool:
        if self.limit and self.held + more > self.limit:
            self.refused += 1
            return False
        return True


BUDGET = Budget()
# Where the bodies past MEMORY_MAX go (config/asgi.py sets it from ROUTER_SPOOL_DIR).
DIRECTORY: str | None = None


class Full(Exception):
    """The process's spool budget has no room for the next chunk."""


class Spool:
    """One body. `budget` counts all its bytes until `close`; `memory`, when
    given, counts the bytes it holds in memory while the body arrives (the
    process's bound on bodies still arriving, which a form's first MiB is
    part of), until they are on disk or the body is complete (`finish`)."""

    __slots__ = ("_budget", "_counted", "_file", "_in_memory", "_memory", "_pending", "size")

    def __init__(self, budget: Budget = BUDGET, memory: Budget | None = None) -> None:
        self.size = 0
        self._memory = bytearray()  # the first MEMORY_MAX bytes; then what waits to be written
        self._file: IO[bytes] | None = None
        self._pending = False  # `_memory` holds bytes past what is on disk
        self._budget = budget
        self._in_memory = memory
        self._counted = 0  # bytes of `_memory` counted in `_in_memory`

    async def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        n = len(chunk)
        memory = self._in_memory
        if not self._budget.room(n) or (memory is not None and not memory.room(n)):
            raise Full()
        self._budget.held += n
        if memory is not None:
            memory.held += n
            self._counted += n
        self.size += n
        self._memory += chunk
        if self._file is None and self.size <= MEMORY_MAX:
            return
        self._pending = True
        if len(self._memory) >= PIECE:
            await self._flush()

    async def finish(self) -> None:
        """Everything written is readable (call once the body is complete)."""
        if self._pending:
            await self._flush()
        self._uncount()

    def _uncount(self) -> None:
        if self._in_memory is not None:
            self._in_memory.held -= self._counted
        self._counted = 0

    async def _flush(self) -> None:
        data, self._memory = bytes(self._memory), bytearray()
        self._pending = False
        if self._file is None:
            self._file = await asyncio.to_thread(_open)
        await asyncio.to_thread(_append, self._file, data)
        self._uncount()

    async def pieces(self, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
        """The bytes [start, end) in order, at most PIECE at a time."""
        end = self.size if end is None else min(end, self.size)
        if self._file is None:
            for at in range(start, end, PIECE):
                yield bytes(self._memory[at : min(at + PIECE, end)])
            return
        while start < end:
            n = min(PIECE, end - start)
            piece = await asyncio.to_thread(_read_at, self._file, start, n)
            if not piece:
                raise OSError("the spooled body is shorter than was written")
            yield piece
            start += len(piece)

    def close(self) -> None:
        """Free the memory, the budgets and the file (idempotent)."""
        self._uncount()
        self._budget.held -= self.size
        self.size = 0
        self._memory = bytearray()
        if self._file is not None:
            self._file.close()  # anonymous: closing it frees the disk
            self._file = None


def _open() -> IO[bytes]:
    directory = DIRECTORY
    if directory:
        os.makedirs(directory, exist_ok=True)
    return tempfile.TemporaryFile(dir=directory)


def _append(file: IO[bytes], data: bytes) -> None:
    file.seek(0, os.SEEK_END)
    file.write(data)
    file.flush()


def _read_at(file: IO[bytes], at: int, n: int) -> bytes:
    return os.pread(file.fileno(), n, at)


class Upload:
    """A spooled body as it goes upstream: its bytes with `span` (start, end)
    replaced by `value` when one is given; iterated afresh for each attempt."""

    __slots__ = ("length", "span", "spool", "value")

    def __init__(self, spool: Spool, span: tuple[int, int] | None = None, value: bytes = b"") -> None:
        self.spool = spool
        self.span = span
        self.value = value
        self.length = spool.size if span is None else spool.size - (span[1] - span[0]) + len(value)

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._pieces()

    async def _pieces(self) -> AsyncIterator[bytes]:
        if self.span is None:
            async for piece in self.spool.pieces():
                yield piece
            return
        start, end = self.span
        async for piece in self.spool.pieces(0, start):
            yield piece
        yield self.value
        async for piece in self.spool.pieces(end):
            yield piece

    async def read(self) -> bytes:
        """The whole body at once (for checks: the router itself only iterates it)."""
        return b"".join([piece async for piece in self])

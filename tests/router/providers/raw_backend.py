"""A loopback upstream that writes raw bytes: answers no well-behaved server
(nor aiohttp, which the fakes are built on) would send — a broken chunked
body, a Content-Length longer than the body, a wrong content type, an
endless line.

`RawBackend(answer)` serves every POST with the byte pieces `answer(body)`
yields, written one by one (each drained, then a short pause, so they tend to
reach the router as separate reads), then closes the connection. It counts
the POSTs and the bytes written, and `cut` is set when a write failed: the
router closed the connection before the answer's end.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable
from typing import Self

import orjson

Answer = Callable[[dict], Iterable[bytes]]


def head(status: int, content_type: str | None, *, length: int | None = None, chunked: bool = False) -> bytes:
    """A status line and headers, `connection: close` (the pool keeps nothing:
    every request gets a new connection, whatever the previous answer did)."""
    lines = [f"HTTP/1.1 {status} X", "connection: close"]
    if content_type is not None:
        lines.append(f"content-type: {content_type}")
    if length is not None:
        lines.append(f"content-length: {length}")
    if chunked:
        lines.append("transfer-encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def completion(model: str, text: str = "hi") -> bytes:
    return orjson.dumps({
        "id": "c1", "object": "chat.completion", "created": 1, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    })


class LoopServer:
    """A loopback TCP server on an event loop in a thread of its own: `start()`
    listens on a free port, `stop()` closes it and cancels its connections.
    Subclasses write `_serve(reader, writer)`."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=type(self).__name__, daemon=True)
        self._server: asyncio.Server | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Self:
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0), self._loop
        ).result(10)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def stop(self) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class RawBackend(LoopServer):
    def __init__(self, answer: Answer, *, pause: float = 0.005) -> None:
        super().__init__()
        self.answer = answer
        self.pause = pause
        self.posts = 0
        self.written = 0
        self.cut = threading.Event()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in request.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            body = await reader.readexactly(length)
            self.posts += 1
            for piece in self.answer(orjson.loads(body)):
                writer.write(piece)
                await writer.drain()
                self.written += len(piece)
                await asyncio.sleep(self.pause)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.cut.set()
        finally:
            writer.close()


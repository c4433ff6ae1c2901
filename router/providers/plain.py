"""A lean HTTP/1.1 client for plain-http upstreams (issue 13).

The router's upstreams are mostly replicas on the cluster network (vLLM,
SGLang, Ollama) spoken to over plain HTTP/1.1. aiohttp's client was the
largest single cost of a proxied request (~27 % of the web process's CPU
under load: its request object, payload registry, writer, timeout
rescheduling, response object and stream reader per request). This client
does the one thing the hot path needs: a request written in one
`transport.write`, the answer parsed by httptools (llhttp, in C) straight
into an `httpx.Response` whose stream is this connection's buffer.

Everything else (https, a proxy, a unix socket, a local address) stays on
aiohttp (`LeanAiohttpTransport.send_direct` picks).

Invariants:
- One request at a time per connection; a connection goes back to the pool
  only when its answer ended cleanly and both sides keep it alive. An answer
  left unread (the client went away, a relay stopped) closes its connection:
  the upstream sees the close and stops generating.
- Errors are httpx's (`ConnectError`, `ConnectTimeout`, `ReadTimeout`,
  `ReadError`, `RemoteProtocolError`, `PoolTimeout`), as the aiohttp path maps
  them, so callers tell timeouts from refusals the same way.
- Nothing an upstream sends grows memory without bound: a stream pauses the
  socket when `HIGH_WATER` bytes are waiting for the reader; a whole answer
  is capped by the caller (`read_capped`) before it is read; an answer's head
  (its status line and headers, 1xx interim heads included) is refused
  (`ResponseHeadTooLarge`) at `MAX_RESPONSE_HEAD_BYTES` or past
  `MAX_RESPONSE_HEADERS` while it is still arriving, and httptools, which
  holds a header until its end, is never fed more of a head than that.
- A head that is not an answer to a request (`101 Switching Protocols`: the
  router asks for no upgrade) fails the request as `RemoteProtocolError`;
  other 1xx heads are interim and skipped (RFC 9110 §15.2). Either failure
  drops the connection.
- A request on a kept-alive connection the upstream closed before answering
  is sent again on a new connection only when its method is idempotent (as
  aiohttp does, RFC 9112 §9.3.1); a POST fails as `ReadError`, which the
  pipeline retries elsewhere.
- Header names and values never carry CR or LF onto the wire (a value that
  would is refused before anything is sent); Host, Content-Length and
  Transfer-Encoding are this client's (a configured Host is kept).
"""

from __future__ import annotations

import asyncio
import functools
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import httptools
import httpx
import yarl

HIGH_WATER = 256 * 1024  # bytes buffered for a stream's reader before the socket pauses
LOW_WATER = 64 * 1024
# An upstream answer's head is refused past these, as request heads are
# (config/server.py): more headers than any API server sends, and twice the
# request limit in bytes (docs/operations.md, "Limits and capacity").
MAX_RESPONSE_HEADERS = 100
MAX_RESPONSE_HEAD_BYTES = 64 * 1024
IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
_OWN = frozenset({"host", "content-length", "transfer-encoding"})


@functools.lru_cache(maxsize=4096)
def endpoint(url: yarl.URL) -> tuple[str, int, str, str]:
    """(host to connect to, port, request target, Host header value) of a URL."""
    host = url.raw_host or ""
    port = url.port or 80
    shown = f"[{host}]" if ":" in host else host
    return host, port, url.raw_path_qs or "/", shown if port == 80 else f"{shown}:{port}"


def request_head(method: str, target: str, host: str, headers: dict[str, str], length: int | None) -> bytes:
    """The request line and headers, as bytes (UTF-8 for a configured non-ASCII value)."""
    parts = [method, " ", target, " HTTP/1.1\r\n"]
    if "host" not in headers:
        parts += ("host: ", host, "\r\n")
    lines = 1
    for name, value in headers.items():
        if name.lower() in _OWN and name.lower() != "host":
            continue
        parts += (name, ": ", value, "\r\n")
        lines += 1
    if length is not None:
        parts += ("content-length: ", str(length), "\r\n")
    parts.append("\r\n")
    text = "".join(parts)
    ends = lines + (1 if "host" not in headers else 0) + (1 if length is not None else 0) + 1
    if text.count("\n") != ends or text.count("\r") != ends:
        raise ValueError("a request header name or value holds CR or LF")
    return text.encode()


class ResponseHeadTooLarge(httpx.RemoteProtocolError):
    """An upstream answer's head passed `MAX_RESPONSE_HEADERS` or `MAX_RESPONSE_HEAD_BYTES`."""


class _Exchange:
    """One request's answer as it arrives: the head, then body chunks."""

    __slots__ = (
        "buffered",
        "chunks",
        "complete",
        "conn",
        "encoded",
        "error",
        "got_bytes",
        "head",
        "headers",
        "length",
        "paused",
        "reason",
        "status",
        "waiter",
    )

    def __init__(self, conn: _Connection) -> None:
        self.conn = conn
        self.head: asyncio.Future[None] = conn.loop.create_future()
        self.status = 0
        self.reason = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.length: int | None = None  # the declared Content-Length
        self.encoded = False  # a Content-Encoding to undo
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.paused = False
        self.got_bytes = False

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None:
            self.waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def data(self, chunk: bytes) -> None:
        self.chunks.append(chunk)
        self.buffered += len(chunk)
        if self.buffered > HIGH_WATER and not self.paused:
            self.paused = True
            self.conn.pause()
        self._wake()

    def finish(self) -> None:
        self.complete = True
        self._wake()

    def fail(self, exc: BaseException) -> None:
        if not self.head.done():
            self.head.set_exception(exc)
        elif not self.complete and self.error is None:
            self.error = exc
            self._wake()

    def take(self) -> bytes:
        """Everything buffered, as one chunk (a stream relays what has arrived at once)."""
        chunks = self.chunks
        chunk = chunks.popleft() if len(chunks) == 1 else b"".join(chunks)
        chunks.clear()
        self.buffered = 0
        if self.paused:
            self.paused = False
            self.conn.resume()
        return chunk

    async def wait(self) -> None:
        self.waiter = waiter = self.conn.loop.create_future()
        await waiter


class _Connection(asyncio.Protocol):
    """One kept-alive connection to one upstream (host, port)."""

    def __init__(self, pool: PlainPool, key: tuple[str, int]) -> None:
        self.pool = pool
        self.key = key
        self.loop = pool.loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        self.closed = False
        self.reused = False
        self.idle_since = 0.0
        self.last_data = 0.0
        self.read_timeout = 0.0
        self.timer: asyncio.TimerHandle | None = None
        self._informational = False
        self._until_eof = False
        self._headers: list[tuple[bytes, bytes]] = []
        self._reason = b""
        self._head_bytes = 0  # of the answer's head so far (1xx heads included)

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.last_data = self.loop.time()
        if self.exchange is None:  # bytes nobody asked for: the connection cannot be trusted
            self.abort()
            return
        exchange = self.exchange
        exchange.got_bytes = True
        try:
            if not exchange.head.done():
                room = MAX_RESPONSE_HEAD_BYTES - self._head_bytes
                self._head_bytes += len(data)
                if len(data) > room:  # the head must end within the room left
                    self.parser.feed_data(data[:room])
                    if not exchange.head.done():
                        raise ResponseHeadTooLarge(
                            f"the upstream's answer head is larger than {MAX_RESPONSE_HEAD_BYTES} bytes"
                        )
                    data = data[room:]
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            ours = exc.__context__  # what a callback of ours raised
            self._fail(ours if isinstance(ours, httpx.HTTPError) else
                       httpx.RemoteProtocolError(f"invalid HTTP answer from the upstream: {exc}"))
            self.abort()
        except httpx.HTTPError as exc:
            self._fail(exc)
            self.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        exchange, self.exchange = self.exchange, None
        if exchange is not None:
            if exchange.head.done() and self._until_eof and not exchange.complete:
                exchange.finish()  # a body without a declared length ends with the connection
            else:
                exchange.fail(httpx.ReadError("the upstream closed the connection before the answer ended"))
        self.pool.lost(self)

    # -- httptools callbacks
    def on_message_begin(self) -> None:
        self._headers = []
        self._reason = b""

    def on_status(self, status: bytes) -> None:
        self._reason += status

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self._headers) >= MAX_RESPONSE_HEADERS:
            raise ResponseHeadTooLarge(f"the upstream's answer has more than {MAX_RESPONSE_HEADERS} headers")
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        exchange = self.exchange
        if exchange is None:
            return
        if status == 101:  # an upgrade nothing asked for: this connection speaks something else now
            raise httpx.RemoteProtocolError("the upstream answered 101 Switching Protocols to a plain request")
        if 100 <= status < 200:  # informational: the answer is still to come
            self._informational = True
            return
        length = None
        chunked = encoded = False
        for name, value in self._headers:
            lower = name.lower()
            if lower == b"content-length":
                length = int(value) if value.strip().isdigit() else None
            elif lower == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif lower == b"content-encoding":
                encoded = True
        self._until_eof = length is None and not chunked and status not in (204, 304)
        exchange.status = status
        exchange.reason = self._reason
        exchange.headers = self._headers
        exchange.length = None if chunked else length
        exchange.encoded = encoded
        if not exchange.head.done():
            exchange.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        if self.exchange is not None:
            self.exchange.data(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        exchange, self.exchange = self.exchange, None
        self._stop_timer()
        if exchange is None:
            return
        keep = self.parser.should_keep_alive() and not self._until_eof
        exchange.finish()
        if keep and not self.closed:
            self.pool.release(self)
        else:
            self.abort()

    # -- driving
    def start(self, exchange: _Exchange, data: bytes, read_timeout: float) -> None:
        self.exchange = exchange
        self._informational = False
        self._until_eof = False
        self._head_bytes = 0
        self.read_timeout = read_timeout
        self.last_data = now = self.loop.time()
        if read_timeout and read_timeout > 0:
            self.timer = self.loop.call_at(now + read_timeout, self._check_timeout)
        assert self.transport is not None
        self.transport.write(data)

    def _check_timeout(self) -> None:
        self.timer = None
        exchange = self.exchange
        if exchange is None or self.closed:
            return
        now = self.loop.time()
        if exchange.paused:  # the reader is behind, not the upstream
            self.timer = self.loop.call_at(now + self.read_timeout, self._check_timeout)
            return
        due = self.last_data + self.read_timeout
        if now < due:
            self.timer = self.loop.call_at(due, self._check_timeout)
            return
        self._fail(httpx.ReadTimeout(f"no byte from the upstream for {self.read_timeout:g} s"))
        self.abort()

    def _stop_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fail(self, exc: BaseException) -> None:
        exchange, self.exchange = self.exchange, None
        self._stop_timer()
        if exchange is not None:
            exchange.fail(exc)

    def pause(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.pause_reading()

    def resume(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.resume_reading()

    def abort(self) -> None:
        """Drop the connection now (an answer not read to its end can't be reused)."""
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()


class PlainStream(httpx.AsyncByteStream):
    """The body of one answer, chunk by chunk as it arrives."""

    def __init__(self, exchange: _Exchange) -> None:
        self.exchange = exchange

    def declared(self) -> int | None:
        """The declared length of a body with nothing to decode, else None
        (what httpx's headers would say, without decoding them all)."""
        exchange = self.exchange
        return None if exchange.encoded else exchange.length

    async def __aiter__(self) -> AsyncIterator[bytes]:
        exchange = self.exchange
        while True:
            if exchange.chunks:
                yield exchange.take()
                continue
            if exchange.error is not None:
                raise exchange.error
            if exchange.complete:
                return
            await exchange.wait()

    async def read_all(self) -> bytes:
        """The whole body (the caller checked its declared length), taken as
        it comes so the socket never stays paused for it."""
        exchange = self.exchange
        parts: list[bytes] = []
        while True:
            if exchange.chunks:
                parts.append(exchange.take())
            if exchange.error is not None:
                raise exchange.error
            if exchange.complete:
                if exchange.chunks:
                    parts.append(exchange.take())
                return parts[0] if len(parts) == 1 else b"".join(parts)
            await exchange.wait()

    async def aclose(self) -> None:
        exchange = self.exchange
        if not exchange.complete:
            exchange.conn._fail(httpx.ReadError("the answer was closed before its end"))
            exchange.conn.abort()


class PlainPool:
    """Kept-alive connections by (host, port), at most `max_connections` open."""

    def __init__(
        self, *, max_connections: int | None, max_keepalive: int | None, keepalive_expiry: float | None
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.max_connections = max_connections
        self.max_keepalive = max_keepalive
        self.expiry = keepalive_expiry if keepalive_expiry is not None else 5.0
        self.idle: dict[tuple[str, int], list[_Connection]] = {}
        self.open = 0
        self.idle_count = 0
        self._slots: deque[asyncio.Future[None]] = deque()
        self._next_sweep = 0.0

    # -- the pool
    def release(self, conn: _Connection) -> None:
        now = self.loop.time()
        if self.max_keepalive is not None and self.idle_count >= self.max_keepalive:
            conn.abort()
            return
        conn.idle_since = now
        self.idle.setdefault(conn.key, []).append(conn)
        self.idle_count += 1
        if now >= self._next_sweep:
            self._sweep(now)
        self._wake_slot()

    def lost(self, conn: _Connection) -> None:
        self.open -= 1
        idle = self.idle.get(conn.key)
        if idle and conn in idle:
            idle.remove(conn)
            self.idle_count -= 1
        self._wake_slot()

    def _sweep(self, now: float) -> None:
        """Close connections idle past the expiry (an upstream that never closes them)."""
        self._next_sweep = now + max(self.expiry / 2, 1.0)
        for conns in list(self.idle.values()):
            for conn in [c for c in conns if now - c.idle_since > self.expiry]:
                conn.abort()  # connection_lost removes it

    def _wake_slot(self) -> None:
        while self._slots:
            waiter = self._slots.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _take_idle(self, key: tuple[str, int]) -> _Connection | None:
        idle = self.idle.get(key)
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            self.idle_count -= 1
            if not conn.closed and now - conn.idle_since <= self.expiry:
                conn.reused = True
                return conn
            conn.abort()
        return None

    async def _acquire(self, key: tuple[str, int], timeout: dict[str, float]) -> _Connection:
        """A kept-alive connection to `key`, or a new one when there is room;
        else close an idle one to another upstream, or wait for one to free."""
        pool_timeout = timeout.get("pool")
        deadline = None if pool_timeout is None else self.loop.time() + pool_timeout
        while True:
            conn = self._take_idle(key)
            if conn is not None:
                return conn
            if self.max_connections is None or self.open < self.max_connections:
                return await self._connect(key, timeout)
            victim = next((c for k, conns in self.idle.items() if k != key for c in conns if not c.closed), None)
            if victim is not None:
                victim.abort()  # its connection_lost frees the slot and wakes us
            waiter = self.loop.create_future()
            self._slots.append(waiter)
            try:
                async with asyncio.timeout_at(deadline):
                    await waiter
            except TimeoutError:
                raise httpx.PoolTimeout("no free upstream connection in time") from None

    async def _connect(self, key: tuple[str, int], timeout: dict[str, float]) -> _Connection:
        self.open += 1
        host, port = key
        try:
            async with asyncio.timeout(timeout.get("connect")):
                _, conn = await self.loop.create_connection(lambda: _Connection(self, key), host, port)
        except TimeoutError:
            self._unopened()
            raise httpx.ConnectTimeout(f"connecting to {host}:{port} timed out") from None
        except OSError as exc:
            self._unopened()
            raise httpx.ConnectError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from exc
        except BaseException:
            self._unopened()
            raise
        return conn

    def _unopened(self) -> None:
        self.open -= 1
        self._wake_slot()

    async def send(
        self, method: str, url: yarl.URL, headers: dict[str, str], content: bytes, timeout: dict[str, float]
    ) -> httpx.Response:
        host, port, target, shown = endpoint(url)
        key = (host, port)
        length = len(content) if content or method not in ("GET", "HEAD", "DELETE", "OPTIONS") else None
        data = request_head(method, target, shown, headers, length)
        if content:
            data += content
        retry = method in IDEMPOTENT
        while True:
            conn = await self._acquire(key, timeout)
            exchange = _Exchange(conn)
            conn.start(exchange, data, timeout.get("read") or 0.0)
            try:
                await exchange.head
            except httpx.ReadError:
                if retry and conn.reused and not exchange.got_bytes:
                    retry = False  # the upstream closed a kept-alive connection as we sent: once more, anew
                    continue
                raise
            except BaseException:
                conn._fail(httpx.ReadError("the request was cancelled"))
                conn.abort()
                raise
            break
        extensions: dict[str, Any] = {"http_version": b"HTTP/1.1"}
        if exchange.reason:
            extensions["reason_phrase"] = exchange.reason
        return httpx.Response(
            status_code=exchange.status, headers=exchange.headers, stream=PlainStream(exchange), extensions=extensions
        )

    def close(self) -> None:
        for conns in list(self.idle.values()):
            for conn in list(conns):
                conn.abort()

"""router.providers.plain: the lean HTTP/1.1 client of plain-http upstreams,
against real loopback servers that answer in each of HTTP/1.1's framings and
fail in the ways upstreams fail."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import httpx
import pytest

from router.core.backend import BackendSpec
from router.core.errors import UpstreamResponseTooLarge
from router.providers import plain
from router.providers.base import UpstreamFailed
from router.providers.http import LeanAiohttpTransport, is_timeout, send

DEADLINE = 10.0
OK = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Upstream:
    """A TCP server whose `handler(reader, writer, n)` plays connection n."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()  # a connection saw EOF from the client

    async def __aenter__(self) -> Upstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/v1/chat/completions"
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer, self.connections)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # (a handler still waiting when the test ends is cancelled: not an error)
        finally:
            writer.close()

    async def read_request(self, reader: asyncio.StreamReader) -> bytes | None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError:
            self.closed.set()
            return None
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        request = head + await reader.readexactly(length)
        self.requests.append(request)
        return request

    async def until_eof(self, reader: asyncio.StreamReader) -> None:
        while await reader.read(65536):
            pass
        self.closed.set()


def _spec(**kw) -> BackendSpec:
    return BackendSpec(name="b", url="http://127.0.0.1:1", **kw)


async def _post(transport, url, *, stream=False, spec=None, headers=None, method="POST"):
    return await send(
        transport,
        spec or _spec(),
        url,
        content=b'{"model":"m"}' if method == "POST" else b"",
        headers=headers or {"content-type": "application/json"},
        stream=stream,
        method=method,
    )


@pytest.fixture
async def transport():
    t = LeanAiohttpTransport(trust_env=False)
    yield t
    await t.aclose()


async def test_kept_alive_connection_is_reused(transport):
    async def handler(reader, writer, n):
        while await up.read_request(reader) is not None:
            writer.write(OK)

    async with Upstream(handler) as up:
        for _ in range(3):
            got = await _post(transport, up.url)
            assert (got.response.status_code, got.first) == (200, b"{}")
        assert up.connections == 1
        assert transport._plain is not None and transport._plain.open == 1
        request_line, _, rest = up.requests[0].partition(b"\r\n")
        assert request_line == b"POST /v1/chat/completions HTTP/1.1"
        assert f"host: 127.0.0.1:{up.port}".encode() in rest and b"content-length: 13" in rest


async def test_chunked_stream_relays_each_chunk_as_it_arrives(transport):
    got_first = asyncio.Event()

    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n6\r\ndata: \r\n"
        )
        await asyncio.wait_for(got_first.wait(), DEADLINE)  # the next chunk only once the first was relayed
        writer.write(b"3\r\none\r\n0\r\n\r\n")
        await up.read_request(reader)  # the connection is kept for the next request
        writer.write(OK)

    async with Upstream(handler) as up:
        sent = await _post(transport, up.url, stream=True)
        assert sent.first == b"data: "
        got_first.set()
        assert [chunk async for chunk in sent.rest] == [b"one"]
        await sent.response.aclose()
        again = await _post(transport, up.url)
        assert again.first == b"{}" and up.connections == 1


async def test_body_until_close_is_whole_and_its_connection_not_kept(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n" + b'{"a": 1}')
        await writer.drain()

    async with Upstream(handler) as up:
        got = await _post(transport, up.url)
        assert got.first == b'{"a": 1}'
        await _post(transport, up.url)
        assert up.connections == 2


async def test_whole_answer_larger_than_the_stream_buffer(transport):
    body = b'{"x": "' + b"y" * (3 * plain.HIGH_WATER) + b'"}'

    async def handler(reader, writer, n):
        while await up.read_request(reader) is not None:
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(body))
            for i in range(0, len(body), 65536):
                writer.write(body[i : i + 65536])
                await writer.drain()

    async with Upstream(handler) as up:
        got = await _post(transport, up.url, spec=_spec(read_timeout=DEADLINE))
        assert got.first == body
        with pytest.raises(UpstreamResponseTooLarge, match="larger than 1000 bytes"):
            await send(transport, _spec(), up.url, content=b"{}", headers={}, stream=False, max_bytes=1000)


async def test_connection_close_answer_is_not_reused(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\n{}")
        await up.until_eof(reader)

    async with Upstream(handler) as up:
        assert (await _post(transport, up.url)).first == b"{}"
        assert (await _post(transport, up.url)).first == b"{}"
        assert up.connections == 2


async def test_informational_answer_is_skipped(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n" + OK)

    async with Upstream(handler) as up:
        got = await _post(transport, up.url)
        assert (got.response.status_code, got.first) == (200, b"{}")


async def test_upstream_closing_mid_body_fails_the_send(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"partial"')

    async with Upstream(handler) as up:
        with pytest.raises(UpstreamFailed, match="closed the connection") as info:
            await _post(transport, up.url)
        assert isinstance(info.value.__cause__, httpx.ReadError)


async def test_a_kept_connection_closed_unanswered_fails_a_post_and_retries_a_get(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(OK)
        await up.read_request(reader)  # the second request on this connection: read, never answered

    async with Upstream(handler) as up:
        await _post(transport, up.url)
        with pytest.raises(UpstreamFailed) as info:
            await _post(transport, up.url)  # a POST is not sent twice
        assert not info.value.timeout
        assert up.connections == 1
        await _post(transport, up.url)  # a fresh connection
        got = await _post(transport, up.url, method="GET")  # read, unanswered, sent again anew
        assert got.first == b"{}"
        assert up.connections == 3
        assert [r.split(b" ", 1)[0] for r in up.requests] == [b"POST", b"POST", b"POST", b"GET", b"GET"]


async def test_silent_upstream_is_a_read_timeout(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
        await up.until_eof(reader)  # then nothing, until the client gives up

    async with Upstream(handler) as up:
        sent = await _post(transport, up.url, stream=True, spec=_spec(read_timeout=0.3))
        assert sent.first == b"a"
        with pytest.raises(httpx.ReadTimeout) as info:
            async for _ in sent.rest:
                pass
        assert is_timeout(info.value)
        await asyncio.wait_for(up.closed.wait(), DEADLINE)  # and the upstream saw the connection close


async def test_refused_connection_is_not_a_timeout(transport):
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    server.close()
    await server.wait_closed()
    with pytest.raises(UpstreamFailed, match="cannot connect") as info:
        await _post(transport, f"http://127.0.0.1:{port}/v1/chat/completions")
    assert not info.value.timeout
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert transport._plain.open == 0


async def test_header_with_a_line_break_is_refused_before_sending(transport):
    async def handler(reader, writer, n):
        await up.until_eof(reader)

    async with Upstream(handler) as up:
        with pytest.raises(UpstreamFailed, match="cannot send"):
            await _post(transport, up.url, headers={"x-a": "1\r\nx-injected: 2"}, spec=_spec(read_timeout=2))
        assert up.connections == 0 and up.requests == []
    with pytest.raises(ValueError):
        plain.request_head("POST", "/", "h", {"x-a": "bad\rvalue"}, 0)


async def test_configured_host_wins_and_own_framing_headers_are_ours(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(OK)

    async with Upstream(handler) as up:
        await _post(
            transport,
            up.url,
            headers={"host": "vllm.internal", "content-length": "999", "transfer-encoding": "chunked"},
        )
        head = up.requests[0].lower()
        assert b"host: vllm.internal\r\n" in head and head.count(b"host:") == 1
        assert b"content-length: 13\r\n" in head and b"transfer-encoding" not in head


async def test_slow_reader_pauses_the_socket_and_loses_nothing(transport):
    total = 4 * 1024 * 1024
    piece = b"x" * 65536

    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        for _ in range(total // len(piece)):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        writer.write(b"0\r\n\r\n")

    async with Upstream(handler) as up:
        sent = await _post(transport, up.url, stream=True)
        exchange = sent.response.stream.exchange
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not exchange.paused and loop.time() < deadline:
            await asyncio.sleep(0.01)
        assert exchange.paused, "the socket was never paused for the slow reader"
        assert exchange.buffered < plain.HIGH_WATER + 1024 * 1024
        rest = [chunk async for chunk in sent.rest]
        assert len(sent.first) + sum(map(len, rest)) == total


async def test_cancelled_request_closes_its_connection(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        await up.until_eof(reader)  # never answers

    async with Upstream(handler) as up:
        task = asyncio.create_task(_post(transport, up.url))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE
        while not up.requests and loop.time() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(up.closed.wait(), DEADLINE)


async def test_stream_closed_early_closes_its_connection(transport):
    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
        await up.until_eof(reader)

    async with Upstream(handler) as up:
        sent = await _post(transport, up.url, stream=True)
        await sent.response.aclose()
        await asyncio.wait_for(up.closed.wait(), DEADLINE)
        assert transport._plain.idle_count == 0


async def test_pool_limit_waits_then_times_out(transport):
    release = asyncio.Event()

    async def handler(reader, writer, n):
        await up.read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\na\r\n")
        await asyncio.wait_for(release.wait(), DEADLINE)
        writer.write(b"0\r\n\r\n")
        while await up.read_request(reader) is not None:
            writer.write(OK)

    transport.limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with Upstream(handler) as up:
        held = await _post(transport, up.url, stream=True, spec=_spec(connect_timeout=0.3))
        with pytest.raises(UpstreamFailed):  # the one connection is busy: the pool's wait runs out
            await _post(transport, up.url, spec=_spec(connect_timeout=0.3))
        waiting = asyncio.create_task(_post(transport, up.url))
        release.set()
        assert [c async for c in held.rest] == []
        await held.response.aclose()
        assert (await asyncio.wait_for(waiting, DEADLINE)).first == b"{}"
        assert up.connections == 1  # the waiter got the freed connection

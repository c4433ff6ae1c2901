"""An upstream answer's head is bounded and must be an answer (issue 34,
defects 4 and 7), on both upstream clients: the plain-http one
(router.providers.plain) and aiohttp (https, proxies, a local address: forced
here by `local_address`).

A head past `MAX_RESPONSE_HEAD_BYTES` or with more than `MAX_RESPONSE_HEADERS`
headers is refused while it still arrives; a `101 Switching Protocols` is
never passed on as the answer. Either fails the attempt before the client saw
a byte (another replica may answer), and the connection is dropped, not
pooled. Real loopback servers that write raw bytes; a real router process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator

import httpx
import pytest

from router.core.backend import BackendSpec
from router.core.errors import UpstreamResponseTooLarge
from router.providers.base import UpstreamFailed
from router.providers.http import LeanAiohttpTransport, send
from router.providers.plain import MAX_RESPONSE_HEAD_BYTES, MAX_RESPONSE_HEADERS
from tests.router.providers.raw_backend import LoopServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
BODY = (
    b'{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
    b'"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}'
)
HUGE = 64 * 1024 * 1024  # the probe sent 100 MB; a client that reads it all fails the test


def ok_head(*extra: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n" % len(BODY)
            + b"".join(extra) + b"\r\n")


def huge_header() -> Iterator[bytes]:
    """A header value that never fits: 64 MB of it, 64 KiB a write."""
    yield b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nx-big: "
    piece = b"a" * 65536
    for _ in range(HUGE // len(piece)):
        yield piece


def headers(n: int) -> Iterator[bytes]:
    yield ok_head(*(b"x-h%d: 1\r\n" % i for i in range(n - 2))) + BODY  # + content-type, content-length


def switching() -> Iterator[bytes]:
    yield b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: upgrade\r\n\r\n"


def early_hints(total: int) -> Iterator[bytes]:
    """Interim 103 heads, `total` bytes of them, then the answer."""
    hint = b"HTTP/1.1 103 Early Hints\r\nlink: </" + b"a" * 1000 + b">\r\n\r\n"
    for _ in range(total // len(hint) + 1):
        yield hint
    yield ok_head() + BODY


class RawUpstream(LoopServer):
    """A loopback upstream on a thread of its own: every request is answered
    with the byte pieces `answer()` yields (each drained), then the
    connection is held until the client closes it, so a client that keeps a
    connection it should drop waits for ever (the test's own limit ends it)."""

    def __init__(self, answer: Callable[[], Iterable[bytes]]) -> None:
        super().__init__()
        self.answer = answer
        self.requests = 0
        self.written = 0
        self.closed = threading.Event()  # the client closed a connection

    def __enter__(self) -> RawUpstream:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                await reader.readexactly(length)
                self.requests += 1
                for piece in self.answer():
                    writer.write(piece)
                    await writer.drain()
                    self.written += len(piece)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed.set()
        finally:
            writer.close()


# -- the upstream clients -------------------------------------------------------


@pytest.fixture(params=["plain", "aiohttp"])
async def transport(request):
    t = LeanAiohttpTransport(trust_env=False, local_address="127.0.0.1" if request.param == "aiohttp" else None)
    yield t
    await t.aclose()


async def post(transport: LeanAiohttpTransport, up: RawUpstream):
    url = up.url + "/v1/chat/completions"
    spec = BackendSpec(name="b", url=up.url, read_timeout=30.0)
    return await send(transport, spec, url, content=b'{"model":"m"}', headers={}, stream=False)


async def test_a_head_past_the_byte_cap_is_refused_while_it_arrives(transport):
    with RawUpstream(huge_header) as up:
        with pytest.raises(UpstreamFailed) as info:
            await post(transport, up)
        assert info.value.error is UpstreamResponseTooLarge and not info.value.timeout
        assert await asyncio.to_thread(up.closed.wait, 30)  # the connection dropped…
        assert up.written < HUGE  # …while the upstream still had most of its head to write


@pytest.mark.parametrize("count", [MAX_RESPONSE_HEADERS, MAX_RESPONSE_HEADERS + 1])
async def test_more_headers_than_the_cap_are_refused(transport, count):
    with RawUpstream(lambda: headers(count)) as up:
        if count <= MAX_RESPONSE_HEADERS:
            assert (await post(transport, up)).first == BODY
            return
        with pytest.raises(UpstreamFailed) as info:
            await post(transport, up)
        assert info.value.error is UpstreamResponseTooLarge
        assert await asyncio.to_thread(up.closed.wait, 30)


async def test_a_101_fails_the_attempt_and_drops_the_connection(transport):
    with RawUpstream(switching) as up:
        with pytest.raises(UpstreamFailed) as info:
            await post(transport, up)
        assert info.value.error is None and not info.value.timeout
        assert "101" in info.value.reason
        assert await asyncio.to_thread(up.closed.wait, 30)


async def test_interim_heads_count_towards_the_cap():
    """1xx interim heads are skipped, as HTTP says, but the plain client counts
    their bytes with the answer's head: a flood of them is refused too."""
    transport = LeanAiohttpTransport(trust_env=False)
    try:
        with RawUpstream(lambda: early_hints(MAX_RESPONSE_HEAD_BYTES // 2)) as up:
            assert (await post(transport, up)).first == BODY
        with RawUpstream(lambda: early_hints(MAX_RESPONSE_HEAD_BYTES)) as up:
            with pytest.raises(UpstreamFailed) as info:
                await post(transport, up)
            assert info.value.error is UpstreamResponseTooLarge
    finally:
        await transport.aclose()


# -- through the router ---------------------------------------------------------


def backends(*urls: str) -> str:
    rows = "".join(f"  - {{name: b{i}, url: '{url}', models: [m]}}\n" for i, url in enumerate(urls))
    return f"backends:\n{rows}health: {{enabled: false}}\nretry: {{backoff: 0}}\n"


def test_an_oversized_head_is_a_502_too_large_unless_another_replica_answers(openai_backends, router_factory):
    (good,) = openai_backends("good")
    with RawUpstream(huge_header) as bad:
        alone = router_factory(backends(bad.url))
        r = httpx.post(alone.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "upstream_response_too_large"
        assert bad.written < HUGE
        tried = bad.requests
        both = router_factory(backends(bad.url, good.url))
        with httpx.Client(base_url=both.url, timeout=60) as http:
            for _ in range(4):  # taken in turns: the bad one fails first, the good one answers
                r = http.post("/v1/chat/completions", json=CHAT)
                assert r.status_code == 200, r.text
        assert bad.requests > tried


def test_an_upstream_101_is_a_502_never_relayed(router_factory):
    with RawUpstream(switching) as bad:
        router = router_factory(backends(bad.url))
        r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=60)
        assert r.status_code == 502, r.text
        assert r.json()["error"]["code"] == "upstream_error"
        assert "101" in r.json()["error"]["message"]
        assert bad.closed.wait(30)

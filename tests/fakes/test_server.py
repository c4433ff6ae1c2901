"""`ServerThread.stop()` kills like a crash, through aiohttp's public API only.

The kill closes the listener with `BaseSite.stop()` and then aborts every open
connection. That relies on `BaseSite.stop()` closing the listener without
waiting for open connections; the first test pins that library behaviour so an
aiohttp upgrade that changes it fails here, by name, not as a hung fake.
"""

from __future__ import annotations

import asyncio
import socket
import time

from aiohttp import web

from fakes.openai_backend import server_thread

BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'
REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s" % (len(BODY), BODY)
)


def _refused(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
        except ConnectionRefusedError:
            return True
        return False


async def test_aiohttp_site_stop_closes_the_listener_without_waiting_for_open_connections():
    """aiohttp's `BaseSite.stop()` returns at once while a request hangs, and nobody can connect after it."""
    entered = asyncio.Event()

    async def hang(request: web.Request) -> web.Response:
        entered.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    app = web.Application()
    app.router.add_get("/", hang)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    site = web.SockSite(runner, sock)
    await site.start()
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        await asyncio.wait_for(entered.wait(), 10)

        await asyncio.wait_for(site.stop(), 1)  # must not wait for the hung request

        assert site not in runner.sites
        assert await asyncio.to_thread(_refused, port)
        writer.close()
    finally:
        await runner.cleanup()


def test_stop_aborts_a_hung_request_and_refuses_new_connections_at_once():
    """A kill with a request in flight takes well under a second and leaves nothing listening."""
    with server_thread("kill-me", ["m"]) as srv:
        srv.behavior.hang = True
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as conn:
            conn.sendall(REQUEST)
            deadline = time.monotonic() + 10
            while not srv.requests:
                assert time.monotonic() < deadline, "the fake never saw the request"
                time.sleep(0.005)

            started = time.monotonic()
            srv.stop()
            assert time.monotonic() - started < 1.0

            try:  # aborted: no answer, the connection is gone (EOF or reset)
                assert conn.recv(65536) == b""
            except ConnectionResetError:
                pass
            assert _refused(srv.port)
            assert not srv.running


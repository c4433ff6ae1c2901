"""Library internals the data plane reads, pinned so an upgrade fails here first.

`router.runtime.transport_of` reads `httpx.AsyncClient._transport`: the hot
path sends through the client's transport directly (docs/architecture.md,
"Upstream client"). If httpx renames that attribute or stops sending through
the transport given as `AsyncClient(transport=...)`, these tests fail with a
message saying what to re-read.
"""

from __future__ import annotations

import logging

import httpx
from django.http import HttpResponse
from django.test import RequestFactory
from django.utils.log import log_response
from httpx_aiohttp import AiohttpTransport

from router.frontends.responses import observed
from router.runtime import make_client, transport_of

WHY = (
    f"httpx {httpx.__version__}: router.runtime.transport_of reads AsyncClient._transport "
    "(the transport passed as AsyncClient(transport=...)); re-read httpx/_client.py and "
    "give transport_of a new way to reach that transport."
)


async def test_the_transport_given_to_the_client_is_its_private_transport():
    transport = httpx.MockTransport(lambda request: httpx.Response(204))
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        assert getattr(client, "_transport", None) is transport, WHY
        assert transport_of(client) is transport, WHY


async def test_that_transport_is_the_one_that_handles_the_clients_requests():
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, text="from the transport")

    transport = httpx.MockTransport(handler)
    async with httpx.AsyncClient(transport=transport, trust_env=False) as client:
        via_client = await client.get("http://upstream.test/a")
        via_transport = await transport_of(client).handle_async_request(
            httpx.Request("GET", "http://upstream.test/b")
        )
        await via_transport.aread()
    assert via_client.text == via_transport.text == "from the transport", WHY
    assert seen == ["http://upstream.test/a", "http://upstream.test/b"], WHY


async def test_the_runtime_client_sends_through_the_aiohttp_transport():
    client = make_client()
    try:
        assert isinstance(transport_of(client), AiohttpTransport), WHY
    finally:
        await client.aclose()


def test_django_skips_logging_a_response_the_door_already_observed(caplog):
    """The doors mark their responses with `observed()` so Django's request
    logger does not log a 5xx the observation already logged. That relies on
    django.utils.log.log_response honouring `response._has_been_logged`: if
    Django drops it, this fails (and 5xx lines would double again)."""
    request = RequestFactory().get("/v1/models")
    with caplog.at_level(logging.ERROR, logger="django.request"):
        log_response("x", response=HttpResponse(status=502), request=request)
        assert len(caplog.records) == 1  # the unmarked one is logged: the test can see logging
        log_response("x", response=observed(HttpResponse(status=502)), request=request)
    assert len(caplog.records) == 1


# -- the direct send (router.providers.http.LeanAiohttpTransport) -------------

# httpx-aiohttp's handle_async_request as `send_direct` was written from.
HANDLE_ASYNC_REQUEST = "8aa971b748d413ba"  # httpx-aiohttp 0.2.0


def test_send_direct_was_written_from_this_handle_async_request():
    import hashlib
    import inspect
    import textwrap

    from httpx_aiohttp import AiohttpTransport as Base

    source = textwrap.dedent(inspect.getsource(Base.handle_async_request))
    assert hashlib.sha256(source.encode()).hexdigest()[:16] == HANDLE_ASYNC_REQUEST, (
        "httpx-aiohttp changed AiohttpTransport.handle_async_request: re-read it and make "
        "router.providers.http.LeanAiohttpTransport.send_direct do what it does, then update the digest."
    )


async def _capture_server():
    """A one-answer-per-request HTTP/1.1 server that records each request as it came."""
    import asyncio

    seen: list[bytes] = []

    async def serve(reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                body = await reader.readexactly(length)
                seen.append(head + body)
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
                             b"x-upstream: yes\r\n\r\n{}")
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], seen


def _lines(raw: bytes) -> tuple[bytes, list[bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    request_line, *headers = head.split(b"\r\n")
    return request_line, sorted(h.lower() for h in headers), body


async def test_send_direct_sends_what_the_httpx_request_path_sent():
    """Same request line, headers (a configured non-ASCII value included) and
    body on the wire, and the same answer, through either entry. The direct
    entry to a plain-http URL is router.providers.plain, which sends what
    aiohttp sends minus aiohttp's own defaults (Accept: */*, its User-Agent)."""
    from router.core.backend import BackendSpec
    from router.providers.http import LeanAiohttpTransport, send

    server, port, seen = await _capture_server()
    transport = LeanAiohttpTransport(trust_env=False)
    spec = BackendSpec(name="b", url=f"http://127.0.0.1:{port}", headers=(("X-Team", "équipe"),))
    try:
        answers = []
        for direct in (True, False):
            headers = {"content-type": "application/json", "accept-encoding": "identity", "x-team": "équipe",
                       "x-request-id": "r1"}
            if direct:
                got = await send(transport, spec, f"http://127.0.0.1:{port}/v1/chat/completions",
                                 content=b'{"model":"m"}', headers=headers, stream=False)
            else:
                plain = _PlainPath()
                plain.inner = transport
                got = await send(plain, spec, f"http://127.0.0.1:{port}/v1/chat/completions",
                                 content=b'{"model":"m"}', headers=headers, stream=False)
            answers.append((got.response.status_code, got.response.headers.get("x-upstream"), got.first))
        assert answers[0] == answers[1] == (200, "yes", b"{}")
        assert len(seen) == 2
        line, headers, body = _lines(seen[1])
        aiohttp_defaults = [h for h in headers if h.startswith((b"accept: ", b"user-agent: "))]
        assert len(aiohttp_defaults) == 2
        assert _lines(seen[0]) == (line, [h for h in headers if h not in aiohttp_defaults], body)
        assert transport._plain is not None and transport._plain.open == 1  # the plain pool sent the first
    finally:
        await transport.aclose()
        server.close()
        await server.wait_closed()


class _PlainPath(httpx.AsyncBaseTransport):
    """The same aiohttp transport reached only through handle_async_request
    (what send() did before send_direct)."""

    inner: httpx.AsyncBaseTransport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self.inner.handle_async_request(request)

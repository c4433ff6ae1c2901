"""An upstream's answer headers reach the client only when an API client needs
them (router/providers/http.py `RELAYED_HEADERS`, issue 34 defect 11): the
SDKs' request ids, retry hints and rate-limit state pass; cookies, CORS and
everything else an upstream (in AppProxy mode, a user's workload) sends stop
at the router, whose origin also serves the dashboard."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import openai
import pytest
from aiohttp import web

from fakes.server import ServerThread
from router.core.backend import BackendSpec
from router.providers.http import RELAYED_HEADERS, LeanAiohttpTransport, relay_headers, send

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
ANSWER = b'{"id":"c1","object":"chat.completion","model":"m","choices":[],"usage":null}'
EVENTS = b'data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[]}\n\ndata: [DONE]\n\n'

# What the SDKs read, as OpenAI, Anthropic and vLLM send it.
KEPT = {
    "x-request-id": "req_123",
    "request-id": "req_456",
    "retry-after": "2",
    "retry-after-ms": "1500",
    "x-should-retry": "true",
    "openai-organization": "org-1",
    "openai-processing-ms": "12",
    "x-ratelimit-remaining-requests": "99",
    "anthropic-ratelimit-tokens-remaining": "1000",
}
# What a client of the API never gets from an upstream.
STOPPED = {
    "set-cookie": "session=upstream; Path=/",
    "access-control-allow-origin": "*",
    "access-control-allow-credentials": "true",
    "access-control-expose-headers": "set-cookie",
    "x-backend-name": "a",
    "server": "replica/1.0",
    "cache-control": "public, max-age=3600",
    "strict-transport-security": "max-age=0",
    "location": "http://elsewhere.example/",
}


def upstream_app() -> web.Application:
    """Every answer (whole, stream, error) carries both sets of headers."""

    async def chat(request: web.Request) -> web.StreamResponse:
        data = await request.json()
        headers = {**KEPT, **STOPPED}
        if data.get("status", 200) != 200:
            return web.Response(status=data["status"], body=b'{"error":{"message":"slow down"}}',
                                content_type="application/json", headers=headers)
        if not data.get("stream"):
            return web.Response(body=ANSWER, content_type="application/json", headers=headers)
        response = web.StreamResponse(headers={**headers, "content-type": "text/event-stream"})
        await response.prepare(request)
        await response.write(EVENTS)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.fixture
def upstream():
    server = ServerThread(lambda _behavior, _requests: upstream_app()).start()
    yield server
    server.stop()


def assert_relayed_only_what_clients_need(headers: httpx.Headers) -> None:
    for name, value in KEPT.items():
        assert headers.get(name) == value, name
    for name, value in STOPPED.items():
        assert headers.get(name) != value, name  # (the router may set a Server or Cache-Control of its own)


@pytest.mark.parametrize("answer", [{}, {"stream": True}, {"status": 429}], ids=["whole", "stream", "error"])
def test_the_client_gets_the_sdk_headers_and_no_cookie_or_cors(upstream, router_factory, answer):
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{upstream.url}', models: [m]}}\nhealth: {{enabled: false}}\n"
        "retry: {max_attempts: 1}\n"
    )
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, **answer}, timeout=30)
    assert r.status_code == answer.get("status", 200), r.text
    assert_relayed_only_what_clients_need(r.headers)


def test_the_openai_sdk_reads_the_request_id_it_was_relayed(upstream, router_factory):
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{upstream.url}', models: [m]}}\nhealth: {{enabled: false}}\n"
    )
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(**CHAT)
    assert raw.request_id == "req_123"
    assert "set-cookie" not in raw.headers


@pytest.mark.parametrize("path", ["plain", "aiohttp"])
async def test_both_upstream_clients_give_the_same_relayed_headers(path):
    """The plain-http client and aiohttp (https, proxies, a local address:
    forced here by `local_address`) hand `relay_headers` the same answer."""
    raw = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n"
    raw += b"".join(f"{k}: {v}\r\n".encode() for k, v in {**KEPT, **STOPPED}.items()) + b"\r\n{}"

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next((int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")), 0)
        await reader.readexactly(length)
        writer.write(raw)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1/chat/completions"
    transport = LeanAiohttpTransport(trust_env=False, local_address="127.0.0.1" if path == "aiohttp" else None)
    try:
        sent = await send(transport, BackendSpec(name="b", url=url), url, content=b"{}", headers={}, stream=False)
        assert (transport._plain is not None) == (path == "plain")
        assert sorted(relay_headers(sent.response)) == sorted(KEPT.items())
    finally:
        await transport.aclose()
        server.close()


def test_the_documented_table_is_the_code_table():
    doc = (Path(__file__).parents[3] / "docs" / "mixed-providers.md").read_text()
    section = doc.split("### Answer headers the client gets", 1)[1].split("\n## ", 1)[0]
    assert re.findall(r"^\| `([^`]+)` \|", section, re.M) == list(RELAYED_HEADERS)

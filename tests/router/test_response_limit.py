"""A whole (non-streaming) upstream answer is capped (issue 12, defect 3).

`server.max_response_bytes` bounds what the router holds of one answer: an
answer that declares more is refused before it is read, one that streams
more is cut as soon as it passes the limit; either is a 502
`upstream_response_too_large`, and the backend's slot is freed.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import orjson
import pytest
from aiohttp import web

from fakes.server import ServerThread
from tests.support.routerproc import wait_until

LIMIT = 64 * 1024
CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


class BigBackend:
    """POST /v1/chat/completions answers a completion padded to `pad` bytes:
    with a Content-Length, or (`chunked: true`) in slow 16 KB chunks."""

    def __init__(self) -> None:
        self.finished = threading.Event()  # a chunked answer was written to its end
        self.pad = 0  # when the request has no `pad`
        self.server = ServerThread(lambda _behavior, _requests: self.app())

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        return app

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m-served", "object": "model"}]})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        data = await request.json()
        body = orjson.dumps({
            "id": "c1", "object": "chat.completion", "model": data["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "y" * data.get("pad", self.pad)},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })
        if not data.get("chunked"):
            return web.Response(body=body, content_type="application/json")
        response = web.StreamResponse(headers={"content-type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        try:
            for i in range(0, len(body), 16 * 1024):
                await response.write(body[i : i + 16 * 1024])
                await asyncio.sleep(0.05)
            await response.write_eof()
            self.finished.set()
        except (ConnectionError, asyncio.CancelledError):
            pass  # the router went away, as it should
        return response


@pytest.fixture
def big():
    backend = BigBackend()
    backend.server.start()
    yield backend
    backend.server.stop()


def config(url: str) -> str:
    return (
        f"backends:\n  - {{name: a, url: '{url}', models: [m], served_model: m-served, capacity: 1}}\n"
        f"server: {{max_response_bytes: {LIMIT}}}\n"
    )


def error_of(r: httpx.Response) -> dict:
    assert r.headers["content-type"].startswith("application/json"), r.text
    return r.json()["error"]


def test_answer_under_the_limit_is_relayed_with_the_name_rewritten(big, router_factory):
    router = router_factory(config(big.server.url))
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "pad": LIMIT // 2}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "m"  # the served name undone
    assert len(r.json()["choices"][0]["message"]["content"]) == LIMIT // 2


def test_declared_oversize_answer_is_502_and_frees_the_slot(big, router_factory):
    router = router_factory(config(big.server.url))
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(2):  # capacity 1: a leaked slot would fail the second
            r = http.post("/v1/chat/completions", json={**CHAT, "pad": LIMIT * 4})
            assert r.status_code == 502, r.text
            err = error_of(r)
            assert err["code"] == "upstream_response_too_large"
            assert str(LIMIT) in err["message"]
        wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")
        assert http.post("/v1/chat/completions", json=CHAT).status_code == 200
        # A too-large answer is not a sick backend: it stays in rotation.
        assert router.status()["backends"][0]["healthy"] is True


def test_chunked_oversize_answer_is_cut_early(big, router_factory):
    """No Content-Length: the router stops reading as soon as the limit is
    passed (the backend is still writing when the client already has its 502)."""
    router = router_factory(config(big.server.url))
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "pad": LIMIT * 64, "chunked": True},
                   timeout=60)
    assert r.status_code == 502, r.text
    assert error_of(r)["code"] == "upstream_response_too_large"
    assert not big.finished.is_set()  # ~256 slow chunks: far from its end
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200, r.text


def test_messages_door_oversize_answer_is_anthropic_502(big, router_factory):
    router = router_factory(config(big.server.url))
    big.pad = LIMIT * 4  # the door sends only fields with an OpenAI meaning
    r = httpx.post(router.url + "/v1/messages", timeout=30, json={
        "model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
    })
    assert r.status_code == 502, r.text
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "api_error"


def test_answer_without_rewrite_is_relayed_as_it_comes(big, router_factory):
    """No name to rewrite: a long whole answer is relayed chunk by chunk (the
    client has its first bytes while the backend still writes), so the cap,
    which bounds what the router holds, does not apply to it."""
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{big.server.url}', models: [m-served], capacity: 1}}\n"
        f"server: {{max_response_bytes: {LIMIT}}}\n"
    )
    pad = LIMIT * 16
    with httpx.stream("POST", router.url + "/v1/chat/completions", timeout=60,
                      json={**CHAT, "model": "m-served", "pad": pad, "chunked": True}) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("application/json")
        chunks = r.iter_bytes()
        first = next(chunks)
        assert first.startswith(b"{") and not big.finished.is_set()
        body = first + b"".join(chunks)
    assert len(orjson.loads(body)["choices"][0]["message"]["content"]) == pad
    # The backend marks itself finished just after its last write returns,
    # which can be after the client already has the last byte: wait for it.
    wait_until(big.finished.is_set, 10, what="the backend to finish its answer")
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")


def test_relayed_answer_cut_by_the_backend_ends_short_and_frees_the_slot(big, router_factory):
    """The backend dies mid-answer: the relayed document ends short (no SSE
    error frame inside a JSON body), nothing crashes, the slot is freed."""
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{big.server.url}', models: [m-served], capacity: 1}}\n"
    )
    with httpx.stream("POST", router.url + "/v1/chat/completions", timeout=60,
                      json={**CHAT, "model": "m-served", "pad": LIMIT * 16, "chunked": True}) as r:
        assert r.status_code == 200
        chunks = r.iter_bytes()
        body = next(chunks)
        big.server.stop()
        try:
            body += b"".join(chunks)
        except httpx.HTTPError:
            pass  # either ending is fine: short or aborted
    assert b"data:" not in body
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(body)
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")
    assert "Traceback" not in router.logs()

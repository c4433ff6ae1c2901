"""The OpenAI door served straight on ASGI (router/frontends/direct.py), end
to end under both servers: what it writes itself (the status line, the
headers, the length of a whole answer, the stream's framing) and how it
reads (a body cut short, a client that leaves), with the official SDK and
raw sockets against a real router process and a fake backend."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest

from tests.support.answers import answered_by
from tests.support.routerproc import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


@pytest.fixture(params=["uvicorn", "daphne"])
def served(request, openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n", server=request.param)
    return a, router


def test_a_whole_answer_carries_its_length_and_the_backend_headers(served):
    _, router = served
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/json")
    assert int(r.headers["content-length"]) == len(r.content)
    assert "transfer-encoding" not in r.headers
    assert answered_by(r) == "a" and "x-backend-name" not in r.headers  # relayed: RELAYED_HEADERS only
    assert r.json()["object"] == "chat.completion"


def test_a_refusal_is_openai_shaped_with_its_length(served):
    _, router = served
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "nope"}, timeout=30)
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert int(r.headers["content-length"]) == len(r.content)
    assert r.json()["error"]["code"] == "model_not_found"


def test_the_sdk_streams_through_it(served):
    a, router = served
    a.behavior.chunks = 7
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30)
    raw = client.chat.completions.with_raw_response.create(**CHAT, stream=True)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.headers["cache-control"] == "no-cache"
    assert raw.headers["x-accel-buffering"] == "no"
    chunks = list(raw.parse())
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) == 7
    assert len(posts(a)) == 1


def test_every_openai_path_is_served(served):
    _, router = served
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30)
    assert client.completions.create(model="m", prompt="x").object == "text_completion"
    assert client.embeddings.create(model="m", input="x").data
    assert client.chat.completions.create(**CHAT).choices


def test_a_client_leaving_mid_stream_cancels_the_upstream(served):
    a, router = served
    a.behavior.chunk_delay_s = 0.5
    a.behavior.chunks = 100
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", router.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            assert next(r.iter_lines()).startswith("data: ")
    req = posts(a)[-1]
    assert req.finished.wait(10), "upstream still running after the client left"
    assert req.outcome == "cancelled"
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")


def test_a_body_cut_short_is_dropped_and_the_next_request_served(served):
    a, router = served
    with socket.create_connection(("127.0.0.1", router.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 1000\r\n\r\n{"model": '
        )
    assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200
    assert len(posts(a)) == 1  # the cut body reached no backend
    assert router.status()["backends"][0]["in_flight"] == 0


def test_keep_alive_serves_many_requests_on_one_connection(served):
    a, router = served
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for i in range(20):
            r = http.post("/v1/chat/completions", json={**CHAT, "stream": i % 2 == 1})
            assert r.status_code == 200, r.text
    assert len(posts(a)) == 20

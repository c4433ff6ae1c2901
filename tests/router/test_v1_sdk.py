"""The /v1 surface end to end: the official openai SDK → router process →
fake OpenAI-compatible backends, all real HTTP on loopback."""

from __future__ import annotations

import time

import httpx
import openai
import orjson
import pytest

from tests.support.answers import answered_by

CONFIG = """
backends:
  - name: a
    url: {a}
    models: [m, m-alias]
  - name: b
    url: {b}
    models: [m, m-alias]
  - name: renamed
    url: {a}
    models: [public-name]
    served_model: internal/served-name
health:
  enabled: false
"""


@pytest.fixture
def stack(openai_backends, router_factory):
    a, b = openai_backends("a", "b", models=("m", "m-alias", "internal/served-name"))
    router = router_factory(CONFIG.format(a=a.url, b=b.url))
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="sk-test", max_retries=0, timeout=30)
    return router, client, a, b


def landed(*servers):
    return [len([r for r in s.requests if r.method == "POST"]) for s in servers]


def test_chat_non_stream_is_relayed_byte_for_byte(stack):
    """The client gets exactly the backend's bytes, and the backend exactly the client's."""
    router, _client, a, b = stack
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "vendor_knob": {"x": [1, 2]}}
    raw = orjson.dumps(body)
    r = httpx.post(router.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 200
    server = a if answered_by(r) == "a" else b
    received = [x for x in server.requests if x.method == "POST"][-1]
    assert received.body == raw  # unknown fields survive, bytes unchanged
    assert received.path == "/v1/chat/completions"
    assert "authorization" not in received.headers  # the client's key never goes upstream
    # Non-stream bodies come back byte for byte: compare with the backend answering directly.
    direct = httpx.post(server.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    assert set(orjson.loads(r.content)) == set(orjson.loads(direct.content))
    assert orjson.loads(r.content)["choices"][0]["message"]["content"].startswith(f"Hello from {answered_by(r)}")


def test_sdk_chat_stream_and_usage(stack):
    _router, client, _a, _b = stack
    stream = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello from ")
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
    assert all(c.model == "m" for c in chunks)


def test_sdk_completions_embeddings_responses_models(stack):
    _router, client, _a, _b = stack
    comp = client.completions.create(model="m", prompt="Say hi")
    assert comp.choices[0].text
    emb = client.embeddings.create(model="m", input=["one", "two"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) > 0
    emb64 = client.embeddings.create(model="m", input="one")  # SDK asks base64 by default
    assert len(emb64.data[0].embedding) == len(emb.data[0].embedding)
    resp = client.responses.create(model="m", input="hello")
    assert resp.output_text.startswith("Hello from ")
    events = list(client.responses.create(model="m", input="hello", stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == events[-1].response.output_text
    ids = sorted(m.id for m in client.models.list())
    assert ids == ["m", "m-alias", "public-name"]
    assert client.models.retrieve("m-alias").id == "m-alias"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_served_name_rewrite_both_ways(stack):
    """The backend sees its served name; the client sees the name it asked for."""
    _router, client, a, _b = stack
    out = client.chat.completions.create(model="public-name", messages=[{"role": "user", "content": "x"}])
    assert out.model == "public-name"
    received = [r for r in a.requests if r.method == "POST"][-1]
    assert received.json["model"] == "internal/served-name"
    chunks = list(client.chat.completions.create(model="public-name", messages=[{"role": "user", "content": "x"}], stream=True))
    assert chunks and all(c.model == "public-name" for c in chunks)


def test_stream_is_not_buffered(stack):
    """The first event reaches the client while the backend is still generating."""
    _router, client, a, b = stack
    for s in (a, b):
        s.behavior.chunk_delay_s = 0.4
        s.behavior.chunks = 6
    t0 = time.monotonic()
    stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], stream=True)
    first = next(iter(stream))
    t_first = time.monotonic() - t0
    rest = list(stream)
    t_all = time.monotonic() - t0
    assert first.choices[0].delta.role == "assistant"
    assert rest
    assert t_all >= 2.0
    assert t_first < t_all - 1.5  # arrived long before the stream ended


def test_smooth_weighted_distribution(openai_backends, router_factory):
    a, b = openai_backends("a", "b")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m], weight: 100}}\n"
        f"  - {{name: b, url: '{b.url}', models: [m], weight: 300}}\nhealth: {{enabled: false}}\n"
    )
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(200):
            r = http.post("/v1/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]})
            assert r.status_code == 200
    na, nb = landed(a, b)
    assert na + nb == 200
    assert abs(nb / 200 - 0.75) <= 0.05, (na, nb)

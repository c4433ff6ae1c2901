"""The Gemini provider (`GEMINI.start` / `finish` / `relay`) against the fake
Gemini API over real HTTP: converted requests are accepted, answers become
exact OpenAI objects, count_tokens answers in Anthropic's shape, and a stream
that dies before its first token is retryable while one that dies later ends
in one OpenAI error frame."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import httpx
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from fakes.gemini_backend import FAKE_API_KEY, server_thread
from router.core.backend import BackendSpec
from router.core.errors import UnsupportedParameter
from router.core.secret import Secret
from router.providers import listed_models, probe_headers, probe_url, provider_for
from router.providers.base import UpstreamFailed
from router.providers.gemini.provider import GEMINI
from router.request import Envelope
from tests.router.providers.openai_shapes import chat_sse, exact


@dataclass
class Upstreams:
    transport: httpx.AsyncBaseTransport


@pytest.fixture
def fake():
    with server_thread("fake-gemini") as server:
        yield server


def spec_for(fake, served: str = "gemini-2.5-flash") -> BackendSpec:
    return BackendSpec(
        name="gem",
        url=fake.url,
        kind="gemini",
        models=("g",),
        served_model=served,
        api_key=Secret(FAKE_API_KEY),
        read_timeout=30,
    )


def envelope(endpoint: str, body: dict) -> Envelope:
    body = {"model": "g", **body}
    return Envelope(
        endpoint=endpoint,
        raw=orjson.dumps(body),
        body=body,
        model="g",
        stream=bool(body.get("stream")),
        headers={},
        client_ip="127.0.0.1",
        host="localhost",
        request_id="r1",
    )


def run(fake, endpoint: str, body: dict, served: str = "gemini-2.5-flash"):
    """start → finish (whole) or relay (stream): (exchange, body bytes or SSE frames, done calls)."""

    async def go():
        transport = httpx.AsyncHTTPTransport()
        try:
            env = envelope(endpoint, body)
            ex = await GEMINI.start(Upstreams(transport), spec_for(fake, served), env, "g")
            if ex.stream is None:
                return ex, GEMINI.finish(ex, env)[0], []
            calls: list = []
            data = b"".join([c async for c in GEMINI.relay(ex, env, lambda ok, info: calls.append((ok, info)))])
            return ex, [f + b"\n\n" for f in data.split(b"\n\n") if f], calls
        finally:
            await transport.aclose()

    return asyncio.run(go())


def test_chat_several_candidates_and_json(fake) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    ex, body, _ = run(
        fake,
        "chat/completions",
        {
            "messages": [{"role": "user", "content": "hi"}],
            "n": 2,
            "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
        },
    )
    obj = exact(ChatCompletion, orjson.loads(body))
    assert ex.status == 200 and ex.info["adapter"] == "gemini" and ex.info["served"] == "gemini-2.5-flash"
    assert [c.index for c in obj.choices] == [0, 1]
    assert orjson.loads(obj.choices[0].message.content) == {"city": "Paris"}


def test_chat_length_and_reasoning(fake) -> None:
    _, body, _ = run(
        fake,
        "chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 2, "reasoning_effort": "medium"},
    )
    obj = exact(ChatCompletion, orjson.loads(body))
    assert obj.choices[0].finish_reason == "length"
    assert obj.usage.completion_tokens_details.reasoning_tokens == 7


def test_stream_relay_and_done(fake) -> None:
    ex, frames, calls = run(
        fake,
        "chat/completions",
        {"messages": [{"role": "user", "content": "hi"}], "stream": True, "stream_options": {"include_usage": True}},
    )
    events = chat_sse(frames)
    assert ex.content_type == "text/event-stream" and events[-1] == "[DONE]"
    chunks = [exact(ChatCompletionChunk, e) for e in events[:-1]]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello from fake-gemini")
    assert calls == [(True, {"usage": chunks[-1].usage.model_dump(exclude_none=True)})]


def test_stream_death_before_the_first_token_is_retryable(fake) -> None:
    fake.behavior.die_after_chunks = 0
    with pytest.raises(UpstreamFailed):
        run(fake, "chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True})


def test_stream_death_mid_stream_is_one_error_frame(fake) -> None:
    fake.behavior.die_after_chunks = 2
    _, frames, calls = run(fake, "chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True})
    events = chat_sse(frames)
    assert [e for e in events if isinstance(e, dict) and "error" in e] == [events[-1]]
    assert events[-1]["error"]["type"] == "server_error" and "[DONE]" not in events
    assert [ok for ok, _ in calls] == [False]


def test_count_tokens_answers_in_anthropic_shape(fake) -> None:
    ex, body, _ = run(
        fake,
        "messages/count_tokens",
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "one two three"}]},
    )
    assert (ex.status, ex.wire, ex.content_type) == (200, "anthropic", "application/json")
    assert orjson.loads(body) == {"input_tokens": 5}
    req = [r for r in fake.requests if r.method == "POST"][-1]
    assert req.path == "/v1beta/models/gemini-2.5-flash:countTokens"
    assert req.json["generateContentRequest"]["model"] == "models/gemini-2.5-flash"


def test_errors_and_other_endpoints(fake) -> None:
    ex, body, _ = run(fake, "chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, served="gemini-0")
    assert ex.status == 404 and orjson.loads(body)["error"]["code"] == "not_found"
    fake.behavior.status = 429
    ex, body, _ = run(fake, "chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert ex.status == 429 and orjson.loads(body)["error"]["code"] == "resource_exhausted"
    fake.behavior.status = 503
    ex, body, _ = run(fake, "chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert ex.status == 503 and orjson.loads(body)["error"]["code"] == "unavailable"
    fake.behavior.reset()
    for endpoint in ("completions", "responses"):
        with pytest.raises(UnsupportedParameter, match="/v1/chat/completions or /v1/embeddings"):
            run(fake, endpoint, {"prompt": "x"})


def test_probe_and_listing(fake) -> None:
    spec = spec_for(fake)
    assert provider_for("gemini").inner is GEMINI  # type: ignore[attr-defined]
    url = probe_url(spec, "/v1/models")
    headers = probe_headers(spec)
    assert url == fake.url + "/v1beta/models?pageSize=1000" and headers == {"x-goog-api-key": FAKE_API_KEY}
    r = httpx.get(url, headers=headers, timeout=10)
    assert listed_models("gemini", r.content) == ["gemini-2.5-flash", "gemini-embedding-001"]
    assert FAKE_API_KEY not in repr(spec)

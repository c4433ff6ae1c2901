"""A `kind: gemini` backend behind a real router process, driven by the
official openai SDK: every answer is an exact OpenAI object converted from
the fake Gemini API, which checked each converted request as Google does."""

from __future__ import annotations

import base64
import struct

import httpx
import openai
import orjson
import pytest
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from fakes.gemini_backend import FAKE_API_KEY, server_thread
from tests.mix.conftest import observation, rid
from tests.router.providers.openai_shapes import exact, no_extras
from tests.support.routerproc import RouterProc

TEXT = "Hello from fake-gemini. This is a demo reply."
CONFIG = """
backends:
  - name: gem-chat
    url: {url}
    kind: gemini
    models: [gflash]
    served_model: gemini-2.5-flash
    api_key: {key}
    headers: {{x-tenant: team-g}}
  - name: gem-embed
    url: {url}
    kind: gemini
    models: [gembed]
    served_model: gemini-embedding-001
    api_key: {key}
  - name: gem-missing
    url: {url}/v1beta
    kind: gemini
    models: [gmissing]
    served_model: gemini-0
    api_key: {key}
  - name: gem-badkey
    url: {url}
    kind: gemini
    models: [gbadkey]
    served_model: gemini-2.5-flash
    api_key: AIza-wrong-key-0000
health:
  enabled: false
"""
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module")
def stack():
    fake = server_thread("fake-gemini").start()
    router = None
    try:
        router = RouterProc(CONFIG.format(url=fake.url, key=FAKE_API_KEY)).start()
        yield router, fake
    finally:
        if router is not None:
            router.stop()
        fake.stop()


@pytest.fixture
def client(stack):
    router, _ = stack
    return openai.OpenAI(base_url=router.url + "/v1", api_key="sk-client", max_retries=0, timeout=30)


def last_post(fake) -> dict:
    return [r for r in fake.requests if r.method == "POST"][-1]


def test_chat_non_stream(stack, client) -> None:
    router, fake = stack
    request_id = rid()
    out = client.chat.completions.with_raw_response.create(
        model="gflash",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=64,
        temperature=0.2,
        user="u-1",
        extra_headers={"x-request-id": request_id},
    )
    body = orjson.loads(out.content)
    obj = exact(ChatCompletion, body)
    assert obj.id.startswith("chatcmpl-") and obj.model == "gflash"
    assert obj.choices[0].message.content == TEXT and obj.choices[0].finish_reason == "stop"
    assert obj.usage.total_tokens == obj.usage.prompt_tokens + obj.usage.completion_tokens > 0
    req = last_post(fake)
    assert req.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert req.json == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "systemInstruction": {"parts": [{"text": "be brief"}]},
        "generationConfig": {"temperature": 0.2, "maxOutputTokens": 64},
    }
    assert req.headers["x-goog-api-key"] == FAKE_API_KEY and req.headers["x-tenant"] == "team-g"
    assert "authorization" not in req.headers and "key=" not in req.path
    obs = observation(router, request_id)
    assert (obs["provider"], obs["kind"], obs["path"], obs["adapter"]) == ("gem-chat", "gemini", "normalized", "gemini")
    assert obs["served"] == "gemini-2.5-flash" and obs["ignored_fields"] == ["user"]


def test_chat_stream_with_usage(stack, client) -> None:
    _, fake = stack
    chunks = list(
        client.chat.completions.create(
            model="gflash",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for chunk in chunks:
        no_extras(chunk)
        assert isinstance(chunk, ChatCompletionChunk) and chunk.model == "gflash"
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert last_post(fake).path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"


def test_tool_call_round_trip(stack, client) -> None:
    _, fake = stack
    messages = [{"role": "user", "content": "what is the weather in Paris?"}]
    first = client.chat.completions.create(model="gflash", messages=messages, tools=[WEATHER])
    no_extras(first)
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"},
    ]
    second = client.chat.completions.create(model="gflash", messages=messages, tools=[WEATHER])
    assert second.choices[0].message.content == TEXT and second.choices[0].finish_reason == "stop"
    sent = last_post(fake).json
    assert sent["contents"][1]["role"] == "model"
    assert sent["contents"][2] == {
        "role": "user",
        "parts": [{"functionResponse": {"name": "get_weather", "response": {"result": "sunny, 21 C"}}}],
    }
    # the streamed tool call too
    chunks = list(client.chat.completions.create(model="gflash", messages=messages[:1], tools=[WEATHER], stream=True))
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert [(tc.index, tc.function.name) for tc in calls] == [(0, "get_weather")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_embeddings_single_and_list(stack, client) -> None:
    _, fake = stack
    one = client.embeddings.with_raw_response.create(
        model="gembed", input="hello", dimensions=4, encoding_format="float"
    )
    obj = exact(CreateEmbeddingResponse, orjson.loads(one.content))
    assert [len(d.embedding) for d in obj.data] == [4] and obj.usage.prompt_tokens == 2
    assert last_post(fake).path == "/v1beta/models/gemini-embedding-001:embedContent"
    many = client.embeddings.create(model="gembed", input=["a", "b", "c"])
    assert [d.index for d in many.data] == [0, 1, 2] and len(many.data[0].embedding) == 8
    assert last_post(fake).path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    b64 = client.embeddings.create(model="gembed", input=["a"], encoding_format="base64")
    raw = base64.b64decode(b64.data[0].embedding)
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == many.data[0].embedding


def test_provider_errors_keep_their_status(stack, client) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gmissing", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 404
    assert info.value.body["code"] == "not_found" and "gemini-0" in info.value.body["message"]
    with pytest.raises(openai.InternalServerError) as info:  # the backend's key, not the client's request
        client.chat.completions.create(model="gbadkey", messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code == 502 and info.value.body["code"] == "upstream_error"


def test_safety_block_is_a_content_filter_error(stack, client) -> None:
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model="gflash", messages=[{"role": "user", "content": "blocked-prompt"}], stream=stream
            )
        assert info.value.status_code == 400 and info.value.body["code"] == "content_filter"
    out = client.chat.completions.create(model="gflash", messages=[{"role": "user", "content": "unsafe-reply"}])
    assert out.choices[0].finish_reason == "content_filter" and out.choices[0].message.content == ""


def test_unsupported_is_refused_before_dispatch(stack, client) -> None:
    router, fake = stack
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="gflash", messages=[{"role": "user", "content": "x"}], logprobs=True)
    assert info.value.body["code"] == "unsupported_parameter" and info.value.body["param"] == "logprobs"
    r = httpx.post(router.url + "/v1/completions", json={"model": "gflash", "prompt": "hi"}, timeout=30)
    assert r.status_code == 400 and "/v1/chat/completions" in r.json()["error"]["message"]
    assert len(fake.requests) == before
    assert FAKE_API_KEY not in router.logs()


THOUGHT = "The user wants a reply from fake-gemini."


def test_thoughts_come_back_as_reasoning_content(stack, client) -> None:
    """A client that asks for reasoning gets Gemini's thought parts as
    `reasoning_content` (vLLM's field), whole and streamed as deltas; without
    reasoning_effort no thoughts are asked for and none reach the client."""
    router, fake = stack
    out = client.chat.completions.create(
        model="gflash", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low"
    )
    no_extras(out)
    assert last_post(fake).json["generationConfig"]["thinkingConfig"] == {"thinkingBudget": 1024, "includeThoughts": True}
    assert out.choices[0].message.content == TEXT
    assert out.choices[0].message.model_extra == {"reasoning_content": THOUGHT}
    chunks = list(
        client.chat.completions.create(
            model="gflash", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low", stream=True
        )
    )
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.model_extra["reasoning_content"] for d in deltas if "reasoning_content" in (d.model_extra or {})]
    assert len(reasoning) == 2 and "".join(reasoning) == THOUGHT  # the fake's two thought frames
    assert "".join(d.content or "" for d in deltas) == TEXT
    plain = httpx.post(router.url + "/v1/chat/completions", timeout=30,
                       json={"model": "gflash", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert plain.status_code == 200 and b"reasoning_content" not in plain.content
    assert "generationConfig" not in last_post(fake).json

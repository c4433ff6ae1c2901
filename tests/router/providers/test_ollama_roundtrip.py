"""The conversions against a real HTTP server speaking Ollama's native API
(the demo fake): converted requests are accepted and its answers, streamed or
not, become exact OpenAI objects."""

from __future__ import annotations

import httpx
import orjson
import pytest
from openai.types import CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from fakes.ollama_backend import server_thread
from router.providers.ollama import (
    ChatStream,
    NdjsonDecoder,
    ResponsesStream,
    chat_completion,
    chat_request,
    embed_request,
    embeddings,
    error_from_ollama,
    models_from_tags,
    response_object,
    responses_request,
)
from tests.router.providers.openai_shapes import chat_sse, exact, exact_event, responses_sse

WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


@pytest.fixture(scope="module")
def ollama():
    with server_thread("fake-ollama", ["llama3.2", "qwen3"]) as server:
        with httpx.Client(base_url=server.url, timeout=10) as client:
            yield client


def post_stream(client: httpx.Client, path: str, body: dict, chunk: int = 5) -> list[dict]:
    decoder, frames = NdjsonDecoder(), []
    with client.stream("POST", path, json=body) as r:
        assert r.status_code == 200
        for data in r.iter_bytes(chunk):
            frames += decoder.feed(data)
    return frames + decoder.close()


def test_chat_non_stream(ollama) -> None:
    conv = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "llama3.2")
    r = ollama.post("/api/chat", json=conv.request)
    assert r.status_code == 200
    obj = exact(ChatCompletion, chat_completion(r.json(), model="m", completion_id="chatcmpl-1", created=1))
    assert "fake-ollama" in obj.choices[0].message.content
    assert obj.usage.total_tokens > 0


def test_chat_stream_with_tools_and_usage(ollama) -> None:
    body = {
        "model": "m",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "what is the weather in Seoul?"}],
        "tools": [WEATHER],
    }
    frames = post_stream(ollama, "/api/chat", chat_request(body, "llama3.2").request)
    stream = ChatStream(model="m", completion_id="chatcmpl-2", created=1, include_usage=True)
    out = [b for f in frames for b in stream.feed(f)] + stream.finish()
    events = chat_sse(out)
    assert events[-1] == "[DONE]"
    chunks = [exact(ChatCompletionChunk, c) for c in events[:-1]]
    assert stream.finish_reason == "tool_calls"
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert calls and calls[0].function.name == "get_weather"
    orjson.loads(calls[0].function.arguments)
    assert chunks[-1].usage.total_tokens == stream.usage["total_tokens"]


def test_chat_length_limit(ollama) -> None:
    body = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
    r = ollama.post("/api/chat", json=chat_request(body, "llama3.2").request)
    obj = exact(ChatCompletion, chat_completion(r.json(), model="m", completion_id="c", created=1))
    assert obj.choices[0].finish_reason == "length"


def test_responses_non_stream_with_json_format(ollama) -> None:
    body = {"model": "m", "input": "hi", "text": {"format": {"type": "json_object"}}}
    r = ollama.post("/api/chat", json=responses_request(body, "qwen3").request)
    out = response_object(r.json(), model="m", response_id="resp_1", created_at=1, request_body=body)
    obj = exact(Response, out)
    assert obj.status == "completed"
    orjson.loads(obj.output_text)


def test_responses_stream_with_thinking(ollama) -> None:
    body = {"model": "m", "input": "hi", "stream": True, "reasoning": {"effort": "low"}}
    frames = post_stream(ollama, "/api/chat", responses_request(body, "qwen3").request, chunk=3)
    stream = ResponsesStream(model="m", response_id="resp_2", created_at=1, request_body=body)
    out = stream.start() + [b for f in frames for b in stream.feed(f)] + stream.finish()
    events = responses_sse(out)
    for event in events:
        exact_event(event)
    final = exact_event(events[-1]).response
    assert final.status == "completed"
    assert [item.type for item in final.output] == ["reasoning", "message"]
    assert "fake-ollama" in final.output_text


def test_embeddings_and_models(ollama) -> None:
    conv = embed_request({"model": "e", "input": ["a", "b"]}, "llama3.2")
    r = ollama.post("/api/embed", json=conv.request)
    obj = exact(CreateEmbeddingResponse, embeddings(r.json(), model="e", encoding_format="float"))
    assert len(obj.data) == 2
    models = models_from_tags(ollama.get("/api/tags").json(), owned_by="fake-ollama")
    assert {m["id"] for m in models} >= {"llama3.2:latest", "qwen3:latest"}
    for m in models:
        exact(Model, m)


def test_unknown_model_error_is_mapped(ollama) -> None:
    conv = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "nope")
    r = ollama.post("/api/chat", json=conv.request)
    status, payload = error_from_ollama(r.status_code, r.content)
    assert r.status_code == 404 and status == 502
    assert "not found" in payload["error"]["message"]

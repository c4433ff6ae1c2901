"""The Anthropic provider against a real HTTP server speaking the Messages API
(the fake, which refuses what the real API refuses): converted requests are
accepted, answers and streams become exact OpenAI objects, the Anthropic
door's own requests go up as given and come back byte for byte."""

from __future__ import annotations

import httpx
import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from fakes.anthropic_backend import server_thread
from router.core.backend import BackendSpec
from router.core.errors import UnsupportedParameter
from router.core.secret import Secret
from router.providers import probe_headers, probe_url, provider_for
from router.providers.anthropic import ChatStream, SseDecoder, chat_completion, chat_request
from router.providers.anthropic.provider import ANTHROPIC
from router.providers.base import Exchange, UpstreamFailed
from router.providers.http import LeanAiohttpTransport
from router.request import Envelope
from tests.router.providers.openai_shapes import chat_sse, exact

KEY = "sk-ant-roundtrip-42"
HEADERS = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


@pytest.fixture(scope="module")
def fake():
    with server_thread("fake-claude", ["claude-x"], api_key=KEY) as server:
        yield server


@pytest.fixture
def client(fake):
    with httpx.Client(base_url=fake.url, headers=HEADERS, timeout=10) as c:
        yield c


class Rt:
    def __init__(self) -> None:
        self.transport = LeanAiohttpTransport(trust_env=False)


@pytest.fixture
async def rt():
    upstreams = Rt()
    yield upstreams
    await upstreams.transport.aclose()


def spec_of(fake, **kw) -> BackendSpec:
    fields = {
        "name": "claude",
        "url": fake.url + "/v1",
        "kind": "anthropic",
        "models": ("c",),
        "served_model": "claude-x",
        "api_key": Secret(KEY),
        **kw,
    }
    return BackendSpec(**fields)


def envelope(
    body: dict, endpoint: str = "chat/completions", notes: dict | None = None, headers: dict | None = None
) -> Envelope:
    raw = orjson.dumps(body)
    return Envelope(
        endpoint=endpoint,
        raw=raw,
        body=body,
        model=body.get("model", "c"),
        stream=bool(body.get("stream")),
        headers=headers or {},
        client_ip="127.0.0.1",
        host="h",
        request_id="r",
        notes=notes or {},
    )


async def drain(ex: Exchange) -> tuple[bytes, list]:
    done: list = []
    out = b""
    async for data in ANTHROPIC.relay(ex, envelope({}), lambda ok, info: done.append((ok, info))):
        out += data
    return out, done


def test_registry_and_probe(fake) -> None:
    spec = spec_of(fake, headers=(("X-Tenant", "t"),))
    assert provider_for("anthropic").inner is ANTHROPIC  # type: ignore[attr-defined] and ANTHROPIC.path == "normalized"
    assert probe_url(spec, "/v1/models") == fake.url + "/v1/models"
    headers = probe_headers(spec)
    assert headers == {"anthropic-version": "2023-06-01", "x-api-key": KEY, "x-tenant": "t"}
    r = httpx.get(probe_url(spec, "/health"), headers=headers)
    assert ANTHROPIC.listed_models(r.json()) == ["claude-x"]
    # A configured anthropic-version wins over the default.
    pinned = spec_of(fake, headers=(("anthropic-version", "2024-01-01"),))
    assert probe_headers(pinned)["anthropic-version"] == "2024-01-01"


def test_converted_chat_is_accepted_and_exact(client) -> None:
    body = {
        "model": "c",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "stop": ["nothing"],
        "user": "u",
    }
    r = client.post("/v1/messages", json=chat_request(body, "claude-x").request)
    assert r.status_code == 200, r.text
    obj = exact(ChatCompletion, chat_completion(r.json(), model="c", completion_id="chatcmpl-1", created=1))
    assert obj.choices[0].message.content == "Hello from fake-claude. This is a demo reply."
    assert obj.usage.prompt_tokens > 0 and obj.usage.completion_tokens == 5


def test_tool_round_trip_is_accepted(client) -> None:
    first = {"model": "c", "messages": [{"role": "user", "content": "weather in Paris?"}], "tools": [WEATHER]}
    r = client.post("/v1/messages", json=chat_request(first, "claude-x").request)
    answer = exact(ChatCompletion, chat_completion(r.json(), model="c", completion_id="chatcmpl-1", created=1))
    (call,) = answer.choices[0].message.tool_calls
    assert call.id.startswith("toolu_") and answer.choices[0].finish_reason == "tool_calls"
    second = {
        **first,
        "messages": [
            *first["messages"],
            answer.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
        ],
    }
    r = client.post("/v1/messages", json=chat_request(second, "claude-x").request)
    assert r.status_code == 200, r.text
    final = exact(ChatCompletion, chat_completion(r.json(), model="c", completion_id="chatcmpl-2", created=1))
    assert final.choices[0].finish_reason == "stop" and "fake-claude" in final.choices[0].message.content


def test_stream_from_the_fake_in_small_chunks(client) -> None:
    body = {
        "model": "c",
        "stream": True,
        "messages": [{"role": "user", "content": "weather in Seoul?"}],
        "tools": [WEATHER],
        "stream_options": {"include_usage": True},
    }
    decoder, stream = SseDecoder(), ChatStream(model="c", completion_id="chatcmpl-3", created=1, include_usage=True)
    out: list[bytes] = []
    with client.stream("POST", "/v1/messages", json=chat_request(body, "claude-x").request) as r:
        assert r.status_code == 200
        for data in r.iter_bytes(3):
            out += [f for e in decoder.feed(data) for f in stream.feed(e)]
    out += [f for e in decoder.close() for f in stream.feed(e)] + stream.finish()
    events = chat_sse(out)
    chunks = [exact(ChatCompletionChunk, c) for c in events[:-1]]
    args = "".join(tc.function.arguments for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ())
    assert orjson.loads(args) == {"city": "Paris"} and stream.finish_reason == "tool_calls"
    assert chunks[-1].usage.completion_tokens == stream.usage["completion_tokens"]


async def test_start_non_stream_and_stream(fake, rt) -> None:
    spec = spec_of(fake)
    ex = await ANTHROPIC.start(rt, spec, envelope({"model": "c", "messages": [{"role": "user", "content": "hi"}]}), "c")
    assert ex.status == 200 and ex.wire == "openai" and ex.info["adapter"] == "anthropic"
    obj = exact(ChatCompletion, orjson.loads(ANTHROPIC.finish(ex, envelope({}))[0]))
    assert obj.model == "c" and obj.id.startswith("chatcmpl-")
    sent = fake.requests[-1]
    assert sent.headers["x-api-key"] == KEY and "authorization" not in sent.headers
    ex = await ANTHROPIC.start(
        rt, spec, envelope({"model": "c", "stream": True, "messages": [{"role": "user", "content": "hi"}]}), "c"
    )
    assert ex.body.startswith(b"data: ") and b'"role":"assistant"' in ex.body
    out, done = await drain(ex)
    events = chat_sse([b"data: " + f for f in out.split(b"data: ") if f])
    assert events[-1] == "[DONE]"
    assert done == [(True, {"usage": {"prompt_tokens": 1, "completion_tokens": 5, "total_tokens": 6}})]


async def test_provider_error_keeps_its_status(fake, rt) -> None:
    fake.behavior.status = 529
    try:
        ex = await ANTHROPIC.start(
            rt, spec_of(fake), envelope({"model": "c", "messages": [{"role": "user", "content": "x"}]}), "c"
        )
    finally:
        fake.behavior.reset()
    assert ex.status == 503 and orjson.loads(ex.body)["error"]["code"] == "overloaded"
    ex = await ANTHROPIC.start(
        rt,
        spec_of(fake, served_model="nope"),
        envelope({"model": "c", "messages": [{"role": "user", "content": "x"}]}),
        "c",
    )
    assert ex.status == 404 and "nope" in orjson.loads(ex.body)["error"]["message"]


async def test_error_event_before_the_first_token_is_retryable(fake, rt) -> None:
    fake.behavior.chunks = 1  # one piece: the error event comes right after it
    body = {"model": "c", "stream": True, "messages": [{"role": "user", "content": "overload-mid-stream"}]}
    try:
        ex = await ANTHROPIC.start(rt, spec_of(fake), envelope(body), "c")
        out, done = await drain(ex)
    finally:
        fake.behavior.reset()
    frames = chat_sse([b"data: " + f for f in out.split(b"data: ") if f])
    assert frames[0]["choices"][0]["delta"]["content"] == "Hello from fake-claude. This is a demo reply."
    assert frames[-1]["error"]["code"] == "overloaded" and done[0][0] is False
    fake.behavior.die_after_chunks = 2  # message_start, content_block_start, then the connection dies
    try:
        with pytest.raises(UpstreamFailed):
            await ANTHROPIC.start(
                rt, spec_of(fake), envelope({**body, "messages": [{"role": "user", "content": "hi"}]}), "c"
            )
    finally:
        fake.behavior.reset()


async def test_other_endpoints_name_what_works(fake, rt) -> None:
    with pytest.raises(UnsupportedParameter) as caught:
        await ANTHROPIC.start(rt, spec_of(fake), envelope({"model": "c", "input": "x"}, "embeddings"), "c")
    assert "/v1/chat/completions" in caught.value.message


async def test_door_request_goes_up_as_given_and_comes_back_byte_identical(fake, rt) -> None:
    own = {
        "model": "c",
        "max_tokens": 50,
        "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "top_k": 3,
    }
    chat = {"model": "c", "messages": [{"role": "user", "content": "hi"}]}
    door = envelope(chat, notes={"anthropic_request": own}, headers={"anthropic-beta": "b1", "x-other": "no"})
    ex = await ANTHROPIC.start(rt, spec_of(fake), door, "c")
    sent = fake.requests[-1]
    assert sent.json == {**own, "model": "claude-x"}
    assert sent.headers["anthropic-beta"] == "b1" and "x-other" not in sent.headers
    assert ex.wire == "anthropic" and ex.status == 200
    body, info = ANTHROPIC.finish(ex, envelope({}))
    assert orjson.loads(body)["type"] == "message" and info["usage"]["completion_tokens"] == 5
    # Byte-identical: the same request straight to the fake answers the same
    # bytes but for the ids and the model, which is the name the client asked for.
    direct = httpx.post(fake.url + "/v1/messages", json={**own, "model": "claude-x"}, headers=HEADERS).content
    assert orjson.loads(body)["model"] == "c"
    assert _without_ids(body) == _without_ids(direct.replace(b'"model":"claude-x"', b'"model":"c"', 1))
    # Streamed: the raw SSE bytes, relayed chunk by chunk.
    ex = await ANTHROPIC.start(
        rt, spec_of(fake), envelope({**chat, "stream": True}, notes={"anthropic_request": {**own, "stream": True}}), "c"
    )
    out, done = await drain(ex)
    raw = out
    direct = httpx.post(
        fake.url + "/v1/messages", json={**own, "model": "claude-x", "stream": True}, headers=HEADERS
    ).content
    assert raw.startswith(b"event: message_start\n")
    renamed = direct.replace(b'"model":"claude-x"', b'"model":"c"', 1)
    assert renamed != direct and _without_ids(raw).decode() == _without_ids(renamed).decode()
    assert done[0][0] is True and done[0][1]["usage"]["completion_tokens"] == 5
    # Errors as they came.
    ex = await ANTHROPIC.start(rt, spec_of(fake), envelope(chat, notes={"anthropic_request": {**own, "n": 2}}), "c")
    assert ex.status == 400 and orjson.loads(ex.body)["error"]["message"] == "n: Extra inputs are not permitted"


async def test_count_tokens(fake, rt) -> None:
    chat = {"model": "c", "messages": [{"role": "user", "content": "one two three four"}], "max_tokens": 9}
    ex = await ANTHROPIC.start(rt, spec_of(fake), envelope(chat, "messages/count_tokens"), "c")
    assert ex.wire == "anthropic" and ex.status == 200 and orjson.loads(ex.body) == {"input_tokens": 4}
    own = {"model": "c", "max_tokens": 9, "stream": False, "messages": chat["messages"], "system": "a b"}
    ex = await ANTHROPIC.start(
        rt, spec_of(fake), envelope(chat, "messages/count_tokens", notes={"anthropic_request": own}), "c"
    )
    assert orjson.loads(ex.body) == {"input_tokens": 6}
    assert fake.requests[-1].json == {"model": "claude-x", "messages": chat["messages"], "system": "a b"}


def _without_ids(data: bytes) -> bytes:
    import re

    return re.sub(rb'"(msg_|req_|toolu_)[0-9a-f]+"', b'"ID"', data)


async def test_a_stream_cut_mid_way_ends_with_one_error(fake, rt) -> None:
    body = {"model": "c", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    fake.behavior.die_after_chunks = 5  # message_start, block start, ping, two deltas: then the connection dies
    try:
        ex = await ANTHROPIC.start(rt, spec_of(fake), envelope(body), "c")
        out, done = await drain(ex)
        own = {"model": "c", "max_tokens": 50, "stream": True, "messages": body["messages"]}
        raw_ex = await ANTHROPIC.start(rt, spec_of(fake), envelope(body, notes={"anthropic_request": own}), "c")
        raw, raw_done = await drain(raw_ex)
    finally:
        fake.behavior.reset()
    frames = chat_sse([b"data: " + f for f in out.split(b"data: ") if f])
    assert [f["choices"][0]["delta"].get("content") for f in frames[:-1]] == ["Hello from fake-claude. This", " is"]
    assert frames[-1]["error"]["type"] == "server_error" and done[0][0] is False
    last = raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: error\ndata: ") and raw_done[0][0] is False
    assert orjson.loads(last.split(b"data: ", 1)[1])["error"]["type"] == "api_error"

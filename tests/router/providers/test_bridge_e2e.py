"""`bridged(inner)` over a real chat provider: the OpenAI passthrough against the
fake OpenAI backend on loopback, driven through `start` / `finish` / `relay`.

The backend is only ever asked `/v1/chat/completions` (the bridge converts);
what it answers comes back as exact Responses API objects and events.
"""

from __future__ import annotations

import asyncio
import dataclasses

import orjson
import pytest
from openai.types.responses import Response

from fakes.openai_backend import server_thread
from router.core.backend import BackendSpec
from router.core.errors import UnsupportedParameter
from router.providers.bridge.provider import bridged
from router.providers.http import LeanAiohttpTransport
from router.providers.openai import OPENAI
from router.request import Envelope
from tests.router.providers.openai_shapes import exact, exact_event, responses_sse

BRIDGED = bridged(OPENAI)
TIMEOUT = 30.0
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    "strict": None,
}


@dataclasses.dataclass
class Upstreams:
    transport: LeanAiohttpTransport


@pytest.fixture(scope="module")
def backend():
    with server_thread("fake-chat", ["demo"]) as server:
        yield server


@pytest.fixture
async def rt():
    transport = LeanAiohttpTransport(trust_env=False)
    yield Upstreams(transport)
    await transport.aclose()


@pytest.fixture
def spec(backend):
    backend.behavior.reset()
    return BackendSpec(name="fake-chat", url=backend.url, models=("demo",), served_model="demo-served")


def envelope(body: dict, endpoint: str = "responses") -> Envelope:
    body = {"model": "demo", **body}
    return Envelope(
        endpoint=endpoint,
        raw=orjson.dumps(body),
        body=body,
        model="demo",
        stream=bool(body.get("stream")),
        headers={},
        client_ip="127.0.0.1",
        host="router",
        request_id="req-1",
        relay_whole=True,
    )


def frames(data: bytes) -> list[bytes]:
    assert data.endswith(b"\n\n")
    return [frame + b"\n\n" for frame in data[:-2].split(b"\n\n")]


class Verdicts:
    def __init__(self) -> None:
        self.calls: list[tuple[bool | None, dict]] = []

    def __call__(self, ok: bool | None, info: dict) -> None:
        self.calls.append((ok, info))


async def whole(rt, spec, backend, body: dict) -> tuple[Response, dict]:
    env = envelope(body)
    ex = await BRIDGED.start(rt, spec, env, "demo")
    assert ex.status == 200 and ex.stream is None
    out, info = BRIDGED.finish(ex, env)
    sent = backend.requests[-1]
    assert sent.path == "/v1/chat/completions"
    return exact(Response, orjson.loads(out)), {**info, "sent": sent.json, "exchange": ex}


async def streamed(rt, spec, backend, body: dict) -> tuple[list, Verdicts, list[bytes]]:
    env = envelope({**body, "stream": True})
    ex = await BRIDGED.start(rt, spec, env, "demo")
    assert ex.status == 200 and ex.content_type == "text/event-stream"
    verdicts = Verdicts()
    chunks = [chunk async for chunk in BRIDGED.relay(ex, env, verdicts)]
    events = [exact_event(e) for e in responses_sse(frames(b"".join(chunks)))]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert backend.requests[-1].path == "/v1/chat/completions"
    return events, verdicts, chunks


async def test_non_stream_text_becomes_a_response(rt, spec, backend) -> None:
    response, info = await whole(
        rt, spec, backend, {"input": "hi", "instructions": "Be brief.", "metadata": {"a": "b"}}
    )
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.status == "completed" and response.model == "demo"
    assert response.output_text == "Hello from fake-chat. This is a demo reply."
    assert response.instructions == "Be brief." and response.metadata == {"a": "b"}
    assert response.output[0].id.startswith("msg_")
    assert response.usage.input_tokens > 0 and response.usage.total_tokens == (
        response.usage.input_tokens + response.usage.output_tokens
    )
    assert info["usage"] == response.usage.model_dump(exclude_unset=True)
    assert info["sent"] == {
        "model": "demo-served",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    }
    ex = info["exchange"]
    assert ex.info["adapter"] == "responses-bridge" and ex.info["served"] == "demo-served"
    assert ex.info["ignored_fields"] == ["metadata"]


async def test_non_stream_token_limit_is_incomplete(rt, spec, backend) -> None:
    response, info = await whole(rt, spec, backend, {"input": "hi", "max_output_tokens": 2})
    assert info["sent"]["max_completion_tokens"] == 2
    assert response.status == "incomplete"
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete"


async def test_stream_text_becomes_responses_events(rt, spec, backend) -> None:
    backend.behavior.chunks = 4
    events, verdicts, _ = await streamed(rt, spec, backend, {"input": "hi"})
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 4,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response
    assert final.status == "completed" and final.output_text == "Hello from fake-chat. This is a demo reply."
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == final.output_text
    assert final.usage.output_tokens == 4
    assert backend.requests[-1].json["stream_options"] == {"include_usage": True}
    assert verdicts.calls == [(True, {"usage": final.usage.model_dump(exclude_unset=True)})]


async def test_function_call_round_trip(rt, spec, backend) -> None:
    """A function call comes out as a function_call item; sent back with its
    output, it reaches the chat provider as assistant tool_calls + a tool message."""
    ask = {"input": "What is the weather in Seoul?", "tools": [WEATHER], "parallel_tool_calls": False}
    response, info = await whole(rt, spec, backend, ask)
    assert info["sent"]["tools"] == [
        {
            "type": "function",
            "function": {k: WEATHER[k] for k in ("name", "description", "parameters")},
        }
    ]
    assert info["sent"]["parallel_tool_calls"] is False
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.id.startswith("fc_")
    assert call.call_id.startswith("call_")
    assert set(orjson.loads(call.arguments)) == {"city"}

    events, _, _ = await streamed(rt, spec, backend, ask)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"]
        * len([e for e in events if e.type == "response.function_call_arguments.delta"]),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    streamed_call = events[-1].response.output[0]
    assert streamed_call.name == "get_weather" and orjson.loads(streamed_call.arguments) == orjson.loads(call.arguments)

    history = [
        {"role": "user", "content": [{"type": "input_text", "text": "What is the weather in Seoul?"}]},
        call.model_dump(exclude_none=True),
        {"type": "function_call_output", "call_id": call.call_id, "output": '{"sky": "clear"}'},
    ]
    answer, info = await whole(rt, spec, backend, {"input": history, "tools": [WEATHER]})
    assert info["sent"]["messages"] == [
        {"role": "user", "content": "What is the weather in Seoul?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": call.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"sky": "clear"}'},
    ]
    assert answer.status == "completed" and "fake-chat" in answer.output_text


async def test_client_disconnect_closes_the_upstream(rt, spec, backend) -> None:
    backend.behavior.chunk_delay_s = 60.0  # the stream would take minutes
    env = envelope({"input": "hi", "stream": True})
    ex = await BRIDGED.start(rt, spec, env, "demo")
    verdicts = Verdicts()
    relay = BRIDGED.relay(ex, env, verdicts)
    first = await anext(relay)  # while the upstream is still streaming: never buffered whole
    assert responses_sse(frames(first))[0]["type"] == "response.created"
    assert not backend.requests[-1].finished.is_set()
    await relay.aclose()  # the client went away
    upstream = backend.requests[-1]
    assert await asyncio.to_thread(upstream.finished.wait, TIMEOUT)
    assert upstream.outcome == "cancelled"
    assert verdicts.calls == [(None, {"usage": None})]


async def test_mid_stream_failure_ends_with_response_failed(rt, spec, backend) -> None:
    backend.behavior.die_after_chunks = 3
    env = envelope({"input": "hi", "stream": True})
    ex = await BRIDGED.start(rt, spec, env, "demo")
    verdicts = Verdicts()
    data = b"".join([chunk async for chunk in BRIDGED.relay(ex, env, verdicts)])
    events = [exact_event(e) for e in responses_sse(frames(data))]
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "failed" and events[-1].response.error.code == "server_error"
    assert verdicts.calls[0][0] is False and len(verdicts.calls) == 1


async def test_a_provider_error_is_relayed_as_it_is(rt, spec, backend) -> None:
    backend.behavior.status = 429
    for stream in (False, True):
        env = envelope({"input": "hi", "stream": stream})
        ex = await BRIDGED.start(rt, spec, env, "demo")
        assert ex.status == 429 and ex.stream is None
        body, _ = BRIDGED.finish(ex, env)
        assert orjson.loads(body)["error"]["code"] == "rate_limit_exceeded"


async def test_an_unsupported_field_sends_nothing(rt, spec, backend) -> None:
    before = len(backend.requests)
    with pytest.raises(UnsupportedParameter):
        await BRIDGED.start(rt, spec, envelope({"input": "hi", "previous_response_id": "resp_1"}), "demo")
    with pytest.raises(UnsupportedParameter):
        await BRIDGED.start(rt, spec, envelope({"input": "hi", "tools": [{"type": "web_search"}]}), "demo")
    assert len(backend.requests) == before


async def test_other_endpoints_go_straight_to_the_inner_provider(rt, spec, backend) -> None:
    env = envelope({"messages": [{"role": "user", "content": "hi"}]}, endpoint="chat/completions")
    ex = await BRIDGED.start(rt, spec, env, "demo")
    body, info = BRIDGED.finish(ex, env)
    assert orjson.loads(body)["object"] == "chat.completion" and info["usage"]["total_tokens"] > 0
    assert backend.requests[-1].json["messages"] == [{"role": "user", "content": "hi"}]


def test_the_wrapper_keeps_the_inner_providers_face() -> None:
    assert BRIDGED.kinds == OPENAI.kinds and BRIDGED.path == OPENAI.path
    spec = BackendSpec(name="b", url="http://h:1/v1", models=("m",))
    assert BRIDGED.probe_url(spec, "/v1/models") == OPENAI.probe_url(spec, "/v1/models")
    assert BRIDGED.probe_headers(spec) == OPENAI.probe_headers(spec)
    assert BRIDGED.listed_models({"data": [{"id": "m"}]}) == ["m"]

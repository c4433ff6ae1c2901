"""The fake OpenAI backend, checked over real HTTP with the official `openai` SDK."""

from __future__ import annotations

import base64
import struct
import threading
import time

import httpx
import openai
import orjson
import pytest

from fakes.openai_backend import make_app, server_thread
from fakes.server import Behavior, ServerThread

TIMEOUT = 30.0
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["location", "unit"],
        },
    },
}
USER_HI = [{"role": "user", "content": "Say hello"}]


def wait_until(pred, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


@pytest.fixture
def srv():
    with server_thread("demo-a", ["demo", "demo-mini"]) as s:
        yield s


@pytest.fixture
def client(srv: ServerThread):
    with openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT) as c:
        yield c


# -- chat completions -----------------------------------------------------------------


def test_chat_non_stream(client: openai.OpenAI, srv: ServerThread):
    raw = client.chat.completions.with_raw_response.create(model="demo-mini", messages=USER_HI)
    assert raw.headers["x-backend-name"] == "demo-a"
    r = raw.parse()
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == "demo-mini"  # echoes the request
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == "Hello from demo-a. This is a demo reply."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage is not None and r.usage.completion_tokens == 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_accepts_any_model_name(client: openai.OpenAI):
    r = client.chat.completions.create(model="served/Name-7B", messages=USER_HI)
    assert r.model == "served/Name-7B"


def test_chat_stream_with_usage(client: openai.OpenAI, srv: ServerThread):
    srv.behavior.chunks = 12
    chunks = list(
        client.chat.completions.create(
            model="demo",
            messages=USER_HI,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert all(c.object == "chat.completion.chunk" and c.model == "demo" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) == 12
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text.startswith("Hello from demo-a.")
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [c.choices[0].finish_reason for c in finals] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_stream_without_usage_has_no_usage_chunk(client: openai.OpenAI):
    chunks = list(client.chat.completions.create(model="demo", messages=USER_HI, stream=True))
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert all(c.choices for c in chunks)


def test_chat_stream_wire_format(srv: ServerThread):
    body = {"model": "demo", "messages": USER_HI, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers["x-backend-name"] == "demo-a"
        raw = r.read()
    frames = raw.split(b"\n\n")
    assert frames[-1] == b"" and frames[-2] == b"data: [DONE]"
    for f in frames[:-2]:
        assert f.startswith(b"data: {")
        orjson.loads(f[len(b"data: ") :])


def test_stream_frames_are_flushed_one_by_one(srv: ServerThread):
    # With 30 s between frames the first one can only arrive in time if each
    # frame is written and flushed on its own.
    srv.behavior.chunk_delay_s = 30.0
    body = {"model": "demo", "messages": USER_HI, "stream": True}
    t0 = time.monotonic()
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
        first = next(r.iter_lines())
    assert time.monotonic() - t0 < 25.0
    assert first.startswith("data: {")
    assert orjson.loads(first[6:])["choices"][0]["delta"]["role"] == "assistant"


def test_max_tokens_truncates_with_length(client: openai.OpenAI):
    r = client.chat.completions.create(model="demo", messages=USER_HI, max_tokens=2)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 2
    r = client.chat.completions.create(model="demo", messages=USER_HI, max_completion_tokens=200)
    assert r.choices[0].finish_reason == "stop"


def test_tool_call_non_stream(client: openai.OpenAI):
    r = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "What's the weather in Paris?"}],
        tools=[WEATHER_TOOL],
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.type == "function"
    assert call.function.name == "get_weather"
    args = orjson.loads(call.function.arguments)
    assert args == {"location": "Paris", "unit": "celsius"}


def test_no_tool_call_without_weather_or_with_tool_choice_none(client: openai.OpenAI):
    r = client.chat.completions.create(model="demo", messages=USER_HI, tools=[WEATHER_TOOL])
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"
    r = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": "weather?"}],
        tools=[WEATHER_TOOL],
        tool_choice="none",
    )
    assert r.choices[0].message.tool_calls is None


def test_tool_call_stream(client: openai.OpenAI):
    stream = client.chat.completions.create(
        model="demo",
        messages=[{"role": "user", "content": [{"type": "text", "text": "weather in Paris"}]}],
        tools=[WEATHER_TOOL],
        stream=True,
    )
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        choice = chunk.choices[0]
        finish = choice.finish_reason or finish
        for tc in choice.delta.tool_calls or []:
            acc = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            acc["id"] = tc.id or acc["id"]
            if tc.function and tc.function.name:
                acc["name"] += tc.function.name
            if tc.function and tc.function.arguments:
                acc["arguments"] += tc.function.arguments
    assert finish == "tool_calls"
    assert list(calls) == [0]
    assert calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert orjson.loads(calls[0]["arguments"]) == {
        "location": "Paris",
        "unit": "celsius",
    }


# -- completions / embeddings / models --------------------------------------------------


def test_completions(client: openai.OpenAI):
    r = client.completions.create(model="demo", prompt="Once upon a time")
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.model == "demo"
    assert r.choices[0].text == "Hello from demo-a. This is a demo reply."
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.prompt_tokens == 4


def test_completions_stream(client: openai.OpenAI):
    chunks = list(
        client.completions.create(
            model="demo",
            prompt="hi",
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == "Hello from demo-a. This is a demo reply."
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_embeddings_float_and_base64(client: openai.OpenAI, srv: ServerThread):
    floats = client.embeddings.create(model="demo", input=["alpha", "beta"], encoding_format="float")
    assert floats.object == "list" and floats.model == "demo"
    assert [d.index for d in floats.data] == [0, 1]
    assert all(len(d.embedding) == 8 for d in floats.data)
    assert floats.data[0].embedding != floats.data[1].embedding
    # Without encoding_format the SDK asks for base64 and decodes it itself.
    decoded = client.embeddings.create(model="demo", input=["alpha", "beta"])
    assert srv.requests[-1].json["encoding_format"] == "base64"
    assert [d.embedding for d in decoded.data] == [d.embedding for d in floats.data]
    # Deterministic per input, str input accepted.
    single = client.embeddings.create(model="demo", input="alpha", encoding_format="float")
    assert single.data[0].embedding == floats.data[0].embedding
    assert single.usage.prompt_tokens == 1


def test_embeddings_base64_wire_format(srv: ServerThread):
    body = {
        "model": "demo",
        "input": "alpha",
        "encoding_format": "base64",
        "dimensions": 4,
    }
    r = httpx.post(srv.url + "/v1/embeddings", json=body, timeout=TIMEOUT)
    emb = r.json()["data"][0]["embedding"]
    assert isinstance(emb, str)
    vec = struct.unpack("<4f", base64.b64decode(emb))
    assert len(vec) == 4 and all(-1.0 <= v <= 1.0 for v in vec)


def test_models_list_and_health(client: openai.OpenAI, srv: ServerThread):
    models = client.models.list()
    assert [m.id for m in models.data] == ["demo", "demo-mini"]
    assert all(m.owned_by == "demo-a" and m.object == "model" for m in models.data)
    r = httpx.get(srv.url + "/health", timeout=TIMEOUT)
    assert r.status_code == 200 and r.headers["x-backend-name"] == "demo-a"


# -- responses API --------------------------------------------------------------------------


def test_responses_non_stream(client: openai.OpenAI):
    r = client.responses.create(model="demo", input="Say hello", instructions="Be brief.")
    assert r.id.startswith("resp_") and r.object == "response"
    assert r.status == "completed" and r.model == "demo"
    assert r.output_text == "Hello from demo-a. This is a demo reply."
    assert r.instructions == "Be brief."
    msg = r.output[0]
    assert msg.type == "message" and msg.role == "assistant" and msg.status == "completed"
    assert msg.content[0].type == "output_text"
    assert r.usage.output_tokens == 5
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens
    assert r.usage.input_tokens_details.cached_tokens == 0
    assert r.usage.output_tokens_details.reasoning_tokens == 0


def test_responses_stream_typed_events(client: openai.OpenAI):
    events = list(client.responses.create(model="demo", input=[{"role": "user", "content": "Say hello"}], stream=True))
    types = [e.type for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 5,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert type(events[4]).__name__ == "ResponseTextDeltaEvent"
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = events[-1].response
    assert deltas == done.output_text == "Hello from demo-a. This is a demo reply."
    assert events[0].response.status == "in_progress" and done.status == "completed"
    assert done.usage.output_tokens == 5


def test_responses_stream_wire_format(srv: ServerThread):
    body = {"model": "demo", "input": "hi", "stream": True}
    with httpx.stream("POST", srv.url + "/v1/responses", json=body, timeout=TIMEOUT) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        raw = r.read()
    frames = [f for f in raw.split(b"\n\n") if f]
    for f in frames:
        event_line, data_line = f.split(b"\n")
        assert event_line.startswith(b"event: ") and data_line.startswith(b"data: ")
        assert orjson.loads(data_line[6:])["type"] == event_line[7:].decode()
    assert b"[DONE]" not in raw  # the Responses API has no sentinel


def test_responses_tool_call(client: openai.OpenAI):
    tool = {
        "type": "function",
        "name": "get_weather",
        "parameters": WEATHER_TOOL["function"]["parameters"],
    }
    r = client.responses.create(model="demo", input="What is the weather in Paris?", tools=[tool])
    (item,) = r.output
    assert item.type == "function_call" and item.name == "get_weather"
    assert item.call_id.startswith("call_")
    assert orjson.loads(item.arguments) == {"location": "Paris", "unit": "celsius"}
    events = list(client.responses.create(model="demo", input="weather?", tools=[tool], stream=True))
    args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert orjson.loads(args) == {"location": "Paris", "unit": "celsius"}
    assert events[-1].type == "response.completed"


def test_responses_max_output_tokens_incomplete(client: openai.OpenAI):
    r = client.responses.create(model="demo", input="hi", max_output_tokens=3)
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    events = list(client.responses.create(model="demo", input="hi", max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete"


# -- errors and faults ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "exc"),
    [
        (400, openai.BadRequestError),
        (401, openai.AuthenticationError),
        (404, openai.NotFoundError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
def test_forced_error_status(client: openai.OpenAI, srv: ServerThread, status: int, exc: type):
    srv.behavior.status = status
    with pytest.raises(exc) as info:
        client.chat.completions.create(model="demo", messages=USER_HI)
    assert info.value.status_code == status
    assert isinstance(info.value.body, dict) and info.value.body["message"]
    assert info.value.response.headers["x-backend-name"] == "demo-a"
    # applies to every POST endpoint, streaming or not
    with pytest.raises(exc):
        client.responses.create(model="demo", input="hi", stream=True)
    with pytest.raises(exc):
        client.embeddings.create(model="demo", input="hi")


def test_error_headers(client: openai.OpenAI, srv: ServerThread):
    srv.behavior.status = 429
    srv.behavior.error_headers = {"Retry-After": "7"}
    with pytest.raises(openai.RateLimitError) as info:
        client.chat.completions.create(model="demo", messages=USER_HI)
    assert info.value.response.headers["retry-after"] == "7"
    assert info.value.code == "rate_limit_exceeded"


def test_invalid_json_is_openai_400(srv: ServerThread):
    r = httpx.post(
        srv.url + "/v1/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
        timeout=TIMEOUT,
    )
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and "message" in err
    assert srv.requests[-1].body == b"{not json" and srv.requests[-1].json is None


def test_missing_model_is_400(srv: ServerThread):
    r = httpx.post(srv.url + "/v1/chat/completions", json={"messages": USER_HI}, timeout=TIMEOUT)
    assert r.status_code == 400 and r.json()["error"]["param"] == "model"


def test_delay_before_headers(client: openai.OpenAI, srv: ServerThread):
    srv.behavior.delay_s = 0.3
    t0 = time.monotonic()
    client.chat.completions.create(model="demo", messages=USER_HI)
    assert time.monotonic() - t0 >= 0.3


def test_drop_before_response(client: openai.OpenAI, srv: ServerThread):
    srv.behavior.drop_before_response = True
    with pytest.raises(openai.APIConnectionError):
        client.chat.completions.create(model="demo", messages=USER_HI)
    assert len(srv.requests) == 1  # it did arrive
    srv.behavior.reset()
    assert client.chat.completions.create(model="demo", messages=USER_HI).choices[0].message.content


def test_die_mid_stream(client: openai.OpenAI, srv: ServerThread):
    srv.behavior.die_after_chunks = 3
    got = []
    with pytest.raises((openai.APIConnectionError, httpx.HTTPError)):
        for chunk in client.chat.completions.create(model="demo", messages=USER_HI, stream=True):
            got.append(chunk)
    assert len(got) == 3


def test_hang_then_client_timeout(srv: ServerThread):
    srv.behavior.hang = True
    with (
        openai.OpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=0.5) as c,
        pytest.raises(openai.APITimeoutError),
    ):
        c.chat.completions.create(model="demo", messages=USER_HI)


def test_kill_aborts_in_flight_and_restart_on_same_port(client: openai.OpenAI, srv: ServerThread):
    url, port = srv.url, srv.port
    srv.behavior.hang = True
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.chat.completions.create(model="demo", messages=USER_HI)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    wait_until(lambda: len(srv.requests) == 1)
    srv.stop()
    t.join(TIMEOUT)
    assert not t.is_alive()
    assert len(errors) == 1 and isinstance(errors[0], openai.APIConnectionError)
    assert not srv.running

    with pytest.raises(openai.APIConnectionError):  # nobody listens any more
        client.chat.completions.create(model="demo", messages=USER_HI)

    srv.behavior.reset()
    srv.start()
    assert srv.url == url and srv.port == port
    r = client.chat.completions.create(model="demo", messages=USER_HI)
    assert "demo-a" in r.choices[0].message.content
    assert len(srv.requests) == 2  # the record survives restarts


def test_requests_are_recorded(client: openai.OpenAI, srv: ServerThread):
    payload = b'{"model": "demo", "messages": [{"role": "user", "content": "hi"}], "x_custom": {"a": 1}}'
    httpx.post(
        srv.url + "/v1/chat/completions?trace=1",
        content=payload,
        headers={"Content-Type": "application/json", "X-Custom-Header": "Yes"},
        timeout=TIMEOUT,
    )
    rec = srv.requests[-1]
    assert rec.method == "POST" and rec.path == "/v1/chat/completions?trace=1"
    assert rec.body == payload
    assert rec.json["x_custom"] == {"a": 1}
    assert rec.headers["x-custom-header"] == "Yes"
    client.chat.completions.create(model="demo", messages=USER_HI, temperature=0.5)
    rec = srv.requests[-1]
    assert rec.headers["authorization"] == "Bearer x"
    assert rec.json == {"model": "demo", "messages": USER_HI, "temperature": 0.5}


def test_custom_server_thread_and_app():
    behavior = Behavior(chunks=2)
    reqs: list = []
    s = ServerThread(lambda b, r: make_app("custom", ["m"], b, r), behavior=behavior, requests=reqs)
    with s:
        r = httpx.post(
            s.url + "/v1/completions",
            json={"model": "m", "prompt": "x", "stream": False},
            timeout=TIMEOUT,
        )
        assert r.json()["choices"][0]["text"] == "Hello from custom. This is a demo reply."
        assert reqs and reqs[0] is s.requests[0]
    assert not s.running


async def test_async_client_stream(srv: ServerThread):
    async with openai.AsyncOpenAI(base_url=srv.url + "/v1", api_key="x", max_retries=0, timeout=TIMEOUT) as c:
        stream = await c.chat.completions.create(model="demo", messages=USER_HI, stream=True)
        text = "".join([ch.choices[0].delta.content or "" async for ch in stream])
    assert text == "Hello from demo-a. This is a demo reply."


def test_recorded_outcome(client: openai.OpenAI, srv: ServerThread):
    client.chat.completions.create(model="demo", messages=USER_HI)
    done = srv.requests[-1]
    assert done.finished.wait(TIMEOUT) and done.outcome == "completed"

    # a client that walks away mid-stream cancels the handler
    srv.behavior.chunk_delay_s = 30.0
    body = {"model": "demo", "messages": USER_HI, "stream": True}
    with httpx.stream("POST", srv.url + "/v1/chat/completions", json=body, timeout=TIMEOUT) as r:
        lines = r.iter_lines()  # keep a reference: a dropped iterator closes
        next(lines)
        rec = srv.requests[-1]
        assert rec.outcome is None  # still streaming
    assert rec.finished.wait(TIMEOUT) and rec.outcome == "cancelled"

    srv.behavior.reset()
    srv.behavior.die_after_chunks = 1
    with pytest.raises(openai.APIConnectionError):
        list(client.chat.completions.create(model="demo", messages=USER_HI, stream=True))
    assert srv.requests[-1].finished.wait(TIMEOUT)
    assert srv.requests[-1].outcome == "cancelled"


def test_models_retrieve(client: openai.OpenAI):
    assert client.models.retrieve("demo-mini").owned_by == "demo-a"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("nope")


def test_text_answer_after_tool_result(client: openai.OpenAI):
    call = (
        client.chat.completions.create(
            model="demo",
            messages=[{"role": "user", "content": "weather in Paris?"}],
            tools=[WEATHER_TOOL],
        )
        .choices[0]
        .message
    )
    r = client.chat.completions.create(
        model="demo",
        messages=[
            {"role": "user", "content": "weather in Paris?"},
            call.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.tool_calls[0].id, "content": "sunny"},
        ],
        tools=[WEATHER_TOOL],
    )
    assert r.choices[0].finish_reason == "stop" and "demo-a" in r.choices[0].message.content
    item = client.responses.create(model="demo", input="weather?", tools=[{"type": "function", "name": "w"}]).output[0]
    r2 = client.responses.create(
        model="demo",
        input=[
            {"role": "user", "content": "weather?"},
            item.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": item.call_id, "output": "sunny"},
        ],
        tools=[{"type": "function", "name": "w"}],
    )
    assert r2.output[0].type == "message" and "demo-a" in r2.output_text

"""POST /v1/messages end to end: the official `anthropic` SDK → router process →
fake OpenAI-compatible and Ollama backends, all real HTTP on loopback."""

from __future__ import annotations

import uuid

import anthropic
import httpx
import orjson
import pytest

from fakes import ollama_backend, openai_backend
from fakes.server import Recorded, ServerThread
from tests.keys.e2e import create_key
from tests.router.frontends.sse import assemble, events
from tests.support.routerproc import RouterProc, wait_until

CONFIG = """
backends:
  - name: a
    url: {a}
    models: [m]
  - name: renamed
    url: {a}
    models: [public-name]
    served_model: internal/served
  - name: o
    url: {o}
    kind: ollama
    models: [olla]
    served_model: llama3.2
  - name: f
    url: {f}
    models: [faulty]
health:
  enabled: false
  failure_threshold: 1000  # injected faults must not open the breaker for later tests
"""
TEXT_A = "Hello from a. This is a demo reply."
TEXT_O = "Hello from o. This is a demo reply."
TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


class Stack:
    def __init__(self, router: RouterProc, a: ServerThread, o: ServerThread, f: ServerThread) -> None:
        self.router, self.a, self.o, self.f = router, a, o, f

    def client(self, **kwargs) -> anthropic.Anthropic:
        kwargs.setdefault("api_key", "sk-anything")
        return anthropic.Anthropic(base_url=self.router.url, max_retries=0, timeout=30, **kwargs)

    def post(self, body: bytes | dict, **headers: str) -> httpx.Response:
        content = body if isinstance(body, bytes) else orjson.dumps(body)
        return httpx.post(
            self.router.url + "/v1/messages",
            content=content,
            headers={"content-type": "application/json", **headers},
            timeout=30,
        )


@pytest.fixture(scope="module")
def stack():
    a = openai_backend.server_thread("a", ["m"]).start()
    o = ollama_backend.server_thread("o", ["llama3.2"]).start()
    f = openai_backend.server_thread("f", ["faulty"]).start()
    router = RouterProc(CONFIG.format(a=a.url, o=o.url, f=f.url)).start()
    try:
        yield Stack(router, a, o, f)
    finally:
        router.stop()
        for server in (a, o, f):
            server.stop()


@pytest.fixture(autouse=True)
def _reset_faults(request):
    yield
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").f.behavior.reset()


def mark() -> str:
    return f"mark-{uuid.uuid4().hex[:12]}"


def received(server: ServerThread, text: str) -> list[Recorded]:
    return [r for r in server.requests if r.method == "POST" and text.encode() in r.body]


def observation(router: RouterProc, request_id: str) -> dict:
    """The pipeline's observation of one request, from the router's structured log."""

    def find():
        for line in router.logs().splitlines():
            if request_id in line and '"router.requests"' in line:
                return orjson.loads(line)["obs"]
        return None

    return wait_until(find, 20, what=f"the observation of {request_id}")


# -- OpenAI-compatible backends (passthrough) ---------------------------------


def test_create_converts_the_request_and_the_answer(stack):
    """The backend receives exactly the converted OpenAI request; the client an Anthropic message."""
    m = mark()
    msg = stack.client().messages.create(
        model="m",
        max_tokens=64,
        system="Be brief.",
        messages=[{"role": "user", "content": m}],
        stop_sequences=["END"],
        metadata={"user_id": "user-1"},
        extra_body={"temperature": 0.5, "top_k": 5},
    )
    assert isinstance(msg, anthropic.types.Message)
    assert msg.id.startswith("msg_") and msg.type == "message" and msg.role == "assistant"
    assert msg.model == "m"
    assert [(b.type, b.text) for b in msg.content] == [("text", TEXT_A)]
    assert (msg.stop_reason, msg.stop_sequence) == ("end_turn", None)
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens == 5
    (req,) = received(stack.a, m)
    assert req.path == "/v1/chat/completions"
    assert req.json == {
        "model": "m",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": m}],
        "max_tokens": 64,
        "stop": ["END"],
        "temperature": 0.5,
        "top_k": 5,
        "user": "user-1",
        "stream": False,
    }
    # Neither the client's credential nor Anthropic's headers go upstream.
    assert not {"authorization", "x-api-key", "anthropic-version"} & set(req.headers)


def test_max_tokens_and_served_name(stack):
    """A backend-side length stop is max_tokens; a served-name rewrite stays invisible."""
    m = mark()
    msg = stack.client().messages.create(model="public-name", max_tokens=2, messages=[{"role": "user", "content": m}])
    assert msg.model == "public-name" and msg.stop_reason == "max_tokens"
    assert received(stack.a, m)[0].json["model"] == "internal/served"


def test_stream_helper(stack):
    """`client.messages.stream(...)`: text deltas as they come, then the final message with usage."""
    m = mark()
    with stack.client().messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": m}]) as s:
        pieces = list(s.text_stream)
        final = s.get_final_message()
    assert len(pieces) > 1 and "".join(pieces) == TEXT_A
    assert final.content[0].text == TEXT_A and final.stop_reason == "end_turn" and final.model == "m"
    assert final.usage.input_tokens > 0 and final.usage.output_tokens == 5
    (req,) = received(stack.a, m)
    assert req.json["stream"] is True and req.json["stream_options"] == {"include_usage": True}


def test_create_stream_true_events_and_observation(stack):
    """`create(stream=True)` yields the Anthropic event sequence; the pipeline observes a
    normal, completed stream (not a disconnect) with its usage."""
    request_id = uuid.uuid4().hex
    stream = stack.client().messages.create(
        model="m",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        extra_headers={"x-request-id": request_id},
    )
    evs = list(stream)
    types = [e.type for e in evs]
    assert types[0] == "message_start" and types[-2:] == ["message_delta", "message_stop"]
    assert types.count("content_block_start") == types.count("content_block_stop") == 1
    assert "".join(e.delta.text for e in evs if e.type == "content_block_delta") == TEXT_A
    obs = observation(stack.router, request_id)
    assert obs["endpoint"] == "chat/completions" and obs["status"] == 200 and obs["path"] == "passthrough"
    assert not obs.get("client_disconnected") and not obs.get("stream_error")
    assert obs["usage"]["completion_tokens"] == 5


def test_tool_use_round_trip(stack):
    client = stack.client()
    m = mark()
    question = {"role": "user", "content": f"What's the weather in Paris? {m}"}
    first = client.messages.create(model="m", max_tokens=256, tools=TOOLS, messages=[question])
    assert first.stop_reason == "tool_use"
    (call,) = [b for b in first.content if b.type == "tool_use"]
    assert call.name == "get_weather" and isinstance(call.input, dict) and "city" in call.input
    upstream = received(stack.a, m)[0].json
    assert upstream["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather in a city",
                "parameters": TOOLS[0]["input_schema"],
            },
        }
    ]

    answer = client.messages.create(
        model="m",
        max_tokens=256,
        tools=TOOLS,
        messages=[
            question,
            {"role": "assistant", "content": first.content},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "18C, sunny"}]},
        ],
    )
    assert answer.stop_reason == "end_turn" and answer.content[0].text == TEXT_A
    history = received(stack.a, m)[-1].json["messages"]
    assert history[1]["tool_calls"] == [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": "get_weather", "arguments": orjson.dumps(call.input).decode()},
        }
    ]
    assert history[2] == {"role": "tool", "tool_call_id": call.id, "content": "18C, sunny"}


def test_tool_use_streams_and_tool_choice(stack):
    """A streamed tool call arrives as input_json_delta and builds the same input;
    tool_choice {"type": "tool"} becomes a named function choice upstream."""
    client = stack.client()
    m = mark()
    kwargs = {
        "model": "m",
        "max_tokens": 256,
        "tools": TOOLS,
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "messages": [{"role": "user", "content": f"Use the tool. {m}"}],
    }
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as s:
        final = s.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [(b.type, b.name, b.input) for b in whole.content]
    raw = list(client.messages.create(**kwargs, stream=True))
    assert {e.delta.type for e in raw if e.type == "content_block_delta"} == {"input_json_delta"}
    assert received(stack.a, m)[0].json["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


def test_image_blocks_reach_the_backend_as_image_parts(stack):
    m = mark()
    content = [
        {"type": "text", "text": m},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
    ]
    stack.client().messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": content}])
    parts = received(stack.a, m)[0].json["messages"][0]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url", "image_url"]
    assert parts[1]["image_url"]["url"] == "data:image/png;base64,iVBORw0KGgo="


# -- Ollama (normalized path) -----------------------------------------------------


def test_ollama_backend_behind_the_anthropic_surface(stack):
    """Anthropic → OpenAI → Ollama /api/chat and back: non-stream, stream and tool use."""
    client = stack.client()
    m = mark()
    msg = client.messages.create(
        model="olla", max_tokens=64, system="Be brief.", messages=[{"role": "user", "content": m}]
    )
    assert msg.model == "olla" and msg.content[0].text == TEXT_O and msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0
    (req,) = received(stack.o, m)
    assert req.path == "/api/chat"
    assert req.json["model"] == "llama3.2" and req.json["options"]["num_predict"] == 64
    assert req.json["messages"][0] == {"role": "system", "content": "Be brief."}

    with client.messages.stream(model="olla", max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        assert "".join(s.text_stream) == TEXT_O
        final = s.get_final_message()
    assert final.stop_reason == "end_turn" and final.usage.output_tokens > 0

    ask = [{"role": "user", "content": "What's the weather in Paris?"}]
    tool = client.messages.create(model="olla", max_tokens=64, tools=TOOLS, messages=ask)
    assert tool.stop_reason == "tool_use" and tool.content[-1].type == "tool_use"
    with client.messages.stream(model="olla", max_tokens=64, tools=TOOLS, messages=ask) as s:
        streamed = s.get_final_message()
    assert streamed.stop_reason == "tool_use"
    assert (streamed.content[-1].name, streamed.content[-1].input) == (tool.content[-1].name, tool.content[-1].input)


def test_ollama_unsupported_choice_is_a_bad_request(stack):
    """tool_choice any → required, which the Ollama path cannot honour: a 400, nothing sent."""
    with pytest.raises(anthropic.BadRequestError) as info:
        stack.client().messages.create(
            model="olla",
            max_tokens=8,
            tools=TOOLS,
            tool_choice={"type": "any"},
            messages=[{"role": "user", "content": "x"}],
        )
    assert info.value.body["error"]["type"] == "invalid_request_error"


# -- errors -----------------------------------------------------------------------


def test_unknown_model_is_not_found(stack):
    with pytest.raises(anthropic.NotFoundError) as info:
        stack.client().messages.create(model="nope", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == 404
    assert info.value.body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "The model 'nope' does not exist."},
    }


@pytest.mark.parametrize(
    "kwargs",
    [
        {"messages": []},
        {
            "messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}],
        },
        {"messages": [{"role": "user", "content": [{"type": "mystery"}]}]},
    ],
)
def test_malformed_body_is_a_bad_request_via_the_sdk(stack, kwargs):
    with pytest.raises(anthropic.BadRequestError) as info:
        stack.client().messages.create(model="m", max_tokens=8, **kwargs)
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "body, words",
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "JSON object"),
        ({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"model": "m", "max_tokens": 8, "messages": [{"role": "bot", "content": "x"}]}, "role"),
        ({"model": "m", "max_tokens": 8, "messages": [], "metadata": {"iop_response_mode": "x"}}, "execution path"),
    ],
)
def test_malformed_bodies_are_anthropic_shaped_400s(stack, body, words):
    r = stack.post(body)
    assert r.status_code == 400
    err = r.json()
    assert set(err) == {"type", "error"} and err["type"] == "error"
    assert err["error"]["type"] == "invalid_request_error" and words in err["error"]["message"]


def test_other_methods_and_paths_are_anthropic_shaped(stack):
    r = httpx.get(stack.router.url + "/v1/messages", timeout=10)
    assert r.status_code == 405 and r.json()["error"]["type"] == "invalid_request_error"
    r = httpx.post(stack.router.url + "/v1/messages/batches", json={}, timeout=10)
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found_error"
    r = httpx.post(stack.router.url + "/v1/messages/count_tokens", json={}, timeout=10)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(
    "status, exc, kind",
    [
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (503, anthropic.InternalServerError, "overloaded_error"),
        (500, anthropic.InternalServerError, "api_error"),
    ],
)
def test_backend_errors_keep_their_status(stack, status, exc, kind):
    stack.f.behavior.status = status
    stack.f.behavior.error_message = "backend says no"
    with pytest.raises(exc) as info:
        stack.client().messages.create(model="faulty", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert info.value.status_code == status
    assert info.value.body == {"type": "error", "error": {"type": kind, "message": "backend says no"}}


def test_stream_failing_mid_way_ends_with_an_error_event(stack):
    stack.f.behavior.die_after_chunks = 3
    stream = stack.client().messages.create(
        model="faulty", max_tokens=64, messages=[{"role": "user", "content": "x"}], stream=True
    )
    seen = []
    with pytest.raises(anthropic.APIStatusError) as info:
        for event in stream:
            seen.append(event.type)
    assert seen[0] == "message_start" and "message_stop" not in seen
    assert info.value.body["type"] == "error" and info.value.body["error"]["type"] == "api_error"


def test_stream_is_not_buffered_and_disconnect_cancels_upstream(stack):
    """The first text delta arrives while the backend is still generating; closing the
    client connection cancels the upstream request at once (CORE-10)."""
    stack.f.behavior.chunk_delay_s = 0.2
    stack.f.behavior.chunks = 100  # ~20 s if nothing cancelled it
    m = mark()
    body = {"model": "faulty", "max_tokens": 1000, "stream": True, "messages": [{"role": "user", "content": m}]}
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST", stack.router.url + "/v1/messages", json=body, headers={"anthropic-version": "2023-06-01"}
        ) as r,
    ):
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        raw = b""
        # Held: a generator left by `break` and dropped is closed at once, and
        # with it the response, which would cancel the upstream before the
        # check below (a race a loaded machine lost).
        chunks = r.iter_bytes()
        for data in chunks:
            raw += data
            if b"content_block_delta" in raw:
                break
        (upstream,) = received(stack.f, m)
        assert not upstream.finished.is_set()  # the backend is still generating
    assert upstream.finished.wait(10), "the upstream request was not cancelled"
    assert upstream.outcome == "cancelled"
    evs = events(raw[: raw.rfind(b"\n\n") + 2])
    assert evs[0][0] == "message_start"


def test_replayed_events_assemble_into_the_message(stack):
    """Raw bytes on the wire: every frame named, in order, assembling to the final text."""
    r = stack.post({"model": "m", "max_tokens": 64, "stream": True, "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 200
    message = assemble(events(r.content))
    assert message["content"] == [{"type": "text", "text": TEXT_A}] and message["stop_reason"] == "end_turn"


# -- keys ------------------------------------------------------------------------


def test_blocking_mode_key_gate(openai_backends, router_factory, monkeypatch):
    """No key → 401 authentication_error; a valid key works as Bearer and as x-api-key."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    (a,) = openai_backends("a")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\nhealth: {{enabled: false}}\napi_keys: {{mode: blocking}}\n"
    )
    ask = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
    r = httpx.post(router.url + "/v1/messages", json=ask, timeout=30)
    assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=router.url, api_key="sk-wrong", max_retries=0).messages.create(**ask)

    key = create_key(router, name="anthropic-client")
    by_bearer = anthropic.Anthropic(base_url=router.url, api_key=key, max_retries=0, timeout=30)
    assert by_bearer.messages.create(**ask).content[0].text.startswith("Hello from a")
    by_header = anthropic.Anthropic(
        base_url=router.url, api_key=None, default_headers={"x-api-key": key}, max_retries=0, timeout=30
    )
    assert by_header.messages.create(**ask).content[0].text.startswith("Hello from a")
    r = httpx.post(router.url + "/v1/messages", json=ask, headers={"x-api-key": key}, timeout=30)
    assert r.status_code == 200 and r.json()["type"] == "message"
    assert key not in router.logs()


# -- /v1/messages/count_tokens --------------------------------------------------


@pytest.mark.parametrize("model", ["m", "olla"])
def test_count_tokens_on_a_kind_that_cannot_count_is_the_marked_estimate(stack, model):
    """Neither an OpenAI-compatible nor an Ollama backend counts: the router's
    estimate answers, says so in a header, and nothing is sent upstream."""
    m = mark()
    raw = stack.client().messages.with_raw_response.count_tokens(
        model=model,
        system="Be brief.",
        messages=[{"role": "user", "content": f"{m} " + "word " * 40}],
        tools=TOOLS,
    )
    count = raw.parse()
    assert isinstance(count, anthropic.types.MessageTokensCount)
    assert raw.headers["x-token-count"] == "estimate"
    # 4 chars a token of the text (system, message, tool JSON) + 4 a message + 3.
    assert 60 < count.input_tokens < 200
    more = stack.client().messages.count_tokens(
        model=model, messages=[{"role": "user", "content": f"{m} " + "word " * 400}]
    )
    assert more.input_tokens > count.input_tokens + 300
    assert not received(stack.a, m) and not received(stack.o, m)


def test_count_tokens_refusals_are_anthropic_shaped(stack):
    client = stack.client()
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.body["type"] == "error" and missing.value.body["error"]["type"] == "not_found_error"
    response = httpx.post(stack.router.url + "/v1/messages/count_tokens", content=b"{", timeout=30,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request_error"
    response = httpx.get(stack.router.url + "/v1/messages/count_tokens", timeout=30)
    assert response.status_code == 405 and response.json()["type"] == "error"

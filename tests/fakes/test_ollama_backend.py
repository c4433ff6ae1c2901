"""The fake Ollama server, checked over real HTTP with the official `ollama` client."""

from __future__ import annotations

import re
import threading
import time

import httpx
import ollama
import orjson
import pytest
from pydantic import BaseModel

from fakes.ollama_backend import OLLAMA_VERSION, server_thread
from fakes.server import ServerThread

TIMEOUT = 30.0
HI = [{"role": "user", "content": "Say hello"}]
TEXT = "Hello from demo-ollama. This is a demo reply."
RFC3339_NANO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$")
METRICS = (
    "total_duration",
    "load_duration",
    "prompt_eval_count",
    "prompt_eval_duration",
    "eval_count",
    "eval_duration",
)


def get_current_weather(city: str, unit: str) -> str:
    """Get the current weather for a city.

    Args:
      city: The city, e.g. Toronto
      unit: celsius or fahrenheit
    """
    return "sunny"


class Weather(BaseModel):
    city: str
    temperature: int
    sunny: bool


def wait_until(pred, timeout: float = TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


@pytest.fixture
def srv():
    with server_thread("demo-ollama", ["llama3.2", "qwen3:8b"]) as s:
        yield s


@pytest.fixture
def client(srv: ServerThread):
    c = ollama.Client(host=srv.url, timeout=TIMEOUT)
    yield c
    c.close()


# -- chat ----------------------------------------------------------------------------------


def test_chat_non_stream(client: ollama.Client):
    r = client.chat(model="llama3.2", messages=HI, stream=False)
    assert r.model == "llama3.2"
    assert r.done is True and r.done_reason == "stop"
    assert r.message.role == "assistant" and r.message.content == TEXT
    assert RFC3339_NANO.match(r.created_at)
    assert r.eval_count == 5 and r.prompt_eval_count == 2
    assert all(isinstance(getattr(r, k), int) for k in METRICS)


def test_chat_stream(client: ollama.Client, srv: ServerThread):
    srv.behavior.chunks = 9
    parts = list(client.chat(model="llama3.2:latest", messages=HI, stream=True))
    assert len(parts) == 10
    assert all(not p.done and p.message.role == "assistant" for p in parts[:-1])
    assert "".join(p.message.content for p in parts).startswith("Hello from demo-ollama.")
    last = parts[-1]
    assert last.done and last.done_reason == "stop" and last.message.content == ""
    assert last.eval_count == 9
    assert all(getattr(last, k) is not None for k in METRICS)


def test_chat_stream_is_default_and_ndjson(srv: ServerThread):
    body = {
        "model": "llama3.2",
        "messages": HI,
    }  # no "stream": Ollama streams by default
    with httpx.stream("POST", srv.url + "/api/chat", json=body, timeout=TIMEOUT) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        assert r.headers["x-backend-name"] == "demo-ollama"
        lines = [orjson.loads(line) for line in r.iter_lines() if line]
    assert [x["done"] for x in lines] == [False] * 5 + [True]
    assert set(lines[0]) == {"model", "created_at", "message", "done"}
    assert lines[-1]["done_reason"] == "stop"
    assert set(METRICS) <= set(lines[-1])


def test_stream_lines_are_flushed_one_by_one(srv: ServerThread):
    srv.behavior.chunk_delay_s = 30.0
    t0 = time.monotonic()
    with httpx.stream(
        "POST",
        srv.url + "/api/chat",
        json={"model": "llama3.2", "messages": HI},
        timeout=TIMEOUT,
    ) as r:
        first = orjson.loads(next(r.iter_lines()))
    assert time.monotonic() - t0 < 25.0
    assert first["done"] is False and first["message"]["content"]


def test_num_predict_gives_length(client: ollama.Client):
    r = client.chat(model="llama3.2", messages=HI, options={"num_predict": 2}, stream=False)
    assert r.done_reason == "length" and r.eval_count == 2
    r = client.chat(model="llama3.2", messages=HI, options={"num_predict": 128}, stream=False)
    assert r.done_reason == "stop"


def test_tool_calls_parsed_by_client(client: ollama.Client):
    r = client.chat(
        model="qwen3:8b",
        messages=[{"role": "user", "content": "What is the weather in Toronto?"}],
        tools=[get_current_weather],
        stream=False,
    )
    assert r.message.content == ""
    (call,) = r.message.tool_calls
    assert isinstance(call, ollama.Message.ToolCall)
    assert call.function.name == "get_current_weather"
    assert dict(call.function.arguments) == {"city": "Paris", "unit": "celsius"}


def test_tool_calls_stream_and_wire_shape(client: ollama.Client, srv: ServerThread):
    parts = list(
        client.chat(
            model="qwen3:8b",
            messages=[{"role": "user", "content": "weather please"}],
            tools=[get_current_weather],
            stream=True,
        )
    )
    calls = [c for p in parts for c in (p.message.tool_calls or [])]
    assert [c.function.name for c in calls] == ["get_current_weather"]
    assert parts[-1].done
    # on the wire: arguments is an object and there is no call id
    body = {
        "model": "qwen3:8b",
        "messages": [{"role": "user", "content": "weather please"}],
        "tools": [
            {
                "type": "function",
                "function": {"name": "w", "parameters": {"type": "object"}},
            }
        ],
        "stream": False,
    }
    msg = httpx.post(srv.url + "/api/chat", json=body, timeout=TIMEOUT).json()["message"]
    assert msg["tool_calls"] == [{"function": {"name": "w", "arguments": {}}}]


def test_format_json_and_schema(client: ollama.Client):
    r = client.chat(model="llama3.2", messages=HI, format="json", stream=False)
    assert isinstance(orjson.loads(r.message.content), dict)
    parts = list(
        client.chat(
            model="llama3.2",
            messages=HI,
            format=Weather.model_json_schema(),
            stream=True,
        )
    )
    w = Weather.model_validate_json("".join(p.message.content for p in parts))
    assert w.sunny is True


def test_images_and_think_accepted(client: ollama.Client, srv: ServerThread):
    png = b"\x89PNG\r\n\x1a\n" + b"\0" * 16
    r = client.chat(
        model="llama3.2",
        messages=[{"role": "user", "content": "What is this?", "images": [png]}],
        think=True,
        stream=False,
    )
    assert r.message.content == TEXT and r.message.thinking
    assert isinstance(srv.requests[-1].json["messages"][0]["images"][0], str)  # base64 on the wire


def test_empty_messages_loads_model(srv: ServerThread):
    r = httpx.post(
        srv.url + "/api/chat",
        json={"model": "llama3.2", "messages": []},
        timeout=TIMEOUT,
    ).json()
    assert r["done"] is True and r["done_reason"] == "load"


# -- generate / embed ---------------------------------------------------------------------------


def test_generate(client: ollama.Client):
    r = client.generate(model="llama3.2", prompt="Why is the sky blue?", stream=False)
    assert r.response == TEXT and r.done and r.done_reason == "stop"
    assert r.context and all(isinstance(x, int) for x in r.context)
    parts = list(client.generate(model="llama3.2", prompt="hi", stream=True))
    assert "".join(p.response for p in parts) == TEXT
    assert parts[-1].done and parts[-1].eval_count == 5
    assert not any(p.done for p in parts[:-1])


def test_embed(client: ollama.Client):
    one = client.embed(model="qwen3:8b", input="alpha")
    assert one.model == "qwen3:8b"
    assert len(one.embeddings) == 1 and len(one.embeddings[0]) == 8
    many = client.embed(model="qwen3:8b", input=["alpha", "beta"])
    assert many.embeddings[0] == one.embeddings[0] != many.embeddings[1]
    assert many.prompt_eval_count == 2
    assert many.total_duration and many.load_duration


# -- catalogue endpoints ---------------------------------------------------------------------------


def test_list_show_ps(client: ollama.Client):
    tags = client.list()
    assert [m.model for m in tags.models] == ["llama3.2:latest", "qwen3:8b"]
    m = tags.models[0]
    assert m.size > 0 and len(m.digest) == 64 and m.modified_at is not None
    assert m.details.family == "llama" and m.details.format == "gguf"
    shown = client.show("qwen3:8b")
    assert shown.details.family == "qwen3"
    assert "tools" in shown.capabilities and shown.modelinfo["general.architecture"] == "qwen3"
    ps = client.ps()
    assert [p.name for p in ps.models] == ["llama3.2:latest", "qwen3:8b"]
    assert ps.models[0].expires_at is not None and ps.models[0].size_vram > 0


def test_tags_wire_shape_version_and_root(srv: ServerThread):
    tags = httpx.get(srv.url + "/api/tags", timeout=TIMEOUT).json()
    entry = tags["models"][0]
    assert set(entry) == {"name", "model", "modified_at", "size", "digest", "details"}
    assert set(entry["details"]) == {
        "parent_model",
        "format",
        "family",
        "families",
        "parameter_size",
        "quantization_level",
    }
    assert httpx.get(srv.url + "/api/version", timeout=TIMEOUT).json() == {"version": OLLAMA_VERSION}
    root = httpx.get(srv.url + "/", timeout=TIMEOUT)
    assert root.status_code == 200 and root.text == "Ollama is running"
    assert root.headers["x-backend-name"] == "demo-ollama"


# -- errors and faults --------------------------------------------------------------------------------


def test_unknown_model_is_404(client: ollama.Client, srv: ServerThread):
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="nope", messages=HI, stream=False)
    assert info.value.status_code == 404
    assert info.value.error == "model 'nope' not found"
    with pytest.raises(ollama.ResponseError) as info:  # streaming call: error before the stream
        list(client.chat(model="nope", messages=HI, stream=True))
    assert info.value.status_code == 404
    for call in (
        lambda: client.generate(model="nope", prompt="x"),
        lambda: client.embed(model="nope", input="x"),
        lambda: client.show("nope"),
    ):
        with pytest.raises(ollama.ResponseError) as info:
            call()
        assert info.value.status_code == 404


def test_forced_error_status(client: ollama.Client, srv: ServerThread):
    srv.behavior.status = 503
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="llama3.2", messages=HI, stream=False)
    assert info.value.status_code == 503 and info.value.error
    r = httpx.post(
        srv.url + "/api/generate",
        json={"model": "llama3.2", "prompt": "x"},
        timeout=TIMEOUT,
    )
    assert r.status_code == 503 and set(r.json()) == {"error"}


def test_invalid_json_is_400(srv: ServerThread):
    r = httpx.post(srv.url + "/api/chat", content=b"{nope", timeout=TIMEOUT)
    assert r.status_code == 400 and "error" in r.json()
    assert srv.requests[-1].body == b"{nope"


def test_die_mid_stream(client: ollama.Client, srv: ServerThread):
    srv.behavior.die_after_chunks = 2
    got = []
    with pytest.raises(httpx.HTTPError):
        for part in client.chat(model="llama3.2", messages=HI, stream=True):
            got.append(part)
    assert len(got) == 2 and not any(p.done for p in got)


def test_kill_and_restart_same_port(client: ollama.Client, srv: ServerThread):
    port = srv.port
    srv.behavior.hang = True
    errors: list[BaseException] = []

    def call() -> None:
        try:
            client.chat(model="llama3.2", messages=HI, stream=False)
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=call)
    t.start()
    wait_until(lambda: len(srv.requests) == 1)
    srv.stop()
    t.join(TIMEOUT)
    assert not t.is_alive() and len(errors) == 1
    with pytest.raises((ConnectionError, httpx.HTTPError)):
        client.list()
    srv.behavior.reset()
    srv.start()
    assert srv.port == port
    assert client.chat(model="llama3.2", messages=HI, stream=False).message.content == TEXT


async def test_async_client(srv: ServerThread):
    c = ollama.AsyncClient(host=srv.url, timeout=TIMEOUT)
    text = ""
    async for part in await c.chat(model="llama3.2", messages=HI, stream=True):
        text += part.message.content
    await c.close()
    assert text == TEXT


def test_text_answer_after_tool_result(client: ollama.Client):
    first = client.chat(
        model="qwen3:8b",
        messages=[{"role": "user", "content": "weather in Toronto?"}],
        tools=[get_current_weather],
        stream=False,
    ).message
    r = client.chat(
        model="qwen3:8b",
        messages=[
            {"role": "user", "content": "weather in Toronto?"},
            first,
            {"role": "tool", "content": "sunny", "tool_name": "get_current_weather"},
        ],
        tools=[get_current_weather],
        stream=False,
    )
    assert not r.message.tool_calls and r.message.content == TEXT

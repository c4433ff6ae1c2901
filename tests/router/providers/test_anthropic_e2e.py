"""A `kind: anthropic` backend behind a real router process, driven by the
official `openai` SDK: chat, streams with usage, a tool call round trip, and
a provider error mapped with its status kept. The upstream is the fake
Anthropic API, which requires `x-api-key` and refuses what the real API refuses."""

from __future__ import annotations

import httpx
import openai
import orjson
import pytest
from openai.types.chat import ChatCompletion

from fakes.anthropic_backend import server_thread
from tests.router.providers.openai_shapes import no_extras
from tests.support.routerproc import RouterProc, wait_until

KEY = "sk-ant-e2e-0123456789"
TEXT = "Hello from fake-claude. This is a demo reply."
CONFIG = """
backends:
  - name: claude
    url: {url}
    kind: anthropic
    models: [sonnet]
    served_model: claude-x
    api_key: {key}
health:
  enabled: false
retry:
  max_attempts: 1
"""
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture(scope="module")
def fake():
    with server_thread("fake-claude", ["claude-x"], api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module")
def router(fake):
    proc = RouterProc(CONFIG.format(url=fake.url, key=KEY), env={"ROUTER_LOG_LEVEL": "DEBUG"}).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def client(router):
    return openai.OpenAI(base_url=router.url + "/v1", api_key="sk-client", max_retries=0, timeout=30)


def test_chat(client, fake) -> None:
    out = client.chat.completions.create(
        model="sonnet",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=64,
        temperature=0.3,
    )
    assert isinstance(out, ChatCompletion)
    no_extras(out)
    assert out.id.startswith("chatcmpl-") and out.model == "sonnet"
    assert out.choices[0].message.content == TEXT and out.choices[0].finish_reason == "stop"
    assert out.usage.completion_tokens == 5
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == KEY
    assert sent.headers["anthropic-version"] == "2023-06-01" and "authorization" not in sent.headers
    assert sent.json == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "hi"}],
        "system": "be brief",
        "max_tokens": 64,
        "temperature": 0.3,
        "stream": False,
    }


def test_stream_with_usage(client) -> None:
    chunks = list(
        client.chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for chunk in chunks:
        no_extras(chunk)
    assert len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == TEXT
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


def test_tool_call_round_trip(client, fake) -> None:
    messages: list = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model="sonnet", messages=messages, tools=[WEATHER])
    no_extras(first)
    (call,) = first.choices[0].message.tool_calls
    assert first.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 °C"},
    ]
    stream = client.chat.completions.create(model="sonnet", messages=messages, tools=[WEATHER], stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == TEXT
    sent = fake.requests[-1].json["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call.id, "name": "get_weather", "input": {"city": "Paris"}}],
    }
    assert sent[2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call.id, "content": "sunny, 21 °C"}],
    }


def test_streamed_tool_call(client) -> None:
    chunks = list(
        client.chat.completions.create(
            model="sonnet",
            messages=[{"role": "user", "content": "weather in Rome?"}],
            tools=[WEATHER],
            stream=True,
        )
    )
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert calls[0].id.startswith("toolu_") and calls[0].function.name == "get_weather"
    assert orjson.loads("".join(tc.function.arguments or "" for tc in calls)) == {"city": "Paris"}


def test_provider_errors_keep_their_status(client, fake) -> None:
    fake.behavior.status = 429
    try:
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="sonnet", messages=[{"role": "user", "content": "hi"}])
    finally:
        fake.behavior.reset()
    assert caught.value.status_code == 429 and caught.value.body["code"] == "rate_limit_exceeded"
    fake.behavior.status = 529
    try:
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(model="sonnet", messages=[{"role": "user", "content": "hi"}])
    finally:
        fake.behavior.reset()
    assert caught.value.status_code == 503 and "Anthropic" in caught.value.body["message"]


def test_unsupported_field_is_refused_before_dispatch(client, fake) -> None:
    before = len(fake.requests)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="sonnet", messages=[{"role": "user", "content": "hi"}], n=2)
    assert caught.value.body["code"] == "unsupported_parameter" and len(fake.requests) == before


def test_the_upstream_key_never_reaches_the_logs(client, router) -> None:
    """The backend's api_key (sent upstream as x-api-key) is never logged."""
    client.chat.completions.create(model="sonnet", messages=[{"role": "user", "content": "hi"}])

    def request_logged() -> str | None:
        text = router.logs()
        return text if '"router.requests"' in text else None

    logs = wait_until(request_logged, 30, what="a request log line")
    assert KEY not in logs


THOUGHT = "The user wants a reply from fake-claude."


def test_thinking_comes_back_as_reasoning_content(client, fake) -> None:
    """A client that asks for reasoning gets Anthropic's thinking text as
    `reasoning_content` (vLLM's field): whole, and streamed as deltas ahead of
    the answer; the answer itself is the one it always got."""
    out = client.chat.completions.create(
        model="sonnet", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low"
    )
    no_extras(out)
    assert fake.requests[-1].json["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    message = out.choices[0].message
    assert message.content == TEXT and message.model_extra == {"reasoning_content": THOUGHT}
    chunks = list(
        client.chat.completions.create(
            model="sonnet", messages=[{"role": "user", "content": "hi"}], reasoning_effort="low", stream=True
        )
    )
    for chunk in chunks:
        no_extras(chunk)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    reasoning = [d.model_extra["reasoning_content"] for d in deltas if "reasoning_content" in (d.model_extra or {})]
    assert len(reasoning) == 3 and "".join(reasoning) == THOUGHT  # the fake's three thinking_deltas
    assert deltas[0].role == "assistant" and "reasoning_content" in deltas[0].model_extra
    first_text = next(i for i, d in enumerate(deltas) if d.content)
    assert all("reasoning_content" not in (d.model_extra or {}) for d in deltas[first_text:])
    assert "".join(d.content or "" for d in deltas) == TEXT


def test_no_reasoning_asked_no_reasoning_sent(client, router) -> None:
    """Without reasoning_effort nothing is added: no thinking is asked of
    Anthropic and no `reasoning_content` reaches the client, whole or streamed."""
    body = {"model": "sonnet", "messages": [{"role": "user", "content": "hi"}]}
    whole = httpx.post(router.url + "/v1/chat/completions", json=body, timeout=30)
    streamed = httpx.post(router.url + "/v1/chat/completions", json={**body, "stream": True}, timeout=30)
    assert whole.status_code == streamed.status_code == 200
    assert TEXT in whole.text and b"reasoning_content" not in whole.content + streamed.content

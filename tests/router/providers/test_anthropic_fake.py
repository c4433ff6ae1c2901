"""The fake Anthropic API is honest: the official `anthropic` SDK, pointed at
it, gets answers that validate as its own types, and it refuses what the real
API refuses, with the documented error object."""

from __future__ import annotations

import anthropic
import httpx
import pytest
from anthropic.types import ErrorResponse, Message, MessageTokensCount, ModelInfo

from fakes.anthropic_backend import server_thread

KEY = "sk-ant-test-0123"
VERSION = {"anthropic-version": "2023-06-01", "x-api-key": KEY}
WEATHER = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


@pytest.fixture(scope="module")
def fake():
    with server_thread("fake-claude", ["claude-x"], api_key=KEY) as server:
        yield server


@pytest.fixture(scope="module")
def sdk(fake):
    # The installed SDK sends `Authorization: Bearer` for api_key=; the API
    # documents `x-api-key`, which the router sends and the fake requires.
    with anthropic.Anthropic(base_url=fake.url, default_headers={"X-Api-Key": KEY}, max_retries=0) as client:
        yield client


def test_message_is_an_sdk_message(sdk) -> None:
    out = sdk.messages.create(model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "hi"}])
    assert isinstance(out, Message)
    assert out.content[0].type == "text" and "fake-claude" in out.content[0].text
    assert out.stop_reason == "end_turn" and out.usage.output_tokens > 0


def test_stream_events_are_sdk_events_and_accumulate(sdk) -> None:
    with sdk.messages.stream(
        model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "weather in Seoul?"}], tools=[WEATHER]
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_start" in kinds and "message_delta" in kinds
    (block,) = final.content
    assert block.type == "tool_use" and block.name == "get_weather" and block.input == {"city": "Paris"}
    assert final.stop_reason == "tool_use"


def test_raw_stream_with_ping_thinking_and_text(fake, sdk) -> None:
    events = list(
        sdk.messages.create(
            model="claude-x",
            max_tokens=4096,
            stream=True,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "hi"}],
        )
    )
    kinds = [e.type for e in events]
    assert kinds[:2] == ["message_start", "content_block_start"] and kinds.count("content_block_start") == 2
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    # The thinking streams as several deltas, its signature last, as Anthropic sends it.
    assert deltas[:4] == ["thinking_delta"] * 3 + ["signature_delta"] and "text_delta" in deltas
    thought = "".join(
        e.delta.thinking for e in events if e.type == "content_block_delta" and e.delta.type == "thinking_delta"
    )
    assert thought == "The user wants a reply from fake-claude."
    # The SDK skips pings; on the wire the third event is one.
    body = {"model": "claude-x", "max_tokens": 9, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    raw = httpx.post(fake.url + "/v1/messages", json=body, headers=VERSION).content
    names = [line[7:] for line in raw.split(b"\n") if line.startswith(b"event: ")]
    assert names[:3] == [b"message_start", b"content_block_start", b"ping"] and names[-1] == b"message_stop"


def test_count_tokens_and_models(sdk) -> None:
    count = sdk.messages.count_tokens(model="claude-x", messages=[{"role": "user", "content": "one two three"}])
    assert isinstance(count, MessageTokensCount) and count.input_tokens >= 3
    models = list(sdk.models.list())
    assert [m.id for m in models] == ["claude-x"] and all(isinstance(m, ModelInfo) for m in models)


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]}, 400, "max_tokens: Field required"),
        ({"model": "claude-x", "max_tokens": 5, "messages": [{"role": "system", "content": "s"}]}, 400, "system"),
        (
            {"model": "claude-x", "max_tokens": 5, "n": 2, "messages": [{"role": "user", "content": "hi"}]},
            400,
            "n: Extra inputs",
        ),
        ({"model": "nope", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}, 404, "model: nope"),
        (
            {"model": "claude-x", "max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "h"}]},
            400,
            "temperature",
        ),
        (
            {
                "model": "claude-x",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
                    {"role": "user", "content": "no result"},
                ],
            },
            400,
            "without `tool_result`",
        ),
        (
            {
                "model": "claude-x",
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}
                ],
            },
            400,
            "unexpected `tool_use_id`",
        ),
        ({"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": ""}]}, 400, "non-empty"),
    ],
)
def test_refuses_what_the_api_refuses(fake, body, status, fragment) -> None:
    r = httpx.post(fake.url + "/v1/messages", json=body, headers=VERSION)
    assert r.status_code == status
    error = ErrorResponse.model_validate(r.json())
    assert fragment in error.error.message


def test_auth_headers_are_checked(fake) -> None:
    body = {"model": "claude-x", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    bearer = httpx.post(
        fake.url + "/v1/messages",
        json=body,
        headers={"authorization": f"Bearer {KEY}", "anthropic-version": "2023-06-01"},
    )
    assert bearer.status_code == 401 and bearer.json()["error"]["type"] == "authentication_error"
    no_version = httpx.post(fake.url + "/v1/messages", json=body, headers={"x-api-key": KEY})
    assert no_version.status_code == 400 and "anthropic-version" in no_version.json()["error"]["message"]
    wrong = httpx.get(fake.url + "/v1/models", headers={**VERSION, "x-api-key": "other"})
    assert wrong.status_code == 401


def test_injected_overload_is_529(fake, sdk) -> None:
    fake.behavior.status = 529
    try:
        with pytest.raises(anthropic.InternalServerError) as caught:
            sdk.messages.create(model="claude-x", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
    finally:
        fake.behavior.reset()
    assert caught.value.status_code == 529
    assert ErrorResponse.model_validate(caught.value.body).error.type == "overloaded_error"

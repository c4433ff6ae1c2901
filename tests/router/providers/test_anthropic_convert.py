"""Chat Completions ↔ Anthropic Messages, pure: requests, answers, errors, stream events."""

from __future__ import annotations

import orjson
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from router.core.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from router.providers.anthropic import (
    CHAT_POLICY,
    ChatStream,
    SseDecoder,
    chat_completion,
    chat_request,
    count_request,
    error_from_anthropic,
    listed_models,
)
from tests.router.providers.openai_shapes import chat_sse, exact

PNG = "iVBORw0KGgo="


def convert(**body) -> dict:
    body.setdefault("model", "m")
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    return chat_request(body, "claude-x").request


def test_minimal_request_gets_the_documented_default_max_tokens() -> None:
    conv = chat_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "claude-x")
    assert conv.request == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4096,
        "stream": False,
    }
    assert any("max_tokens" in note for note in conv.notes)


def test_system_developer_and_merged_turns() -> None:
    out = convert(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [{"type": "text", "text": "no emojis"}]},
            {"role": "user", "content": "a"},
            {"role": "user", "content": [{"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
        ],
        max_completion_tokens=10,
        max_tokens=99,
        stop="END",
        temperature=0.5,
        top_p=0.9,
        top_k=40,
        user="u-1",
        stream=True,
    )
    assert out == {
        "model": "claude-x",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
        ],
        "system": [{"type": "text", "text": "be brief"}, {"type": "text", "text": "no emojis"}],
        "max_tokens": 10,
        "stop_sequences": ["END"],
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "metadata": {"user_id": "u-1"},
        "stream": True,
    }
    assert convert(messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])["system"] == "s"


def test_images_data_and_remote() -> None:
    out = convert(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg", "detail": "low"}},
                ],
            }
        ]
    )
    assert out["messages"][0]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    with pytest.raises(UnsupportedParameter):
        convert(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "data:image/tiff;base64,AAAA"}}],
                }
            ]
        )
    with pytest.raises(InvalidRequest):
        convert(
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]}
            ]
        )


def test_tool_history_becomes_tool_use_and_merged_tool_results() -> None:
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "d",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
    out = convert(
        messages=[
            {"role": "user", "content": "weather in Paris and Rome?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    },
                    {
                        "id": "toolu_2",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
            {"role": "user", "content": "thanks"},
        ],
        tools=[weather, {"type": "function", "function": {"name": "noop"}}],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    assert out["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "rain"}]},
                {"type": "text", "text": "thanks"},
            ],
        },
    ]
    assert out["tools"] == [
        {"name": "get_weather", "description": "d", "input_schema": weather["function"]["parameters"]},
        {"name": "noop", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert out["tool_choice"] == {"type": "any", "disable_parallel_tool_use": True}


@pytest.mark.parametrize(
    ("choice", "native"),
    [
        ("auto", {"type": "auto"}),
        ("none", {"type": "none"}),
        ({"type": "function", "function": {"name": "f"}}, {"type": "tool", "name": "f"}),
        (None, None),
    ],
)
def test_tool_choice(choice, native) -> None:
    out = convert(tools=[{"type": "function", "function": {"name": "f"}}], tool_choice=choice)
    assert out.get("tool_choice") == native


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("logprobs", True),
        ("audio", {"voice": "alloy"}),
        ("modalities", ["text", "audio"]),
        ("response_format", {"type": "json_object"}),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}),
        ("temperature", 1.5),
        ("functions", [{"name": "f"}]),
        ("tools", [{"type": "custom", "custom": {"name": "x"}}]),
        ("tool_choice", {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}),
    ],
)
def test_unsupported_fields_are_400(field, value) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], field: value}
    if field == "tool_choice":
        body["tools"] = [{"type": "function", "function": {"name": "f"}}]
    with pytest.raises(UnsupportedParameter) as caught:
        chat_request(body, "claude-x")
    assert caught.value.status == 400 and caught.value.param.startswith(field)


def test_invalid_tool_arguments_are_400() -> None:
    with pytest.raises(InvalidRequest) as caught:
        convert(
            messages=[
                {"role": "user", "content": "x"},
                {
                    "role": "assistant",
                    "tool_calls": [
                        {"id": "t", "type": "function", "function": {"name": "f", "arguments": "{not json"}}
                    ],
                },
            ]
        )
    assert caught.value.param == "messages[1].tool_calls[0].function.arguments"


def test_ignored_fields_are_recorded_not_sent() -> None:
    conv = chat_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "seed": 1,
            "frequency_penalty": 0.5,
            "store": True,
            "mystery": 1,
        },
        "claude-x",
    )
    assert conv.ignored_fields == ["seed", "frequency_penalty", "store", "mystery"]
    assert not {"seed", "frequency_penalty", "store", "mystery"} & conv.request.keys()
    assert set(CHAT_POLICY) >= {"seed", "frequency_penalty", "store"}


def test_reasoning_effort_becomes_thinking() -> None:
    out = convert(reasoning_effort="medium")
    assert out["thinking"] == {"type": "enabled", "budget_tokens": 4096} and out["max_tokens"] == 4096 + 4096
    assert "thinking" not in convert(reasoning_effort="none")
    with pytest.raises(UnsupportedParameter):
        convert(reasoning_effort="high", max_tokens=100)


def test_count_request_keeps_what_count_tokens_takes() -> None:
    own = {
        "model": "c",
        "max_tokens": 5,
        "stream": True,
        "system": "s",
        "temperature": 0.1,
        "messages": [{"role": "user", "content": "x"}],
    }
    assert count_request(own, {}, "claude-x").request == {
        "model": "claude-x",
        "messages": own["messages"],
        "system": "s",
    }
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 3}
    assert count_request(None, chat, "claude-x").request == {
        "model": "claude-x",
        "messages": [{"role": "user", "content": "x"}],
    }


# -- answers -------------------------------------------------------------------------


def message(content, stop_reason="end_turn", **usage) -> dict:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 5, **usage},
    }


def test_answer_thinking_becomes_reasoning_content_and_cache_usage() -> None:
    """Thinking blocks come back as `reasoning_content`; their signatures and
    redacted thinking do not."""
    out = chat_completion(
        message(
            [
                {"type": "thinking", "thinking": "hmm", "signature": "s"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "thinking", "thinking": ", right", "signature": "t"},
                {"type": "text", "text": "Hello "},
                {"type": "text", "text": "there"},
            ],
            cache_creation_input_tokens=3,
            cache_read_input_tokens=7,
        ),
        model="m",
        completion_id="chatcmpl-1",
        created=1,
    )
    obj = exact(ChatCompletion, out)
    assert obj.choices[0].message.content == "Hello there" and obj.choices[0].finish_reason == "stop"
    assert out["choices"][0]["message"]["reasoning_content"] == "hmm, right"
    assert b"opaque" not in orjson.dumps(out) and '"s"' not in orjson.dumps(out).decode()
    assert out["usage"] == {
        "prompt_tokens": 20,
        "completion_tokens": 5,
        "total_tokens": 25,
        "prompt_tokens_details": {"cached_tokens": 7},
    }


def test_answer_tool_use_keeps_its_id() -> None:
    out = chat_completion(
        message(
            [
                {"type": "text", "text": "let me check"},
                {"type": "tool_use", "id": "toolu_abc", "name": "f", "input": {"a": 1}},
            ],
            "tool_use",
        ),
        model="m",
        completion_id="chatcmpl-1",
        created=1,
    )
    obj = exact(ChatCompletion, out)
    (call,) = obj.choices[0].message.tool_calls
    assert (call.id, call.function.name, call.function.arguments) == ("toolu_abc", "f", '{"a":1}')
    assert obj.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
    ],
)
def test_finish_reasons(stop, finish) -> None:
    out = chat_completion(message([{"type": "text", "text": "x"}], stop), model="m", completion_id="c", created=1)
    assert out["choices"][0]["finish_reason"] == finish


@pytest.mark.parametrize(
    ("status", "kind", "mapped", "otype"),
    [
        (400, "invalid_request_error", 400, "invalid_request_error"),
        (401, "authentication_error", 401, "invalid_request_error"),
        (403, "permission_error", 403, "permission_error"),
        (404, "not_found_error", 404, "invalid_request_error"),
        (413, "request_too_large", 413, "invalid_request_error"),
        (429, "rate_limit_error", 429, "requests"),
        (500, "api_error", 500, "server_error"),
        (529, "overloaded_error", 503, "server_error"),
    ],
)
def test_errors_keep_their_status(status, kind, mapped, otype) -> None:
    body = orjson.dumps({"type": "error", "error": {"type": kind, "message": "boom"}, "request_id": "req_1"})
    got, payload = error_from_anthropic(status, body)
    assert got == mapped
    assert payload == {
        "error": {"message": "Anthropic: boom", "type": otype, "param": None, "code": payload["error"]["code"]}
    }


def test_non_json_error_body() -> None:
    status, payload = error_from_anthropic(502, b"<html>bad gateway</html>")
    assert status == 502 and "bad gateway" in payload["error"]["message"]


def test_model_listing() -> None:
    data = {
        "data": [{"type": "model", "id": "claude-a", "display_name": "A", "created_at": "2025-01-01T00:00:00Z"}],
        "has_more": False,
        "first_id": "claude-a",
        "last_id": "claude-a",
    }
    assert listed_models(data) == ["claude-a"]
    assert listed_models({"models": []}) is None


# -- stream events -----------------------------------------------------------------------


def events(*items: dict) -> bytes:
    return b"".join(b"event: " + e["type"].encode() + b"\ndata: " + orjson.dumps(e) + b"\n\n" for e in items)


TOOL_STREAM = events(
    {"type": "message_start", "message": {**message([], None), "usage": {"input_tokens": 12, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": "", "signature": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Let me ✓ "}},
    {"type": "content_block_stop", "index": 1},
    {
        "type": "content_block_start",
        "index": 2,
        "content_block": {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {}},
    },
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '{"city":'}},
    {"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": '"Paris"}'}},
    {"type": "content_block_stop", "index": 2},
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 30, "cache_read_input_tokens": 4},
    },
    {"type": "message_stop"},
)


def translate(data: bytes, step: int | None = None, include_usage: bool = True) -> list[bytes]:
    decoder = SseDecoder()
    stream = ChatStream(model="m", completion_id="chatcmpl-1", created=1, include_usage=include_usage)
    chunks = [data] if step is None else [data[i : i + step] for i in range(0, len(data), step)]
    out = [f for c in chunks for e in decoder.feed(c) for f in stream.feed(e)]
    out += [f for e in decoder.close() for f in stream.feed(e)]
    return out + stream.finish()


def test_stream_frames_are_exact_chunks() -> None:
    frames = chat_sse(translate(TOOL_STREAM))
    assert frames[-1] == "[DONE]"
    reasoning, *chunks = [exact(ChatCompletionChunk, f) for f in frames[:-1]]
    # The thinking comes first, as a reasoning_content delta with the role;
    # its signature is not sent.
    assert reasoning.choices[0].delta.role == "assistant"
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "reasoning_content": "hmm"}
    assert b"sig" not in b"".join(translate(TOOL_STREAM))
    assert chunks[0].choices[0].delta.role is None and chunks[0].choices[0].delta.content == "Let me ✓ "
    assert "reasoning_content" not in frames[1]["choices"][0]["delta"]
    call = chunks[1].choices[0].delta.tool_calls[0]
    assert (call.index, call.id, call.function.name, call.function.arguments) == (0, "toolu_9", "get_weather", "")
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments for c in chunks[1:4])
    assert args == '{"city":"Paris"}'
    assert chunks[4].choices[0].finish_reason == "tool_calls"
    assert chunks[5].choices == [] and chunks[5].usage.model_dump(exclude_none=True) == {
        "prompt_tokens": 16,
        "completion_tokens": 30,
        "total_tokens": 46,
        "prompt_tokens_details": {"cached_tokens": 4},
    }


def test_stream_split_at_every_byte_boundary_is_the_same() -> None:
    whole = translate(TOOL_STREAM)
    for cut in range(1, len(TOOL_STREAM)):
        decoder = SseDecoder()
        stream = ChatStream(model="m", completion_id="chatcmpl-1", created=1, include_usage=True)
        out = []
        for piece in (TOOL_STREAM[:cut], TOOL_STREAM[cut:]):
            out += [f for e in decoder.feed(piece) for f in stream.feed(e)]
        out += [f for e in decoder.close() for f in stream.feed(e)] + stream.finish()
        assert out == whole, cut
    assert translate(TOOL_STREAM, step=1) == whole
    assert translate(TOOL_STREAM.replace(b"\n", b"\r\n"), step=7) == whole


def test_stream_without_usage_and_empty_reply() -> None:
    data = events(
        {"type": "message_start", "message": message([], None)},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 0}},
        {"type": "message_stop"},
    )
    frames = chat_sse(translate(data, include_usage=False))
    assert [f["choices"][0]["delta"] for f in frames[:-1]] == [{"role": "assistant", "content": ""}, {}]
    assert all("usage" not in f for f in frames[:-1])


def test_stream_error_event_and_cut_stream() -> None:
    stream = ChatStream(model="m", completion_id="c", created=1, include_usage=False)
    with pytest.raises(UpstreamError) as caught:
        stream.feed({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert caught.value.status == 503
    cut = ChatStream(model="m", completion_id="c", created=1, include_usage=False)
    cut.feed({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}})
    with pytest.raises(UpstreamError):
        cut.finish()
    (frame,) = cut.fail(UpstreamError("gone"))
    assert chat_sse([frame])[0]["error"]["message"] == "gone"


def test_the_docs_policy_table_is_the_code() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "providers" / "anthropic.md").read_text()
    rows = {}
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().split(" | ")]
        if (
            line.startswith("| `")
            and len(cells) == 3
            and cells[1] in ("converted", "conditional", "ignored", "unsupported")
        ):
            rows[cells[0].strip("|` ")] = (cells[1], cells[2].rstrip(" |").replace("\\|", "|"))
    assert rows == CHAT_POLICY

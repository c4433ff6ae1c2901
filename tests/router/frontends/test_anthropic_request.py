"""Anthropic Messages request → OpenAI Chat Completions request (pure)."""

from __future__ import annotations

import orjson
import pytest

from router.core.errors import InvalidRequest, RouterError
from router.frontends.anthropic import IGNORED_FIELDS, parse, to_openai

USER = [{"role": "user", "content": "hi"}]


def convert(**fields):
    return to_openai({"model": "m", "max_tokens": 64, "messages": USER, **fields})


def test_minimal_request():
    """model, max_tokens and a string message map one to one; stream is explicit."""
    c = convert()
    assert c.request == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "stream": False,
    }
    assert (c.model, c.stream, c.stop_sequences, c.ignored) == ("m", False, (), ())


def test_stream_asks_for_usage():
    """A streamed request sets stream_options.include_usage so message_delta can report usage."""
    c = convert(stream=True)
    assert c.stream is True
    assert c.request["stream"] is True and c.request["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "system, expected",
    [
        ("Be brief.", "Be brief."),
        (
            [
                {"type": "text", "text": "One."},
                {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
            ],
            "One.\nTwo.",
        ),
    ],
)
def test_system_becomes_the_leading_system_message(system, expected):
    c = convert(system=system)
    assert c.request["messages"][0] == {"role": "system", "content": expected}
    assert c.request["messages"][1] == {"role": "user", "content": "hi"}


def test_sampling_stop_and_user_fields():
    c = convert(
        temperature=0.2,
        top_p=0.9,
        top_k=40,
        stop_sequences=["END", "###"],
        metadata={"user_id": "user-7"},
    )
    r = c.request
    assert (r["temperature"], r["top_p"], r["top_k"]) == (0.2, 0.9, 40)
    assert r["stop"] == ["END", "###"] and c.stop_sequences == ("END", "###")
    assert r["user"] == "user-7"
    assert "metadata" not in r  # OpenAI metadata means something else (stored completions)


def test_images_base64_and_url():
    content = [
        {"type": "text", "text": "What is in these?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]
    c = convert(messages=[{"role": "user", "content": content}])
    assert c.request["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in these?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
            ],
        }
    ]


def test_plain_text_document_becomes_text():
    doc = {"type": "document", "title": "Notes", "source": {"type": "text", "media_type": "text/plain", "data": "x=1"}}
    c = convert(messages=[{"role": "user", "content": [doc, {"type": "text", "text": "Summarise."}]}])
    assert c.request["messages"][0]["content"] == [
        {"type": "text", "text": "Notes\nx=1"},
        {"type": "text", "text": "Summarise."},
    ]


def test_tool_round_trip_history():
    """tool_use → assistant tool_calls (JSON arguments); tool_result → tool messages placed
    before the rest of the user turn; is_error is visible to the model."""
    messages = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "down"}],
                    "is_error": True,
                },
                {"type": "text", "text": "Thanks"},
            ],
        },
    ]
    c = convert(messages=messages)
    assert c.request["messages"] == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Let me check.",
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
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: down"},
        {"role": "user", "content": "Thanks"},
    ]
    assert any(note.startswith("thinking blocks:") for note in c.ignored)


def test_assistant_with_only_tool_calls_has_null_content_and_tool_only_turn_has_no_user_message():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]},
    ]
    out = convert(messages=messages).request["messages"]
    assert out[1]["content"] is None and out[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert out[2:] == [{"role": "tool", "tool_call_id": "t", "content": ""}]


def test_tool_result_image_rides_in_the_following_user_message():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lG"}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "chart:"}, image]}
    out = convert(messages=[{"role": "user", "content": [result]}])
    assert out.request["messages"] == [
        {"role": "tool", "tool_call_id": "t", "content": "chart:"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lG"}}]},
    ]
    assert out.ignored


TOOLS = [
    {
        "name": "get_weather",
        "description": "Current weather",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "cache_control": {"type": "ephemeral"},
    }
]


def test_tools_become_function_tools():
    c = convert(tools=TOOLS)
    assert c.request["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": TOOLS[0]["input_schema"],
                "description": "Current weather",
            },
        }
    ]
    assert "tools[].cache_control: no OpenAI equivalent" in c.ignored


@pytest.mark.parametrize(
    "choice, expected",
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
        ({"type": "auto", "disable_parallel_tool_use": True}, {"tool_choice": "auto", "parallel_tool_calls": False}),
        ({"type": "any", "disable_parallel_tool_use": False}, {"tool_choice": "required"}),
    ],
)
def test_tool_choice(choice, expected):
    r = convert(tools=TOOLS, tool_choice=choice).request
    assert {k: r[k] for k in ("tool_choice", "parallel_tool_calls") if k in r} == expected


def test_tool_choice_auto_without_tools_is_dropped():
    assert "tool_choice" not in convert(tool_choice={"type": "auto"}).request


def test_output_config_format_becomes_response_format():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    c = convert(output_config={"format": {"type": "json_schema", "schema": schema}, "effort": "high"})
    assert c.request["response_format"] == {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    assert "output_config.effort: no portable OpenAI equivalent" in c.ignored


def test_ignored_fields_are_named_not_forwarded():
    """thinking (and every Anthropic-only field) is dropped and noted, never sent upstream."""
    c = convert(thinking={"type": "enabled", "budget_tokens": 1024}, service_tier="auto", vendor_knob=1)
    assert set(c.request) == {"model", "messages", "max_tokens", "stream"}
    assert c.ignored == (
        f"service_tier: {IGNORED_FIELDS['service_tier']}",
        f"thinking: {IGNORED_FIELDS['thinking']}",
        "vendor_knob: unknown field",
    )


def test_parse_rejects_what_is_not_a_json_object():
    assert parse(b'{"a": 1}') == {"a": 1}
    for raw in (b"", b"{nope", b"[1, 2]"):
        with pytest.raises(InvalidRequest):
            parse(raw)


@pytest.mark.parametrize(
    "fields, param",
    [
        ({"model": None}, "model"),
        ({"model": 7}, "model"),
        ({"max_tokens": None}, "max_tokens"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": "64"}, "max_tokens"),
        ({"max_tokens": True}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"messages": []}, "messages"),
        ({"messages": "hi"}, "messages"),
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0]"),
        ({"messages": [{"role": "user", "content": [{"text": "no type"}]}]}, "messages[0].content[0]"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}
                ]
            },
            "messages[0].content[0].source",
        ),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]}, "messages[0].content[0].tool_use_id"),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": []}]}
                ]
            },
            "messages[0].content[0].input",
        ),
        ({"system": 5}, "system"),
        ({"system": [{"type": "image"}]}, "system[0]"),
        ({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type"),
        ({"tools": [{"name": "f"}]}, "tools[0].input_schema"),
        ({"tools": TOOLS, "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
        ({"tool_choice": {"type": "any"}}, "tool_choice"),
        ({"stop_sequences": "END"}, "stop_sequences"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_k": 1.5}, "top_k"),
        ({"output_config": {"format": {"type": "xml"}}}, "output_config.format"),
    ],
)
def test_invalid_requests_are_400_with_the_path(fields, param):
    with pytest.raises(RouterError) as info:
        convert(**fields)
    assert info.value.status == 400
    assert info.value.param == param


def test_unicode_survives():
    c = convert(messages=[{"role": "user", "content": "안녕 ☃"}])
    assert orjson.loads(orjson.dumps(c.request))["messages"][0]["content"] == "안녕 ☃"

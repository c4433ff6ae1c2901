"""Responses requests → Chat Completions requests: every row of the bridge's
field policy, the input items, tools and formats, and what is refused (400)."""

from __future__ import annotations

import pytest

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.bridge import RESPONSES_POLICY, responses_to_chat

USER = {"role": "user", "content": "hi"}


def convert(**fields):
    return responses_to_chat({"model": "m", "input": "hi", **fields})


def chat(**fields) -> dict:
    return convert(**fields).request


def rejected(exc=UnsupportedParameter, **fields) -> str | None:
    with pytest.raises(exc) as info:
        convert(**fields)
    return info.value.param


# -- the policy table, row by row ------------------------------------------------------

# field → (a value, what the chat body then holds for its keys); None = checked elsewhere.
CONVERTED = {
    "model": ("m", {"model": "m"}),
    "input": ("hi", {"messages": [USER]}),
    "instructions": ("Be brief.", {"messages": [{"role": "system", "content": "Be brief."}, USER]}),
    "stream": (True, {"stream": True, "stream_options": {"include_usage": True}}),
    "temperature": (0.2, {"temperature": 0.2}),
    "top_p": (0.9, {"top_p": 0.9}),
    "max_output_tokens": (64, {"max_completion_tokens": 64}),
    "text": (
        {"format": {"type": "json_object"}, "verbosity": "low"},
        {"response_format": {"type": "json_object"}, "verbosity": "low"},
    ),
    "tools": None,
    "tool_choice": ("required", {"tool_choice": "required"}),
    "reasoning": ({"effort": "high"}, {"reasoning_effort": "high"}),
    "parallel_tool_calls": None,
    "user": ("u-1", {"user": "u-1"}),
    "safety_identifier": ("s-1", {"safety_identifier": "s-1"}),
    "prompt_cache_key": ("k", {"prompt_cache_key": "k"}),
    "prompt_cache_retention": ("24h", {"prompt_cache_retention": "24h"}),
    "service_tier": ("flex", {"service_tier": "flex"}),
    "background": (False, {}),
    "include": None,
    "top_logprobs": (0, {}),
}
UNSUPPORTED = {"previous_response_id": "resp_1", "conversation": "conv_1", "prompt": {"id": "pmpt_1"}}
IGNORED = {
    "max_tool_calls": 3,
    "store": True,
    "metadata": {"a": "b"},
    "truncation": "auto",
    "stream_options": {"include_obfuscation": False},
}


def test_every_policy_row_has_a_case() -> None:
    cases = {**CONVERTED, **UNSUPPORTED, **IGNORED}
    assert set(cases) == set(RESPONSES_POLICY)
    for field, (policy, _) in RESPONSES_POLICY.items():
        assert (field in UNSUPPORTED) == (policy == "unsupported"), field
        assert (field in IGNORED) == (policy == "ignored"), field


@pytest.mark.parametrize("field", [f for f, case in CONVERTED.items() if case is not None])
def test_converted_fields(field) -> None:
    value, expected = CONVERTED[field]
    conversion = convert(**{field: value})
    for key, want in expected.items():
        assert conversion.request[key] == want, key
    assert conversion.ignored_fields == []


@pytest.mark.parametrize("field", sorted(UNSUPPORTED))
def test_unsupported_fields_are_400(field) -> None:
    assert rejected(**{field: UNSUPPORTED[field]}) == field


@pytest.mark.parametrize("field", sorted(UNSUPPORTED))
def test_a_null_unsupported_field_is_absent(field) -> None:
    assert convert(**{field: None}).ignored_fields == []


@pytest.mark.parametrize("field", sorted(IGNORED))
def test_ignored_fields_are_recorded_and_not_sent(field) -> None:
    conversion = convert(**{field: IGNORED[field]})
    assert conversion.ignored_fields == [field]
    assert conversion.notes == [f"{field}: {RESPONSES_POLICY[field][1]}"]
    assert set(conversion.request) == {"model", "messages"}


def test_unknown_fields_are_recorded_and_not_sent() -> None:
    conversion = convert(seed=7, top_k=3)
    assert conversion.ignored_fields == ["seed", "top_k"]
    assert set(conversion.request) == {"model", "messages"}


def test_a_plain_request_is_just_model_and_messages() -> None:
    assert chat() == {"model": "m", "messages": [USER]}


# -- conditional fields ------------------------------------------------------------------


def test_background_true_and_log_probabilities_are_400() -> None:
    assert rejected(background=True) == "background"
    assert rejected(top_logprobs=2) == "top_logprobs"
    assert rejected(include=["message.output_text.logprobs"]) == "include"
    assert rejected(InvalidRequest, include="reasoning") == "include"


def test_other_include_entries_are_ignored() -> None:
    conversion = convert(include=["reasoning.encrypted_content"])
    assert conversion.ignored_fields == ["include"] and "include" not in conversion.request
    assert convert(include=[]).ignored_fields == []


def test_text_formats() -> None:
    assert "response_format" not in chat(text={"format": {"type": "text"}})
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    fmt = {"type": "json_schema", "name": "thing", "schema": schema, "strict": True, "description": "d"}
    assert chat(text={"format": fmt})["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "thing", "description": "d", "schema": schema, "strict": True},
    }
    assert rejected(InvalidRequest, text={"format": {"type": "json_schema", "schema": schema}}) == "text.format"
    assert rejected(text={"format": {"type": "grammar"}}) == "text.format"
    assert convert(text={"stop": "x"}).ignored_fields == ["text.stop"]


def test_reasoning_summary_is_ignored() -> None:
    conversion = convert(reasoning={"effort": "low", "summary": "auto"})
    assert conversion.request["reasoning_effort"] == "low"
    assert conversion.ignored_fields == ["reasoning.summary"]
    assert rejected(InvalidRequest, reasoning={"effort": 3}) == "reasoning.effort"


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def test_function_tools_become_chat_tools() -> None:
    bare = {"type": "function", "name": "now", "parameters": None, "strict": None}
    conversion = convert(tools=[WEATHER, bare, {**bare, "name": "later", "defer_loading": True}])
    assert conversion.request["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "The weather.",
                "parameters": WEATHER["parameters"],
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "now"}},
        {"type": "function", "function": {"name": "later"}},
    ]
    assert conversion.ignored_fields == ["tools[].defer_loading"]


@pytest.mark.parametrize(
    "tool",
    [
        {"type": "web_search"},
        {"type": "file_search", "vector_store_ids": ["vs_1"]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "mcp", "server_label": "x"},
        {"type": "custom", "name": "x"},
        {"type": "image_generation"},
    ],
)
def test_hosted_and_custom_tools_are_400(tool) -> None:
    assert rejected(tools=[WEATHER, tool]) == "tools[1]"


def test_parallel_tool_calls_is_sent_only_with_tools() -> None:
    assert chat(tools=[WEATHER], parallel_tool_calls=False)["parallel_tool_calls"] is False
    conversion = convert(parallel_tool_calls=False)
    assert "parallel_tool_calls" not in conversion.request
    assert conversion.ignored_fields == ["parallel_tool_calls"]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("none", "none"),
        ("auto", "auto"),
        ({"type": "function", "name": "get_weather"}, {"type": "function", "function": {"name": "get_weather"}}),
        (
            {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]},
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "get_weather"}}],
                },
            },
        ),
    ],
)
def test_tool_choice(choice, expected) -> None:
    assert chat(tools=[WEATHER], tool_choice=choice)["tool_choice"] == expected


@pytest.mark.parametrize(
    "choice",
    [
        {"type": "file_search"},
        {"type": "web_search_preview"},
        {"type": "mcp", "server_label": "x"},
        {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "file_search"}]},
    ],
)
def test_hosted_tool_choices_are_400(choice) -> None:
    assert rejected(tools=[WEATHER], tool_choice=choice) in ("tool_choice", "tool_choice.tools")


# -- input -------------------------------------------------------------------------------


def test_message_items_of_every_role() -> None:
    items = [
        {"role": "developer", "content": "rules"},
        {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "sys"}]},
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "answer", "annotations": []}],
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]
    assert chat(input=items)["messages"] == [
        {"role": "developer", "content": "rules"},
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": "answer"},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]


def test_images_by_url_and_by_file_id() -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    content = [
        {"type": "input_text", "text": "what is it?"},
        {"type": "input_image", "image_url": url, "detail": "low"},
    ]
    assert chat(input=[{"role": "user", "content": content}])["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is it?"},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            ],
        }
    ]
    by_file = [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1", "detail": "auto"}]}]
    assert rejected(input=by_file) == "input[0].content[0]"


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_file", "file_id": "file_1"},
        {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}},
    ],
)
def test_other_content_parts_are_400(part) -> None:
    assert rejected(input=[{"role": "user", "content": [part]}]) == "input[0].content[0]"


def call(i: int, args: str) -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": args}}


def test_function_calls_are_grouped_into_one_assistant_turn() -> None:
    items = [
        {"role": "user", "content": "weather in Seoul and Busan?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Seoul"}'},
        {
            "type": "function_call",
            "call_id": "call_2",
            "name": "get_weather",
            "arguments": '{"city":"Busan"}',
            "id": "fc_2",
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "rain"}]},
        {"role": "assistant", "content": "Sunny and rainy."},
        {"type": "function_call", "call_id": "call_3", "name": "get_weather", "arguments": "{}"},
    ]
    conversion = convert(input=items)
    assert conversion.request["messages"] == [
        {"role": "user", "content": "weather in Seoul and Busan?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [call(1, '{"city":"Seoul"}'), call(2, '{"city":"Busan"}')],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "rain"}]},
        {"role": "assistant", "content": "Sunny and rainy.", "tool_calls": [call(3, "{}")]},
    ]
    assert conversion.ignored_fields == ["input[].reasoning"]


@pytest.mark.parametrize(
    ("item", "exc", "param"),
    [
        ({"type": "item_reference", "id": "msg_1"}, UnsupportedParameter, "input[0].type"),
        ({"type": "custom_tool_call", "call_id": "c", "name": "x", "input": ""}, UnsupportedParameter, "input[0].type"),
        ({"type": "function_call", "name": "f", "arguments": "{}"}, InvalidRequest, "input[0]"),
        ({"type": "function_call", "call_id": "c", "name": "f", "arguments": {}}, InvalidRequest, "input[0].arguments"),
        ({"type": "function_call_output", "output": "x"}, InvalidRequest, "input[0]"),
        (
            {"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image", "image_url": "x"}]},
            UnsupportedParameter,
            "input[0].output[0]",
        ),
        ({"role": "tool", "content": "x"}, InvalidRequest, "input[0].role"),
        ({"role": "user", "content": 3}, InvalidRequest, "input[0].content"),
    ],
)
def test_bad_or_unsupported_items(item, exc, param) -> None:
    assert rejected(exc, input=[item]) == param


@pytest.mark.parametrize("value", [[], 3, None])
def test_input_must_be_a_string_or_items(value) -> None:
    assert rejected(InvalidRequest, input=value) == "input"


def test_a_body_that_is_not_an_object_is_400() -> None:
    with pytest.raises(InvalidRequest):
        responses_to_chat([])  # type: ignore[arg-type]

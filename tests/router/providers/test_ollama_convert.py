"""OpenAI requests → Ollama native requests: every rule of the field policy."""

from __future__ import annotations

import base64

import pytest
from ollama._types import ChatRequest, EmbedRequest

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.ollama import (
    CHAT_POLICY,
    EMBED_POLICY,
    RESPONSES_POLICY,
    chat_request,
    embed_request,
    responses_request,
)

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\nfake").decode()
USER = [{"role": "user", "content": "hi"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def chat(**body):
    conv = chat_request({"model": "client-name", "messages": USER, **body}, "llama3:8b")
    ChatRequest.model_validate(conv.request)  # the official client accepts it
    return conv


def responses(**body):
    conv = responses_request({"model": "client-name", "input": "hi", **body}, "qwen3")
    ChatRequest.model_validate(conv.request)
    return conv


# -- chat: basics ---------------------------------------------------------------------


def test_minimal_chat_request_names_the_served_model_and_sets_stream_false() -> None:
    """Ollama streams by default, so a non-streaming request says stream: false."""
    conv = chat()
    assert conv.request == {
        "model": "llama3:8b",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
    }
    assert conv.ignored_fields == [] and conv.notes == []


def test_stream_true_is_preserved_and_stream_options_is_not_sent() -> None:
    conv = chat(stream=True, stream_options={"include_usage": True})
    assert conv.request["stream"] is True
    assert "stream_options" not in conv.request
    assert conv.ignored_fields == []


def test_sampling_fields_map_to_options() -> None:
    """temperature, top_p, seed, penalties, stop and max tokens → options."""
    conv = chat(
        temperature=0.2,
        top_p=0.9,
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=-0.5,
        stop="END",
        max_tokens=100,
    )
    assert conv.request["options"] == {
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
        "frequency_penalty": 0.5,
        "presence_penalty": -0.5,
        "stop": ["END"],
        "num_predict": 100,
    }


def test_stop_list_and_max_completion_tokens_wins_over_max_tokens() -> None:
    conv = chat(stop=["a", "b"], max_tokens=5, max_completion_tokens=9)
    assert conv.request["options"] == {"stop": ["a", "b"], "num_predict": 9}


def test_known_extensions_top_k_min_p_repetition_penalty_reach_options() -> None:
    conv = chat(top_k=40, min_p=0.05, repetition_penalty=1.1)
    assert conv.request["options"] == {
        "top_k": 40,
        "min_p": 0.05,
        "repeat_penalty": 1.1,
    }
    assert conv.ignored_fields == []


def test_null_fields_count_as_absent() -> None:
    conv = chat(temperature=None, n=None, logprobs=None, audio=None, user=None)
    assert "options" not in conv.request
    assert conv.ignored_fields == []


@pytest.mark.parametrize(
    ("field", "value"),
    [("temperature", "hot"), ("max_tokens", 1.5), ("stop", 3), ("stream", "yes")],
)
def test_mistyped_fields_are_invalid_requests(field, value) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat(**{field: value})
    assert err.value.param == field
    assert not isinstance(err.value, UnsupportedParameter)


# -- chat: messages -------------------------------------------------------------------


def test_roles_developer_becomes_system_and_text_parts_are_joined() -> None:
    conv = chat_request(
        {
            "model": "m",
            "messages": [
                {"role": "developer", "content": "be brief"},
                {"role": "system", "content": [{"type": "text", "text": "rule"}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "line one"},
                        {"type": "text", "text": "line two"},
                    ],
                },
                {"role": "assistant", "content": "ok"},
            ],
        },
        "m",
    )
    assert conv.request["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "rule"},
        {"role": "user", "content": "line one\nline two"},
        {"role": "assistant", "content": "ok"},
    ]


def test_data_url_images_become_base64_images() -> None:
    conv = chat(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is this?"},
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": f"data:image/png;base64,{PNG}",
                            "detail": "low",
                        },
                    },
                ],
            }
        ]
    )
    assert conv.request["messages"] == [{"role": "user", "content": "what is this?", "images": [PNG]}]


def test_http_image_urls_are_unsupported_because_ollama_needs_bytes() -> None:
    with pytest.raises(UnsupportedParameter) as err:
        chat(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}],
                }
            ]
        )
    assert err.value.param == "messages[0].content[0]"


def test_broken_base64_image_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest):
        chat(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image_url",
                            "image_url": {"url": "data:image/png;base64,@@@"},
                        }
                    ],
                }
            ]
        )


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
        {"type": "file", "file": {"file_id": "file-1"}},
    ],
)
def test_audio_and_file_parts_are_unsupported(part) -> None:
    with pytest.raises(UnsupportedParameter):
        chat(messages=[{"role": "user", "content": [part]}])


def test_assistant_tool_calls_get_object_arguments_and_tool_messages_get_tool_name() -> None:
    """OpenAI string arguments → Ollama objects; the call id names the tool."""
    conv = chat(
        messages=[
            {"role": "user", "content": "weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": "get_weather",
                            "arguments": '{"city":"Seoul"}',
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        ]
    )
    assert conv.request["messages"][1:] == [
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Seoul"}}}],
        },
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
    ]


def test_tool_message_without_a_known_call_id_is_sent_without_tool_name_and_noted() -> None:
    conv = chat(messages=[*USER, {"role": "tool", "tool_call_id": "nope", "content": "x"}])
    assert conv.request["messages"][1] == {"role": "tool", "content": "x"}
    assert any("tool_name not sent" in n for n in conv.notes)


def test_invalid_tool_call_arguments_are_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest) as err:
        chat(
            messages=[
                {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{"},
                        }
                    ],
                }
            ]
        )
    assert err.value.param == "messages[0].tool_calls[0].function.arguments"


@pytest.mark.parametrize("messages", [None, "hi", [], ["hi"], [{"role": "robot", "content": "x"}]])
def test_malformed_messages_are_invalid_requests(messages) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat_request({"model": "m", "messages": messages}, "m")
    assert not isinstance(err.value, UnsupportedParameter)


def test_message_name_is_ignored_and_recorded() -> None:
    conv = chat(messages=[{"role": "user", "content": "hi", "name": "ann"}])
    assert conv.request["messages"] == [{"role": "user", "content": "hi"}]
    assert conv.ignored_fields == ["messages[].name"]


def test_deprecated_function_role_is_unsupported() -> None:
    with pytest.raises(UnsupportedParameter):
        chat(messages=[{"role": "function", "name": "f", "content": "x"}])


# -- chat: tools, formats, think ------------------------------------------------------


def test_function_tools_are_converted_and_strict_is_recorded_as_ignored() -> None:
    tool = {"type": "function", "function": {**WEATHER["function"], "strict": True}}
    conv = chat(tools=[tool], tool_choice="auto")
    assert conv.request["tools"] == [WEATHER]
    assert conv.ignored_fields == ["tools[].function.strict"]


def test_tool_choice_none_drops_the_tools() -> None:
    conv = chat(tools=[WEATHER], tool_choice="none")
    assert "tools" not in conv.request
    assert any("tool_choice" in n for n in conv.notes)


def test_allowed_tools_in_auto_mode_filters_the_tools() -> None:
    other = {"type": "function", "function": {"name": "other"}}
    conv = chat(
        tools=[WEATHER, other],
        tool_choice={
            "type": "allowed_tools",
            "allowed_tools": {
                "mode": "auto",
                "tools": [{"type": "function", "function": {"name": "other"}}],
            },
        },
    )
    assert conv.request["tools"] == [{"type": "function", "function": {"name": "other"}}]


@pytest.mark.parametrize(
    "choice",
    [
        "required",
        {"type": "function", "function": {"name": "get_weather"}},
        {
            "type": "allowed_tools",
            "allowed_tools": {"mode": "required", "tools": []},
        },
    ],
)
def test_forcing_a_tool_call_is_unsupported(choice) -> None:
    with pytest.raises(UnsupportedParameter) as err:
        chat(tools=[WEATHER], tool_choice=choice)
    assert err.value.param == "tool_choice"


def test_custom_tools_are_unsupported() -> None:
    with pytest.raises(UnsupportedParameter):
        chat(tools=[{"type": "custom", "custom": {"name": "grammar"}}])


@pytest.mark.parametrize(
    ("response_format", "expected"),
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, "json"),
        (
            {
                "type": "json_schema",
                "json_schema": {
                    "name": "city",
                    "strict": True,
                    "schema": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}},
                    },
                },
            },
            {"type": "object", "properties": {"name": {"type": "string"}}},
        ),
    ],
)
def test_response_format_maps_to_ollama_format(response_format, expected) -> None:
    conv = chat(response_format=response_format)
    assert conv.request.get("format") == expected


def test_other_response_format_types_are_unsupported() -> None:
    with pytest.raises(UnsupportedParameter):
        chat(response_format={"type": "grammar", "grammar": "root ::= x"})


@pytest.mark.parametrize(
    ("effort", "think"),
    [
        ("none", False),
        ("minimal", "low"),
        ("low", "low"),
        ("medium", "medium"),
        ("high", "high"),
    ],
)
def test_reasoning_effort_maps_to_think(effort, think) -> None:
    assert chat(reasoning_effort=effort).request["think"] == think


def test_explicit_think_extension_wins_and_is_not_ignored() -> None:
    conv = chat(think=True, reasoning_effort="low")
    assert conv.request["think"] is True
    assert conv.ignored_fields == []


# -- chat: policy --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("logprobs", True),
        ("modalities", ["text", "audio"]),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("logit_bias", {"50256": -100}),
        ("web_search_options", {}),
    ],
)
def test_fields_that_must_be_honoured_but_cannot_be_are_unsupported(field, value) -> None:
    with pytest.raises(UnsupportedParameter) as err:
        chat(**{field: value})
    assert err.value.param == field
    assert err.value.status == 400 and err.value.code == "unsupported_parameter"


def test_harmless_values_of_conditional_fields_pass() -> None:
    conv = chat(n=1, logprobs=False, modalities=["text"], logit_bias={})
    assert conv.request["messages"] and conv.ignored_fields == []


def test_unknown_and_ignorable_fields_are_recorded_never_sent() -> None:
    """S08: standard fields convert; the rest is observed, not invented."""
    conv = chat(
        temperature=0.1,
        user="u1",
        metadata={"task": "t"},
        store=True,
        parallel_tool_calls=False,
        codex_extra={"a": 1},
        keep_alive="1h",
    )
    assert conv.request == {
        "model": "llama3:8b",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": False,
        "options": {"temperature": 0.1},
    }
    assert conv.ignored_fields == [
        "user",
        "metadata",
        "store",
        "parallel_tool_calls",
        "codex_extra",
        "keep_alive",
    ]
    assert len(conv.notes) == len(conv.ignored_fields)
    assert any(n.startswith("codex_extra: unknown field") for n in conv.notes)


@pytest.mark.parametrize("field", [f for f, (policy, _) in CHAT_POLICY.items() if policy == "ignored"])
def test_every_ignored_chat_field_is_recorded(field) -> None:
    assert chat(**{field: "x"}).ignored_fields == [field]


@pytest.mark.parametrize("field", [f for f, (policy, _) in CHAT_POLICY.items() if policy == "unsupported"])
def test_every_unsupported_chat_field_raises(field) -> None:
    with pytest.raises(UnsupportedParameter):
        chat(**{field: {"x": 1}})


def test_request_body_must_be_an_object() -> None:
    with pytest.raises(InvalidRequest):
        chat_request(["not", "an", "object"], "m")  # type: ignore[arg-type]


def test_conversion_does_not_mutate_the_client_body() -> None:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stop": "x",
        "tools": [WEATHER],
    }
    snapshot = repr(body)
    chat_request(body, "m")
    assert repr(body) == snapshot


# -- responses ----------------------------------------------------------------------


def test_responses_string_input_and_instructions() -> None:
    conv = responses(instructions="be brief", max_output_tokens=50, temperature=0.3)
    assert conv.request == {
        "model": "qwen3",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hi"},
        ],
        "stream": False,
        "options": {"temperature": 0.3, "num_predict": 50},
    }


def test_responses_item_list_with_images_function_calls_and_outputs() -> None:
    conv = responses(
        stream=True,
        input=[
            {"role": "developer", "content": "rules"},
            {
                "type": "message",
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {
                        "type": "input_image",
                        "image_url": f"data:image/jpeg;base64,{PNG}",
                    },
                ],
            },
            {
                "type": "message",
                "role": "assistant",
                "id": "msg_1",
                "status": "completed",
                "content": [{"type": "output_text", "text": "checking", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_9",
                "name": "get_weather",
                "arguments": '{"city":"Busan"}',
            },
            {"type": "function_call_output", "call_id": "call_9", "output": "rain"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
        ],
    )
    assert conv.request["stream"] is True
    assert conv.request["messages"] == [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "look", "images": [PNG]},
        {
            "role": "assistant",
            "content": "checking",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Busan"}}}],
        },
        {"role": "tool", "content": "rain", "tool_name": "get_weather"},
    ]
    assert conv.ignored_fields == ["input[].reasoning"]


def test_responses_function_call_without_text_becomes_its_own_assistant_message() -> None:
    conv = responses(
        input=[
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "a", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "b", "arguments": ""},
        ]
    )
    assert conv.request["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"function": {"name": "a", "arguments": {}}},
            {"function": {"name": "b", "arguments": {}}},
        ],
    }


def test_responses_tools_text_format_and_reasoning() -> None:
    conv = responses(
        tools=[
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object"},
            }
        ],
        tool_choice="auto",
        text={
            "format": {
                "type": "json_schema",
                "name": "x",
                "schema": {"type": "object"},
            },
            "verbosity": "low",
        },
        reasoning={"effort": "high", "summary": "auto"},
    )
    assert conv.request["tools"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "parameters": {"type": "object"}},
        }
    ]
    assert conv.request["format"] == {"type": "object"}
    assert conv.request["think"] == "high"
    assert conv.ignored_fields == ["text.verbosity", "reasoning.summary"]


def test_responses_json_object_format() -> None:
    assert responses(text={"format": {"type": "json_object"}}).request["format"] == "json"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("previous_response_id", "resp_1"),
        ("conversation", "conv_1"),
        ("prompt", {"id": "pmpt_1"}),
        ("background", True),
        ("top_logprobs", 3),
        ("include", ["message.output_text.logprobs"]),
        ("tools", [{"type": "web_search"}]),
        ("tool_choice", {"type": "function", "name": "f"}),
        ("tool_choice", "required"),
    ],
)
def test_responses_fields_that_need_state_or_hosted_tools_are_unsupported(field, value) -> None:
    with pytest.raises(UnsupportedParameter):
        responses(**{field: value})


@pytest.mark.parametrize(
    "item",
    [
        {"type": "item_reference", "id": "msg_1"},
        {"type": "web_search_call", "id": "ws_1"},
        {"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]},
        {"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]},
    ],
)
def test_responses_items_ollama_cannot_take_are_unsupported(item) -> None:
    with pytest.raises(UnsupportedParameter):
        responses(input=[item])


@pytest.mark.parametrize("value", [None, [], 5, [{"role": "robot", "content": "x"}]])
def test_responses_malformed_input_is_invalid(value) -> None:
    with pytest.raises(InvalidRequest) as err:
        responses_request({"model": "m", "input": value}, "m")
    assert not isinstance(err.value, UnsupportedParameter)


def test_responses_ignorable_fields_are_recorded() -> None:
    conv = responses(
        store=False,
        metadata={"a": "b"},
        parallel_tool_calls=True,
        truncation="auto",
        include=["reasoning.encrypted_content"],
        background=False,
        top_logprobs=0,
        vendor_field=1,
    )
    assert conv.ignored_fields == [
        "store",
        "metadata",
        "parallel_tool_calls",
        "truncation",
        "vendor_field",
        "include",
    ]


@pytest.mark.parametrize("field", [f for f, (policy, _) in RESPONSES_POLICY.items() if policy == "ignored"])
def test_every_ignored_responses_field_is_recorded(field) -> None:
    assert responses(**{field: "x"}).ignored_fields == [field]


# -- embeddings -----------------------------------------------------------------------


def test_embed_request_with_list_input_and_dimensions() -> None:
    conv = embed_request(
        {
            "model": "e",
            "input": ["a", "b"],
            "dimensions": 256,
            "encoding_format": "base64",
        },
        "nomic-embed-text",
    )
    assert conv.request == {
        "model": "nomic-embed-text",
        "input": ["a", "b"],
        "dimensions": 256,
    }
    EmbedRequest.model_validate(conv.request)


def test_embed_request_records_user_and_unknown_fields() -> None:
    conv = embed_request({"model": "e", "input": "a", "user": "u", "x": 1}, "e")
    assert conv.request == {"model": "e", "input": "a"}
    assert conv.ignored_fields == ["user", "x"]
    assert set(EMBED_POLICY) >= {"model", "input", "dimensions", "encoding_format"}


@pytest.mark.parametrize("value", [[1, 2, 3], [[1, 2], [3]]])
def test_token_id_embedding_input_is_unsupported(value) -> None:
    with pytest.raises(UnsupportedParameter):
        embed_request({"model": "e", "input": value}, "e")


@pytest.mark.parametrize(
    "body",
    [
        {"model": "e"},
        {"model": "e", "input": []},
        {"model": "e", "input": [{"a": 1}]},
        {"model": "e", "input": "a", "encoding_format": "int8"},
    ],
)
def test_malformed_embedding_requests_are_invalid(body) -> None:
    with pytest.raises(InvalidRequest) as err:
        embed_request(body, "e")
    assert not isinstance(err.value, UnsupportedParameter)


def test_chat_extensions_are_not_honoured_for_embeddings() -> None:
    conv = embed_request({"model": "e", "input": "a", "top_k": 3, "think": True}, "e")
    assert conv.request == {"model": "e", "input": "a"}
    assert conv.ignored_fields == ["top_k", "think"]


@pytest.mark.parametrize("table", [CHAT_POLICY, RESPONSES_POLICY, EMBED_POLICY])
def test_policy_tables_use_only_the_four_policies_and_explain_each_field(table) -> None:
    for policy, note in table.values():
        assert policy in {"converted", "conditional", "ignored", "unsupported"}
        assert note

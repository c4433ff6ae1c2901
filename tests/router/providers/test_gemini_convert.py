"""OpenAI requests → Gemini requests, and Gemini answers → exact OpenAI objects
(pure conversions, no network). Gemini shapes are checked against the
official google-genai types, OpenAI shapes against the openai SDK types."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest
from google.genai import types as gt
from openai.types import CreateEmbeddingResponse
from openai.types.chat import ChatCompletion

from router.core.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from router.providers.gemini import (
    CHAT_POLICY,
    EMBED_POLICY,
    Blocked,
    api_base,
    chat_completion,
    chat_request,
    count_request,
    embed_request,
    embeddings,
    error_from_gemini,
    listed_models,
)
from router.providers.gemini.chat import PLACEHOLDER_SIGNATURE
from tests.router.providers.openai_shapes import exact

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
PNG = base64.b64encode(b"\x89PNG fake").decode()


def valid_request(request: dict) -> None:
    """The converted request is made of the SDK's own types (no unknown field)."""
    for content in request["contents"]:
        gt.Content.model_validate(content)
        assert content["role"] in ("user", "model")
    if "systemInstruction" in request:
        gt.Content.model_validate(request["systemInstruction"])
    for tool in request.get("tools") or ():
        gt.Tool.model_validate(tool)
    if "toolConfig" in request:
        gt.ToolConfig.model_validate(request["toolConfig"])
    if "generationConfig" in request:
        gt.GenerationConfig.model_validate(request["generationConfig"])


def convert(body: dict) -> dict:
    request = chat_request({"model": "m", **body}, "gemini-2.5-flash").request
    valid_request(request)
    return request


# -- the request -------------------------------------------------------------------------


def test_roles_system_and_merging() -> None:
    """system/developer → systemInstruction; assistant → model; neighbours of one role merge."""
    request = convert(
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "developer", "content": [{"type": "text", "text": "be kind"}]},
                {"role": "user", "content": "one"},
                {"role": "user", "content": [{"type": "text", "text": "two"}]},
                {"role": "assistant", "content": "three"},
                {"role": "user", "content": "four"},
            ]
        }
    )
    assert request["systemInstruction"] == {"parts": [{"text": "be brief"}, {"text": "be kind"}]}
    assert request["contents"] == [
        {"role": "user", "parts": [{"text": "one"}, {"text": "two"}]},
        {"role": "model", "parts": [{"text": "three"}]},
        {"role": "user", "parts": [{"text": "four"}]},
    ]
    assert "generationConfig" not in request


def test_generation_config_fields() -> None:
    request = convert(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.3,
            "top_p": 0.9,
            "top_k": 20,
            "max_tokens": 10,
            "max_completion_tokens": 64,
            "stop": "END",
            "n": 2,
            "seed": 7,
            "presence_penalty": 0.1,
            "frequency_penalty": 0.2,
            "reasoning_effort": "low",
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object"}}},
        }
    )
    assert request["generationConfig"] == {
        "temperature": 0.3,
        "topP": 0.9,
        "seed": 7,
        "presencePenalty": 0.1,
        "frequencyPenalty": 0.2,
        "topK": 20,
        "stopSequences": ["END"],
        "maxOutputTokens": 64,
        "candidateCount": 2,
        "responseMimeType": "application/json",
        "responseJsonSchema": {"type": "object"},
        "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
    }
    # No thinking asked for: no thoughts asked for either.
    off = convert({"messages": [{"role": "user", "content": "x"}], "reasoning_effort": "none"})
    assert off["generationConfig"] == {"thinkingConfig": {"thinkingBudget": 0}}
    assert "generationConfig" not in convert({"messages": [{"role": "user", "content": "x"}]})
    assert convert({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})[
        "generationConfig"
    ] == {"responseMimeType": "application/json"}


def test_images_inline_and_by_url() -> None:
    request = convert(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg?s=1"}},
                    ],
                }
            ]
        }
    )
    assert request["contents"][0]["parts"] == [
        {"text": "what is this"},
        {"inlineData": {"mimeType": "image/png", "data": PNG}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg?s=1"}},
    ]
    with pytest.raises(UnsupportedParameter):
        convert(
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/y"}}]}]}
        )


def test_tools_and_tool_round_trip() -> None:
    """Tool calls become functionCall parts (the first with the placeholder
    signature), tool results functionResponse parts named after their call."""
    request = convert(
        {
            "messages": [
                {"role": "user", "content": "weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        },
                        {
                            "id": "call_b",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Rome"}'},
                        },
                    ],
                },
                {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
                {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "rain"}]},
            ],
            "tools": [WEATHER],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
        }
    )
    assert request["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "the weather",
                    "parametersJsonSchema": WEATHER["function"]["parameters"],
                }
            ]
        }
    ]
    assert request["toolConfig"] == {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}}
    assert request["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {
                    "functionCall": {"name": "get_weather", "args": {"city": "Paris"}},
                    "thoughtSignature": PLACEHOLDER_SIGNATURE,
                },
                {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"result": "sunny"}}},
                {"functionResponse": {"name": "get_weather", "response": {"result": "rain"}}},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("choice", "config"),
    [("auto", {"mode": "AUTO"}), ("none", {"mode": "NONE"}), ("required", {"mode": "ANY"})],
)
def test_tool_choice_modes(choice, config) -> None:
    request = convert({"messages": [{"role": "user", "content": "x"}], "tools": [WEATHER], "tool_choice": choice})
    assert request["toolConfig"] == {"functionCallingConfig": config}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 2}, "top_logprobs"),
        ({"audio": {"voice": "alloy"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logit_bias": {"1": 2}}, "logit_bias"),
        ({"web_search_options": {}}, "web_search_options"),
        ({"tools": [{"type": "custom", "custom": {"name": "x"}}]}, "tools[0]"),
        ({"response_format": {"type": "grammar"}}, "response_format"),
    ],
)
def test_unsupported_fields_are_400_before_anything_is_built(body, param) -> None:
    with pytest.raises(UnsupportedParameter) as info:
        chat_request({"model": "m", "messages": [{"role": "user", "content": "x"}], **body}, "g")
    assert info.value.status == 400 and info.value.param == param


def test_tool_result_without_its_call_is_400() -> None:
    with pytest.raises(InvalidRequest) as info:
        chat_request(
            {
                "model": "m",
                "messages": [
                    {"role": "user", "content": "x"},
                    {"role": "tool", "tool_call_id": "call_x", "content": "r"},
                ],
            },
            "g",
        )
    assert info.value.param == "messages[1].tool_call_id"


def test_ignored_fields_are_recorded() -> None:
    conv = chat_request(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "x", "name": "bob"}],
            "user": "u1",
            "x_custom": 1,
            "parallel_tool_calls": True,
        },
        "g",
    )
    assert conv.ignored_fields == ["user", "x_custom", "parallel_tool_calls", "messages[].name"]
    assert all(isinstance(n, str) for n in conv.notes)
    assert "parallel_tool_calls" in CHAT_POLICY


def test_count_request_wraps_the_generate_request() -> None:
    conv = count_request(
        {
            "model": "m",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "x"}],
            "tools": [WEATHER],
            "max_tokens": 5,
        },
        "gemini-2.5-flash",
    )
    inner = conv.request["generateContentRequest"]
    assert list(conv.request) == ["generateContentRequest"]
    assert inner["model"] == "models/gemini-2.5-flash"
    assert inner["systemInstruction"] == {"parts": [{"text": "s"}]} and "tools" in inner
    assert "generationConfig" not in inner


def test_embed_requests() -> None:
    method, conv = embed_request({"model": "e", "input": "hello", "dimensions": 4}, "gemini-embedding-001")
    assert method == "embedContent"
    assert conv.request == {"content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 4}
    gt.EmbedContentConfig  # noqa: B018 - the SDK names outputDimensionality the same
    method, conv = embed_request({"model": "e", "input": ["a", "b"]}, "gemini-embedding-001")
    assert method == "batchEmbedContents"
    assert conv.request == {
        "requests": [
            {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "a"}]}},
            {"model": "models/gemini-embedding-001", "content": {"parts": [{"text": "b"}]}},
        ]
    }
    with pytest.raises(UnsupportedParameter):
        embed_request({"model": "e", "input": [[1, 2]]}, "g")


def test_base_url_gets_a_version() -> None:
    assert api_base("https://generativelanguage.googleapis.com") == "https://generativelanguage.googleapis.com/v1beta"
    assert api_base("https://generativelanguage.googleapis.com/") == "https://generativelanguage.googleapis.com/v1beta"
    assert api_base("https://x.example/v1") == "https://x.example/v1"
    assert api_base("https://x.example/proxy/v1beta") == "https://x.example/proxy/v1beta"


# -- the answers -------------------------------------------------------------------------


def answer(**kw) -> dict:
    resp = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"text": "thinking…", "thought": True}, {"text": "Hello"}, {"text": " there"}],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 4,
            "thoughtsTokenCount": 6,
            "cachedContentTokenCount": 2,
            "totalTokenCount": 20,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
        **kw,
    }
    gt.GenerateContentResponse.model_validate(resp)
    return resp


def test_text_answer_drops_thoughts_and_maps_usage() -> None:
    out = chat_completion(answer(), model="m", completion_id="chatcmpl-1", created=1)
    obj = exact(ChatCompletion, out)
    assert obj.choices[0].message.content == "Hello there"
    assert obj.choices[0].finish_reason == "stop"
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 10,
        "total_tokens": 20,
        "completion_tokens_details": {"reasoning_tokens": 6},
        "prompt_tokens_details": {"cached_tokens": 2},
    }


def test_function_call_answer() -> None:
    parts = [{"functionCall": {"name": "get_weather", "args": {"city": "서울"}}, "thoughtSignature": "c2ln"}]
    resp = answer(candidates=[{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}])
    obj = exact(ChatCompletion, chat_completion(resp, model="m", completion_id="chatcmpl-1", created=1))
    choice = obj.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert orjson.loads(call.function.arguments) == {"city": "서울"}


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("IMAGE_SAFETY", "content_filter"),
        ("OTHER", "stop"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
    ],
)
def test_finish_reasons(reason, expected) -> None:
    resp = answer(candidates=[{"content": {"role": "model", "parts": [{"text": "x"}]}, "finishReason": reason}])
    out = exact(ChatCompletion, chat_completion(resp, model="m", completion_id="chatcmpl-1", created=1))
    assert out.choices[0].finish_reason == expected


def test_several_candidates_are_choices() -> None:
    candidates = [
        {"content": {"role": "model", "parts": [{"text": t}]}, "finishReason": "STOP", "index": i}
        for i, t in ((1, "b"), (0, "a"))
    ]
    out = exact(
        ChatCompletion, chat_completion(answer(candidates=candidates), model="m", completion_id="chatcmpl-1", created=1)
    )
    assert [(c.index, c.message.content) for c in out.choices] == [(0, "a"), (1, "b")]


def test_blocked_prompt_is_a_content_filter_error() -> None:
    resp = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 3, "totalTokenCount": 3}}
    gt.GenerateContentResponse.model_validate(resp)
    with pytest.raises(Blocked) as info:
        chat_completion(resp, model="m", completion_id="chatcmpl-1", created=1)
    error = info.value.to_dict()["error"]
    assert info.value.status == 400 and error["code"] == "content_filter" and "SAFETY" in error["message"]


def test_embeddings_answers() -> None:
    gt.ContentEmbedding.model_validate({"values": [0.5, -0.25]})
    out = embeddings({"embedding": {"values": [0.5, -0.25]}}, model="e", request_body={"input": "hello"})
    exact(CreateEmbeddingResponse, out)
    assert out["usage"] == {"prompt_tokens": 2, "total_tokens": 2}  # estimated: ceil(5 / 4)
    batch = {"embeddings": [{"values": [0.5]}, {"values": [1.0]}]}
    gt.EmbedContentResponse.model_validate(batch)
    out = embeddings(batch, model="e", request_body={"input": ["a", "b"], "encoding_format": "base64"})
    assert [d["index"] for d in out["data"]] == [0, 1]  # the SDK type itself only knows float lists
    assert struct.unpack("<f", base64.b64decode(out["data"][1]["embedding"])) == (1.0,)
    with pytest.raises(ValueError):
        embeddings(batch, model="e", request_body={"input": ["a"]})


@pytest.mark.parametrize(
    ("status", "canonical", "kind"),
    [
        (400, "INVALID_ARGUMENT", "invalid_request_error"),
        (403, "PERMISSION_DENIED", "permission_error"),
        (404, "NOT_FOUND", "invalid_request_error"),
        (429, "RESOURCE_EXHAUSTED", "rate_limit_error"),
        (500, "INTERNAL", "server_error"),
        (503, "UNAVAILABLE", "server_error"),
        (504, "DEADLINE_EXCEEDED", "server_error"),
    ],
)
def test_errors_keep_their_status(status, canonical, kind) -> None:
    body = orjson.dumps({"error": {"code": status, "message": "nope", "status": canonical}})
    assert error_from_gemini(status, body) == (
        status,
        {"error": {"message": "Gemini: nope", "type": kind, "param": None, "code": canonical.lower()}},
    )


def test_refused_api_key_is_the_routers_problem() -> None:
    body = orjson.dumps(
        {
            "error": {
                "code": 400,
                "message": "API key not valid.",
                "status": "INVALID_ARGUMENT",
                "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "API_KEY_INVALID"}],
            }
        }
    )
    status, error = error_from_gemini(400, body)
    assert status == 502 and error == UpstreamError("Gemini refused the backend's API key.").to_dict()


def test_listed_models() -> None:
    data = {
        "models": [{"name": "models/gemini-2.5-flash"}, {"name": "models/gemini-embedding-001"}],
        "nextPageToken": "x",
    }
    assert listed_models(data) == ["gemini-2.5-flash", "gemini-embedding-001"]
    assert listed_models({}) == []
    assert listed_models({"data": []}) is None


# -- docs/providers/gemini.md says what the code does ------------------------------------


def doc_table(heading: str) -> list[tuple[str, str, str]]:
    """The policy table under `heading` in docs/providers/gemini.md."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs" / "providers" / "gemini.md").read_text()
    match = re.search(rf"^#+ {re.escape(heading)}\s*$(.*?)(?=^#+ |\Z)", text, re.M | re.S)
    assert match, heading
    rows = [line for line in match.group(1).splitlines() if line.startswith("| `")]
    out = []
    for line in rows:
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        out.append((cells[0].strip("`"), cells[1], cells[2]))
    return out


@pytest.mark.parametrize(
    ("heading", "table"),
    [("Field policy", CHAT_POLICY), ("Embeddings → `embedContent` / `batchEmbedContents`", EMBED_POLICY)],
)
def test_policy_tables_are_documented(heading, table) -> None:
    assert doc_table(heading) == [(k, p, n) for k, (p, n) in table.items()]

"""Ollama answers (non-streamed) → exact OpenAI objects; models; errors."""

from __future__ import annotations

import base64
import struct

import orjson
import pytest
from openai.types import CreateEmbeddingResponse, Model
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from router.core.errors import UpstreamError
from router.providers.ollama import (
    chat_completion,
    embeddings,
    error_from_ollama,
    models_from_tags,
    ollama_error,
    response_object,
)
from tests.router.providers.openai_shapes import exact

DONE = {
    "model": "llama3:8b",
    "created_at": "2025-10-17T23:14:07.414671Z",
    "done": True,
    "done_reason": "stop",
    "total_duration": 174560334,
    "load_duration": 101397084,
    "prompt_eval_count": 11,
    "prompt_eval_duration": 13074791,
    "eval_count": 18,
    "eval_duration": 52479709,
}


def answer(message: dict, **extra) -> dict:
    return {**DONE, "message": {"role": "assistant", **message}, **extra}


def completion(resp: dict) -> dict:
    return chat_completion(resp, model="client-model", completion_id="chatcmpl-1", created=1700000000)


def response(resp: dict, body: dict | None = None) -> dict:
    return response_object(
        resp,
        model="client-model",
        response_id="resp_1",
        created_at=1700000000,
        request_body=body or {"model": "client-model", "input": "hi"},
    )


# -- chat completion ------------------------------------------------------------------


def test_text_answer_is_an_exact_chat_completion() -> None:
    out = completion(answer({"content": "Hello!"}))
    obj = exact(ChatCompletion, out)
    assert obj.model == "client-model" and obj.id == "chatcmpl-1"
    assert obj.choices[0].message.content == "Hello!"
    assert obj.choices[0].finish_reason == "stop"
    assert obj.usage.model_dump() == {
        "prompt_tokens": 11,
        "completion_tokens": 18,
        "total_tokens": 29,
        "completion_tokens_details": None,
        "prompt_tokens_details": None,
    }
    assert "total_duration" not in orjson.dumps(out).decode()


def test_length_stop_is_finish_reason_length() -> None:
    out = completion(answer({"content": "Hel"}, done_reason="length"))
    assert exact(ChatCompletion, out).choices[0].finish_reason == "length"


@pytest.mark.parametrize("reason", ["load", "unload", None])
def test_other_done_reasons_are_stop(reason) -> None:
    out = completion(answer({"content": ""}, done_reason=reason))
    assert exact(ChatCompletion, out).choices[0].finish_reason == "stop"


def test_tool_calls_get_ids_and_string_arguments_and_finish_tool_calls() -> None:
    out = completion(
        answer(
            {
                "content": "",
                "tool_calls": [
                    {
                        "function": {
                            "name": "get_weather",
                            "arguments": {"city": "Seoul", "n": 2},
                        }
                    },
                    {"function": {"index": 1, "name": "now", "arguments": {}}},
                ],
            }
        )
    )
    obj = exact(ChatCompletion, out)
    choice = obj.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    first, second = choice.message.tool_calls
    assert first.id.startswith("call_") and second.id.startswith("call_")
    assert first.id != second.id
    assert first.function.arguments == '{"city":"Seoul","n":2}'
    assert second.function.arguments == "{}"


def test_an_upstream_tool_call_id_is_kept() -> None:
    out = completion(
        answer(
            {
                "content": "",
                "tool_calls": [{"id": "call_abc", "function": {"name": "f", "arguments": {}}}],
            }
        )
    )
    assert exact(ChatCompletion, out).choices[0].message.tool_calls[0].id == "call_abc"


def test_thinking_never_leaks_into_a_chat_completion() -> None:
    out = completion(answer({"content": "42", "thinking": "let me think"}))
    exact(ChatCompletion, out)
    assert "let me think" not in orjson.dumps(out).decode()


def test_missing_counts_are_zero() -> None:
    resp = answer({"content": "x"})
    del resp["prompt_eval_count"]
    usage = exact(ChatCompletion, completion(resp)).usage
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        0,
        18,
        18,
    )


def test_an_error_body_raises_upstream_error() -> None:
    with pytest.raises(UpstreamError, match="model crashed"):
        completion({"error": "model crashed"})


# -- responses -----------------------------------------------------------------------


def test_text_answer_is_an_exact_response() -> None:
    out = response(answer({"content": "Hello!"}))
    obj = exact(Response, out)
    assert obj.status == "completed" and obj.incomplete_details is None
    assert obj.output_text == "Hello!"
    assert [item.type for item in obj.output] == ["message"]
    assert obj.output[0].id.startswith("msg_")
    assert (
        obj.usage.input_tokens,
        obj.usage.output_tokens,
        obj.usage.total_tokens,
    ) == (11, 18, 29)


def test_response_echoes_the_request_parameters() -> None:
    body = {
        "model": "client-model",
        "input": "hi",
        "instructions": "be brief",
        "temperature": 0.2,
        "top_p": 0.5,
        "max_output_tokens": 64,
        "parallel_tool_calls": False,
        "metadata": {"k": "v"},
        "tool_choice": "auto",
        "tools": [
            {
                "type": "function",
                "name": "f",
                "parameters": {"type": "object"},
                "strict": True,
            }
        ],
        "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
        "reasoning": {"effort": "low"},
    }
    obj = exact(Response, response(answer({"content": "{}"}), body))
    assert obj.instructions == "be brief"
    assert (obj.temperature, obj.top_p, obj.max_output_tokens) == (0.2, 0.5, 64)
    assert obj.parallel_tool_calls is False and obj.metadata == {"k": "v"}
    assert obj.tools[0].name == "f" and obj.tools[0].strict is True
    assert obj.text.format.type == "json_schema"
    assert obj.reasoning.effort == "low"


def test_length_makes_the_response_incomplete() -> None:
    obj = exact(Response, response(answer({"content": "Hel"}, done_reason="length")))
    assert obj.status == "incomplete"
    assert obj.incomplete_details.reason == "max_output_tokens"
    assert obj.output[0].status == "incomplete"


def test_function_calls_become_function_call_items() -> None:
    out = response(
        answer(
            {
                "content": "",
                "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, "ü"]}}}],
            }
        )
    )
    obj = exact(Response, out)
    assert [item.type for item in obj.output] == ["function_call"]
    call = obj.output[0]
    assert call.call_id.startswith("call_") and call.id.startswith("fc_")
    assert call.arguments == '{"a":[1,"ü"]}'
    assert call.status == "completed"


def test_thinking_becomes_a_reasoning_item_before_the_message() -> None:
    obj = exact(Response, response(answer({"content": "42", "thinking": "hmm"})))
    assert [item.type for item in obj.output] == ["reasoning", "message"]
    assert obj.output[0].content[0].text == "hmm"
    assert obj.output[0].id.startswith("rs_")


def test_response_error_body_raises() -> None:
    with pytest.raises(UpstreamError):
        response({"error": {"message": "boom"}})


# -- embeddings, models, errors ----------------------------------------------------------

EMBED = {
    "model": "nomic",
    "embeddings": [[0.5, -1.25, 2.0], [0.0, 1.0, 3.5]],
    "prompt_eval_count": 7,
}


def test_embeddings_float() -> None:
    out = embeddings(EMBED, model="client-embed", encoding_format=None)
    obj = exact(CreateEmbeddingResponse, out)
    assert [d.index for d in obj.data] == [0, 1]
    assert obj.data[1].embedding == [0.0, 1.0, 3.5]
    assert obj.usage.prompt_tokens == 7 and obj.usage.total_tokens == 7
    assert obj.model == "client-embed"


def test_embeddings_base64_is_little_endian_float32() -> None:
    out = embeddings(EMBED, model="m", encoding_format="base64")
    raw = base64.b64decode(out["data"][0]["embedding"])
    assert list(struct.unpack("<3f", raw)) == [0.5, -1.25, 2.0]
    assert set(out["data"][0]) == {"object", "index", "embedding"}


def test_models_from_tags() -> None:
    tags = {
        "models": [
            {
                "name": "llama3:8b",
                "model": "llama3:8b",
                "modified_at": "2024-05-01T10:20:30.123456789-07:00",
                "size": 1,
                "digest": "sha256:x",
                "details": {"family": "llama"},
            },
            {"model": "qwen3:latest", "modified_at": "garbage"},
            {"size": 3},
            "junk",
        ]
    }
    models = models_from_tags(tags, owned_by="ollama-a")
    for entry in models:
        exact(Model, entry)
    assert [(m["id"], m["created"], m["owned_by"]) for m in models] == [
        ("llama3:8b", 1714584030, "ollama-a"),
        ("qwen3:latest", 0, "ollama-a"),
    ]
    assert models_from_tags({}, owned_by="x") == []


@pytest.mark.parametrize(
    ("status", "body", "want_status", "want_type", "want_code"),
    [
        (
            400,
            b'{"error":"llama2 does not support tools"}',
            400,
            "invalid_request_error",
            "invalid_request",
        ),
        (
            404,
            b'{"error":"model \\"x\\" not found, try pulling it first"}',
            502,
            "server_error",
            "upstream_error",
        ),
        (500, b"internal crash", 502, "server_error", "upstream_error"),
        (
            503,
            b'{"error":"server busy, please try again"}',
            429,
            "server_overloaded",
            "capacity_exhausted",
        ),
        (429, b"", 429, "server_overloaded", "capacity_exhausted"),
        (504, b"{}", 504, "server_error", "upstream_timeout"),
        (
            413,
            b'{"error":"too big"}',
            413,
            "invalid_request_error",
            "request_too_large",
        ),
    ],
)
def test_error_from_ollama(status, body, want_status, want_type, want_code) -> None:
    got_status, payload = error_from_ollama(status, body)
    assert got_status == want_status
    error = payload["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"]) == (want_type, want_code)
    assert error["message"].startswith("Ollama: ")
    assert ollama_error(status, body).status == want_status


def test_error_message_keeps_ollamas_text() -> None:
    _, payload = error_from_ollama(404, b'{"error":"model \\"x\\" not found"}')
    assert payload["error"]["message"] == 'Ollama: model "x" not found'
    _, payload = error_from_ollama(500, b"")
    assert payload["error"]["message"] == "Ollama: HTTP 500"


def test_a_limit_hit_while_thinking_leaves_an_incomplete_reasoning_item_only() -> None:
    obj = exact(Response, response(answer({"content": "", "thinking": "hm"}, done_reason="length")))
    assert obj.status == "incomplete"
    assert [(item.type, item.status) for item in obj.output] == [("reasoning", "incomplete")]

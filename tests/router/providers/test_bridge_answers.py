"""ChatCompletions → exact Responses API `response` objects (the bridge's answer side).

Every chat answer fed in is itself checked against the SDK's ChatCompletion,
so the inputs are what a chat provider really sends."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from router.core.errors import UpstreamError
from router.providers.bridge import chat_to_response, usage_of
from tests.router.providers.openai_shapes import exact

USAGE = {
    "prompt_tokens": 12,
    "completion_tokens": 5,
    "total_tokens": 17,
    "prompt_tokens_details": {"cached_tokens": 4, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 2},
}
REQUEST = {
    "model": "m",
    "input": "hi",
    "instructions": "Be brief.",
    "temperature": 0.5,
    "max_output_tokens": 100,
    "metadata": {"k": "v"},
    "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}, "strict": True}],
    "tool_choice": "auto",
    "parallel_tool_calls": False,
    "reasoning": {"effort": "low"},
}


def completion(message: dict, finish: str = "stop", usage: dict | None = USAGE) -> dict:
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "logprobs": None, "finish_reason": finish}
        ],
    }
    if usage is not None:
        obj["usage"] = usage
    exact(ChatCompletion, obj)
    return obj


def response(chat: dict, body: dict | None = None) -> Response:
    out = chat_to_response(chat, model="client-model", response_id="resp_1", created_at=7, request_body=body or REQUEST)
    return exact(Response, out)


def call(i: int, args: str = '{"city":"Seoul"}') -> dict:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": args}}


def test_text_answer() -> None:
    r = response(completion({"content": "Hello!", "refusal": None}))
    assert (r.id, r.object, r.created_at, r.model, r.status) == ("resp_1", "response", 7, "client-model", "completed")
    [item] = r.output
    assert item.type == "message" and item.id.startswith("msg_") and item.status == "completed"
    assert r.output_text == "Hello!" and item.content[0].annotations == []
    assert r.incomplete_details is None and r.error is None


def test_the_request_is_echoed() -> None:
    r = response(completion({"content": "x"}))
    assert r.instructions == "Be brief." and r.temperature == 0.5 and r.max_output_tokens == 100
    assert r.metadata == {"k": "v"} and r.parallel_tool_calls is False and r.tool_choice == "auto"
    assert [t.name for t in r.tools] == ["get_weather"]
    assert r.reasoning.effort == "low"


def test_usage_is_renamed_with_its_details() -> None:
    r = response(completion({"content": "x"}))
    assert r.usage.model_dump(exclude_unset=True) == {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 17,
    }
    assert response(completion({"content": "x"}, usage=None)).usage is None
    assert usage_of({"prompt_tokens": 3, "completion_tokens": 4})["total_tokens"] == 7


def test_tool_calls_become_function_call_items() -> None:
    r = response(completion({"content": None, "tool_calls": [call(1), call(2, "{}")]}, finish="tool_calls"))
    assert [(i.type, i.call_id, i.name, i.arguments, i.status) for i in r.output] == [
        ("function_call", "call_1", "get_weather", '{"city":"Seoul"}', "completed"),
        ("function_call", "call_2", "get_weather", "{}", "completed"),
    ]
    assert all(i.id.startswith("fc_") for i in r.output) and r.output[0].id != r.output[1].id
    assert r.status == "completed"


def test_text_with_tool_calls_keeps_the_text_first() -> None:
    r = response(completion({"content": "Let me look.", "tool_calls": [call(1)]}, finish="tool_calls"))
    assert [i.type for i in r.output] == ["message", "function_call"]
    assert r.output_text == "Let me look."


def test_a_refusal_is_a_refusal_part() -> None:
    r = response(completion({"content": None, "refusal": "I can't help with that."}))
    [item] = r.output
    assert [(p.type, p.refusal) for p in item.content] == [("refusal", "I can't help with that.")]


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_a_cut_answer_is_incomplete(finish, reason) -> None:
    r = response(completion({"content": "Hel"}, finish=finish))
    assert r.status == "incomplete" and r.incomplete_details.reason == reason
    assert r.output[0].status == "incomplete"


def test_an_empty_answer_is_an_empty_message() -> None:
    r = response(completion({"content": ""}))
    assert [i.type for i in r.output] == ["message"] and r.output_text == ""


def test_a_minimal_request_echoes_defaults() -> None:
    r = response(completion({"content": "x"}), body={"model": "m", "input": "hi"})
    assert r.tools == [] and r.tool_choice == "auto" and r.parallel_tool_calls is True
    assert r.text.format.type == "text" and r.metadata == {}


@pytest.mark.parametrize(
    "answer",
    [
        [],
        {"error": {"message": "boom", "type": "server_error", "param": None, "code": None}},
        {"id": "x", "choices": []},
        {"id": "x", "choices": [{"index": 0}]},
    ],
)
def test_an_answer_that_is_no_chat_completion_is_an_upstream_error(answer) -> None:
    with pytest.raises(UpstreamError):
        chat_to_response(answer, model="m", response_id="resp_1", created_at=1, request_body=REQUEST)

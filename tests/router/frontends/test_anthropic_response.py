"""OpenAI chat.completion / errors → Anthropic message / error shape (pure)."""

from __future__ import annotations

import orjson
import pytest

from router.core.errors import RouterError, UpstreamError, catalogue
from router.frontends.anthropic import error_body, error_from_openai, error_type, message_from_completion


def completion(message, finish="stop", usage=None, **choice_extra):
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "org/served-name",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish, **choice_extra}],
        "usage": usage or {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15},
    }


def convert(obj, stops=()):
    return message_from_completion(obj, model="asked-name", message_id="msg_1", stop_sequences=stops)


def test_text_answer():
    """The message carries the requested model name, a text block and Anthropic usage."""
    out = convert(completion({"role": "assistant", "content": "Hello.", "refusal": None}))
    assert out == {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "asked-name",
        "content": [{"type": "text", "text": "Hello."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 4},
    }


def test_tool_calls_become_tool_use_blocks_with_parsed_input():
    message = {
        "role": "assistant",
        "content": "Checking.",
        "tool_calls": [
            {"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
            {"id": "call_b", "type": "function", "function": {"name": "now", "arguments": ""}},
        ],
    }
    out = convert(completion(message, finish="tool_calls"))
    assert out["content"] == [
        {"type": "text", "text": "Checking."},
        {"type": "tool_use", "id": "call_a", "name": "get_weather", "input": {"city": "Paris"}},
        {"type": "tool_use", "id": "call_b", "name": "now", "input": {}},
    ]
    assert out["stop_reason"] == "tool_use"


def test_tool_calls_win_over_a_stop_finish_reason():
    """Some backends say finish_reason "stop" with tool calls; the client must still run them."""
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
    }
    assert convert(completion(message, finish="stop"))["stop_reason"] == "tool_use"


def test_unparseable_tool_arguments_are_an_upstream_error():
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{broken"}}],
    }
    with pytest.raises(UpstreamError):
        convert(completion(message, finish="tool_calls"))


@pytest.mark.parametrize(
    "finish, expected",
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
        ("something_new", "end_turn"),
    ],
)
def test_stop_reasons(finish, expected):
    out = convert(completion({"role": "assistant", "content": "x"}, finish=finish))
    assert out["stop_reason"] == expected and out["stop_sequence"] is None


def test_stop_sequence_is_reported_when_the_backend_names_it():
    """vLLM reports the matched stop string as the choice's stop_reason."""
    out = convert(completion({"role": "assistant", "content": "x"}, stop_reason="END"), stops=("END",))
    assert (out["stop_reason"], out["stop_sequence"]) == ("stop_sequence", "END")
    eos = convert(completion({"role": "assistant", "content": "x"}, stop_reason=None), stops=("END",))
    assert (eos["stop_reason"], eos["stop_sequence"]) == ("end_turn", None)


def test_cached_prompt_tokens_are_reported_apart():
    usage = {"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 60}}
    out = convert(completion({"role": "assistant", "content": "x"}, usage=usage))
    assert out["usage"] == {"input_tokens": 40, "output_tokens": 5, "cache_read_input_tokens": 60}


def test_refusal_text_and_content_parts():
    out = convert(completion({"role": "assistant", "content": None, "refusal": "I can't."}))
    assert out["content"] == [{"type": "text", "text": "I can't."}] and out["stop_reason"] == "refusal"
    parts = convert(
        completion({"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})
    )
    assert parts["content"] == [{"type": "text", "text": "ab"}]


@pytest.mark.parametrize("bad", [None, [], {"choices": []}, {"choices": ["x"]}])
def test_not_a_completion_is_an_upstream_error(bad):
    with pytest.raises(UpstreamError):
        convert(bad)


@pytest.mark.parametrize(
    "status, kind",
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
        (405, "invalid_request_error"),
        (413, "request_too_large"),
        (422, "invalid_request_error"),
        (429, "rate_limit_error"),
        (500, "api_error"),
        (502, "api_error"),
        (503, "overloaded_error"),
        (504, "api_error"),
        (529, "overloaded_error"),
    ],
)
def test_error_types_by_status(status, kind):
    assert error_type(status) == kind
    assert orjson.loads(error_body(status, "boom")) == {"type": "error", "error": {"type": kind, "message": "boom"}}


@pytest.mark.parametrize("cls", catalogue(), ids=lambda c: c.__name__)
def test_every_router_error_renders_anthropic_shaped(cls: type[RouterError]):
    """Walk the whole catalogue: same status, Anthropic type, the router's message."""
    exc = cls()
    body = orjson.loads(error_from_openai(exc.status, exc.to_body()))
    assert body == {"type": "error", "error": {"type": error_type(exc.status), "message": exc.message}}
    assert body["error"]["type"] in {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
    }


def test_error_message_from_other_shapes():
    assert (
        orjson.loads(error_from_openai(502, b"<html>bad gateway</html>"))["error"]["message"]
        == "<html>bad gateway</html>"
    )
    assert (
        orjson.loads(error_from_openai(404, b'{"error": "model \'x\' not found"}'))["error"]["message"]
        == "model 'x' not found"
    )
    assert orjson.loads(error_from_openai(400, b'{"detail": 1}'))["error"]["message"] == "The upstream request failed."

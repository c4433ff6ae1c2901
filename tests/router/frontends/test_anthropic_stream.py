"""OpenAI chat.completion.chunk SSE → Anthropic stream events (pure)."""

from __future__ import annotations

import itertools
import random

import orjson
import pytest

from router.core.errors import UpstreamError
from router.frontends.anthropic import MessageStream, message_events, message_from_completion
from tests.router.frontends.sse import assemble, chunk, events, sse, usage_chunk

TEXT_STREAM = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": " wörld ☃"}),
    chunk({"content": "."}),
    chunk({}, "stop"),
    usage_chunk(9, 3),
    "[DONE]",
)
TOOL_ARGS = '{"city": "Paris", "unit": "celsius"}'
TOOL_STREAM = sse(
    chunk(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
            ],
        }
    ),
    *[
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": TOOL_ARGS[i : i + 7]}}]})
        for i in range(0, len(TOOL_ARGS), 7)
    ],
    chunk({}, "tool_calls"),
    usage_chunk(20, 12),
    "[DONE]",
)


def run(data: bytes, cuts: list[int] | None = None, stops: tuple[str, ...] = ()) -> bytes:
    """Feed `data` split at `cuts` (every byte when None), then finish."""
    t = MessageStream(model="asked", message_id="msg_x", stop_sequences=stops)
    if cuts is None:
        pieces = [data[i : i + 1] for i in range(len(data))]
    else:
        bounds = [0, *sorted(cuts), len(data)]
        pieces = [data[a:b] for a, b in itertools.pairwise(bounds)]
    out = [frame for piece in pieces for frame in t.feed(piece)]
    out.extend(t.finish())
    assert t.done
    return b"".join(out)


def test_text_stream_event_sequence():
    evs = events(run(TEXT_STREAM, cuts=[]))
    assert [name for name, _ in evs] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start = evs[0][1]["message"]
    assert start == {
        "id": "msg_x",
        "type": "message",
        "role": "assistant",
        "model": "asked",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    }
    assert evs[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert evs[3][1] == {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}
    assert evs[-2][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 9, "output_tokens": 3},
    }
    message = assemble(evs)
    assert message["content"] == [{"type": "text", "text": "Hello wörld ☃."}]


@pytest.mark.parametrize("seed", range(25))
def test_any_chunk_boundaries_give_the_same_events(seed):
    """Splitting inside lines, inside `data:`, inside UTF-8 sequences changes nothing."""
    rng = random.Random(seed)
    for data in (TEXT_STREAM, TOOL_STREAM):
        whole = run(data, cuts=[])
        cuts = rng.sample(range(1, len(data)), k=rng.randint(1, 40))
        assert run(data, cuts=cuts) == whole


def test_byte_by_byte():
    assert run(TEXT_STREAM) == run(TEXT_STREAM, cuts=[])
    assert run(TOOL_STREAM) == run(TOOL_STREAM, cuts=[])


def test_tool_use_streams_as_input_json_delta():
    evs = events(run(TOOL_STREAM, cuts=[]))
    starts = [d for n, d in evs if n == "content_block_start"]
    assert starts == [
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {}},
        }
    ]
    deltas = [d["delta"] for n, d in evs if n == "content_block_delta"]
    assert all(d["type"] == "input_json_delta" for d in deltas) and len(deltas) > 1
    assert "".join(d["partial_json"] for d in deltas) == TOOL_ARGS
    message = assemble(evs)
    assert message["content"][0]["input"] == {"city": "Paris", "unit": "celsius"}
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 20, "output_tokens": 12}


def test_text_then_two_tool_calls_are_three_blocks():
    data = sse(
        chunk({"role": "assistant", "content": "Let me look."}),
        chunk({"tool_calls": [{"index": 0, "id": "c0", "function": {"name": "a", "arguments": '{"x":'}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c1", "function": {"name": "b", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    message = assemble(events(run(data)))
    assert message["content"] == [
        {"type": "text", "text": "Let me look."},
        {"type": "tool_use", "id": "c0", "name": "a", "input": {"x": 1}},
        {"type": "tool_use", "id": "c1", "name": "b", "input": {}},
    ]


def test_whole_tool_call_in_one_chunk_as_the_ollama_path_sends_it():
    data = sse(
        chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_z",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"q":"x"}'},
                    }
                ],
            }
        ),
        chunk({}, "tool_calls"),
        "[DONE]",
    )
    message = assemble(events(run(data)))
    assert message["content"] == [{"type": "tool_use", "id": "call_z", "name": "f", "input": {"q": "x"}}]


def test_tool_call_without_id_gets_one():
    data = sse(
        chunk({"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}), chunk({}, "stop"), "[DONE]"
    )
    block = assemble(events(run(data)))["content"][0]
    assert block["id"] == "toolu_msg_x_0" and block["name"] == "f"


@pytest.mark.parametrize(
    "finish, matched, expected",
    [
        ("length", None, ("max_tokens", None)),
        ("stop", "END", ("stop_sequence", "END")),
        ("stop", None, ("end_turn", None)),
        ("content_filter", None, ("refusal", None)),
    ],
)
def test_stop_reasons(finish, matched, expected):
    data = sse(chunk({"content": "x"}), chunk({}, finish, stop_reason=matched), "[DONE]")
    message = assemble(events(run(data, stops=("END",))))
    assert (message["stop_reason"], message["stop_sequence"]) == expected


def test_missing_usage_reports_zero():
    message = assemble(events(run(sse(chunk({"content": "x"}), chunk({}, "stop"), "[DONE]"))))
    assert message["usage"] == {"input_tokens": 0, "output_tokens": 0}


def test_mid_stream_error_ends_with_an_error_event():
    """The router's own mid-stream error frame becomes one `event: error`, and nothing follows."""
    failure = UpstreamError("The upstream provider failed mid-stream (ReadError).").to_sse()
    t = MessageStream(model="m", message_id="msg_e")
    out = t.feed(sse(chunk({"content": "partial"})) + failure)
    out += t.feed(sse(chunk({"content": "ignored"}), "[DONE]"))
    out += t.finish()
    evs = events(b"".join(out))
    assert evs[-1] == (
        "error",
        {
            "type": "error",
            "error": {"type": "api_error", "message": "The upstream provider failed mid-stream (ReadError)."},
        },
    )
    assert "message_stop" not in [n for n, _ in evs]
    assert [d["delta"]["text"] for n, d in evs if n == "content_block_delta"] == ["partial"]


@pytest.mark.parametrize(
    "error, kind",
    [
        ({"message": "busy", "type": "server_overloaded", "code": "capacity_exhausted"}, "overloaded_error"),
        ({"message": "bad", "type": "BadRequestError", "code": 400}, "invalid_request_error"),
        ({"message": "x"}, "api_error"),
    ],
)
def test_error_event_types(error, kind):
    t = MessageStream(model="m", message_id="msg_e")
    evs = events(b"".join(t.feed(sse({"error": error}))))
    assert evs == [("error", {"type": "error", "error": {"type": kind, "message": error["message"]}})]


def test_stream_cut_short_is_an_error():
    t = MessageStream(model="m", message_id="msg_e")
    out = t.feed(sse(chunk({"content": "par"})))
    evs = events(b"".join(out + t.finish()))
    assert evs[-1][0] == "error" and evs[-1][1]["error"]["type"] == "api_error"


def test_missing_done_after_finish_reason_still_completes():
    evs = events(run(sse(chunk({"content": "x"}), chunk({}, "stop")), cuts=[]))
    assert [n for n, _ in evs][-2:] == ["message_delta", "message_stop"]


def test_crlf_comments_and_unterminated_last_event():
    data = (
        b": keep-alive\r\n\r\n"
        + sse(chunk({"content": "a"})).replace(b"\n", b"\r\n")
        + b"data: "
        + orjson.dumps(chunk({}, "stop"))
        + b"\n\ndata: [DONE]"
    )
    message = assemble(events(run(data, cuts=[])))
    assert message["content"] == [{"type": "text", "text": "a"}] and message["stop_reason"] == "end_turn"


def test_malformed_event_fails_the_stream():
    evs = events(run(b"data: {not json}\n\n", cuts=[]))
    assert [n for n, _ in evs] == ["error"]


def test_message_events_replay_a_whole_message():
    """A backend that answers a stream request with one JSON body is replayed as events."""
    comp = {
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Hi",
                    "tool_calls": [
                        {"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": [1]}'}}
                    ],
                },
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
    }
    message = message_from_completion(comp, model="m", message_id="msg_r")
    rebuilt = assemble(events(b"".join(message_events(message))))
    assert rebuilt == message

"""Chat Completions SSE → exact Responses API stream events (the bridge's stream side).

Every chat chunk fed in is checked against the SDK's ChatCompletionChunk; every
event out against the SDK's event types, with sequence numbers 0, 1, 2, …
The chat bytes are split at every byte boundary (inside UTF-8 characters too)
and must give the same events."""

from __future__ import annotations

import itertools
import re

import orjson
import pytest
from openai.types.chat import ChatCompletionChunk

from router.core.errors import UpstreamError
from router.providers.bridge import ResponsesFromChat, SseDecoder, SseError
from router.providers.framing import LineTooLong
from tests.router.providers.openai_shapes import exact, exact_event, responses_sse

USAGE = {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
BODY = {"model": "m", "input": "hi", "stream": True}


def chunk(delta: dict | None = None, finish: str | None = None, *, usage: dict | None = None) -> bytes:
    obj: dict = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    if delta is None:
        obj["choices"] = []
        obj["usage"] = usage
    else:
        obj["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
    exact(ChatCompletionChunk, obj)
    return b"data: " + orjson.dumps(obj) + b"\n\n"


DONE = b"data: [DONE]\n\n"


def tool(index: int, *, call_id: str | None = None, name: str | None = None, args: str = "") -> dict:
    call: dict = {"index": index, "function": {"arguments": args}}
    if call_id is not None:
        call["id"], call["type"] = call_id, "function"
        call["function"]["name"] = name
    return call


def translator() -> ResponsesFromChat:
    return ResponsesFromChat(model="client-model", response_id="resp_1", created_at=3, request_body=BODY)


def run(*pieces: bytes, split: list[int] | None = None) -> tuple[list, ResponsesFromChat]:
    """Feed the chat bytes (cut at `split`), then finish; the events, validated."""
    t = translator()
    data = b"".join(pieces)
    cuts = [0, *(split or []), len(data)]
    out = t.start()
    for a, b in itertools.pairwise(cuts):
        out += t.feed(data[a:b])
    out += t.finish()
    events = [exact_event(e) for e in responses_sse(out)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    return events, t


def types(events) -> list[str]:
    return [e.type for e in events]


TEXT = (
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "안녕"}),
    chunk({"content": ", 👋 é"}),
    chunk({}, "stop"),
    chunk(usage=USAGE),
    DONE,
)


def test_text_stream() -> None:
    events, t = run(*TEXT)
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0].response
    assert created.id == "resp_1" and created.status == "in_progress" and created.output == [] and created.usage is None
    item_id = events[2].item.id
    assert item_id.startswith("msg_") and {e.item_id for e in events[3:8]} == {item_id}
    assert events[6].text == "안녕, 👋 é"
    final = events[-1].response
    assert final.status == "completed" and final.output_text == "안녕, 👋 é" and final.model == "client-model"
    assert final.usage.input_tokens == 9 and final.usage.output_tokens == 3 and final.usage.total_tokens == 12
    assert t.usage == final.usage.model_dump(exclude_unset=True) and not t.failed


def _normalized(events) -> list[dict]:
    text = orjson.dumps([e.model_dump(mode="json", exclude_unset=True) for e in events]).decode()
    return orjson.loads(re.sub(r'"(msg|fc)_[0-9a-f]{24}"', r'"\1_x"', text))


def test_every_byte_boundary_gives_the_same_events() -> None:
    data = b"".join(TEXT)
    assert "안".encode() in data
    whole = _normalized(run(data)[0])
    for cut in range(1, len(data)):
        assert _normalized(run(data, split=[cut])[0]) == whole, cut


def test_byte_by_byte_with_crlf_and_comments() -> None:
    data = b": keep-alive\r\n\r\n" + b"".join(TEXT).replace(b"\n", b"\r\n")
    events, _ = run(data, split=list(range(1, len(data))))
    assert _normalized(events) == _normalized(run(*TEXT)[0])


def test_tool_calls_stream_as_function_call_items() -> None:
    events, _ = run(
        chunk({"role": "assistant", "content": None, "tool_calls": [tool(0, call_id="call_a", name="get_weather")]}),
        chunk({"tool_calls": [tool(0, args='{"city":')]}),
        chunk({"tool_calls": [tool(0, args='"Seoul"}')]}),
        chunk({"tool_calls": [tool(1, call_id="call_b", name="get_time", args="{}")]}),
        chunk({}, "tool_calls"),
        chunk(usage=USAGE),
        DONE,
    )
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    added = events[2].item
    assert (added.call_id, added.name, added.arguments, added.status) == ("call_a", "get_weather", "", "in_progress")
    assert events[7].arguments == '{"city":"Seoul"}' and events[7].output_index == 0
    assert events[9].arguments == "{}" and events[9].output_index == 1
    final = events[-1].response
    assert [(i.call_id, i.name, i.arguments, i.status) for i in final.output] == [
        ("call_a", "get_weather", '{"city":"Seoul"}', "completed"),
        ("call_b", "get_time", "{}", "completed"),
    ]


def test_a_call_named_after_it_opened_keeps_its_name() -> None:
    events, _ = run(
        chunk({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_a", "type": "function", "function": {}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"name": "get_weather", "arguments": "{}"}}]}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert events[-1].response.output[0].name == "get_weather"


def test_text_then_a_tool_call() -> None:
    events, _ = run(
        chunk({"role": "assistant", "content": "Let me look."}),
        chunk({"tool_calls": [tool(0, call_id="call_a", name="get_weather", args="{}")]}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert types(events)[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    final = events[-1].response
    assert [i.type for i in final.output] == ["message", "function_call"]
    assert final.usage is None  # the provider sent none


@pytest.mark.parametrize(("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")])
def test_a_cut_stream_is_incomplete(finish, reason) -> None:
    events, _ = run(chunk({"role": "assistant", "content": "Hel"}), chunk({}, finish), chunk(usage=USAGE), DONE)
    assert events[-1].type == "response.incomplete"
    final = events[-1].response
    assert final.status == "incomplete" and final.incomplete_details.reason == reason
    assert final.output[0].status == "incomplete" and events[-2].item.status == "incomplete"


def test_a_refusal_streams_as_a_refusal_part() -> None:
    events, _ = run(
        chunk({"role": "assistant", "refusal": "I can't"}), chunk({"refusal": " help."}), chunk({}, "stop"), DONE
    )
    assert types(events)[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[6].refusal == "I can't help."
    assert events[-1].response.output[0].content[0].type == "refusal"


def test_an_empty_answer_is_an_empty_message() -> None:
    events, _ = run(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), DONE)
    assert types(events)[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[-1].response.output_text == ""


def test_an_error_frame_ends_the_stream_with_response_failed() -> None:
    error = {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}}
    events, t = run(
        chunk({"role": "assistant", "content": "Hi"}),
        b"data: " + orjson.dumps(error) + b"\n\n",
        chunk({"content": "ignored"}),
    )
    assert events[-1].type == "response.failed"
    failed = events[-1].response
    assert failed.status == "failed" and failed.error.code == "server_error" and failed.error.message == "overloaded"
    assert "response.output_text.done" not in types(events) and t.failed


def test_a_rate_limit_error_frame_keeps_its_code() -> None:
    error = {"error": {"message": "slow down", "type": "requests", "param": None, "code": "rate_limit_exceeded"}}
    events, _ = run(b"data: " + orjson.dumps(error) + b"\n\n")
    assert events[-1].response.error.code == "rate_limit_exceeded"


def test_no_done_sentinel_after_the_finish_reason_still_completes() -> None:
    events, _ = run(chunk({"role": "assistant", "content": "Hi"}), chunk({}, "stop"))
    assert events[-1].type == "response.completed"


@pytest.mark.parametrize("tail", [b"", DONE])
def test_a_stream_that_ends_before_its_last_chunk_is_an_upstream_error(tail) -> None:
    t = translator()
    t.start()
    with pytest.raises(UpstreamError):
        t.feed(chunk({"role": "assistant", "content": "Hi"}) + tail)
        t.finish()
    events = [exact_event(e) for e in responses_sse(t.fail(UpstreamError("cut")))]
    assert [e.type for e in events] == ["response.failed"] and events[0].sequence_number > 0


def test_fail_after_the_end_adds_nothing() -> None:
    t = translator()
    t.feed(b"".join(TEXT))
    t.finish()
    assert t.fail(UpstreamError("late")) == [] and t.finish() == []


@pytest.mark.parametrize("payload", [b"{not json}", b"[1]"])
def test_a_payload_that_is_no_json_object_is_an_sse_error(payload) -> None:
    with pytest.raises(SseError):
        translator().feed(b"data: " + payload + b"\n\n")


def test_the_sse_decoder() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"event: x\nid: 1\ndata: a\ndata:b\n\n:comment\n\ndata: c") == [b"a\nb"]
    assert decoder.close() == [b"c"]
    assert decoder.close() == []


def test_the_sse_decoder_refuses_endless_lines_and_events() -> None:
    with pytest.raises(LineTooLong):
        SseDecoder(max_line=64).feed(b"data: " + b"x" * 100)
    decoder = SseDecoder(max_line=64)
    with pytest.raises(LineTooLong):
        for _ in range(20):
            decoder.feed(b"data: 0123456789\n")

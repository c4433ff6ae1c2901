"""Ollama NDJSON streams → exact OpenAI stream events (chat and Responses)."""

from __future__ import annotations

import orjson
import pytest
from openai.types.chat import ChatCompletionChunk

from router.core.errors import UpstreamError
from router.providers.ollama import (
    ChatStream,
    NdjsonDecoder,
    NdjsonError,
    ResponsesStream,
)
from tests.router.providers.openai_shapes import chat_sse, exact, exact_event, responses_sse

META = {"model": "llama3:8b", "created_at": "2025-10-17T23:14:07Z"}


def frame(content: str = "", **message) -> dict:
    return {
        **META,
        "message": {"role": "assistant", "content": content, **message},
        "done": False,
    }


def done(reason: str = "stop", prompt: int = 5, completion: int = 3) -> dict:
    return {
        **META,
        "message": {"role": "assistant", "content": ""},
        "done": True,
        "done_reason": reason,
        "total_duration": 1,
        "prompt_eval_count": prompt,
        "eval_count": completion,
    }


CALL = {"function": {"name": "get_weather", "arguments": {"city": "서울"}}}


# -- NDJSON ------------------------------------------------------------------------------


def ndjson(*objs: dict) -> bytes:
    return b"".join(orjson.dumps(o) + b"\n" for o in objs)


def test_ndjson_split_at_every_byte_boundary_including_inside_utf8() -> None:
    """Each split point (even inside a multi-byte character) decodes the same."""
    objs = [frame("안녕"), frame("👋 é"), done()]
    data = ndjson(*objs)
    assert "안".encode() in data  # a 3-byte character the splits will cut
    for cut in range(1, len(data)):
        decoder = NdjsonDecoder()
        got = decoder.feed(data[:cut]) + decoder.feed(data[cut:]) + decoder.close()
        assert got == objs, cut


def test_ndjson_byte_by_byte_with_blank_lines_and_crlf() -> None:
    data = b"\n" + orjson.dumps({"a": 1}) + b"\r\n\r\n  \n" + orjson.dumps({"b": "ü"})
    decoder = NdjsonDecoder()
    got = [obj for i in range(len(data)) for obj in decoder.feed(data[i : i + 1])]
    assert got == [{"a": 1}]
    assert decoder.close() == [{"b": "ü"}]
    assert decoder.close() == []


@pytest.mark.parametrize("line", [b"{not json}\n", b"[1, 2]\n", b'"text"\n'])
def test_ndjson_bad_line_raises_value_error(line) -> None:
    with pytest.raises(ValueError):
        NdjsonDecoder().feed(line)
    assert issubclass(NdjsonError, ValueError)


def test_ndjson_bad_trailing_line_raises_on_close() -> None:
    decoder = NdjsonDecoder()
    assert decoder.feed(b'{"a":1}\n{"b":') == [{"a": 1}]
    with pytest.raises(ValueError):
        decoder.close()


def test_ndjson_overlong_line_is_refused() -> None:
    with pytest.raises(ValueError):
        NdjsonDecoder(max_line=10).feed(b'{"a": "0123456789"}')


# -- chat stream -------------------------------------------------------------------------


def chat_stream(include_usage: bool = False) -> ChatStream:
    return ChatStream(
        model="client-model",
        completion_id="chatcmpl-9",
        created=1700000000,
        include_usage=include_usage,
    )


def run_chat(frames: list[dict], include_usage: bool = False) -> tuple[ChatStream, list]:
    stream = chat_stream(include_usage)
    out = [b for f in frames for b in stream.feed(f)] + stream.finish()
    events = chat_sse(out)
    assert events[-1] == "[DONE]"
    for chunk in events[:-1]:
        exact(ChatCompletionChunk, chunk)
    return stream, events[:-1]


def test_text_stream_role_first_then_content_then_finish_then_done() -> None:
    stream, chunks = run_chat([frame("Hel"), frame("lo"), frame(""), done()])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas == [{"role": "assistant", "content": "Hel"}, {"content": "lo"}, {}]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None, None, "stop"]
    assert all(c["id"] == "chatcmpl-9" and c["model"] == "client-model" for c in chunks)
    assert all("usage" not in c for c in chunks)
    assert stream.finish_reason == "stop"
    assert stream.usage == {
        "prompt_tokens": 5,
        "completion_tokens": 3,
        "total_tokens": 8,
    }


def test_include_usage_adds_null_usage_and_a_final_usage_chunk() -> None:
    _, chunks = run_chat([frame("Hi"), done(prompt=11, completion=2)], include_usage=True)
    assert all(c["usage"] is None for c in chunks[:-1])
    last = chunks[-1]
    assert last["choices"] == []
    assert last["usage"] == {
        "prompt_tokens": 11,
        "completion_tokens": 2,
        "total_tokens": 13,
    }


def test_length_finish() -> None:
    stream, chunks = run_chat([frame("abc"), done("length")])
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert stream.finish_reason == "length"


def test_streamed_tool_calls_have_index_id_and_string_arguments() -> None:
    stream, chunks = run_chat(
        [
            frame(tool_calls=[CALL]),
            frame(tool_calls=[{"function": {"name": "now", "arguments": {}}}]),
            done(),
        ]
    )
    first = chunks[0]["choices"][0]["delta"]
    assert first["role"] == "assistant" and first["content"] is None
    calls = [tc for c in chunks for tc in c["choices"][0]["delta"].get("tool_calls", [])]
    assert [tc["index"] for tc in calls] == [0, 1]
    assert all(tc["id"].startswith("call_") and tc["type"] == "function" for tc in calls)
    assert calls[0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city":"서울"}',
    }
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert stream.finish_reason == "tool_calls"


def test_empty_answer_still_sends_the_role_chunk() -> None:
    _, chunks = run_chat([done()])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[1]["choices"][0]["finish_reason"] == "stop"


def test_thinking_frames_send_nothing_in_chat() -> None:
    stream = chat_stream()
    assert stream.feed(frame(thinking="hmm")) == []


def test_error_frame_raises_and_fail_ends_the_stream_with_an_error_event() -> None:
    stream = chat_stream()
    stream.feed(frame("partial"))
    with pytest.raises(UpstreamError) as err:
        stream.feed({"error": "an error was encountered while running the model"})
    [event] = chat_sse(stream.fail(err.value))
    assert event["error"]["code"] == "upstream_error"
    assert stream.finish() == [] and stream.fail(err.value) == []


def test_stream_ending_without_done_raises_on_finish() -> None:
    stream = chat_stream()
    stream.feed(frame("partial"))
    with pytest.raises(UpstreamError):
        stream.finish()


def test_frames_after_done_are_dropped_and_finish_is_idempotent() -> None:
    stream = chat_stream()
    stream.feed(done())
    assert stream.feed(frame("late")) == []
    assert stream.finish()[-1] == b"data: [DONE]\n\n"
    assert stream.finish() == []


def test_chat_stream_from_raw_ndjson_bytes_split_anywhere() -> None:
    data = ndjson(frame("가나"), frame("다"), done())
    decoder, stream = NdjsonDecoder(), chat_stream()
    out = []
    for i in range(0, len(data), 7):
        for obj in decoder.feed(data[i : i + 7]):
            out += stream.feed(obj)
    out += stream.finish()
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chat_sse(out)[:-1])
    assert text == "가나다"


# -- responses stream ------------------------------------------------------------------

BODY = {"model": "client-model", "input": "hi", "stream": True}


def responses_stream(body: dict | None = None) -> ResponsesStream:
    return ResponsesStream(
        model="client-model",
        response_id="resp_7",
        created_at=1700000000,
        request_body=body or BODY,
    )


def run_responses(frames: list[dict], body: dict | None = None) -> tuple[ResponsesStream, list[dict]]:
    stream = responses_stream(body)
    out = stream.start() + [b for f in frames for b in stream.feed(f)] + stream.finish()
    events = responses_sse(out)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    for event in events:
        exact_event(event)
    return stream, events


def kinds(events: list[dict]) -> list[str]:
    return [e["type"] for e in events]


def test_text_response_stream_event_order_and_final_object() -> None:
    stream, events = run_responses([frame("Hel"), frame("lo"), done()])
    assert kinds(events) == [
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
    assert events[0]["response"]["status"] == "in_progress"
    assert events[0]["response"]["output"] == []
    final = exact_event(events[-1]).response
    assert final.status == "completed" and final.output_text == "Hello"
    assert final.usage.input_tokens == 5 and final.usage.output_tokens == 3
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:8])
    assert events[6]["text"] == "Hello"
    assert stream.finish_reason == "stop"


def test_reasoning_then_text_then_tool_call() -> None:
    _, events = run_responses(
        [
            frame(thinking="think "),
            frame(thinking="more"),
            frame("ok"),
            frame(tool_calls=[CALL]),
            done(),
        ]
    )
    assert kinds(events)[2:] == [
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
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
    final = exact_event(events[-1]).response
    assert [item.type for item in final.output] == [
        "reasoning",
        "message",
        "function_call",
    ]
    assert final.output[0].content[0].text == "think more"
    call = final.output[2]
    assert call.arguments == '{"city":"서울"}' and call.call_id.startswith("call_")
    indexes = [e["output_index"] for e in events if e["type"] == "response.output_item.done"]
    assert indexes == [0, 1, 2]


def test_length_ends_with_response_incomplete() -> None:
    stream, events = run_responses([frame("abc"), done("length")])
    assert events[-1]["type"] == "response.incomplete"
    final = exact_event(events[-1]).response
    assert final.status == "incomplete"
    assert final.incomplete_details.reason == "max_output_tokens"
    assert final.output[0].status == "incomplete"
    assert stream.finish_reason == "length"


def test_empty_answer_is_an_empty_message() -> None:
    _, events = run_responses([done()])
    final = exact_event(events[-1]).response
    assert [item.type for item in final.output] == ["message"]
    assert final.output_text == ""


def test_failure_after_start_emits_response_failed() -> None:
    stream = responses_stream()
    out = stream.feed(frame("par"))
    with pytest.raises(UpstreamError) as err:
        stream.feed({"error": "model runner crashed"})
    out += stream.fail(err.value)
    events = responses_sse(out)
    for event in events:
        exact_event(event)
    failed = exact_event(events[-1]).response
    assert failed.status == "failed" and failed.error.code == "server_error"
    assert "model runner crashed" in failed.error.message
    assert stream.finish() == [] and stream.feed(done()) == []


def test_responses_stream_ending_without_done_raises() -> None:
    stream = responses_stream()
    stream.feed(frame("x"))
    with pytest.raises(UpstreamError):
        stream.finish()


def test_start_is_emitted_once_even_if_feed_comes_first() -> None:
    stream = responses_stream()
    first = responses_sse(stream.feed(frame("a")))
    assert kinds(first)[:2] == ["response.created", "response.in_progress"]
    assert stream.start() == []


def test_stream_response_echoes_request_tools_and_format() -> None:
    body = {
        **BODY,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "parameters": {"type": "object"},
            }
        ],
        "text": {"format": {"type": "json_object"}},
        "max_output_tokens": 32,
    }
    _, events = run_responses([frame("{}"), done()], body)
    final = exact_event(events[-1]).response
    assert final.tools[0].name == "get_weather"
    assert final.text.format.type == "json_object"
    assert final.max_output_tokens == 32


def test_stream_limit_hit_while_thinking_matches_the_non_streamed_answer() -> None:
    _, events = run_responses([frame(thinking="hm"), done("length")])
    final = exact_event(events[-1]).response
    assert final.status == "incomplete"
    assert [(item.type, item.status) for item in final.output] == [("reasoning", "incomplete")]

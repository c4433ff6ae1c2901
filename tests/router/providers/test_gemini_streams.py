"""Gemini SSE streams → exact `chat.completion.chunk` events."""

from __future__ import annotations

import orjson
import pytest
from google.genai import types as gt
from openai.types.chat import ChatCompletionChunk

from router.core.errors import UpstreamError
from router.providers.gemini import Blocked, ChatStream, SseDecoder, SseError
from tests.router.providers.openai_shapes import chat_sse, exact


def frame(*parts: dict, finish: str | None = None, index: int = 0, usage: dict | None = None) -> dict:
    candidate: dict = {"content": {"role": "model", "parts": list(parts)}, "index": index}
    if finish:
        candidate["finishReason"] = finish
    obj = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash", "responseId": "r"}
    obj["usageMetadata"] = usage or {"promptTokenCount": 4, "totalTokenCount": 4}
    gt.GenerateContentResponse.model_validate(obj)
    return obj


FINAL_USAGE = {"promptTokenCount": 4, "candidatesTokenCount": 3, "thoughtsTokenCount": 2, "totalTokenCount": 9}


def sse(*objs: dict, sep: bytes = b"\r\n\r\n") -> bytes:
    return b"".join(b"data: " + orjson.dumps(o) + sep for o in objs)


def run(frames: list[dict], include_usage: bool = False) -> tuple[ChatStream, list]:
    stream = ChatStream(model="m", completion_id="chatcmpl-1", created=1, include_usage=include_usage)
    out = [b for f in frames for b in stream.feed(f)] + stream.finish()
    events = chat_sse(out)
    assert events[-1] == "[DONE]"
    return stream, [exact(ChatCompletionChunk, e) for e in events[:-1]]


def test_sse_split_at_every_byte_boundary_including_inside_utf8() -> None:
    """Each split point (even inside a multi-byte character, or between \\r and \\n)
    decodes the same frames."""
    objs = [frame({"text": "안녕"}), frame({"text": "👋 é"}), frame({"text": "!"}, finish="STOP", usage=FINAL_USAGE)]
    for sep in (b"\r\n\r\n", b"\n\n"):
        data = sse(*objs, sep=sep)
        assert "안".encode() in data
        for cut in range(1, len(data)):
            decoder = SseDecoder()
            got = decoder.feed(data[:cut]) + decoder.feed(data[cut:]) + decoder.close()
            assert got == objs, cut


def test_sse_byte_by_byte_and_odd_fields() -> None:
    data = b': keepalive\r\nevent: message\r\ndata: {"a":\r\ndata: 1}\r\n\r\ndata: [DONE]\r\n\r\ndata: {"b":2}'
    decoder = SseDecoder()
    got = [obj for i in range(len(data)) for obj in decoder.feed(data[i : i + 1])] + decoder.close()
    assert got == [{"a": 1}, {"b": 2}]
    with pytest.raises(SseError):
        SseDecoder().feed(b"data: [1, 2]\n\n")


def test_text_stream_with_usage() -> None:
    frames = [
        frame({"text": "thinking", "thought": True}),
        frame({"text": "Hel"}),
        frame({"text": "lo"}, finish="STOP", usage=FINAL_USAGE),
    ]
    stream, chunks = run(frames, include_usage=True)
    assert chunks[0].choices[0].delta.role == "assistant"
    # The thought part comes back as reasoning_content, never as content.
    assert chunks[0].choices[0].delta.model_extra == {"reasoning_content": "thinking"}
    assert chunks[0].choices[0].delta.content == ""
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    assert all("reasoning_content" not in (c.choices[0].delta.model_extra or {}) for c in chunks[1:] if c.choices)
    assert [c.choices[0].finish_reason for c in chunks if c.choices] == [None, None, None, "stop"]
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump(exclude_none=True) == {
        "prompt_tokens": 4,
        "completion_tokens": 5,
        "total_tokens": 9,
        "completion_tokens_details": {"reasoning_tokens": 2},
    }
    assert all(c.usage is None for c in chunks[:-1])
    assert stream.finish_reason == "stop"


def test_no_usage_chunk_without_include_usage() -> None:
    _, chunks = run([frame({"text": "x"}, finish="MAX_TOKENS")])
    assert [c.choices[0].finish_reason for c in chunks] == [None, "length"]
    assert all(c.usage is None for c in chunks)


def test_tool_call_stream() -> None:
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}, "thoughtSignature": "c2ln"}
    frames = [frame(call, {"functionCall": {"name": "get_time", "args": {}}}), frame(finish="STOP")]
    _, chunks = run(frames)
    calls = chunks[0].choices[0].delta.tool_calls
    assert [(c.index, c.function.name, c.function.arguments) for c in calls] == [
        (0, "get_weather", '{"city":"Paris"}'),
        (1, "get_time", "{}"),
    ]
    assert all(c.id.startswith("call_") and c.type == "function" for c in calls)
    assert chunks[0].choices[0].delta.content is None
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_two_candidates_are_two_choices() -> None:
    frames = [
        frame({"text": "a"}, index=0),
        frame({"text": "b"}, index=1),
        frame(finish="STOP", index=0),
        frame(finish="SAFETY", index=1),
    ]
    _, chunks = run(frames)
    by_index: dict[int, list] = {}
    for c in chunks:
        by_index.setdefault(c.choices[0].index, []).append(c.choices[0])
    assert [d.delta.role for d in (by_index[0][0], by_index[1][0])] == ["assistant", "assistant"]
    assert [by_index[0][-1].finish_reason, by_index[1][-1].finish_reason] == ["stop", "content_filter"]


def test_blocked_prompt_and_early_end() -> None:
    stream = ChatStream(model="m", completion_id="chatcmpl-1", created=1, include_usage=False)
    with pytest.raises(Blocked):
        stream.feed({"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}})
    stream = ChatStream(model="m", completion_id="chatcmpl-1", created=1, include_usage=False)
    stream.feed(frame({"text": "half"}))
    with pytest.raises(UpstreamError):
        stream.finish()
    (event,) = chat_sse(stream.fail(UpstreamError("gone")))
    assert event["error"]["code"] == "upstream_error"
    assert stream.fail(UpstreamError("again")) == []

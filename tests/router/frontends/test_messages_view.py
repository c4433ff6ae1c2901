"""The /v1/messages stream wrapper in-process: translation, closing, whole-body answers."""

from __future__ import annotations

import orjson

from router.frontends import anthropic
from router.frontends.messages import _translated
from tests.router.frontends.sse import assemble, chunk, events, sse


def wrap(source, stream: bool = True, *, status: int = 200, event_stream: bool = True):
    """The door's translation over a routed relay (`source`: OpenAI wire bytes)."""
    body = {"model": "asked", "max_tokens": 8, "stream": stream, "messages": [{"role": "user", "content": "x"}]}
    conversion = anthropic.to_openai(body)
    translator = anthropic.MessageStream(model="asked", message_id="msg_v")
    return _translated(source, translator, conversion, "msg_v", status=status, event_stream=event_stream)


async def collect(gen) -> bytes:
    return b"".join([part async for part in gen])


async def test_chunks_are_translated_as_they_come():
    data = sse(chunk({"content": "Hel"}), chunk({"content": "lo"}), chunk({}, "stop"), "[DONE]")

    async def relay():
        for i in range(0, len(data), 5):
            yield data[i : i + 5]

    message = assemble(events(await collect(wrap(relay()))))
    assert message["content"] == [{"type": "text", "text": "Hello"}] and message["model"] == "asked"


async def test_closing_the_stream_closes_the_pipeline_relay():
    """A client disconnect closes our generator; the relay's `finally` (which closes
    the upstream) must run at once, not whenever the garbage collector gets to it."""
    closed = []

    async def relay():
        try:
            yield sse(chunk({"content": "first"}))
            yield sse(chunk({"content": "never read"}))
        finally:
            closed.append(True)

    outer = wrap(relay())
    first = await anext(outer)
    assert b"message_start" in first and b"first" in first
    await outer.aclose()
    assert closed == [True]


async def test_a_whole_json_answer_to_a_stream_request_is_replayed_as_events():
    completion = {
        "choices": [{"index": 0, "finish_reason": "length", "message": {"role": "assistant", "content": "Hi"}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 1},
    }

    async def relay():
        yield orjson.dumps(completion)

    message = assemble(events(await collect(wrap(relay(), event_stream=False))))
    assert message["content"] == [{"type": "text", "text": "Hi"}] and message["stop_reason"] == "max_tokens"
    assert message["usage"] == {"input_tokens": 2, "output_tokens": 1}


async def test_a_whole_error_body_becomes_one_error_event():
    async def relay():
        yield b'{"error": {"message": "slow down", "type": "requests", "code": "rate_limit_exceeded"}}'

    assert events(await collect(wrap(relay(), status=429, event_stream=False))) == [
        ("error", {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    ]


async def test_a_failure_inside_the_relay_ends_with_an_error_event():
    async def relay():
        yield sse(chunk({"content": "a"}))
        raise RuntimeError("bug")

    evs = events(await collect(wrap(relay())))
    assert evs[-1][0] == "error" and [n for n, _ in evs].count("message_stop") == 0

"""The response cache's pure parts: entry names, the memory tier's bound,
and a stream assembled then replayed (router/respcache/)."""

from __future__ import annotations

import orjson
import pytest

from router.providers.framing import JsonEvents
from router.respcache import assemble, replay
from router.respcache.key import NO_CACHE, NO_STORE, deterministic, digest, directive
from router.respcache.memory import ENTRY_OVERHEAD, Entry, MemoryTier

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def test_key_order_and_stream_fields_do_not_split_entries():
    name = digest("chat/completions", "m", "m", "|", BODY)
    reordered = {"temperature": 0, "messages": [{"content": "hi", "role": "user"}], "model": "m"}
    streamed = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    assert digest("chat/completions", "m", "m", "|", reordered) == name
    assert digest("chat/completions", "m", "m", "|", streamed) == name


@pytest.mark.parametrize(
    "change",
    [
        {"endpoint": "completions"},
        {"model": "n"},
        {"target": "n"},
        {"scope": "operator:1|"},
        {"body": {**BODY, "max_tokens": 5}},
        {"body": {**BODY, "messages": [{"role": "user", "content": "hi!"}]}},
    ],
)
def test_anything_else_names_another_entry(change):
    args = {"endpoint": "chat/completions", "model": "m", "target": "m", "scope": "|", "body": BODY}
    assert digest(**{**args, **change}) != digest(**args)


def test_directives():
    assert directive(None) == ""
    assert directive("max-age=0") == ""
    assert directive("No-Cache") == NO_CACHE
    assert directive("no-cache, no-store") == NO_STORE


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"temperature": 0}, True),
        ({"temperature": 0.0, "n": 1}, True),
        ({"seed": 3}, True),
        ({}, False),
        ({"temperature": 0.2, "seed": 3}, False),
        ({"temperature": 0, "n": 2}, False),
        ({"temperature": False}, False),
    ],
)
def test_deterministic(body, expected):
    assert deterministic("chat/completions", body) is expected
    assert deterministic("embeddings", body) is True


def _entry(body: bytes, model: str = "m", expires: float = 100.0) -> Entry:
    return Entry(body, 0.0, expires, model, True)


def test_the_memory_tier_stays_under_its_bytes_and_evicts_the_least_recent():
    tier = MemoryTier(10 * (1000 + ENTRY_OVERHEAD))
    for i in range(1000):  # a workload of distinct requests
        assert tier.put(i.to_bytes(4, "big"), _entry(b"x" * 1000))
        assert tier.bytes <= tier.max_bytes
        if i == 5:
            assert tier.get((0).to_bytes(4, "big"), 1.0) is not None  # 0 is now the most recent
    assert len(tier) == 10
    assert tier.get((999).to_bytes(4, "big"), 1.0) is not None
    assert tier.get((1).to_bytes(4, "big"), 1.0) is None


def test_the_memory_tier_refuses_what_cannot_fit_expires_and_purges():
    tier = MemoryTier(2000)
    assert not tier.put(b"big", _entry(b"x" * 2000))
    assert tier.bytes == 0
    tier.put(b"a", _entry(b"a", "m", expires=10.0))
    tier.put(b"b", _entry(b"b", "n"))
    assert tier.get(b"a", 10.0) is None and tier.bytes == len(b"b") + ENTRY_OVERHEAD
    tier.put(b"a", _entry(b"a", "m"))
    assert tier.purge("m") == 1 and tier.get(b"b", 1.0) is not None
    assert tier.purge() == 1 and tier.bytes == 0
    tier.put(b"a", _entry(b"a"))
    tier.shrink(0)
    assert len(tier) == 0 and tier.bytes == 0


def _sse(*objs) -> bytes:
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def _chunk(delta, finish=None, index=0):
    return {**HEAD, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _feed(asm, data: bytes, step: int = 7):
    for i in range(0, len(data), step):  # cut anywhere, even inside a frame
        asm.feed(data[i : i + step])


def test_a_chat_stream_assembles_and_replays_to_the_same_stream_content():
    usage = {"prompt_tokens": 1, "completion_tokens": 3, "total_tokens": 4}
    live = _sse(
        _chunk({"role": "assistant", "content": ""}),
        _chunk({"content": "Hel"}),
        _chunk({"content": "lo ☃"}),
        _chunk({"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                "function": {"name": "f", "arguments": ""}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a":'}}]}),
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": " 1}"}}]}),
        _chunk({}, "tool_calls"),
        {**HEAD, "choices": [], "usage": usage},
    )
    asm = assemble.assembler("chat/completions", True, 10_000)
    _feed(asm, live)
    obj = orjson.loads(asm.result())
    message = obj["choices"][0]["message"]
    assert obj["object"] == "chat.completion" and obj["usage"] == usage and asm.usage
    assert message["content"] == "Hello ☃" and obj["choices"][0]["finish_reason"] == "tool_calls"
    assert message["tool_calls"] == [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]
    replayed = replay.chat(obj, usage=True)
    events = JsonEvents()
    chunks = events.feed(replayed) + events.close()
    assert replayed.endswith(b"data: [DONE]\n\n")
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "Hello ☃"
    assert chunks[-1]["usage"] == usage and all(c["usage"] is None for c in chunks[:-1])
    again = assemble.assembler("chat/completions", True, 10_000)
    again.feed(replayed)
    assert orjson.loads(again.result()) == obj  # replay ∘ assemble is stable


def test_a_cut_an_erroring_or_an_oversized_stream_assembles_to_nothing():
    complete = _sse(_chunk({"content": "Hello"}), _chunk({}, "stop"))
    cut = assemble.assembler("chat/completions", True, 10_000)
    cut.feed(complete[: complete.index(b'"stop"')])
    assert cut.result() is None
    failed = assemble.assembler("chat/completions", True, 10_000)
    failed.feed(_sse(_chunk({"content": "Hel"})) .replace(b"data: [DONE]", b'data: {"error": {"message": "x"}}'))
    failed.feed(_sse(_chunk({}, "stop")))
    assert failed.result() is None and not failed.live
    big = assemble.assembler("chat/completions", True, 4)
    big.feed(complete)
    assert big.result() is None
    whole = assemble.assembler("chat/completions", False, 10)
    whole.feed(b'{"a": 1}')
    assert whole.result() == b'{"a": 1}'
    whole.feed(b"    ")
    assert whole.result() is None


def test_a_responses_stream_is_its_final_response_and_replays_as_events():
    response = {
        "id": "resp_1", "object": "response", "created_at": 1, "status": "completed", "model": "m",
        "output": [
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Hi", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}",
             "status": "completed"},
        ],
        "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
    }
    events = replay.responses(response)
    asm = assemble.assembler("responses", True, 10_000)
    _feed(asm, events)
    assert orjson.loads(asm.result()) == response
    decoded = JsonEvents().feed(events)
    assert [e["sequence_number"] for e in decoded] == list(range(len(decoded)))
    assert "".join(e["delta"] for e in decoded if e["type"] == "response.output_text.delta") == "Hi"
    failed = assemble.assembler("responses", True, 10_000)
    failed.feed(events.replace(b"response.completed", b"response.failed"))
    assert failed.result() is None

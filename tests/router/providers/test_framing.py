"""router.providers.framing: the one line decoder every relay uses (issue 34)."""

from __future__ import annotations

import pytest

from router.providers.framing import (
    MAX_LINE,
    FramingError,
    JsonEvents,
    JsonLines,
    Lines,
    LineTooLong,
    NdjsonError,
    SseError,
    SseEvents,
)

STREAM = (
    b': comment\r\n'
    b'data: {"model":"m-served","choices":[{"delta":{"content":"\xec\x95\x88\xeb\x85\x95 \xf0\x9f\x91\x8b"}}]}\r\n\r\n'
    b'event: x\ndata: {"a":\ndata: 1}\n\n'
    b'data: [DONE]\n\n'
)


def test_lines_give_the_stream_back_byte_for_byte_whatever_the_cuts():
    """Cut at every two points (inside a UTF-8 character, between CR and LF
    too), the blocks plus the rest are the stream, and each block ends a line."""
    assert "안".encode() in STREAM
    for i in range(len(STREAM)):
        for j in range(i, len(STREAM), 7):
            lines = Lines()
            blocks = [lines.feed(STREAM[:i]), lines.feed(STREAM[i:j]), lines.feed(STREAM[j:])]
            assert all(not b or b.endswith(b"\n") for b in blocks), (i, j)
            assert b"".join(blocks) + lines.rest() == STREAM, (i, j)


def test_lines_keep_an_unterminated_last_line_for_rest():
    lines = Lines()
    assert lines.feed(b"a\nb") == b"a\n"
    assert lines.feed(b"c") == b""
    assert lines.rest() == b"bc"
    assert lines.rest() == b""


def test_a_line_over_the_cap_is_refused_as_soon_as_it_passes_it():
    """What is held never exceeds the cap by more than one chunk: a line fed
    1 KiB at a time is refused at the chunk that takes it past 64 KiB."""
    lines = Lines(max_line=64 * 1024)
    fed = 0
    with pytest.raises(LineTooLong):
        while True:
            lines.feed(b"x" * 1024)
            fed += 1
    assert fed == 64  # the 65th chunk passed the cap
    assert issubclass(LineTooLong, FramingError) and issubclass(FramingError, ValueError)
    assert MAX_LINE == 16 * 1024 * 1024


def test_a_line_at_the_cap_passes_and_one_completed_past_it_is_refused():
    lines = Lines(max_line=10)
    assert lines.feed(b"0123456789") == b""
    assert lines.feed(b"\nab") == b"0123456789\n"
    with pytest.raises(LineTooLong):
        lines.feed(b"cdefghijk\n")  # held 2 + 9 more before its newline: 11


def test_an_event_of_many_lines_over_the_cap_is_refused():
    events = SseEvents(max_line=64)
    with pytest.raises(LineTooLong):
        for _ in range(20):
            events.feed(b"data: 0123456789\n")


def test_sse_events_whatever_the_cuts():
    want = [
        b'{"model":"m-served","choices":[{"delta":{"content":"\xec\x95\x88\xeb\x85\x95 \xf0\x9f\x91\x8b"}}]}',
        b'{"a":\n1}',
        b"[DONE]",
    ]
    for cut in range(1, len(STREAM)):
        events = SseEvents()
        assert events.feed(STREAM[:cut]) + events.feed(STREAM[cut:]) + events.close() == want, cut
    one = SseEvents()
    assert [e for i in range(len(STREAM)) for e in one.feed(STREAM[i : i + 1])] + one.close() == want


def test_the_last_event_without_its_blank_line_is_given_by_close():
    events = SseEvents()
    assert events.feed(b"data: a\n\ndata: b") == [b"a"]
    assert events.close() == [b"b"]
    assert events.close() == []


def test_json_events_and_lines_decode_objects_and_refuse_others():
    events = JsonEvents()
    assert events.feed(STREAM) == [
        {"model": "m-served", "choices": [{"delta": {"content": "안녕 👋"}}]},
        {"a": 1},
    ]  # [DONE] carries no object
    with pytest.raises(SseError):
        JsonEvents().feed(b"data: [1]\n\n")
    lines = JsonLines()
    assert lines.feed(b'{"a":1}\r\n\n  \n{"b"') == [{"a": 1}]
    assert lines.feed(b":2}") == [] and lines.close() == [{"b": 2}]
    with pytest.raises(NdjsonError):
        JsonLines().feed(b"<html>\n")

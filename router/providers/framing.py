"""Line framing of upstream streams: the one decoder every relay uses.

SSE (OpenAI, Gemini, Anthropic, the bridge's own chat stream) and NDJSON
(Ollama) are lines; `Lines` cuts bytes into whole lines, `SseEvents` and
`JsonLines` / `JsonEvents` read events and JSON objects from them, and the
OpenAI passthrough rewrites the served model name in `Lines`' blocks.

Invariants:
- Chunks may end anywhere, even inside a UTF-8 character: lines are split on
  the newline byte, which never occurs inside a multi-byte sequence.
- A partial line is held as a list of its chunks and joined once, when its
  newline arrives: a line costs linear time however finely it is chunked.
- Nothing a peer sends is held past `max_line` bytes (`MAX_LINE`, 16 MiB, by
  default): a line, or an SSE event's data, that grows past it raises
  `LineTooLong` as soon as it does. The caller ends the stream and closes
  the upstream (`relay.failed_early` / `relay.mid_stream_error`).
- `Lines.feed` gives the complete lines byte for byte as they came (CR, LF
  and all), so a relay that passes them on changes nothing it did not mean to.

Pure: no I/O, no asyncio.
"""

from __future__ import annotations

import orjson

MAX_LINE = 16 * 1024 * 1024
DONE = b"[DONE]"  # OpenAI's (and Gemini's) last SSE event: no JSON object in it


class FramingError(ValueError):
    """An upstream stream that is not the lines of what it promised."""


class LineTooLong(FramingError):
    """A line (or an SSE event) longer than the cap: the stream is refused."""


class SseError(FramingError):
    """An SSE event's data is not a JSON object."""


class NdjsonError(FramingError):
    """An NDJSON line is not a JSON object."""


class Lines:
    """Bytes in arbitrary chunks → blocks of whole lines."""

    __slots__ = ("_max", "_parts", "_size")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._parts: list[bytes] = []  # the partial last line
        self._size = 0
        self._max = max_line

    def feed(self, chunk: bytes) -> bytes:
        """The lines `chunk` completes, up to and including its last newline
        (b"" when it completes none); the rest is held."""
        end = chunk.rfind(b"\n") + 1
        parts = self._parts
        if not end:
            if chunk:
                parts.append(chunk)
                self._size += len(chunk)
                self._check(self._size)
            return b""
        if parts:
            self._check(self._size + chunk.find(b"\n"))
            parts.append(chunk[:end])
            block = b"".join(parts)
        else:
            block = chunk if end == len(chunk) else chunk[:end]
        rest = chunk[end:]
        self._parts = [rest] if rest else []
        self._size = len(rest)
        self._check(self._size)
        return block

    def rest(self) -> bytes:
        """The unterminated last line (the stream ended without a newline); emptied."""
        rest = b"".join(self._parts)
        self._parts, self._size = [], 0
        return rest

    def _check(self, size: int) -> None:
        if size > self._max:
            raise LineTooLong(f"a line of the upstream's stream is longer than {self._max} bytes")


class SseEvents:
    """Bytes in arbitrary chunks → the data of each complete SSE event.

    Lines end in LF or CRLF; the `data:` lines of one event are joined with a
    newline (the SSE rule); comments and other fields (`event:`, `id:`,
    `retry:`) are skipped: every stream we read says its kind in the data."""

    __slots__ = ("_data", "_lines", "_max", "_size")

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._lines = Lines(max_line)
        self._data: list[bytes] = []  # the data lines of the event being read
        self._size = 0
        self._max = max_line

    def feed(self, chunk: bytes) -> list[bytes]:
        block = self._lines.feed(chunk)
        if not block:
            return []
        lines = block.split(b"\n")
        lines.pop()  # the b"" after the block's last newline
        return self._events(lines)

    def close(self) -> list[bytes]:
        """The last event, for a stream that did not end with a blank line."""
        rest = self._lines.rest()
        return self._events([rest, b""]) if rest or self._data else []

    def _events(self, lines: list[bytes]) -> list[bytes]:
        out = []
        for line in lines:
            line = line.removesuffix(b"\r")
            if not line:
                if self._data:
                    out.append(b"\n".join(self._data))
                    self._data, self._size = [], 0
            elif line.startswith(b"data:"):
                value = line[5:]
                value = value[1:] if value.startswith(b" ") else value
                self._data.append(value)
                self._size += len(value)
                if self._size > self._max:
                    raise LineTooLong(f"an event of the upstream's stream is longer than {self._max} bytes")
        return out


class JsonEvents:
    """Bytes → the JSON object of each complete SSE event (`[DONE]` skipped);
    an event whose data is not a JSON object raises `SseError`."""

    __slots__ = ("_events",)

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._events = SseEvents(max_line)

    def feed(self, chunk: bytes) -> list[dict]:
        return [json_object(data, SseError) for data in self._events.feed(chunk) if data.strip() != DONE]

    def close(self) -> list[dict]:
        return [json_object(data, SseError) for data in self._events.close() if data.strip() != DONE]


class JsonLines:
    """NDJSON: bytes → the JSON object of each complete non-blank line; a line
    that is not a JSON object raises `NdjsonError`."""

    __slots__ = ("_lines",)

    def __init__(self, max_line: int = MAX_LINE) -> None:
        self._lines = Lines(max_line)

    def feed(self, chunk: bytes) -> list[dict]:
        block = self._lines.feed(chunk)
        if not block:
            return []
        return [json_object(line, NdjsonError) for line in block.split(b"\n") if line.strip()]

    def close(self) -> list[dict]:
        """The last line, for a stream that did not end with a newline."""
        rest = self._lines.rest()
        return [json_object(rest, NdjsonError)] if rest.strip() else []


def json_object(data: bytes, error: type[FramingError] = FramingError) -> dict:
    """`data` parsed, which must be a JSON object (`error` otherwise)."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise error(f"not JSON: {data[:200]!r}") from exc
    if not isinstance(obj, dict):
        raise error(f"not a JSON object: {data[:200]!r}")
    return obj

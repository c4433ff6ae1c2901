"""OpenAI `chat.completion.chunk` SSE bytes → Anthropic Messages SSE events.

Invariants:
- Pure: no Django, no I/O. Bytes may be split anywhere (inside a line, inside
  a UTF-8 sequence): only complete SSE events are parsed, the rest is kept.
- Every frame is `event: <type>` + `data: <json with the same type>` (the SDK
  skips events without a name).
- Order: `message_start`, `ping`, then content blocks one after another
  (`content_block_start`, deltas, `content_block_stop`), then `message_delta`
  (stop_reason, cumulative usage) and `message_stop`. A failure ends the
  stream with one `event: error` frame; nothing follows a terminal frame.
- A text block opens at the first non-empty text; a tool call opens a
  `tool_use` block at its first fragment and its argument fragments become
  `input_json_delta`s verbatim. Switching block kind closes the open block.
  OpenAI backends stream parallel tool calls one after another; a fragment
  that comes back to an earlier call is still sent, on that call's index.
"""

from __future__ import annotations

from typing import Any

import orjson

from router.frontends.anthropic_response import error_type, obj, stop_reason, string, usage


def frame(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **payload}) + b"\n\n"


def error_frame(kind: str, message: str) -> bytes:
    return frame("error", {"error": {"type": kind, "message": message}})


def _stream_error_type(error: dict[str, Any]) -> str:
    """The Anthropic type of an OpenAI-shaped error event sent mid-stream."""
    code = error.get("code")
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 600:
        return error_type(code)  # vLLM puts the HTTP status in `code`
    if error.get("type") == "server_overloaded" or code == "capacity_exhausted":
        return "overloaded_error"
    return "api_error"


class MessageStream:
    """Feed upstream bytes, get Anthropic frames back.

    `feed(bytes)` → frames for every complete upstream event; `finish()` when
    the upstream ended; `fail(message)` when it broke. `done` is True once a
    terminal frame (`message_stop` or `error`) was produced.
    """

    def __init__(self, *, model: str, message_id: str, stop_sequences: tuple[str, ...] = ()) -> None:
        self._model = model
        self._id = message_id
        self._stops = stop_sequences
        self._tail = b""
        self._data: list[bytes] = []
        self._started = False
        self._open: int | None = None  # index of the open block
        self._open_kind: str | None = None  # "text" | "tool_use"
        self._next = 0
        self._tools: dict[int, int] = {}  # OpenAI tool-call index → block index
        self._last_tool: int | None = None
        self._finish: Any = None
        self._matched: Any = None
        self._usage: Any = None
        self.done = False

    # -- framing -------------------------------------------------------------

    def feed(self, data: bytes) -> list[bytes]:
        if self.done:
            return []
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        out: list[bytes] = []
        for line in lines:
            out.extend(self._line(line.rstrip(b"\r")))
            if self.done:
                break
        return out

    def finish(self) -> list[bytes]:
        """The upstream ended: complete the message, or fail when it was cut short."""
        out: list[bytes] = []
        if self._tail:
            out.extend(self._line(self._tail.rstrip(b"\r")))
            self._tail = b""
        if self._data and not self.done:
            out.extend(self._dispatch(b"\n".join(self._data)))
            self._data = []
        if self.done:
            return out
        if self._finish is not None:
            return out + self._complete()  # a backend that omits `data: [DONE]`
        return out + self.fail("The backend ended the stream before the message was complete.")

    def fail(self, message: str, kind: str = "api_error") -> list[bytes]:
        if self.done:
            return []
        self.done = True
        return [error_frame(kind, message)]

    def _line(self, line: bytes) -> list[bytes]:
        if not line:
            if not self._data:
                return []
            payload, self._data = b"\n".join(self._data), []
            return self._dispatch(payload)
        if line.startswith(b":"):
            return []  # SSE comment (keep-alive)
        name, _, value = line.partition(b":")
        if name == b"data":
            self._data.append(value[1:] if value.startswith(b" ") else value)
        return []

    # -- events --------------------------------------------------------------

    def _dispatch(self, payload: bytes) -> list[bytes]:
        if payload.strip() == b"[DONE]":
            return self._complete()
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return self.fail("The backend sent a malformed stream event.")
        if not isinstance(obj, dict):
            return []
        error = obj.get("error")
        if isinstance(error, dict) and "choices" not in obj:
            return self.fail(string(error.get("message"), "The backend failed."), _stream_error_type(error))
        out = self._start()
        if isinstance(obj.get("usage"), dict):
            self._usage = obj["usage"]
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return out
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n=1: a single message
            delta = choice.get("delta")
            if isinstance(delta, dict):
                text = delta.get("content")
                if isinstance(text, str) and text:
                    out.extend(self._text(text))
                calls = delta.get("tool_calls")
                if isinstance(calls, list):
                    for call in calls:
                        if isinstance(call, dict):
                            out.extend(self._tool(call))
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]
                self._matched = choice.get("stop_reason")
        return out

    def _start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        message: dict[str, Any] = {
            "id": self._id,
            "type": "message",
            "role": "assistant",
            "model": self._model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [frame("message_start", {"message": message}), frame("ping", {})]

    def _open_block(self, block: dict[str, Any]) -> list[bytes]:
        out = self._close()
        self._open, self._open_kind = self._next, block["type"]
        self._next += 1
        out.append(frame("content_block_start", {"index": self._open, "content_block": block}))
        return out

    def _close(self) -> list[bytes]:
        if self._open is None:
            return []
        index, self._open, self._open_kind = self._open, None, None
        return [frame("content_block_stop", {"index": index})]

    def _text(self, text: str) -> list[bytes]:
        out = [] if self._open_kind == "text" else self._open_block({"type": "text", "text": ""})
        out.append(frame("content_block_delta", {"index": self._open, "delta": {"type": "text_delta", "text": text}}))
        return out

    def _tool(self, call: dict[str, Any]) -> list[bytes]:
        function = obj(call.get("function"))
        key = call.get("index")
        if not isinstance(key, int) or isinstance(key, bool):
            # No index: a new id starts a new call, otherwise it continues the last one.
            key = len(self._tools) if call.get("id") or self._last_tool is None else self._last_tool
        out: list[bytes] = []
        block = self._tools.get(key)
        if block is None:
            call_id = string(call.get("id"), f"toolu_{self._id}_{key}")
            start = {"type": "tool_use", "id": call_id, "name": string(function.get("name")), "input": {}}
            out.extend(self._open_block(start))
            block = self._tools[key] = self._next - 1
        self._last_tool = key
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = orjson.dumps(arguments).decode()
        if isinstance(arguments, str) and arguments:
            delta = {"type": "input_json_delta", "partial_json": arguments}
            out.append(frame("content_block_delta", {"index": block, "delta": delta}))
        return out

    def _complete(self) -> list[bytes]:
        if self.done:
            return []
        out = self._start() + self._close()
        self.done = True
        reason, sequence = stop_reason(self._finish, self._matched, self._stops, bool(self._tools))
        out.append(
            frame(
                "message_delta",
                {"delta": {"stop_reason": reason, "stop_sequence": sequence}, "usage": usage(self._usage)},
            )
        )
        out.append(frame("message_stop", {}))
        return out


def message_events(message: dict[str, Any]) -> list[bytes]:
    """A complete Anthropic `message` replayed as the events of a stream (for a
    backend that answered a stream request with one JSON body)."""
    head = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    head["usage"] = {**message["usage"], "output_tokens": 0}
    out = [frame("message_start", {"message": head}), frame("ping", {})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            out.append(frame("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
            delta = {"type": "text_delta", "text": block["text"]}
        else:
            out.append(frame("content_block_start", {"index": index, "content_block": {**block, "input": {}}}))
            delta = {"type": "input_json_delta", "partial_json": orjson.dumps(block["input"]).decode()}
        out.append(frame("content_block_delta", {"index": index, "delta": delta}))
        out.append(frame("content_block_stop", {"index": index}))
    out.append(
        frame(
            "message_delta",
            {
                "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
                "usage": message["usage"],
            },
        )
    )
    out.append(frame("message_stop", {}))
    return out

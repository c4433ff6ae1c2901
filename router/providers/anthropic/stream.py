"""Anthropic stream events → `chat.completion.chunk` SSE events.

The role rides on the first chunk that carries something (text, reasoning
or a tool call), so a stream that dies before its first token has produced nothing
(the provider can still retry elsewhere). A `tool_use` block opens a tool
call (index, id, name, empty arguments), its `input_json_delta`s add the
argument fragments. `message_delta` gives the stop reason and the output
count; `message_stop` ends the choice (the finish chunk), then `finish()`
adds the usage chunk (stream_options.include_usage) and `data: [DONE]`.
A `thinking` block's `thinking_delta`s become `reasoning_content` deltas
(the field vLLM streams reasoning in); signatures, redacted thinking and
pings produce nothing.
"""

from __future__ import annotations

from router.core.errors import RouterError, UpstreamError
from router.providers.anthropic.answer import finish_reason, usage_of
from router.providers.anthropic.common import sse
from router.providers.anthropic.wire import event_error
from router.providers.normalized import REASONING


class ChatStream:
    """`feed(event)` → SSE frames. `feed` raises for an `error` event; `finish`
    raises when the upstream ended before `message_stop`. After bytes have
    flowed, the caller ends the stream with `fail(error)`."""

    def __init__(self, *, model: str, completion_id: str, created: int, include_usage: bool) -> None:
        self._head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._include_usage = include_usage
        self._role_sent = False
        self._tools: dict[int, int] = {}  # Anthropic block index → OpenAI tool call index
        self._usage: dict = {}
        self._stop_reason: str | None = None
        self._done = False
        self._finished = False
        self.finish_reason: str | None = None

    @property
    def usage(self) -> dict | None:
        return usage_of(self._usage) if self._usage else None

    def _chunk(self, delta: dict, finish: str | None = None) -> bytes:
        chunk = {**self._head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self._include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def _delta(self, delta: dict) -> bytes:
        if not self._role_sent:
            self._role_sent = True
            delta = {
                "role": "assistant",
                "content": delta.pop("content", None if "tool_calls" in delta else ""),
                **delta,
            }
        return self._chunk(delta)

    def feed(self, event: dict) -> list[bytes]:
        kind = event.get("type")
        if kind == "error":
            raise event_error(event)
        if self._done:
            return []
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self._usage.update(message["usage"])
        elif kind == "content_block_start":
            block = event.get("content_block") or {}
            index = event.get("index")
            if block.get("type") == "tool_use" and isinstance(index, int):
                call = len(self._tools)
                self._tools[index] = call
                return [
                    self._delta(
                        {
                            "tool_calls": [
                                {
                                    "index": call,
                                    "id": str(block.get("id") or ""),
                                    "type": "function",
                                    "function": {"name": str(block.get("name") or ""), "arguments": ""},
                                }
                            ]
                        }
                    )
                ]
            if block.get("type") == "text" and block.get("text"):
                return [self._delta({"content": block["text"]})]
            if block.get("type") == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
                return [self._delta({REASONING: block["thinking"]})]
        elif kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") == "text_delta" and delta.get("text"):
                return [self._delta({"content": delta["text"]})]
            if delta.get("type") == "thinking_delta" and isinstance(delta.get("thinking"), str) and delta["thinking"]:
                return [self._delta({REASONING: delta["thinking"]})]
            at = event.get("index")
            slot = self._tools.get(at) if isinstance(at, int) else None
            if delta.get("type") == "input_json_delta" and slot is not None and delta.get("partial_json"):
                return [
                    self._delta({"tool_calls": [{"index": slot, "function": {"arguments": delta["partial_json"]}}]})
                ]
        elif kind == "message_delta":
            delta = event.get("delta") or {}
            if isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            usage = event.get("usage")
            if isinstance(usage, dict):
                self._usage.update({k: v for k, v in usage.items() if v is not None})
        elif kind == "message_stop":
            self._done = True
            self.finish_reason = finish_reason(self._stop_reason, bool(self._tools))
            out = [] if self._role_sent else [self._delta({})]
            out.append(self._chunk({}, self.finish_reason))
            return out
        return []

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        if not self._done:
            raise UpstreamError("Anthropic ended the stream before message_stop.")
        self._finished = True
        out = []
        if self._include_usage:
            out.append(sse({**self._head, "choices": [], "usage": self.usage or usage_of({})}))
        out.append(b"data: [DONE]\n\n")
        return out

    def fail(self, error: RouterError) -> list[bytes]:
        """The event that ends a stream which failed after its first byte."""
        if self._finished:
            return []
        self._finished = True
        return [error.to_sse()]


class UsageWatch:
    """The usage of a relayed (untranslated) Anthropic stream, and whether it
    has begun: `feed(event)` notes message_start / message_delta usage."""

    def __init__(self) -> None:
        self._usage: dict = {}
        self.started = False  # an event past message_start/ping/block start arrived
        self.ended = False
        self.error: RouterError | None = None  # the stream's own `error` event

    @property
    def usage(self) -> dict | None:
        return usage_of(self._usage) if self._usage else None

    def feed(self, event: dict) -> None:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self._usage.update(message["usage"])
        elif kind == "message_delta" and isinstance(event.get("usage"), dict):
            self._usage.update({k: v for k, v in event["usage"].items() if v is not None})
        if kind == "error":
            self.error = event_error(event)
        if kind in ("content_block_delta", "message_delta", "message_stop", "error"):
            self.started = True
        if kind in ("message_stop", "error"):
            self.ended = True

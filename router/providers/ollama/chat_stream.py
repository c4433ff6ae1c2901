"""Ollama NDJSON chat frames → `chat.completion.chunk` SSE events.

Ollama sends text deltas and whole tool calls; each becomes one chunk. The
first chunk carries the role, the last one the finish_reason, then (when the
client asked for stream_options.include_usage) a chunk with empty choices and
the usage, then `data: [DONE]`. Thinking text is not sent (no standard field).
"""

from __future__ import annotations

from router.core.errors import RouterError, UpstreamError
from router.providers.ollama.chat import openai_calls, usage
from router.providers.ollama.common import (
    finish_reason,
    message_of,
    raise_if_error,
    sse,
    tool_calls,
)


class ChatStream:
    """Ollama NDJSON frames → `chat.completion.chunk` SSE events.

    `feed` raises `UpstreamError` for an Ollama error frame; `finish` raises it
    when the upstream ended without its final (`done`) frame. After bytes have
    flowed, the caller ends the stream with `fail(error)`.
    """

    def __init__(self, *, model: str, completion_id: str, created: int, include_usage: bool) -> None:
        self._head = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
        }
        self._include_usage = include_usage
        self._role_sent = False
        self._calls = 0
        self._done = False
        self._finished = False
        self.usage: dict | None = None
        self.finish_reason: str | None = None

    def _chunk(self, delta: dict, finish: str | None = None) -> bytes:
        chunk = {
            **self._head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if self._include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def feed(self, frame: dict) -> list[bytes]:
        raise_if_error(frame)
        if self._done:
            return []
        message = message_of(frame)
        delta: dict = {}
        content = message.get("content")
        if content:
            delta["content"] = content
        calls = tool_calls(message)
        if calls:
            delta["tool_calls"] = openai_calls(calls, start=self._calls)
            self._calls += len(calls)
        done = bool(frame.get("done"))
        out = []
        if delta or (done and not self._role_sent):
            if not self._role_sent:
                delta = {
                    "role": "assistant",
                    "content": delta.pop("content", None if calls else ""),
                    **delta,
                }
                self._role_sent = True
            out.append(self._chunk(delta))
        if done:
            self._done = True
            self.finish_reason = finish_reason(frame.get("done_reason"), self._calls > 0)
            self.usage = usage(frame)
            out.append(self._chunk({}, self.finish_reason))
        return out

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        if not self._done:
            raise UpstreamError("Ollama ended the stream before its final frame.")
        self._finished = True
        out = []
        if self._include_usage:
            out.append(sse({**self._head, "choices": [], "usage": self.usage}))
        out.append(b"data: [DONE]\n\n")
        return out

    def fail(self, error: RouterError) -> list[bytes]:
        """The event that ends a stream which failed after its first byte."""
        if self._finished:
            return []
        self._finished = True
        return [error.to_sse()]

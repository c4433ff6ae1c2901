"""Gemini SSE frames (`GenerateContentResponse` each) → `chat.completion.chunk` events.

Each candidate is one OpenAI choice. Its first chunk carries the role; text
parts become content deltas, functionCall parts whole tool calls (index, id,
name, arguments in one delta); its finishReason closes it. After the stream
(and only with stream_options.include_usage) one chunk with empty choices
carries the usage of the last frame's usageMetadata, then `data: [DONE]`.
Thought parts become `reasoning_content` deltas (the field vLLM streams
reasoning in), ahead of the text of the same frame.
"""

from __future__ import annotations

from router.core.errors import RouterError, UpstreamError
from router.providers.gemini.chat import openai_calls
from router.providers.gemini.common import answer_calls, answer_text, finish_reason, parts_of, thought_text, usage
from router.providers.gemini.wire import Blocked, raise_if_blocked, raise_if_error
from router.providers.normalized import REASONING, sse


class ChatStream:
    """`feed` raises `Blocked` (prompt refused) or `UpstreamError` (an error
    frame); `finish` raises when no candidate ever finished. After bytes have
    flowed, the caller ends the stream with `fail(error)`."""

    def __init__(self, *, model: str, completion_id: str, created: int, include_usage: bool) -> None:
        self._head = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
        self._include_usage = include_usage
        self._started: set[int] = set()
        self._calls: dict[int, int] = {}
        self._open: set[int] = set()  # candidates seen and not finished
        self._finished_any = False
        self._meta: dict | None = None
        self._closed = False
        self.usage: dict | None = None
        self.finish_reason: str | None = None

    def _chunk(self, index: int, delta: dict, finish: str | None = None) -> bytes:
        chunk = {**self._head, "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if self._include_usage:
            chunk["usage"] = None
        return sse(chunk)

    def feed(self, frame: dict) -> list[bytes]:
        raise_if_error(frame)
        raise_if_blocked(frame)
        if isinstance(frame.get("usageMetadata"), dict):
            self._meta = frame["usageMetadata"]
            self.usage = usage(self._meta)
        out: list[bytes] = []
        for position, candidate in enumerate(frame.get("candidates") or ()):
            if isinstance(candidate, dict):
                out.extend(self._candidate(position, candidate))
        return out

    def _candidate(self, position: int, candidate: dict) -> list[bytes]:
        index = candidate.get("index")
        index = index if isinstance(index, int) else position
        parts = parts_of(candidate)
        delta: dict = {}
        thought = thought_text(parts)
        if thought:
            delta[REASONING] = thought
        text = answer_text(parts)
        if text:
            delta["content"] = text
        calls = answer_calls(parts)
        if calls:
            start = self._calls.get(index, 0)
            delta["tool_calls"] = openai_calls(calls, start=start)
            self._calls[index] = start + len(calls)
        reason = candidate.get("finishReason")
        out = []
        if index not in self._started and (delta or reason):
            delta = {"role": "assistant", "content": delta.pop("content", None if calls else ""), **delta}
            self._started.add(index)
            self._open.add(index)
        if delta:
            out.append(self._chunk(index, delta))
        if reason and index in self._open:
            self._open.discard(index)
            self._finished_any = True
            finish = finish_reason(reason, self._calls.get(index, 0) > 0)
            self.finish_reason = self.finish_reason or finish
            out.append(self._chunk(index, {}, finish))
        return out

    def finish(self) -> list[bytes]:
        if self._closed:
            return []
        if not self._finished_any or self._open:
            raise UpstreamError("Gemini ended the stream before its finishReason.")
        self._closed = True
        out = []
        if self._include_usage:
            out.append(sse({**self._head, "choices": [], "usage": self.usage or usage(None)}))
        out.append(b"data: [DONE]\n\n")
        return out

    def fail(self, error: RouterError | Blocked) -> list[bytes]:
        """The event that ends a stream which failed after its first byte."""
        if self._closed:
            return []
        self._closed = True
        return [error.to_sse()]

"""Ollama NDJSON frames → Responses API stream events (`event:` + `data:` SSE).

Event order follows OpenAI: response.created, response.in_progress, then per
output item output_item.added → content_part.added → *.delta … → *.done →
content_part.done → output_item.done, and finally response.completed (or
response.incomplete when Ollama stopped on its token limit). Every event
carries a `sequence_number` counting from 0. There is no `[DONE]` sentinel.
"""

from __future__ import annotations

from router.core.errors import RouterError, UpstreamError
from router.providers.ollama.common import (
    finish_reason,
    message_of,
    new_id,
    raise_if_error,
    sse_event,
    tool_calls,
)
from router.providers.ollama.response_object import (
    envelope,
    function_item,
    message_item,
    output_text,
    reasoning_item,
    usage,
)


class _OpenItem:
    """The reasoning or message item whose text is still streaming."""

    __slots__ = ("index", "item_id", "kind", "parts")

    def __init__(self, kind: str, index: int) -> None:
        self.kind = kind
        self.item_id = new_id("rs" if kind == "reasoning" else "msg")
        self.index = index
        self.parts: list[str] = []


class ResponsesStream:
    """Converts one streamed Ollama chat into Responses API events.

    `start()` may be called as soon as Ollama answers 200 (so the client sees
    response.created at once); `feed` calls it otherwise. `feed` raises
    `UpstreamError` for an Ollama error frame and `finish` when the upstream
    ended without its final frame; after bytes have flowed the caller ends the
    stream with `fail(error)`, which emits response.failed.
    """

    def __init__(self, *, model: str, response_id: str, created_at: int, request_body: dict) -> None:
        self._response_id = response_id
        self._created_at = created_at
        self._model = model
        self._body = request_body
        self._seq = 0
        self._started = False
        self._done = False
        self._finished = False
        self._output: list[dict] = []
        self._open: _OpenItem | None = None
        self._truncated = False
        self.usage: dict | None = None
        self.finish_reason: str | None = None

    # -- framing ---------------------------------------------------------------------

    def _event(self, kind: str, **fields: object) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return sse_event(kind, data)

    def _response(self, status: str, *, error: dict | None = None) -> dict:
        return envelope(
            response_id=self._response_id,
            created_at=self._created_at,
            model=self._model,
            request_body=self._body,
            status=status,
            output=list(self._output),
            usage=self.usage if status in ("completed", "incomplete") else None,
            error=error,
        )

    # -- items -------------------------------------------------------------------------

    def _open_item(self, kind: str) -> list[bytes]:
        out = self._close_item("completed")
        item = self._open = _OpenItem(kind, len(self._output))
        if kind == "reasoning":
            added = reasoning_item(item.item_id, "", "in_progress")
            added["content"] = []
            part = {"type": "reasoning_text", "text": ""}
        else:
            added = message_item(item.item_id, None, "in_progress")
            part = output_text("")
        out.append(self._event("response.output_item.added", output_index=item.index, item=added))
        out.append(
            self._event(
                "response.content_part.added",
                item_id=item.item_id,
                output_index=item.index,
                content_index=0,
                part=part,
            )
        )
        return out

    def _delta(self, kind: str, text: str) -> list[bytes]:
        out = [] if self._open is not None and self._open.kind == kind else self._open_item(kind)
        item = self._open
        assert item is not None
        item.parts.append(text)
        where = {
            "item_id": item.item_id,
            "output_index": item.index,
            "content_index": 0,
        }
        if kind == "reasoning":
            out.append(self._event("response.reasoning_text.delta", **where, delta=text))
        else:
            out.append(self._event("response.output_text.delta", **where, delta=text, logprobs=[]))
        return out

    def _close_item(self, status: str) -> list[bytes]:
        item, self._open = self._open, None
        if item is None:
            return []
        text = "".join(item.parts)
        where = {
            "item_id": item.item_id,
            "output_index": item.index,
            "content_index": 0,
        }
        if item.kind == "reasoning":
            done = reasoning_item(item.item_id, text, status)
            part = done["content"][0]
            out = [self._event("response.reasoning_text.done", **where, text=text)]
        else:
            done = message_item(item.item_id, text, status)
            part = done["content"][0]
            out = [self._event("response.output_text.done", **where, text=text, logprobs=[])]
        out.append(self._event("response.content_part.done", **where, part=part))
        out.append(self._event("response.output_item.done", output_index=item.index, item=done))
        self._output.append(done)
        return out

    def _function_calls(self, calls: list[tuple[str, str, str]]) -> list[bytes]:
        out = self._close_item("completed")
        for call_id, name, arguments in calls:
            index = len(self._output)
            item_id = new_id("fc")
            added = function_item(item_id, call_id, name, "", "in_progress")
            out.append(self._event("response.output_item.added", output_index=index, item=added))
            where = {"item_id": item_id, "output_index": index}
            out.append(self._event("response.function_call_arguments.delta", **where, delta=arguments))
            out.append(
                self._event(
                    "response.function_call_arguments.done",
                    **where,
                    arguments=arguments,
                )
            )
            done = function_item(item_id, call_id, name, arguments, "completed")
            out.append(self._event("response.output_item.done", output_index=index, item=done))
            self._output.append(done)
        return out

    # -- public ------------------------------------------------------------------------

    def start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def feed(self, frame: dict) -> list[bytes]:
        raise_if_error(frame)
        if self._done or self._finished:
            return []
        out = self.start()
        message = message_of(frame)
        thinking = message.get("thinking")
        if thinking:
            out += self._delta("reasoning", thinking)
        content = message.get("content")
        if content:
            out += self._delta("message", content)
        calls = tool_calls(message)
        if calls:
            out += self._function_calls(calls)
        if frame.get("done"):
            self._done = True
            self._truncated = frame.get("done_reason") == "length"
            if not self._output and self._open is None:
                out += self._open_item("message")  # an empty answer is still a message
            has_calls = any(item["type"] == "function_call" for item in self._output)
            out += self._close_item("incomplete" if self._truncated else "completed")
            self.usage = usage(frame)
            self.finish_reason = finish_reason(frame.get("done_reason"), has_calls)
        return out

    def finish(self) -> list[bytes]:
        if self._finished:
            return []
        if not self._done:
            raise UpstreamError("Ollama ended the stream before its final frame.")
        self._finished = True
        if self._truncated:
            return [self._event("response.incomplete", response=self._response("incomplete"))]
        return [self._event("response.completed", response=self._response("completed"))]

    def fail(self, error: RouterError) -> list[bytes]:
        """Ends a stream that failed after its first byte with response.failed."""
        if self._finished:
            return []
        out = self.start()
        self._finished = True
        failed = self._response("failed", error={"code": "server_error", "message": error.message})
        out.append(self._event("response.failed", response=failed))
        return out

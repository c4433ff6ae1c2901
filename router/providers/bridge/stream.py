"""A Chat Completions SSE stream → Responses API stream events.

`SseDecoder` (the shared line decoder's `framing.SseEvents`) cuts the chat
stream's bytes into `data:` payloads (frames may end anywhere, even inside a
UTF-8 character; an event is capped at 16 MiB). `ResponsesFromChat` turns
the chunks into the event sequence OpenAI sends: response.created,
response.in_progress, then per output item output_item.added →
(content_part.added → output_text.delta / refusal.delta … → *.done →
content_part.done) or function_call_arguments.delta … → .done →
output_item.done, and finally response.completed (response.incomplete when
the provider stopped on its token limit or a content filter). Every event
carries a `sequence_number` counting from 0; there is no `[DONE]` sentinel.
A chat error frame (`data: {"error": …}`) ends the stream with response.failed.

Pure: bytes in, bytes out; nothing grows with the stream but the answer's
own text (the final response carries it, as OpenAI's does).
"""

from __future__ import annotations

from typing import Any

import orjson

from router.core.errors import RouterError, UpstreamError
from router.providers.bridge.answer import INCOMPLETE, finish_response, refusal_part, usage_of
from router.providers.framing import SseError as SseError
from router.providers.framing import SseEvents
from router.providers.normalized import new_id, sse_event
from router.providers.ollama.response_object import envelope, function_item, message_item, output_text

SseDecoder = SseEvents  # the shared line decoder's SSE reader (router/providers/framing.py)


class _Message:
    """The message item whose text (or refusal) is still streaming."""

    __slots__ = ("index", "item_id", "kind", "parts", "pieces")

    def __init__(self, index: int) -> None:
        self.item_id = new_id("msg")
        self.index = index
        self.parts: list[dict] = []  # the finished content parts
        self.kind: str | None = None  # the open part: "output_text" | "refusal"
        self.pieces: list[str] = []


class _Call:
    """A function call whose arguments are still streaming."""

    __slots__ = ("call_id", "index", "item_id", "name", "pieces")

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.item_id = new_id("fc")
        self.index = index
        self.call_id = call_id
        self.name = name
        self.pieces: list[str] = []


class ResponsesFromChat:
    """Converts one streamed chat completion into Responses API events.

    `start()` gives response.created and response.in_progress; `feed(bytes)`
    the events of the chat stream's bytes; `finish()` ends a stream whose
    upstream ended (UpstreamError when it ended before its last chunk);
    `fail(error)` ends one that failed mid-stream with response.failed.
    `usage` (Responses shape) and `failed` are there for the observation.
    """

    def __init__(self, *, model: str, response_id: str, created_at: int, request_body: dict) -> None:
        self._response_id = response_id
        self._created_at = created_at
        self._model = model
        self._body = request_body
        self._decoder = SseDecoder()
        self._seq = 0
        self._started = False
        self._finished = False
        self._items: list[dict | None] = []  # by output_index; None while streaming
        self._message: _Message | None = None
        self._calls: dict[int, _Call] = {}  # by the chat tool call index
        self._reason: str | None = None  # the chat finish_reason, once sent
        self.usage: dict | None = None
        self.failed = False

    # -- framing ---------------------------------------------------------------------

    def _event(self, kind: str, **fields: object) -> bytes:
        data = {"type": kind, **fields, "sequence_number": self._seq}
        self._seq += 1
        return sse_event(kind, data)

    def _response(self, status: str, *, error: dict | None = None) -> dict:
        response = envelope(
            response_id=self._response_id,
            created_at=self._created_at,
            model=self._model,
            request_body=self._body,
            status=status,
            output=[item for item in self._items if item is not None],
            usage=self.usage if status in ("completed", "incomplete") else None,
            error=error,
        )
        return finish_response(response, INCOMPLETE.get(self._reason or ""))

    # -- message items -------------------------------------------------------------------

    def _text(self, kind: str, text: str) -> list[bytes]:
        out: list[bytes] = []
        message = self._message
        if message is None:
            message = self._message = _Message(len(self._items))
            self._items.append(None)
            added = message_item(message.item_id, None, "in_progress")
            out.append(self._event("response.output_item.added", output_index=message.index, item=added))
        where = {"item_id": message.item_id, "output_index": message.index, "content_index": len(message.parts)}
        if message.kind != kind:
            out += self._close_part(message)
            where["content_index"] = len(message.parts)
            message.kind = kind
            part = output_text("") if kind == "output_text" else refusal_part("")
            out.append(self._event("response.content_part.added", **where, part=part))
        message.pieces.append(text)
        if not text:
            pass  # an empty answer: the part is opened, no delta
        elif kind == "output_text":
            out.append(self._event("response.output_text.delta", **where, delta=text, logprobs=[]))
        else:
            out.append(self._event("response.refusal.delta", **where, delta=text))
        return out

    def _close_part(self, message: _Message) -> list[bytes]:
        if message.kind is None:
            return []
        text = "".join(message.pieces)
        where = {"item_id": message.item_id, "output_index": message.index, "content_index": len(message.parts)}
        if message.kind == "output_text":
            part = output_text(text)
            out = [self._event("response.output_text.done", **where, text=text, logprobs=[])]
        else:
            part = refusal_part(text)
            out = [self._event("response.refusal.done", **where, refusal=text)]
        out.append(self._event("response.content_part.done", **where, part=part))
        message.parts.append(part)
        message.kind, message.pieces = None, []
        return out

    def _close_message(self, status: str) -> list[bytes]:
        message, self._message = self._message, None
        if message is None:
            return []
        out = self._close_part(message)
        done = message_item(message.item_id, None, status)
        done["content"] = message.parts
        out.append(self._event("response.output_item.done", output_index=message.index, item=done))
        self._items[message.index] = done
        return out

    # -- function calls ------------------------------------------------------------------

    def _tool_delta(self, delta: dict) -> list[bytes]:
        out: list[bytes] = []
        index = delta.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = max(self._calls, default=-1) + (1 if delta.get("id") else 0)
        function = delta.get("function") if isinstance(delta.get("function"), dict) else {}
        assert isinstance(function, dict)
        call = self._calls.get(index)
        if call is None:
            out += self._close_message("completed")  # the text before the calls is done
            name = function.get("name")
            call_id = delta.get("id")
            call = _Call(
                len(self._items),
                call_id if isinstance(call_id, str) and call_id else new_id("call"),
                name if isinstance(name, str) else "",
            )
            self._calls[index] = call
            self._items.append(None)
            added = function_item(call.item_id, call.call_id, call.name, "", "in_progress")
            out.append(self._event("response.output_item.added", output_index=call.index, item=added))
        elif not call.name and isinstance(function.get("name"), str):
            call.name = function["name"]  # a provider that names the call after opening it
        arguments = function.get("arguments")
        if isinstance(arguments, str) and arguments:
            call.pieces.append(arguments)
            out.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.item_id,
                    output_index=call.index,
                    delta=arguments,
                )
            )
        return out

    def _close_calls(self, status: str) -> list[bytes]:
        out: list[bytes] = []
        for call in sorted(self._calls.values(), key=lambda c: c.index):
            arguments = "".join(call.pieces)
            where = {"item_id": call.item_id, "output_index": call.index}
            out.append(self._event("response.function_call_arguments.done", **where, arguments=arguments))
            done = function_item(call.item_id, call.call_id, call.name, arguments, status)
            out.append(self._event("response.output_item.done", output_index=call.index, item=done))
            self._items[call.index] = done
        self._calls = {}
        return out

    # -- chunks ------------------------------------------------------------------------

    def _chunk(self, chunk: dict) -> list[bytes]:
        out: list[bytes] = []
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_of(chunk["usage"])
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n is never asked for: only the first choice exists
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content, refusal = delta.get("content"), delta.get("refusal")
                if isinstance(content, str) and content:
                    if self._calls:  # text after the calls: a new message item
                        out += self._close_calls("completed")
                    out += self._text("output_text", content)
                if isinstance(refusal, str) and refusal:
                    out += self._text("refusal", refusal)
                for call in delta.get("tool_calls") or ():
                    if isinstance(call, dict):
                        out += self._tool_delta(call)
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and self._reason is None:
                self._reason = reason
                status = "incomplete" if reason in INCOMPLETE else "completed"
                if not self._items:
                    out += self._text("output_text", "")  # an empty answer is still a message
                out += self._close_message(status)
                out += self._close_calls(status)
        return out

    def _final(self) -> list[bytes]:
        self._finished = True
        status = "incomplete" if self._reason in INCOMPLETE else "completed"
        return [self._event(f"response.{status}", response=self._response(status))]

    # -- public ------------------------------------------------------------------------

    def start(self) -> list[bytes]:
        if self._started:
            return []
        self._started = True
        return [
            self._event("response.created", response=self._response("in_progress")),
            self._event("response.in_progress", response=self._response("in_progress")),
        ]

    def feed(self, data: bytes) -> list[bytes]:
        """The events of the next bytes of the chat stream (SseError if not SSE)."""
        out = self.start()
        for payload in self._decoder.feed(data):
            if self._finished:
                break
            out += self._payload(payload)
        return out

    def _payload(self, payload: bytes) -> list[bytes]:
        if payload.strip() == b"[DONE]":
            if self._reason is None:
                raise UpstreamError("The provider ended the stream before its last chunk.")
            return self._final()
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise SseError(f"an SSE event is not JSON: {payload[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise SseError(f"an SSE event is not a JSON object: {payload[:200]!r}")
        if "error" in obj:
            return self._failed(obj["error"])
        return self._chunk(obj)

    def finish(self) -> list[bytes]:
        """The upstream ended: the final event, unless one was sent."""
        out = self.start()
        for payload in self._decoder.close():
            if not self._finished:
                out += self._payload(payload)
        if self._finished:
            return out
        if self._reason is None:
            raise UpstreamError("The provider ended the stream before its last chunk.")
        return out + self._final()  # no [DONE]: the finish_reason said it all

    def fail(self, error: RouterError) -> list[bytes]:
        """Ends a stream that failed after its first byte with response.failed."""
        if self._finished:
            return []
        return self.start() + self._failed({"message": error.message, "code": error.code})

    def _failed(self, error: Any) -> list[bytes]:
        self._finished = True
        self.failed = True
        if isinstance(error, dict):
            message, code = error.get("message"), error.get("code") or error.get("type")
        else:
            message, code = error, None
        code = "rate_limit_exceeded" if code in ("rate_limit_exceeded", "rate_limit_error") else "server_error"
        failed = self._response("failed", error={"code": code, "message": str(message or "The provider failed.")})
        return [self._event("response.failed", response=failed)]

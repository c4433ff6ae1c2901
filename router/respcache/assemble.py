"""A streamed answer → the whole object a non-streamed request would get. Pure.

The store wraps a miss's relay and feeds every chunk the client gets to one
of these; when the relay ends well, `result()` is the entry's body (None: not
complete, so not stored). An assembler that sees anything it cannot use (an
error event, a frame that is not JSON, more than `limit` bytes of answer)
gives up for good (`live` False) and never raises: the client's stream is
never the worse for it. It holds the answer's text and the stream's partial
last line, nothing more (`framing.SseEvents`, bounded by `limit`).

- Chat Completions chunks → a `chat.completion` (text, refusal and any other
  string delta joined per choice, tool calls by index, finish reasons,
  logprobs, the usage chunk);
- Completions chunks → a `text_completion`;
- Responses events → the `response` of its response.completed /
  response.incomplete event;
- a whole JSON answer relayed in pieces (no event stream) → its bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import orjson

from ..providers.framing import DONE, SseEvents


class _Assembler:
    __slots__ = ("_events", "limit", "live", "size")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.live = True
        self.size = 0
        self._events = SseEvents(max_line=limit + 4096)

    def feed(self, chunk: bytes) -> None:
        if not self.live:
            return
        try:
            for data in self._events.feed(chunk):
                if not self._event(data) or self.size > self.limit:
                    self.live = False
                    return
        except Exception:  # a frame we cannot read: the answer is not stored
            self.live = False

    def result(self) -> bytes | None:
        if not self.live:
            return None
        try:
            for data in self._events.close():
                if not self._event(data):
                    return None
            body = self._result()
        except Exception:
            return None
        return body if body is not None and len(body) <= self.limit else None

    def _event(self, data: bytes) -> bool:
        raise NotImplementedError

    def _result(self) -> bytes | None:
        raise NotImplementedError


def _object(data: bytes) -> dict | None:
    obj = orjson.loads(data)
    return obj if isinstance(obj, dict) and "error" not in obj else None


_HEAD = ("id", "created", "model", "system_fingerprint", "service_tier")


def _merge_tail(state: dict[str, Any], choice: dict[str, Any]) -> None:
    """A chunk's choice: its logprobs lists appended, its finish reason kept."""
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        merged = state["logprobs"] = state["logprobs"] or {}
        for name, items in logprobs.items():
            if isinstance(items, list):
                merged.setdefault(name, []).extend(items)
    if isinstance(choice.get("finish_reason"), str):
        state["finish"] = choice["finish_reason"]


class _ChunksAssembler(_Assembler):
    """Chat and completions chunks: the head fields and usage of every chunk,
    the choices left to each."""

    __slots__ = ("_choices", "_head", "_usage")

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._head: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None

    def _chunk(self, data: bytes) -> dict | bool:
        """The chunk object, its head and usage taken; True for `[DONE]`,
        False for what cannot be stored (an error, not an object)."""
        if data.strip() == DONE:
            return True
        obj = _object(data)
        if obj is None:
            return False
        head = self._head
        for name in _HEAD:
            if name not in head and obj.get(name) is not None:
                head[name] = obj[name]
        if isinstance(obj.get("usage"), dict):
            self._usage = obj["usage"]
        return obj

    @property
    def usage(self) -> bool:
        return self._usage is not None


class ChatAssembler(_ChunksAssembler):
    __slots__ = ()

    def _event(self, data: bytes) -> bool:
        obj = self._chunk(data)
        if not isinstance(obj, dict):
            return obj
        for choice in obj.get("choices") or ():
            index = choice.get("index", 0)
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = {"role": "assistant", "text": {}, "calls": {}, "other": {},
                                                "logprobs": None, "finish": None}
            self._delta(state, choice.get("delta") or {})
            _merge_tail(state, choice)
        return True

    def _delta(self, state: dict[str, Any], delta: dict[str, Any]) -> None:
        for name, value in delta.items():
            if name == "role":
                if isinstance(value, str):
                    state["role"] = value
            elif name == "tool_calls":
                for position, call in enumerate(value or ()):
                    self._call(state["calls"], position, call)
            elif isinstance(value, str):
                state["text"].setdefault(name, []).append(value)
                self.size += len(value)
            elif value is not None:
                state["other"][name] = value

    def _call(self, calls: dict[int, dict[str, Any]], position: int, call: dict[str, Any]) -> None:
        index = call.get("index", position)
        known = calls.get(index)
        function = call.get("function") or {}
        if known is None:
            known = calls[index] = {"id": call.get("id"), "type": call.get("type", "function"),
                                    "name": function.get("name") or "", "arguments": []}
        elif not known["id"] and call.get("id"):
            known["id"] = call["id"]
        if function.get("name") and not known["name"]:
            known["name"] = function["name"]
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            known["arguments"].append(arguments)
            self.size += len(arguments)

    def _result(self) -> bytes | None:
        if not self._choices or any(state["finish"] is None for state in self._choices.values()):
            return None  # cut before its last chunk
        choices = []
        for index in sorted(self._choices):
            state = self._choices[index]
            message: dict[str, Any] = {"role": state["role"], "content": None, "refusal": None}
            for name, pieces in state["text"].items():
                message[name] = "".join(pieces)
            message.update(state["other"])
            calls = state["calls"]
            if calls:
                message["tool_calls"] = [
                    {"id": c["id"], "type": c["type"], "function": {"name": c["name"], "arguments": "".join(c["arguments"])}}
                    for _, c in sorted(calls.items())
                ]
            choices.append({"index": index, "message": message, "logprobs": state["logprobs"],
                            "finish_reason": state["finish"]})
        obj = {"id": self._head.get("id"), "object": "chat.completion", "created": self._head.get("created"),
               "model": self._head.get("model"), "choices": choices, "usage": self._usage}
        for name in ("system_fingerprint", "service_tier"):
            if name in self._head:
                obj[name] = self._head[name]
        return orjson.dumps(obj)


class CompletionAssembler(_ChunksAssembler):
    __slots__ = ()

    def _event(self, data: bytes) -> bool:
        obj = self._chunk(data)
        if not isinstance(obj, dict):
            return obj
        for choice in obj.get("choices") or ():
            state = self._choices.setdefault(choice.get("index", 0), {"text": [], "logprobs": None, "finish": None})
            text = choice.get("text")
            if isinstance(text, str):
                state["text"].append(text)
                self.size += len(text)
            _merge_tail(state, choice)
        return True

    def _result(self) -> bytes | None:
        if not self._choices or any(state["finish"] is None for state in self._choices.values()):
            return None
        choices = [
            {"text": "".join(state["text"]), "index": index, "logprobs": state["logprobs"],
             "finish_reason": state["finish"]}
            for index, state in sorted(self._choices.items())
        ]
        obj = {"id": self._head.get("id"), "object": "text_completion", "created": self._head.get("created"),
               "model": self._head.get("model"), "choices": choices, "usage": self._usage}
        if "system_fingerprint" in self._head:
            obj["system_fingerprint"] = self._head["system_fingerprint"]
        return orjson.dumps(obj)


_FINAL = ("response.completed", "response.incomplete")
_TYPED = b'{"type":"'


def _event_type(data: bytes) -> tuple[str, dict | None]:
    """An event's type, read from its head when it starts with it (every
    server we know writes it first), else from the whole event."""
    if data.startswith(_TYPED):
        end = data.find(b'"', len(_TYPED), 128)
        if end > 0:
            return data[len(_TYPED) : end].decode("ascii", "replace"), None
    obj = orjson.loads(data)
    kind = obj.get("type") if isinstance(obj, dict) else None
    return (kind if isinstance(kind, str) else ""), obj


class ResponsesAssembler(_Assembler):
    """Only the final event is parsed whole: it carries the whole response."""

    __slots__ = ("_response",)

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._response: bytes | None = None

    def _event(self, data: bytes) -> bool:
        kind, obj = _event_type(data)
        if kind in ("error", "response.failed"):
            return False
        if kind in _FINAL:
            obj = obj if obj is not None else orjson.loads(data)
            response = obj.get("response") if isinstance(obj, dict) else None
            if not isinstance(response, dict):
                return False
            self._response = orjson.dumps(response)
            self.size = len(self._response)
        return True

    def _result(self) -> bytes | None:
        return self._response

    usage = True  # a response always says its usage


class WholeAssembler(_Assembler):
    """A whole JSON answer relayed in pieces as it came: its bytes, up to `limit`."""

    __slots__ = ("_parts",)

    def __init__(self, limit: int) -> None:
        super().__init__(limit)
        self._parts: list[bytes] = []

    def feed(self, chunk: bytes) -> None:
        if self.live:
            self.size += len(chunk)
            if self.size > self.limit:
                self.live = False
                self._parts = []
            else:
                self._parts.append(chunk)

    def result(self) -> bytes | None:
        body = b"".join(self._parts) if self.live else b""
        return body if body[:1] == b"{" else None

    usage = True  # a whole answer is what a non-streamed request gets


Assembler = ChatAssembler | CompletionAssembler | ResponsesAssembler | WholeAssembler

_BY_ENDPOINT: dict[str, type[ChatAssembler] | type[CompletionAssembler] | type[ResponsesAssembler]] = {
    "chat/completions": ChatAssembler,
    "messages": ChatAssembler,  # the Anthropic door routes a chat completion
    "completions": CompletionAssembler,
    "responses": ResponsesAssembler,
}


def assembler(endpoint: str, event_stream: bool, limit: int) -> Assembler | None:
    """The assembler of a relayed answer (None: this endpoint's streams are not stored)."""
    if not event_stream:
        return WholeAssembler(limit)
    kind = _BY_ENDPOINT.get(endpoint)
    return None if kind is None else kind(limit)


async def tee(source: AsyncIterator[bytes], asm: Assembler) -> AsyncIterator[bytes]:
    """`source` as it comes, each chunk fed to `asm` first; closing this closes `source`."""
    async with aclosing(source):  # type: ignore[type-var]
        async for chunk in source:
            asm.feed(chunk)
            yield chunk

"""A stored whole answer → the stream a streaming request gets. Pure.

Each format is valid SSE that the official SDKs parse as the live stream:

- Chat Completions: per choice a first chunk with the role and the whole
  message (text, refusal, any other field), one with the tool calls, one
  with the finish reason; then, when the request asked
  (`stream_options.include_usage`), the usage chunk (and `"usage": null` on
  every other chunk, as OpenAI sends it); then `data: [DONE]`.
- Completions: per choice the text, then the finish reason; usage; [DONE].
- Responses: response.created, response.in_progress, per output item
  output_item.added → its content parts (text / refusal delta and done) or
  function call arguments → output_item.done, and response.completed
  (response.incomplete), numbered by `sequence_number`.

The Anthropic door needs none of its own: its entries are chat completions,
replayed as chat chunks, which the door translates as it does a live stream.
"""

from __future__ import annotations

import itertools
from typing import Any

import orjson

from ..providers.normalized import sse_event

SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"
_DONE = b"data: [DONE]\n\n"


def _data(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def include_usage(body: dict[str, Any]) -> bool:
    options = body.get("stream_options")
    return isinstance(options, dict) and bool(options.get("include_usage"))


def chat(obj: dict[str, Any], *, usage: bool) -> bytes:
    head: dict[str, Any] = {"id": obj.get("id"), "object": "chat.completion.chunk", "created": obj.get("created"),
                            "model": obj.get("model")}
    for name in ("system_fingerprint", "service_tier"):
        if name in obj:
            head[name] = obj[name]
    tail: dict[str, Any] = {"usage": None} if usage else {}

    def chunk(index: int, delta: dict[str, Any], finish: str | None = None, logprobs: Any = None) -> bytes:
        return _data({**head, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                           "finish_reason": finish}], **tail})

    out = []
    for choice in obj["choices"]:
        index = choice.get("index", 0)
        message = choice.get("message") or {}
        delta = {"role": message.get("role") or "assistant", "content": message.get("content")}
        for name, value in message.items():
            if name not in ("role", "content", "tool_calls") and value is not None:
                delta[name] = value
        out.append(chunk(index, delta, logprobs=choice.get("logprobs")))
        calls = message.get("tool_calls")
        if calls:
            out.append(chunk(index, {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]}))
        out.append(chunk(index, {}, choice.get("finish_reason")))
    if usage:
        out.append(_data({**head, "choices": [], "usage": obj.get("usage")}))
    out.append(_DONE)
    return b"".join(out)


def completion(obj: dict[str, Any], *, usage: bool) -> bytes:
    head: dict[str, Any] = {"id": obj.get("id"), "object": "text_completion", "created": obj.get("created"),
                            "model": obj.get("model")}
    if "system_fingerprint" in obj:
        head["system_fingerprint"] = obj["system_fingerprint"]
    tail: dict[str, Any] = {"usage": None} if usage else {}
    out = []
    for choice in obj["choices"]:
        index = choice.get("index", 0)
        out.append(_data({**head, "choices": [{"text": choice.get("text") or "", "index": index,
                                               "logprobs": choice.get("logprobs"), "finish_reason": None}], **tail}))
        out.append(_data({**head, "choices": [{"text": "", "index": index, "logprobs": None,
                                               "finish_reason": choice.get("finish_reason")}], **tail}))
    if usage:
        out.append(_data({**head, "choices": [], "usage": obj.get("usage")}))
    out.append(_DONE)
    return b"".join(out)


def responses(obj: dict[str, Any]) -> bytes:
    seq = itertools.count()

    def event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, {"type": kind, **fields, "sequence_number": next(seq)})

    pending = {**obj, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    out = [event("response.created", response=pending), event("response.in_progress", response=pending)]
    for index, item in enumerate(obj.get("output") or ()):
        kind = item.get("type")
        item_id = item.get("id")
        if kind == "message":
            out.append(event("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "content": []}))
            for part_index, part in enumerate(item.get("content") or ()):
                where = {"item_id": item_id, "output_index": index, "content_index": part_index}
                if part.get("type") == "output_text":
                    text = part.get("text") or ""
                    out.append(event("response.content_part.added", **where,
                                     part={**part, "text": "", "annotations": []}))
                    out.append(event("response.output_text.delta", **where, delta=text, logprobs=[]))
                    out.append(event("response.output_text.done", **where, text=text, logprobs=[]))
                elif part.get("type") == "refusal":
                    refusal = part.get("refusal") or ""
                    out.append(event("response.content_part.added", **where, part={**part, "refusal": ""}))
                    out.append(event("response.refusal.delta", **where, delta=refusal))
                    out.append(event("response.refusal.done", **where, refusal=refusal))
                else:
                    out.append(event("response.content_part.added", **where, part=part))
                out.append(event("response.content_part.done", **where, part=part))
        elif kind == "function_call":
            arguments = item.get("arguments") or ""
            out.append(event("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "arguments": ""}))
            out.append(event("response.function_call_arguments.delta", item_id=item_id, output_index=index,
                             delta=arguments))
            out.append(event("response.function_call_arguments.done", item_id=item_id, output_index=index,
                             arguments=arguments))
        else:
            out.append(event("response.output_item.added", output_index=index, item=item))
        out.append(event("response.output_item.done", output_index=index, item=item))
    final = "response.incomplete" if obj.get("status") == "incomplete" else "response.completed"
    out.append(event(final, response=obj))
    return b"".join(out)


def stream(endpoint: str, body: bytes, request: dict[str, Any]) -> bytes | None:
    """The stream of a stored answer for `request` (None: this endpoint has no stream)."""
    obj = orjson.loads(body)
    if endpoint in ("chat/completions", "messages"):
        return chat(obj, usage=include_usage(request))
    if endpoint == "completions":
        return completion(obj, usage=include_usage(request))
    if endpoint == "responses":
        return responses(obj)
    return None

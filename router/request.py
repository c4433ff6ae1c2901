"""The parsed request envelope: what every /v1 handler reads once.

The body is parsed once with orjson and kept both raw (for byte passthrough)
and as a dict (for routing decisions). Unknown fields are never dropped.

What is checked is what is forwarded: a top-level key given twice is a 400
(orjson keeps the last, an upstream may keep the first, so the raw bytes
could say another model than the one the key gate allowed). Finding one
costs a byte search per top-level key; only a body where some key name
occurs twice is parsed a second time, by the stdlib, to look.

A body is JSON or nothing: a Content-Type other than `application/json`
(or `application/*+json`) is a 415; none at all is taken as JSON, as some
clients send none.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from .core.errors import (
    DuplicateKey,
    InvalidJSON,
    InvalidRequest,
    MissingModel,
    RequestTooLarge,
    UnsupportedMediaType,
)

# The tail of a JSON string with an escape in it, followed by a colon: maybe
# an escaped key. Linear: each escape scans only to the next escape or quote.
_ESCAPED_KEY = re.compile(rb'\\.[^"\\]*"\s*:')

# Client fields that would let a caller pick the execution path (MIX-2).
_PATH_SELECTORS = ("iop_response_mode", "response_mode", "execution_path", "iop_execution_path")


@dataclass(slots=True)
class Envelope:
    # "chat/completions" | "completions" | "embeddings" | "responses" |
    # "messages/count_tokens" (the Anthropic door's count, body = the chat body)
    endpoint: str
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    headers: dict[str, str]  # lower-case names
    client_ip: str
    host: str
    request_id: str
    # Per-request facts for the provider. "anthropic_request": the Anthropic
    # door's own body (as parsed), so an Anthropic-kind provider can send it
    # as is instead of the converted `body` (Exchange.wire = "anthropic").
    notes: dict[str, Any] = field(default_factory=dict)
    max_response_bytes: int = 64 * 1024 * 1024  # server.max_response_bytes: a whole answer's cap
    relay_whole: bool = False  # the door relays a whole answer's bytes as they come (OpenAI door)
    # The snapshot's stream_usage: an OpenAI-compatible upstream is asked for
    # usage on a stream the client did not ask it for (providers/stream_usage.py).
    stream_usage: bool = False


def check_content_type(content_type: str | None) -> None:
    """415 unless the body is declared JSON (or not declared at all)."""
    if not content_type:
        return
    media = content_type.partition(";")[0].strip().lower()
    if media == "application/json" or (media.startswith("application/") and media.endswith("+json")):
        return
    raise UnsupportedMediaType(
        f"Content-Type '{media[:100]}' is not accepted; the body must be JSON (Content-Type: application/json)."
    )


def loads_object(raw: bytes) -> dict[str, Any]:
    """`raw` as a JSON object whose top-level keys are each given once (400 otherwise)."""
    if not raw:
        raise InvalidJSON("The request body is empty; send a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON ({exc.msg} at position {exc.pos}).") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
    if _may_repeat_a_key(raw, body):
        duplicate = _duplicate_top_level_key(raw)
        if duplicate is not None:
            raise DuplicateKey(
                f"The request body has the key '{duplicate[:100]}' more than once; send each top-level key once.",
                param=duplicate[:100],
            )
    return body


def _may_repeat_a_key(raw: bytes, body: dict[str, Any]) -> bool:
    """True when a top-level key could be given twice: its quoted name occurs
    twice in `raw` (a duplicate, or the name used again elsewhere), or some
    key is spelled with an escape (`"mod\\u0065l"`), which no byte search of
    the plain name finds. False positives only cost the closer look."""
    for key in body:
        needle = orjson.dumps(key)
        first = raw.find(needle)
        if first < 0 or raw.find(needle, first + len(needle)) >= 0:
            return True
    return b"\\" in raw and _ESCAPED_KEY.search(raw) is not None


def _duplicate_top_level_key(raw: bytes) -> str | None:
    """The first top-level key given twice, by the stdlib parser (slow path).
    Nested objects are parsed before the one that holds them, so the last
    object the hook sees is the top level."""
    last: list[list[tuple[str, Any]]] = [[]]

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        last[0] = pairs
        return {}  # the values are not needed: orjson's parse is the one kept

    try:
        json.loads(raw, object_pairs_hook=hook)
    except ValueError:  # orjson accepted it; nothing to add
        return None
    seen: set[str] = set()
    for key, _ in last[0]:
        if key in seen:
            return key
        seen.add(key)
    return None


def parse_body(raw: bytes, endpoint: str, max_bytes: int) -> tuple[dict[str, Any], str, bool]:
    if len(raw) > max_bytes:
        raise RequestTooLarge(f"The request body is {len(raw)} bytes; the limit is {max_bytes} bytes.")
    body = loads_object(raw)
    model = body.get("model")
    if model is None or model == "":
        raise MissingModel(param="model")
    if not isinstance(model, str):
        raise InvalidRequest("'model' must be a string.", param="model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise InvalidRequest("'stream' must be a boolean.", param="stream")
    _check_shape(body, endpoint)
    return body, model, stream


def _check_shape(body: dict[str, Any], endpoint: str) -> None:
    if endpoint == "chat/completions":
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise InvalidRequest(f"'messages[{i}]' must be an object with a 'role'.", param=f"messages[{i}]")
    elif endpoint == "completions":
        if "prompt" in body and not isinstance(body["prompt"], (str, list)):
            raise InvalidRequest("'prompt' must be a string or an array.", param="prompt")
    elif endpoint == "embeddings":
        if not isinstance(body.get("input"), (str, list)):
            raise InvalidRequest("'input' must be a string or an array.", param="input")
    elif endpoint == "responses":
        if "input" in body and not isinstance(body["input"], (str, list)):
            raise InvalidRequest("'input' must be a string or an array.", param="input")
    for key in ("temperature", "top_p"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise InvalidRequest(f"'{key}' must be a number.", param=key)
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens", "n"):
        value = body.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise InvalidRequest(f"'{key}' must be an integer.", param=key)


def path_selector(body: dict[str, Any]) -> str | None:
    """The name of a client field that tries to choose the execution path."""
    metadata = body.get("metadata")
    if isinstance(metadata, dict):
        for key in _PATH_SELECTORS:
            if key in metadata:
                return f"metadata.{key}"
    for key in _PATH_SELECTORS:
        if key in body:
            return key
    return None

"""The parsed request envelope: what every /v1 handler reads once.

The body is parsed once with orjson and kept both raw (for byte passthrough)
and as a dict (for routing decisions). Unknown fields are never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from .core.errors import InvalidJSON, InvalidRequest, MissingModel, RequestTooLarge

# Client fields that would let a caller pick the execution path (MIX-2).
_PATH_SELECTORS = ("iop_response_mode", "response_mode", "execution_path", "iop_execution_path")


@dataclass(slots=True)
class Envelope:
    endpoint: str  # "chat/completions" | "completions" | "embeddings" | "responses"
    raw: bytes
    body: dict[str, Any]
    model: str
    stream: bool
    headers: dict[str, str]  # lower-case names
    client_ip: str
    host: str
    request_id: str
    notes: dict[str, Any] = field(default_factory=dict)
    max_response_bytes: int = 64 * 1024 * 1024  # server.max_response_bytes: a whole answer's cap


def parse_body(raw: bytes, endpoint: str, max_bytes: int) -> tuple[dict[str, Any], str, bool]:
    if len(raw) > max_bytes:
        raise RequestTooLarge(f"The request body is {len(raw)} bytes; the limit is {max_bytes} bytes.")
    if not raw:
        raise InvalidJSON("The request body is empty; send a JSON object.")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"The request body is not valid JSON ({exc.msg} at position {exc.pos}).") from None
    if not isinstance(body, dict):
        raise InvalidRequest("The request body must be a JSON object.")
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

"""Anthropic wire details: SSE framing, error bodies, the model list.

`SseDecoder` is the shared line decoder's SSE reader (`framing.JsonEvents`):
chunks may end anywhere, even mid-character; lines may end in CRLF; a long
event costs linear time however finely it is cut, and is capped at 16 MiB.
"""

from __future__ import annotations

import orjson

from router.core.errors import (
    InvalidRequest,
    PermissionDenied,
    RateLimited,
    RequestTooLarge,
    RouterError,
    UpstreamError,
    UpstreamTimeout,
)
from router.providers.framing import JsonEvents
from router.providers.framing import SseError as SseError

SseDecoder = JsonEvents  # the shared line decoder's SSE reader (router/providers/framing.py)

# Anthropic error type → (OpenAI type, code).
_TYPES = {
    "invalid_request_error": ("invalid_request_error", "invalid_request"),
    "authentication_error": ("invalid_request_error", "invalid_api_key"),
    "permission_error": ("permission_error", "permission_denied"),
    "not_found_error": ("invalid_request_error", "not_found"),
    "request_too_large": ("invalid_request_error", "request_too_large"),
    "rate_limit_error": ("requests", "rate_limit_exceeded"),
    "billing_error": ("insufficient_quota", "insufficient_quota"),
    "api_error": ("server_error", "upstream_error"),
    "overloaded_error": ("server_error", "overloaded"),
    "timeout_error": ("server_error", "upstream_timeout"),
}
_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_TYPE_STATUS = {kind: status for status, kind in _STATUS_TYPES.items()}


def error_parts(status: int, body: bytes) -> tuple[str, str]:
    """(Anthropic error type, message) of an error answer, JSON or not."""
    kind = _STATUS_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return kind, body.decode("utf-8", "replace").strip()[:1000]
    error = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(error, dict):
        if isinstance(error.get("type"), str):
            kind = error["type"]
        return kind, str(error.get("message") or "")[:1000]
    return kind, ""


def anthropic_error(status: int, kind: str, message: str) -> RouterError:
    """An Anthropic error → the error the client sees, its status kept where
    it means the same (529 overloaded → 503)."""
    text = f"Anthropic: {message or kind or f'HTTP {status}'}"
    error: RouterError
    if status == 413 or kind == "request_too_large":
        error = RequestTooLarge(text)
    elif status == 403 or kind == "permission_error":
        error = PermissionDenied(text)
    elif status == 429 or kind == "rate_limit_error":
        error = RateLimited(text)
    elif status in (408, 504) or kind == "timeout_error":
        error = UpstreamTimeout(text)
    elif 400 <= status < 500:
        error = InvalidRequest(text)
    else:
        error = UpstreamError(text)
    error.type, error.code = _TYPES.get(kind, (error.type, error.code))
    if status == 529 or kind == "overloaded_error":
        error.status = 503
    elif status >= 400:
        error.status = status
    return error


def error_from_anthropic(status: int, body: bytes) -> tuple[int, dict]:
    """An Anthropic error answer → (status, OpenAI error object)."""
    error = anthropic_error(status, *error_parts(status, body))
    return error.status, error.to_dict()


def event_error(event: dict) -> RouterError:
    """A stream's `error` event → the error that ends the client's stream."""
    error = event.get("error")
    if not isinstance(error, dict):
        error = {}
    kind = error.get("type")
    if not isinstance(kind, str):
        kind = "api_error"
    status = _TYPE_STATUS.get(kind, 500)
    return anthropic_error(status, kind, str(error.get("message") or ""))


def error_event(status: int, message: str) -> bytes:
    """An Anthropic stream `error` event (the router's own, mid-stream)."""
    kind = _STATUS_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    if status == 503:
        kind = "overloaded_error"
    data = {"type": "error", "error": {"type": kind, "message": message}}
    return b"event: error\ndata: " + orjson.dumps(data) + b"\n\n"


def listed_models(data: dict) -> list[str] | None:
    """Model ids from `GET /v1/models` (`{"data": [{"id", "type": "model"}], "has_more"}`)."""
    items = data.get("data")
    if not isinstance(items, list):
        return None
    return [m["id"] for m in items if isinstance(m, dict) and isinstance(m.get("id"), str)]

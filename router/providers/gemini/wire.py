"""Gemini wire details: the base URL, SSE framing, error bodies, the model list.

`SseDecoder` is the shared line decoder's SSE reader (`framing.JsonEvents`):
chunks may end anywhere, both `\\n\\n` and `\\r\\n\\r\\n` (what Google's front
end sends) end an event, and an event is capped at 16 MiB.
"""

from __future__ import annotations

import re

import orjson

from router.core.errors import UpstreamError
from router.providers.framing import JsonEvents
from router.providers.framing import SseError as SseError

SseDecoder = JsonEvents  # the shared line decoder's SSE reader (router/providers/framing.py)

_VERSION = re.compile(r"/v\d+(?:(?:alpha|beta)\d*)?$")

# Gemini's canonical status → (OpenAI error type) for the statuses it answers with.
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
}


def api_base(url: str) -> str:
    """The configured URL with its API version: `/v1beta` unless it names one."""
    url = url.rstrip("/")
    return url if _VERSION.search(url) else url + "/v1beta"


def model_path(served: str) -> str:
    """`models/<name>` (a served name may already say `models/…` or `tunedModels/…`)."""
    return served if "/" in served else f"models/{served}"


def _error_of(body: bytes) -> dict:
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return {"message": body.decode("utf-8", "replace").strip()[:1000]}
    if isinstance(obj, list) and obj and isinstance(obj[0], dict):  # some Google fronts wrap it
        obj = obj[0]
    error = obj.get("error") if isinstance(obj, dict) else None
    return error if isinstance(error, dict) else {"message": str(obj)[:1000]}


def _api_key_invalid(error: dict) -> bool:
    for detail in error.get("details") or ():
        if isinstance(detail, dict) and detail.get("reason") == "API_KEY_INVALID":
            return True
    return False


def error_from_gemini(status: int, body: bytes) -> tuple[int, dict]:
    """A Gemini error answer → (status, OpenAI error object).

    The status is kept (400, 403, 404, 429, 500, 503, 504 mean what they
    say); the OpenAI `code` is Gemini's canonical status in lower case
    (`invalid_argument`, `resource_exhausted`, …). A refused API key is the
    router's configuration, not the client's request: Gemini says 400
    API_KEY_INVALID, the client gets 502 `upstream_error`.
    """
    error = _error_of(body)
    message = str(error.get("message") or f"HTTP {status}")[:1000]
    canonical = error.get("status")
    if status == 400 and _api_key_invalid(error):
        return 502, UpstreamError("Gemini refused the backend's API key.").to_dict()
    if status == 529:
        status = 503
    code = canonical.lower() if isinstance(canonical, str) and canonical else f"http_{status}"
    kind = _TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": f"Gemini: {message}", "type": kind, "param": None, "code": code}}


class Blocked(Exception):
    """Gemini refused the prompt (`promptFeedback.blockReason`, no candidates)."""

    status = 400

    def __init__(self, reason: str, detail: str | None) -> None:
        self.reason = reason
        text = f"Gemini blocked the prompt ({reason})"
        super().__init__(f"{text}: {detail}" if detail else text + ".")

    def to_dict(self) -> dict:
        return {
            "error": {
                "message": str(self),
                "type": "invalid_request_error",
                "param": "messages",
                "code": "content_filter",
            }
        }

    def to_sse(self) -> bytes:
        return b"data: " + orjson.dumps(self.to_dict()) + b"\n\n"


def raise_if_blocked(frame: dict) -> None:
    """No candidates and a block reason: the prompt was refused as a whole."""
    if frame.get("candidates"):
        return
    feedback = frame.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        detail = feedback.get("blockReasonMessage")
        raise Blocked(str(feedback["blockReason"]), detail if isinstance(detail, str) else None)


def raise_if_error(frame: dict) -> None:
    """An error object inside a 200 stream."""
    error = frame.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        raise UpstreamError(f"Gemini: {message}"[:1000])


def listed_models(data: dict) -> list[str] | None:
    """`GET /models` → model names without the `models/` prefix (None: not a listing)."""
    models = data.get("models")
    if models is None:
        return [] if "nextPageToken" in data or not data else None
    if not isinstance(models, list):
        return None
    out = []
    for entry in models:
        name = entry.get("name") if isinstance(entry, dict) else None
        if isinstance(name, str) and name:
            out.append(name.removeprefix("models/"))
    return out

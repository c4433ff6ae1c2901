"""OpenAI answers → Anthropic answers: the `message` object and the error shape.

Invariants:
- Pure: no Django, no I/O; ids are passed in by the caller.
- `model` is always the name the client asked for.
- Errors keep their HTTP status; only the body changes shape:
  `{"type": "error", "error": {"type": <anthropic type>, "message": ...}}`.
"""

from __future__ import annotations

from typing import Any

import orjson

from router.core.errors import UpstreamError

# HTTP status → Anthropic error type (docs: "HTTP errors"). Any other 4xx is an
# invalid_request_error, any other 5xx an api_error.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}

# OpenAI finish_reason → Anthropic stop_reason.
STOP_REASONS: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_body(status: int, message: str, kind: str | None = None) -> bytes:
    return orjson.dumps({"type": "error", "error": {"type": kind or error_type(status), "message": message}})


def error_message(body: bytes) -> str:
    """The human message of an OpenAI-shaped (or any) error body."""
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body.decode("utf-8", "replace").strip()[:2000] or "The upstream request failed."
    if isinstance(obj, dict):
        err = obj.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(err, str):
            return err
        if isinstance(obj.get("message"), str):
            return obj["message"]
    return "The upstream request failed."


def error_from_openai(status: int, body: bytes) -> bytes:
    return error_body(status, error_message(body))


def stop_reason(finish: Any, matched: Any, stop_sequences: tuple[str, ...], has_calls: bool) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence). `matched` is vLLM's per-choice `stop_reason`:
    the stop string that ended the text, when the backend reports it."""
    if has_calls:
        return "tool_use", None
    if finish == "stop" and isinstance(matched, str) and matched in stop_sequences:
        return "stop_sequence", matched
    return STOP_REASONS.get(finish, "end_turn") if isinstance(finish, str) else "end_turn", None


def usage(openai_usage: Any) -> dict[str, int]:
    """OpenAI usage → Anthropic usage. OpenAI counts cached prompt tokens inside
    prompt_tokens; Anthropic counts them apart (input = uncached + cache reads)."""
    if not isinstance(openai_usage, dict):
        return {"input_tokens": 0, "output_tokens": 0}
    prompt = _count(openai_usage.get("prompt_tokens"))
    details = openai_usage.get("prompt_tokens_details")
    cached = _count(details.get("cached_tokens")) if isinstance(details, dict) else 0
    out = {"input_tokens": max(prompt - cached, 0), "output_tokens": _count(openai_usage.get("completion_tokens"))}
    if cached:
        out["cache_read_input_tokens"] = cached
    return out


def obj(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else an empty one (upstream JSON is untrusted)."""
    return value if isinstance(value, dict) else {}


def string(value: Any, default: str = "") -> str:
    """`value` when it is a non-empty string, else `default`."""
    return value if isinstance(value, str) and value else default


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def text_of(content: Any) -> str:
    """OpenAI message content (a string or text parts) → plain text."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def tool_input(arguments: Any, name: str) -> dict[str, Any]:
    """OpenAI tool-call arguments (a JSON string) → the object Anthropic's `input` must be."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise UpstreamError(f"The backend called tool '{name}' with arguments that are not a JSON object.")
    return value


def message_from_completion(
    completion: Any, *, model: str, message_id: str, stop_sequences: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A `chat.completion` → an Anthropic `message`. Raises UpstreamError when
    the completion cannot be represented (no choices, broken tool arguments)."""
    if not isinstance(completion, dict):
        raise UpstreamError("The backend answered something that is not a chat completion.")
    choices = completion.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UpstreamError("The backend answered a chat completion without choices.")
    choice = choices[0]
    message = obj(choice.get("message"))
    content: list[dict[str, Any]] = []
    text = text_of(message.get("content"))
    refused = not text and bool(string(message.get("refusal")))
    if refused:
        text = message["refusal"]
    if text:
        content.append({"type": "text", "text": text})
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, dict)]
    for k, call in enumerate(calls):
        function = obj(call.get("function"))
        name = string(function.get("name"))
        call_id = string(call.get("id"), f"toolu_{message_id}_{k}")
        arguments = tool_input(function.get("arguments"), name)
        content.append({"type": "tool_use", "id": call_id, "name": name, "input": arguments})
    reason, sequence = stop_reason(choice.get("finish_reason"), choice.get("stop_reason"), stop_sequences, bool(calls))
    if refused and reason == "end_turn":
        reason = "refusal"
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage(completion.get("usage")),
    }

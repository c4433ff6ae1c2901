"""Pieces shared by the Ollama conversions: field bookkeeping, options, tools, ids.

Invariants of the normalized path (MIX-5):
- Pure: no Django, no I/O, no asyncio; every function maps dicts to dicts.
- Every request field is converted, ignored (named in `Conversion.ignored_fields`
  with a reason in `notes`) or rejected with `UnsupportedParameter` before
  anything is produced. Nothing is invented into the Ollama request.
- Everything produced for the client carries only fields of the official
  OpenAI types; Ollama-only data (durations, thinking in chat) never leaks.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from router.core.errors import InvalidRequest, UnsupportedParameter, UpstreamError
from router.providers import normalized
from router.providers.normalized import (  # noqa: F401 (re-exported: the Ollama conversions' names)
    Conversion,
    Ledger,
    boolean,
    compact_json,
    function_tools,
    integer,
    new_id,
    number,
    require_object,
    sse,
    sse_event,
    stop_option,
)

# Fields outside the OpenAI API that a normalized provider still understands.
# They are the only "extensions" honoured; every other unknown field is ignored.
EXTENSION_OPTIONS = {
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
}

# Every non-OpenAI request field the chat conversions honour.
EXTENSIONS = frozenset({*EXTENSION_OPTIONS, "think"})

EFFORT_TO_THINK: dict[str, bool | str] = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "high",
}


def apply_policy(
    body: dict,
    table: dict[str, tuple[str, str]],
    ledger: Ledger,
    extensions: frozenset[str] = EXTENSIONS,
) -> None:
    """`normalized.apply_policy` for Ollama (unknown fields are "not sent to Ollama")."""
    normalized.apply_policy(body, table, ledger, extensions, "Ollama")


# -- options, think, format ---------------------------------------------------------


def sampling_options(body: dict, keys: dict[str, str]) -> dict:
    """OpenAI sampling fields (and the known extensions) → Ollama `options`."""
    options: dict = {}
    for key, target in {**keys, **EXTENSION_OPTIONS}.items():
        value = number(body, key)
        if value is not None:
            options[target] = value
    return options


def think_value(body: dict, effort: Any, param: str) -> bool | str | None:
    """`think` (Ollama extension) wins; else a reasoning effort maps to a level."""
    think = body.get("think")
    if think is not None:
        if isinstance(think, bool) or think in ("low", "medium", "high"):
            return think
        raise InvalidRequest("'think' must be a boolean or low/medium/high.", param="think")
    if effort is None:
        return None
    if effort not in EFFORT_TO_THINK:
        raise InvalidRequest(f"Unknown reasoning effort {effort!r}.", param=param)
    return EFFORT_TO_THINK[effort]


def json_format(kind: Any, schema: Any, param: str) -> str | dict | None:
    """An OpenAI output format → Ollama `format` ("json" or a JSON schema)."""
    if kind == "text":
        return None
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        if schema is None:
            return "json"
        if not isinstance(schema, dict):
            raise InvalidRequest("The JSON schema must be an object.", param=param)
        return schema
    raise UnsupportedParameter(
        f"Output format {kind!r} is not supported by this model's provider.",
        param=param,
    )


# -- content -----------------------------------------------------------------------


def image_data(url: Any, param: str) -> str:
    """A `data:image/...;base64,` URL → the bare base64 Ollama takes."""
    if not isinstance(url, str):
        raise InvalidRequest("The image URL must be a string.", param=param)
    if not url.startswith("data:"):
        raise UnsupportedParameter(
            "This model's provider needs image bytes: send the image as a base64 data: URL instead of a remote URL.",
            param=param,
        )
    header, sep, data = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise InvalidRequest("An image data: URL must be base64-encoded.", param=param)
    mime = header[: -len(";base64")]
    if mime and not mime.startswith("image/"):
        raise UnsupportedParameter(f"Content of type {mime!r} is not an image.", param=param)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest("The image data: URL is not valid base64.", param=param) from exc
    return data


def arguments_object(arguments: Any, param: str) -> dict:
    """OpenAI tool-call arguments (a JSON string) → the object Ollama takes."""
    if isinstance(arguments, dict):
        return arguments
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        raise InvalidRequest("Tool call arguments must be a JSON string.", param=param)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest("Tool call arguments are not valid JSON.", param=param) from exc
    if not isinstance(value, dict):
        raise UnsupportedParameter(
            "This model's provider only takes tool call arguments that are JSON objects.",
            param=param,
        )
    return value


# -- tools ---------------------------------------------------------------------------


def ollama_tool(name: Any, description: Any, parameters: Any, param: str) -> dict:
    if not isinstance(name, str) or not name:
        raise InvalidRequest("A function tool needs a name.", param=param)
    function: dict = {"name": name}
    if description is not None:
        function["description"] = description
    if parameters is not None:
        if not isinstance(parameters, dict):
            raise InvalidRequest("Function parameters must be a JSON schema object.", param=param)
        function["parameters"] = parameters
    return {"type": "function", "function": function}


def choose_tools(
    tools: list[dict],
    choice: Any,
    allowed: tuple[Any, list[Any]] | None,
    ledger: Ledger,
) -> list[dict]:
    """Apply `tool_choice`: Ollama can't force a call, only offer tools or not.

    `allowed` is (mode, names) when the choice is an allowed_tools object.
    """
    if choice is None or choice == "auto":
        return tools
    if choice == "none":
        if tools:
            ledger.note("tool_choice 'none': tools were not sent to Ollama")
        return []
    if allowed is not None:
        mode, names = allowed
        if mode == "auto":
            return [t for t in tools if t["function"]["name"] in names]
        if mode != "required":
            raise InvalidRequest(f"Unknown allowed_tools mode {mode!r}.", param="tool_choice")
    raise UnsupportedParameter(
        "This model's provider cannot force a tool call; use tool_choice 'auto' or 'none'.",
        param="tool_choice",
    )


# -- output --------------------------------------------------------------------------






def message_of(frame: dict) -> dict:
    """The `message` of an Ollama chat answer or stream frame ({} if absent)."""
    message = frame.get("message")
    return message if isinstance(message, dict) else {}


def tool_calls(message: dict) -> list[tuple[str, str, str]]:
    """Ollama tool calls → (call id, name, arguments as a compact JSON string)."""
    out = []
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            continue
        name = function["name"]
        arguments = function.get("arguments")
        if not isinstance(arguments, str):
            arguments = compact_json(arguments if arguments is not None else {})
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = new_id("call")
        out.append((call_id, name, arguments))
    return out


def finish_reason(done_reason: Any, has_calls: bool) -> str:
    """Tool calls win (the client must run them), then Ollama's length stop."""
    if has_calls:
        return "tool_calls"
    return "length" if done_reason == "length" else "stop"


def token_counts(resp: dict) -> tuple[int, int]:
    """(prompt, completion); Ollama omits a count that is zero."""

    def count(key: str) -> int:
        value = resp.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    return count("prompt_eval_count"), count("eval_count")


def raise_if_error(frame: dict) -> None:
    """Ollama reports failures as `{"error": "..."}`, also in the middle of a stream."""
    if "error" in frame:
        error = frame["error"]
        if isinstance(error, dict):
            error = error.get("message") or error
        raise UpstreamError(f"Ollama: {error}"[:1000])

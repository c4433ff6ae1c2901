"""What every normalized provider's conversions share: field bookkeeping,
the field-policy pass, small validators, ids, compact JSON and SSE frames.

Pure: no Django, no I/O, no asyncio. The providers' `common` modules
re-export these names; a provider's own variants (e.g. Anthropic's
`require_object`, which names the parameter) stay in its package.
"""

from __future__ import annotations

import base64
import json
import secrets
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from router.core.errors import InvalidRequest, UnsupportedParameter

# The message / delta field that carries a model's reasoning text (Anthropic
# thinking, Gemini thoughts) to a Chat Completions client: vLLM's name, which
# OpenAI-compatible clients read. A client that reads only `content` sees the
# answer it always saw.
REASONING = "reasoning_content"


@dataclass(slots=True)
class Conversion:
    """A native request plus what was left out of it, for the observation."""

    request: dict
    ignored_fields: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


class Ledger:
    """Collects ignored fields (deduplicated, in order) and notes."""

    __slots__ = ("ignored", "notes")

    def __init__(self) -> None:
        self.ignored: list[str] = []
        self.notes: list[str] = []

    def ignore(self, path: str, why: str) -> None:
        if path not in self.ignored:
            self.ignored.append(path)
            self.notes.append(f"{path}: {why}")

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def done(self, request: dict) -> Conversion:
        return Conversion(request=request, ignored_fields=self.ignored, notes=self.notes)


def apply_policy(
    body: dict,
    table: dict[str, tuple[str, str]],
    ledger: Ledger,
    extensions: frozenset[str],
    provider: str,
) -> None:
    """Record ignored/unknown fields and reject unconditional unsupported ones.

    An unknown field (neither in `table` nor in `extensions`) is noted as
    "not sent to <provider>". Conditional and converted fields are handled by
    the caller's own code; a value of null counts as absent, as OpenAI treats it.
    """
    for key, value in body.items():
        rule = table.get(key)
        if rule is None:
            if key not in extensions:
                ledger.ignore(key, f"unknown field, not sent to {provider}")
            continue
        policy, why = rule
        if value is None:
            continue
        if policy == "ignored":
            ledger.ignore(key, why)
        elif policy == "unsupported":
            raise UnsupportedParameter(f"'{key}' is not supported by this model's provider: {why}", param=key)


# -- small validators ------------------------------------------------------------


def require_object(body: Any, what: str = "request body") -> dict:
    if not isinstance(body, dict):
        raise InvalidRequest(f"The {what} must be a JSON object.")
    return body


def number(body: dict, key: str) -> float | int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequest(f"'{key}' must be a number.", param=key)
    return value


def integer(body: dict, key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidRequest(f"'{key}' must be an integer.", param=key)
    return value


def boolean(body: dict, key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"'{key}' must be a boolean.", param=key)
    return value


def stop_option(body: dict) -> list[str] | None:
    """`stop` (a string or a list of strings) → the list of stop sequences."""
    stop = body.get("stop")
    if stop is None:
        return None
    if isinstance(stop, str):
        return [stop]
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return list(stop)
    raise InvalidRequest("'stop' must be a string or a list of strings.", param="stop")


def function_tools(body: dict) -> list[tuple[str, dict]]:
    """`(param, tool)` for each entry of `tools`, which must all be function
    tools; every entry is checked before the caller sees the first."""
    return list(each_function_tool(body))


def each_function_tool(body: dict, require: Callable[[Any, str], dict] = require_object) -> Iterator[tuple[str, dict]]:
    """`function_tools` one entry at a time: an entry is checked (with the
    provider's object check `require`) only when the caller got the previous one."""
    raw = body.get("tools")
    if raw is None:
        return
    if not isinstance(raw, list):
        raise InvalidRequest("'tools' must be a list.", param="tools")
    for i, tool in enumerate(raw):
        param = f"tools[{i}]"
        tool = require(tool, param)
        if tool.get("type") != "function":
            raise UnsupportedParameter(
                f"Tools of type {tool.get('type')!r} are not supported by this model's provider.",
                param=param,
            )
        yield param, tool


def embed_input(body: dict) -> str | list[str]:
    """The `input` of `/v1/embeddings` (text only), after checking `encoding_format`."""
    text = body.get("input")
    if isinstance(text, list):
        if not text:
            raise InvalidRequest("'input' must not be empty.", param="input")
        if not all(isinstance(t, str) for t in text):
            if all(isinstance(t, int | list) for t in text):
                raise UnsupportedParameter(
                    "Token-id input is not supported by this model's provider; send text.",
                    param="input",
                )
            raise InvalidRequest("'input' must be a string or a list of strings.", param="input")
    elif not isinstance(text, str):
        raise InvalidRequest("'input' must be a string or a list of strings.", param="input")
    if body.get("encoding_format") not in (None, "float", "base64"):
        raise InvalidRequest("'encoding_format' must be 'float' or 'base64'.", param="encoding_format")
    return text


# -- output --------------------------------------------------------------------------


def part_text(part: dict, kind: str, where: str) -> str:
    """The string of a `text` / `refusal` content part (400 naming `where` otherwise)."""
    value = part.get(kind)
    if not isinstance(value, str):
        raise InvalidRequest(f"A {kind} part needs a string '{kind}'.", param=where)
    return value


def responses_input(body: dict) -> tuple[list[dict], list | None]:
    """A Responses body's leading chat messages — `instructions` as a system
    message, a string `input` as the user's — and its input items (None when
    `input` is a string). Items are the caller's to convert."""
    out: list[dict] = []
    instructions = body.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise InvalidRequest("'instructions' must be a string.", param="instructions")
        out.append({"role": "system", "content": instructions})
    items = body.get("input")
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
        return out, None
    if not isinstance(items, list) or not items:
        raise InvalidRequest("'input' must be a string or a non-empty list of items.", param="input")
    return out, items


def new_id(prefix: str) -> str:
    """`<prefix>_<24 hex>`: the id shapes OpenAI uses (call_, msg_, fc_, rs_)."""
    return f"{prefix}_{secrets.token_hex(12)}"


def prefixed_id(prefix: str) -> str:
    """`<prefix><24 hex>`: `chatcmpl-<hex>`, `resp_<hex>` as OpenAI shapes them."""
    return prefix + secrets.token_hex(12)


def compact_json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # e.g. integers past 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def sse_event(kind: str, obj: dict) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def chat_completion_object(
    *, completion_id: str, created: int, model: str, content: str, calls: list[dict], finish: str, usage: dict,
    reasoning: str = "",
) -> dict:
    """A one-choice `chat.completion`: the content is null when only tool calls came;
    the model's reasoning text, when it sent some, is `reasoning_content`."""
    message: dict = {
        "role": "assistant",
        "content": content if content or not calls else None,
        "refusal": None,
        "annotations": [],
    }
    if reasoning:
        message[REASONING] = reasoning
    if calls:
        message["tool_calls"] = calls
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": usage,
    }


def base64_vector(vector: list[float]) -> str:
    """An embedding as OpenAI's `encoding_format: base64` sends it (little-endian float32)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()

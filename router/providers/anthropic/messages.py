"""Chat Completions messages → Anthropic `system` + alternating turns.

system/developer messages become the top-level `system` (text blocks);
user/assistant/tool messages become alternating `user`/`assistant` turns:
consecutive same-role turns are merged, tool results are `tool_result` blocks
in a user turn, assistant tool calls are `tool_use` blocks whose `input` is
the parsed arguments. Empty text is never sent (Anthropic refuses it).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import orjson

from router.core.errors import InvalidRequest, UnsupportedParameter
from router.providers.anthropic.common import Ledger, require_object
from router.providers.normalized import part_text

IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})

_MESSAGE_KEYS = {
    "system": {"role", "content", "name"},
    "developer": {"role", "content", "name"},
    "user": {"role", "content", "name"},
    "assistant": {"role", "content", "tool_calls", "name", "refusal"},
    "tool": {"role", "content", "tool_call_id"},
}


def system_and_turns(messages: Any, ledger: Ledger) -> tuple[list[dict], list[dict]]:
    """(system text blocks, alternating turns)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty list.", param="messages")
    system: list[dict] = []
    turns: list[dict] = []
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        message = require_object(message, param)
        role = message.get("role")
        if role == "function":
            raise UnsupportedParameter("Function messages are deprecated; use tool messages.", param=f"{param}.role")
        if role not in _MESSAGE_KEYS:
            raise InvalidRequest(f"Unknown message role {role!r}.", param=f"{param}.role")
        for key in sorted(message.keys() - _MESSAGE_KEYS[role]):
            if key in ("audio", "function_call") and message[key] is not None:
                raise UnsupportedParameter(f"'{key}' in messages is not supported.", param=f"{param}.{key}")
            ledger.ignore(f"messages[].{key}", "Anthropic messages have no such field")
        if "name" in message and message.get("name") is not None:
            ledger.ignore("messages[].name", "Anthropic messages have no author name")
        content = message.get("content")
        if role in ("system", "developer"):
            if turns:
                ledger.note(f"{param}: a {role} message after the first turn joins the top-level system prompt")
            system.extend(_text_blocks(content, f"{param}.content"))
            continue
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise InvalidRequest("A tool message needs its 'tool_call_id'.", param=f"{param}.tool_call_id")
            result: dict = {"type": "tool_result", "tool_use_id": call_id}
            if isinstance(content, str):
                if content:
                    result["content"] = content
            else:
                blocks = _text_blocks(content, f"{param}.content")
                if blocks:
                    result["content"] = blocks
            _append(turns, "user", [result])
            continue
        if role == "user":
            blocks = _user_blocks(content, f"{param}.content")
        else:
            blocks = _text_blocks(content, f"{param}.content", allow_refusal=True)
            blocks.extend(_tool_uses(message.get("tool_calls"), f"{param}.tool_calls"))
        if not blocks:
            ledger.note(f"{param}: empty {role} message not sent (Anthropic refuses empty content)")
            continue
        _append(turns, role, blocks)
    if not turns:
        raise InvalidRequest("This model's provider needs at least one user or assistant message.", param="messages")
    for turn in turns:  # a lone text block goes as a plain string
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return system, turns


def _append(turns: list[dict], role: str, blocks: list[dict]) -> None:
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": list(blocks)})


def _text_blocks(content: Any, param: str, *, allow_refusal: bool = False) -> list[dict]:
    """String or text parts → non-empty text blocks (Anthropic refuses empty ones)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise InvalidRequest("Message content must be a string or a list of parts.", param=param)
    out = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        kind = part.get("type")
        if kind == "text" or (allow_refusal and kind == "refusal"):
            value = part_text(part, kind, where)
            if value:
                out.append({"type": "text", "text": value})
        else:
            raise UnsupportedParameter(f"Content parts of type {kind!r} are not supported here.", param=where)
    return out


def _user_blocks(content: Any, param: str) -> list[dict]:
    if not isinstance(content, list):
        return _text_blocks(content, param)
    out = []
    for j, part in enumerate(content):
        where = f"{param}[{j}]"
        part = require_object(part, where)
        if part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            out.append({"type": "image", "source": image_source(url, where)})
        else:
            out.extend(_text_blocks([part], where))
    return out


def image_source(url: Any, param: str) -> dict:
    """A data: URL → a base64 source; an http(s) URL → a url source."""
    if not isinstance(url, str):
        raise InvalidRequest("The image URL must be a string.", param=param)
    if url.startswith(("http://", "https://")):
        return {"type": "url", "url": url}
    if not url.startswith("data:"):
        raise InvalidRequest("An image URL must be an http(s) URL or a base64 data: URL.", param=param)
    header, sep, data = url[5:].partition(",")
    if not sep or not header.endswith(";base64"):
        raise InvalidRequest("An image data: URL must be base64-encoded.", param=param)
    mime = header[: -len(";base64")].lower()
    if mime not in IMAGE_TYPES:
        raise UnsupportedParameter(
            f"Images of type {mime!r} are not supported by this model's provider (jpeg, png, gif and webp are).",
            param=param,
        )
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest("The image data: URL is not valid base64.", param=param) from exc
    return {"type": "base64", "media_type": mime, "data": data}


def _tool_uses(calls: Any, param: str) -> list[dict]:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise InvalidRequest("'tool_calls' must be a list.", param=param)
    out = []
    for k, call in enumerate(calls):
        where = f"{param}[{k}]"
        call = require_object(call, where)
        if call.get("type", "function") != "function":
            raise UnsupportedParameter("Only function tool calls are supported.", param=where)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidRequest("A tool call needs its 'id'.", param=f"{where}.id")
        fn = require_object(call.get("function"), f"{where}.function")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidRequest("A tool call needs a function name.", param=f"{where}.function.name")
        out.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": _arguments(fn.get("arguments"), f"{where}.function.arguments"),
            }
        )
    return out


def _arguments(arguments: Any, param: str) -> dict:
    if arguments is None or arguments == "":
        return {}
    if not isinstance(arguments, str):
        raise InvalidRequest("Tool call arguments must be a JSON string.", param=param)
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest("Tool call arguments are not valid JSON.", param=param) from exc
    if not isinstance(value, dict):
        raise InvalidRequest("Tool call arguments must be a JSON object.", param=param)
    return value

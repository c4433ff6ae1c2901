"""Anthropic `system` and `messages` → OpenAI chat messages.

Invariants:
- Pure: no Django, no I/O; a rejection is an `InvalidRequest` naming its path.
- The `tool_result` blocks of a user turn become OpenAI `tool` messages placed
  before the rest of that turn, so they directly follow the assistant message
  that made the calls (OpenAI's ordering rule). Images inside a tool result
  ride in the user message that follows (OpenAI tool messages are text only).
- Thinking blocks in assistant turns are dropped; `cache_control` is ignored.
"""

from __future__ import annotations

from typing import Any

import orjson

from router.core.errors import InvalidRequest

THINKING_NOTE = "extended thinking has no OpenAI Chat Completions equivalent"
CACHE_NOTE = "prompt caching is the backend's own business"


def system_messages(system: Any) -> list[dict[str, Any]]:
    """`system` (a string or text blocks) → at most one leading system message."""
    if system is None or system == "" or system == []:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    if isinstance(system, list):
        texts = []
        for i, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
                raise InvalidRequest(f"system[{i}]: must be a text block.", param=f"system[{i}]")
            texts.append(block["text"])
        return [{"role": "system", "content": "\n".join(texts)}]
    raise InvalidRequest("system: must be a string or a list of text blocks.", param="system")


def conversation(messages: Any, ignored: list[str]) -> list[dict[str, Any]]:
    """`messages` → OpenAI messages; dropped parts are appended to `ignored`."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: must be a non-empty list.", param="messages")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise InvalidRequest(f"{where}: must be an object.", param=where)
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        elif not isinstance(content, list):
            raise InvalidRequest(f"{where}.content: must be a string or a list of blocks.", param=f"{where}.content")
        if role == "user":
            out.extend(_user(content, where, ignored))
        elif role == "assistant":
            out.append(_assistant(content, where, ignored))
        else:
            raise InvalidRequest(f"{where}.role: must be 'user' or 'assistant'.", param=f"{where}.role")
    return out


def _blocks(content: list, where: str, ignored: list[str]):
    """(param, block, type) for each block, each checked to be an object with a type."""
    for j, block in enumerate(content):
        param = f"{where}.content[{j}]"
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise InvalidRequest(f"{param}: must be a content block with a 'type'.", param=param)
        if block.get("cache_control") is not None:
            ignored.append(f"cache_control: {CACHE_NOTE}")
        yield param, block, block["type"]


def _text(block: dict, param: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"{param}.text: must be a string.", param=f"{param}.text")
    return text


def _user(content: list, where: str, ignored: list[str]) -> list[dict[str, Any]]:
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for param, block, kind in _blocks(content, where, ignored):
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, param)})
        elif kind == "image":
            parts.append(_image(block, param))
        elif kind == "document":
            parts.append(_document(block, param))
        elif kind == "tool_result":
            message, images = _tool_result(block, param, ignored)
            tool_messages.append(message)
            parts.extend(images)
        else:
            raise InvalidRequest(f"{param}: blocks of type {kind!r} are not supported by this router.", param=param)
    out = list(tool_messages)
    if parts or not tool_messages:
        if len(parts) == 1 and parts[0]["type"] == "text":
            out.append({"role": "user", "content": parts[0]["text"]})
        else:
            out.append({"role": "user", "content": parts})
    return out


def _image(block: dict, param: str) -> dict[str, Any]:
    source = block.get("source")
    if not isinstance(source, dict):
        raise InvalidRequest(f"{param}.source: must be an object.", param=f"{param}.source")
    kind = source.get("type")
    if kind == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not isinstance(data, str):
            raise InvalidRequest(f"{param}.source: base64 needs 'media_type' and 'data'.", param=f"{param}.source")
        url = f"data:{media};base64,{data}"
    elif kind == "url":
        remote = source.get("url")
        if not isinstance(remote, str) or not remote:
            raise InvalidRequest(f"{param}.source.url: must be a string.", param=f"{param}.source.url")
        url = remote
    else:
        raise InvalidRequest(
            f"{param}.source: image sources of type {kind!r} are not supported (use base64 or url).",
            param=f"{param}.source",
        )
    return {"type": "image_url", "image_url": {"url": url}}


def _document(block: dict, param: str) -> dict[str, Any]:
    """Plain-text documents become text; PDFs and files need a native Anthropic backend."""
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        title = block.get("title")
        text = source["data"]
        return {"type": "text", "text": f"{title}\n{text}" if isinstance(title, str) and title else text}
    raise InvalidRequest(f"{param}: only plain-text document sources are supported.", param=f"{param}.source")


def _tool_result(block: dict, param: str, ignored: list[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise InvalidRequest(f"{param}.tool_use_id: must be a string.", param=f"{param}.tool_use_id")
    content = block.get("content")
    texts: list[str] = []
    images: list[dict[str, Any]] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        for k, part in enumerate(content):
            where = f"{param}.content[{k}]"
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                texts.append(_text(part, where))
            elif kind == "image":
                # OpenAI tool messages carry text only: the image rides in the next user message.
                images.append(_image(part, where))
                ignored.append("tool_result images: sent in the user message that follows the tool message")
            elif kind == "document":
                texts.append(_document(part, where)["text"])
            else:
                raise InvalidRequest(f"{where}: must be a text, image or document block.", param=where)
    elif content is not None:
        raise InvalidRequest(f"{param}.content: must be a string or a list of blocks.", param=f"{param}.content")
    text = "\n".join(texts)
    if block.get("is_error") is True:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}, images


def _assistant(content: list, where: str, ignored: list[str]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for param, block, kind in _blocks(content, where, ignored):
        if kind == "text":
            texts.append(_text(block, param))
        elif kind == "tool_use":
            call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
            if not isinstance(call_id, str) or not isinstance(name, str):
                raise InvalidRequest(f"{param}: tool_use needs a string 'id' and 'name'.", param=param)
            if arguments is None:
                arguments = {}
            if not isinstance(arguments, dict):
                raise InvalidRequest(f"{param}.input: must be an object.", param=f"{param}.input")
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
                }
            )
        elif kind in ("thinking", "redacted_thinking"):
            ignored.append(f"{kind} blocks: {THINKING_NOTE}")
        else:
            raise InvalidRequest(f"{param}: assistant blocks of type {kind!r} are not supported.", param=param)
    message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = calls
    return message

"""Helpers for the Anthropic-surface tests: SSE parsing and OpenAI chunk streams."""

from __future__ import annotations

from typing import Any

import orjson


def events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """Anthropic SSE bytes → [(event name, data)], checking each name matches data.type."""
    out = []
    for block in raw.decode().split("\n\n"):
        if not block.strip():
            continue
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        data = orjson.loads(lines["data"])
        assert data["type"] == lines["event"], block
        out.append((lines["event"], data))
    return out


def assemble(evs: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """Rebuild the final message from stream events, as a client would, checking the order rules."""
    names = [name for name, _ in evs if name != "ping"]
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    assert names[-2] == "message_delta", names
    message: dict[str, Any] = {}
    buffers: dict[int, str] = {}
    open_block: int | None = None
    for name, data in evs:
        if name == "message_start":
            message = dict(data["message"], content=[])
        elif name == "content_block_start":
            assert open_block is None, "a block started before the previous one stopped"
            assert data["index"] == len(message["content"])
            message["content"].append(dict(data["content_block"]))
            open_block = data["index"]
        elif name == "content_block_delta":
            assert data["index"] == open_block
            block, delta = message["content"][data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                assert delta["type"] == "input_json_delta"
                buffers[data["index"]] = buffers.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            assert data["index"] == open_block
            open_block = None
        elif name == "message_delta":
            message.update(data["delta"])
            message["usage"] = {**message["usage"], **data["usage"]}
    for index, text in buffers.items():
        message["content"][index]["input"] = orjson.loads(text)
    return message


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta or {}, "logprobs": None, "finish_reason": finish, **extra}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "served", "choices": [choice]}


def usage_chunk(prompt: int, completion: int) -> dict[str, Any]:
    usage = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "served",
        "choices": [],
        "usage": usage,
    }


def sse(*objs: dict[str, Any] | str) -> bytes:
    """OpenAI SSE bytes for the given chunk objects; a str is sent raw (e.g. "[DONE]")."""
    return b"".join(b"data: " + (o.encode() if isinstance(o, str) else orjson.dumps(o)) + b"\n\n" for o in objs)

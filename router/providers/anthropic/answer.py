"""Anthropic Message → `chat.completion` (the non-streamed answer).

Text blocks are joined; `tool_use` blocks become tool calls that keep the
tool_use id as the call id (so the client's tool result finds its call);
thinking blocks become the message's `reasoning_content` (their signatures,
redacted_thinking blocks and server-tool blocks are dropped).
"""

from __future__ import annotations

from typing import Any

from router.core.errors import UpstreamError
from router.providers.anthropic.common import compact_json
from router.providers.normalized import chat_completion_object

FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",  # a server tool paused the turn; the text so far is the answer
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: Any, has_calls: bool) -> str:
    if has_calls and stop_reason in (None, "tool_use", "end_turn"):
        return "tool_calls"
    return FINISH.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"


def _count(usage: dict, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(usage: Any) -> dict:
    """Anthropic usage → OpenAI usage: prompt = input + cache writes + cache
    reads (Anthropic counts them apart), cached = cache reads."""
    usage = usage if isinstance(usage, dict) else {}
    cached = _count(usage, "cache_read_input_tokens")
    prompt = _count(usage, "input_tokens") + _count(usage, "cache_creation_input_tokens") + cached
    completion = _count(usage, "output_tokens")
    out: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def chat_completion(message: Any, *, model: str, completion_id: str, created: int) -> dict:
    """A Messages API answer → `chat.completion`."""
    if not isinstance(message, dict) or message.get("type") != "message":
        raise UpstreamError("Anthropic answered something that is not a message.")
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict] = []
    for block in message.get("content") or ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        elif kind == "tool_use" and isinstance(block.get("name"), str):
            calls.append(
                {
                    "id": str(block.get("id") or ""),
                    "type": "function",
                    "function": {"name": block["name"], "arguments": compact_json(block.get("input") or {})},
                }
            )
    return chat_completion_object(
        completion_id=completion_id,
        created=created,
        model=model,
        content="".join(texts),
        calls=calls,
        finish=finish_reason(message.get("stop_reason"), bool(calls)),
        usage=usage_of(message.get("usage")),
        reasoning="".join(thoughts),
    )

"""A token count the router estimates, for providers that cannot count.

`POST /v1/messages/count_tokens` (Anthropic's door) is answered by the
selected provider when it can count (Anthropic's own endpoint, Gemini's
`countTokens`). Every other kind gets this estimate, clearly marked: the
answer carries `X-Token-Count: estimate`, and the observation `estimate`.

The estimate is deliberately simple and documented (docs/anthropic.md):
one token per 4 characters of text (rounded up) in every message, system
prompt and tool definition, plus 4 per message, 85 per image, and 3 for the
reply's priming. It is not any model's tokenizer; it is within the usual
20–30 % for English prose, and never zero for a non-empty request.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..core.backend import BackendSpec
from .base import WIRE_ANTHROPIC, Exchange

CHARS_PER_TOKEN = 4
PER_MESSAGE = 4
PER_IMAGE = 85
PRIMING = 3
ESTIMATE_HEADER = ("X-Token-Count", "estimate")


def estimate_tokens(chat: dict[str, Any]) -> int:
    """The estimated input tokens of an OpenAI Chat Completions body."""
    chars = 0
    images = 0
    messages = chat.get("messages") or []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    continue
                if part.get("type") in ("image_url", "input_image", "image"):
                    images += 1
                elif isinstance(part.get("text"), str):
                    chars += len(part["text"])
        for call in message.get("tool_calls") or ():
            if isinstance(call, dict):
                chars += len(orjson.dumps(call.get("function") or {}))
    for tool in chat.get("tools") or ():
        if isinstance(tool, dict):
            chars += len(orjson.dumps(tool))
    text_tokens = -(-chars // CHARS_PER_TOKEN)
    return text_tokens + PER_MESSAGE * len(messages) + PER_IMAGE * images + PRIMING


def estimated_count(spec: BackendSpec, chat: dict[str, Any], model: str) -> Exchange:
    """An Anthropic-shaped count answer (`{"input_tokens": N}`), sent nowhere."""
    body = orjson.dumps({"input_tokens": estimate_tokens(chat)})
    return Exchange(
        spec,
        200,
        [ESTIMATE_HEADER],
        "application/json",
        body,
        info={"served": spec.served_name(model), "estimate": True},
        wire=WIRE_ANTHROPIC,
        upstream=False,
    )

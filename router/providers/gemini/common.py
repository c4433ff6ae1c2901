"""Pieces shared by the Gemini conversions: field bookkeeping, finish reasons, usage.

Invariants of the normalized path (as for Ollama, see `ollama.common`):
- Pure: no Django, no I/O, no asyncio; every function maps dicts to dicts.
- Every request field is converted, ignored (named in `Conversion.ignored_fields`
  with a reason in `notes`) or rejected with `UnsupportedParameter` before
  anything is produced.
- Everything produced for the client carries only fields of the official
  OpenAI types, plus `reasoning_content` (vLLM's field) for thought text;
  other Gemini-only data (signatures, safety ratings) never leaks.
"""

from __future__ import annotations

from typing import Any

from router.providers import normalized
from router.providers.normalized import Ledger, compact_json, new_id

# Fields outside the OpenAI API that this path still understands.
EXTENSION_FIELDS = {"top_k": "topK"}
EXTENSIONS = frozenset(EXTENSION_FIELDS)

# Gemini finish reasons that mean "a filter stopped the output".
FILTERED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
        "MODEL_ARMOR",
    }
)


def apply_policy(
    body: dict, table: dict[str, tuple[str, str]], ledger: Ledger, extensions: frozenset[str] = EXTENSIONS
) -> None:
    """`normalized.apply_policy` for Gemini (unknown fields are "not sent to Gemini")."""
    normalized.apply_policy(body, table, ledger, extensions, "Gemini")


def finish_reason(reason: Any, has_calls: bool) -> str:
    """Gemini's finishReason → OpenAI's. STOP with function calls is
    `tool_calls` (the client must run them); every reason not listed here
    (OTHER, LANGUAGE, MALFORMED_FUNCTION_CALL, …) is `stop`."""
    if reason == "MAX_TOKENS":
        return "length"
    if reason in FILTERED:
        return "content_filter"
    return "tool_calls" if has_calls else "stop"


def _count(meta: dict, key: str) -> int:
    value = meta.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage(meta: Any) -> dict:
    """`usageMetadata` → OpenAI usage. Reasoning (thought) tokens are part of
    completion_tokens, as OpenAI counts them, and also named in the details."""
    meta = meta if isinstance(meta, dict) else {}
    prompt = _count(meta, "promptTokenCount") + _count(meta, "toolUsePromptTokenCount")
    thoughts = _count(meta, "thoughtsTokenCount")
    completion = _count(meta, "candidatesTokenCount") + thoughts
    total = _count(meta, "totalTokenCount") or prompt + completion
    out: dict = {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
    if thoughts:
        out["completion_tokens_details"] = {"reasoning_tokens": thoughts}
    cached = _count(meta, "cachedContentTokenCount")
    if cached:
        out["prompt_tokens_details"] = {"cached_tokens": cached}
    return out


def parts_of(candidate: dict) -> list[dict]:
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    return [p for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def answer_text(parts: list[dict]) -> str:
    """The text of the answer: every text part that is not a thought."""
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought"))


def thought_text(parts: list[dict]) -> str:
    """The model's reasoning: every text part marked `thought` (Gemini sends
    them only when asked, `thinkingConfig.includeThoughts`)."""
    return "".join(p["text"] for p in parts if isinstance(p.get("text"), str) and p.get("thought") is True)


def answer_calls(parts: list[dict]) -> list[tuple[str, str, str]]:
    """functionCall parts → (call id, name, arguments as a compact JSON string).
    The ids are the router's own (`call_<hex>`); Gemini matches results by name."""
    out = []
    for part in parts:
        call = part.get("functionCall")
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            continue
        args = call.get("args")
        out.append((new_id("call"), call["name"], compact_json(args if args is not None else {})))
    return out

"""Pieces shared by the Anthropic conversions: bookkeeping, validators, SSE.

Invariants of the normalized path:
- Pure: no Django, no I/O, no asyncio; every function maps dicts to dicts.
- Every request field is converted, ignored (named in `Conversion.ignored_fields`
  with a reason in `notes`) or rejected with `UnsupportedParameter` before
  anything is produced. Nothing is invented into the Anthropic request
  except what it requires (`max_tokens`, documented).
- Everything produced for the client carries only fields of the official
  OpenAI types, plus `reasoning_content` (vLLM's field) for thinking text;
  other Anthropic-only data (signatures, redacted thinking) never leaks.
"""

from __future__ import annotations

from typing import Any

from router.core.errors import InvalidRequest
from router.providers import normalized
from router.providers.normalized import (  # noqa: F401 (re-exported: the Anthropic conversions' names)
    Conversion,
    Ledger,
    boolean,
    compact_json,
    integer,
    number,
    prefixed_id,
    sse,
)


def apply_policy(body: dict, table: dict[str, tuple[str, str]], ledger: Ledger, extensions: frozenset[str]) -> None:
    """`normalized.apply_policy` for Anthropic (unknown fields are "not sent to Anthropic")."""
    normalized.apply_policy(body, table, ledger, extensions, "Anthropic")


def require_object(value: Any, what: str = "request body") -> dict:
    """Unlike `normalized.require_object`, the error names the parameter
    (except for the body itself)."""
    if not isinstance(value, dict):
        raise InvalidRequest(f"The {what} must be a JSON object.", param=None if what == "request body" else what)
    return value


def new_id(prefix: str) -> str:
    """`<prefix><24 hex>`: `chatcmpl-…` as OpenAI shapes it."""
    return prefixed_id(prefix)

"""Pieces shared by the Anthropic conversions: bookkeeping, validators, SSE.

Invariants of the normalized path:
- Pure: no Django, no I/O, no asyncio; every function maps dicts to dicts.
- Every request field is converted, ignored (named in `Conversion.ignored_fields`
  with a reason in `notes`) or rejected with `UnsupportedParameter` before
  anything is produced. Nothing is invented into the Anthropic request
  except what it requires (`max_tokens`, documented).
- Everything produced for the client carries only fields of the official
  OpenAI types; Anthropic-only data (thinking, signatures) never leaks.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

import orjson

from router.core.errors import InvalidRequest, UnsupportedParameter


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


def apply_policy(body: dict, table: dict[str, tuple[str, str]], ledger: Ledger, extensions: frozenset[str]) -> None:
    """Record ignored/unknown fields and reject unconditional unsupported ones
    (a null value counts as absent, as OpenAI itself treats it)."""
    for key, value in body.items():
        rule = table.get(key)
        if rule is None:
            if key not in extensions:
                ledger.ignore(key, "unknown field, not sent to Anthropic")
            continue
        policy, why = rule
        if value is None:
            continue
        if policy == "ignored":
            ledger.ignore(key, why)
        elif policy == "unsupported":
            raise UnsupportedParameter(f"'{key}' is not supported by this model's provider: {why}", param=key)


def require_object(value: Any, what: str = "request body") -> dict:
    if not isinstance(value, dict):
        raise InvalidRequest(f"The {what} must be a JSON object.", param=None if what == "request body" else what)
    return value


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


def new_id(prefix: str) -> str:
    """`<prefix><24 hex>`: `chatcmpl-…` as OpenAI shapes it."""
    return prefix + secrets.token_hex(12)


def compact_json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # e.g. integers past 64 bits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def sse(obj: dict) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"

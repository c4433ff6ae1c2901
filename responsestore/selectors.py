"""Reads of stored responses (run on the app's DB thread, never the event loop).
A row of another owner is the same None as no row."""

from __future__ import annotations

from typing import Any

import orjson

from .models import StoredResponse


def response_json(owner: str, response_id: str) -> bytes | None:
    """The stored Response object's JSON, as stored (no parse)."""
    text = StoredResponse.objects.filter(id=response_id, owner=owner).values_list("response", flat=True).first()
    return None if text is None else text.encode()


def response_items(owner: str, response_id: str) -> list[dict[str, Any]] | None:
    text = StoredResponse.objects.filter(id=response_id, owner=owner).values_list("input_items", flat=True).first()
    return None if text is None else orjson.loads(text)


def conversation(owner: str, response_id: str) -> list[dict[str, Any]] | None:
    """The items a continuation of the response starts from: its input items, then its output."""
    row = (
        StoredResponse.objects.filter(id=response_id, owner=owner)
        .values_list("input_items", "response")
        .first()
    )
    if row is None:
        return None
    output = orjson.loads(row[1]).get("output")
    return [*orjson.loads(row[0]), *(output if isinstance(output, list) else [])]

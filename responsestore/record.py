"""An answer to store, as the door hands it over: what it takes to make the row.

Made on the event loop with no more work than one parse of an answer the
router already holds whole (to learn its id). The request's items are given
their ids once, by whichever comes first — the DB thread writing the row, or
a continuation or GET that finds the record still queued — under a lock, so
both see the same ids. The row's JSON text is built on the DB thread
(`row_values`).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import items

_GIVING_IDS = threading.Lock()


@dataclass(slots=True)
class Record:
    id: str
    owner: str
    owner_name: str
    body: dict[str, Any]  # the request as the client sent it
    earlier: list[dict[str, Any]]  # the continued response's items (input and output), [] for none
    response: dict[str, Any]
    created_at: float = field(default_factory=time.time)
    deleted: bool = False  # deleted by its owner before it was written
    stored: list[dict[str, Any]] | None = None  # the request's own items with their ids, made once

    def conversation(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(input items, output items) of this response."""
        with _GIVING_IDS:
            if self.stored is None:
                self.stored = items.stored_items(self.body)
        output = self.response.get("output")
        return [*self.earlier, *self.stored], output if isinstance(output, list) else []

    def row_response(self) -> dict[str, Any]:
        """The Response object as stored: the upstream was sent the
        conversation, not the id, so the id is put back; and it is stored."""
        response = dict(self.response)
        previous = self.body.get("previous_response_id")
        if isinstance(previous, str):
            response["previous_response_id"] = previous
        response["store"] = True
        return response

    def row_values(self) -> dict[str, Any]:
        input_items, _ = self.conversation()
        response = self.row_response()
        previous = self.body.get("previous_response_id")
        return {
            "id": self.id,
            "owner": self.owner,
            "owner_name": self.owner_name,
            "model": str(response.get("model") or self.body.get("model") or "")[:200],
            "previous_response_id": previous if isinstance(previous, str) else "",
            "created_at": self.created_at,
            "input_items": orjson.dumps(input_items).decode(),
            "response": orjson.dumps(response).decode(),
        }


def of_answer(body: bytes, owner: str, owner_name: str, request: dict[str, Any],
              earlier: list[dict[str, Any]]) -> Record | None:
    """The record of a whole Response object (None: not one to store)."""
    try:
        response = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    rid = response.get("id") if isinstance(response, dict) else None
    if not isinstance(rid, str) or not rid or len(rid) > 100 or response.get("object") != "response":
        return None
    return Record(rid, owner, owner_name, request, earlier, response)

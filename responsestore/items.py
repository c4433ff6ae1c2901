"""Conversation items, pure: no Django, no I/O.

- `stored_items(body)`: a request's `input` as stored — a string becomes one
  user message, a message's string content one text part, and every item
  gets an `id` (OpenAI lists input items with ids; the SDK's types need one).
- `continued(body, earlier)`: the request an upstream is sent when it
  continues a stored response: `previous_response_id` gone, `input` the
  earlier items followed by its own. Ids this router gave input messages are
  dropped again (OpenAI's create parameters have no id on an input message);
  what an upstream gave (output messages, calls, reasoning) goes back as it
  came. `instructions` are the request's own, as OpenAI's are: those of the
  earlier response are not carried over.
- `page(items, …)`: one page of a list, OpenAI's cursor rules.
"""

from __future__ import annotations

import secrets
from typing import Any

_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
_INPUT_ROLES = frozenset({"user", "system", "developer"})
MAX_PAGE = 100


def new_id(kind: str) -> str:
    return f"{_PREFIX.get(kind, 'item')}_{secrets.token_hex(12)}"


def stored_items(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The request's input items as stored (ids given). The door has routed
    the body already, so what is not an item is skipped, never refused."""
    given = body.get("input")
    if isinstance(given, str):
        given = [{"type": "message", "role": "user", "content": given}]
    if not isinstance(given, list):
        return []
    out = []
    for item in given:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        item = {**item, "type": kind}
        if kind == "message" and isinstance(item.get("content"), str):
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": part, "text": item["content"]}]
        if not isinstance(item.get("id"), str) or not item["id"]:
            item["id"] = new_id(kind)
        out.append(item)
    return out


def _upstream(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "message" and item.get("role") in _INPUT_ROLES and "id" in item:
        return {k: v for k, v in item.items() if k != "id"}
    return item


def continued(body: dict[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """`body` (with a previous_response_id) as an upstream is sent it; the
    earlier items are the stored response's input items and output."""
    own = body.get("input")
    own_items = [{"type": "message", "role": "user", "content": own}] if isinstance(own, str) else own
    if not isinstance(own_items, list):
        own_items = []
    out = {k: v for k, v in body.items() if k != "previous_response_id"}
    out["input"] = [_upstream(item) for item in earlier] + list(own_items)
    return out


def page(
    items: list[dict[str, Any]], *, limit: int, order: str, after: str | None, before: str | None
) -> tuple[list[dict[str, Any]], bool]:
    """One page in `order` ("asc": oldest first): the items after the one
    named `after` and before the one named `before` (in that order), at most
    `limit` — those nearest `before` when only it is given, as a page turned
    back — and whether more are left. An id not in the list bounds nothing."""
    seq = items if order == "asc" else items[::-1]
    ids = [item.get("id") for item in seq]
    start = ids.index(after) + 1 if after in ids else 0
    end = ids.index(before) if before in ids else len(seq)
    window = seq[start:end]
    if before in ids and after not in ids:
        return window[-limit:], len(window) > limit
    return window[:limit], len(window) > limit

"""The stored-response door: a plain ASGI callable config/asgi.py hands
`/v1/responses/…` (POST `/v1/responses` itself is the inference door's).

- GET    /v1/responses/{id}              the Response object as the client got it
- DELETE /v1/responses/{id}              OpenAI's deleted object
- GET    /v1/responses/{id}/input_items  OpenAI's list: `data`, `first_id`,
         `last_id`, `has_more`; `limit` (1–100, 20), `order` (asc / desc,
         desc), `after`, `before` (item ids)

Off the inference hot path: the caller is admitted as any /v1 request (the
key gate; no admission slot), then the rows are read on the app's DB thread.
A response of another owner is the same 404 as none; one still queued for
writing (writer.pending) is answered from memory.
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

import orjson

from router.admission import Call, admit, ready_snapshot
from router.core.errors import InvalidRequest, MethodNotAllowed, NotFound, ResponseNotFound, RouterError
from router.frontends.direct import drain, send_json, serve_guarded

from . import db, items, selectors, services
from .owner import owner_of
from .writer import WRITER

PREFIX = "/v1/responses/"
_JSON = b"application/json"
log = logging.getLogger(__name__)


def handles(path: str) -> bool:
    return path.startswith(PREFIX)


async def serve(scope: dict[str, Any], receive, send) -> None:
    await serve_guarded(_serve, scope, receive, send)


async def _serve(scope: dict[str, Any], receive, send) -> None:
    parts = scope["path"][len(PREFIX) :].split("/")
    method = scope["method"]
    if not parts[0] or len(parts) > 2 or (len(parts) == 2 and parts[1] != "input_items"):
        raise NotFound(f"Unknown path: {scope['path']}")
    allowed = ("GET", "DELETE") if len(parts) == 1 else ("GET",)
    if method not in allowed:
        raise MethodNotAllowed(f"{method} is not allowed on {scope['path']}.", headers={"Allow": ", ".join(allowed)})
    caller = await admit(Call(scope), await ready_snapshot())
    owner, _ = owner_of(caller)
    if not await drain(receive):
        return
    response_id = parts[0]
    query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin1")).items()}
    if len(parts) == 2:
        await _input_items(send, owner, response_id, query)
    elif method == "DELETE":
        pending = WRITER.find(owner, response_id)
        if pending is not None:
            pending.deleted = True  # the drainer skips it
        if not await db.run(services.response_delete, owner, response_id) and pending is None:
            raise _missing(response_id)
        await send_json(send, orjson.dumps({"id": response_id, "object": "response", "deleted": True}))
    else:
        if query.get("stream") in ("true", "True", "1"):
            raise InvalidRequest("Streaming a stored response again is not supported.", param="stream")
        pending = WRITER.find(owner, response_id)
        body = orjson.dumps(pending.row_response()) if pending is not None else None
        if body is None:
            body = await db.run(selectors.response_json, owner, response_id)
        if body is None:
            raise _missing(response_id)
        await send_json(send, body)


def _missing(response_id: str) -> RouterError:
    return ResponseNotFound(f"Response with id '{response_id}' not found.")


async def _input_items(send, owner: str, response_id: str, query: dict[str, str]) -> None:
    try:
        limit = int(query.get("limit", "20"))
    except ValueError:
        limit = -1
    if not 1 <= limit <= items.MAX_PAGE:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {items.MAX_PAGE}.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    pending = WRITER.find(owner, response_id)
    found = pending.conversation()[0] if pending is not None else None
    if found is None:
        found = await db.run(selectors.response_items, owner, response_id)
    if found is None:
        raise _missing(response_id)
    data, more = items.page(
        found, limit=limit, order=order, after=query.get("after") or None, before=query.get("before") or None
    )
    page = {
        "object": "list",
        "data": data,
        "first_id": data[0].get("id") if data else None,
        "last_id": data[-1].get("id") if data else None,
        "has_more": more,
    }
    await send_json(send, orjson.dumps(page))

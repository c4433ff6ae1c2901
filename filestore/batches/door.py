"""The `/v1/batches` door: a plain ASGI callable config/asgi.py hands these paths.

Off the chat hot path (DB on the files DB thread). Per request: the caller
is admitted as any /v1 request (the key gate), its owner is its key
(filestore.owner), then the operation; another owner's batch is the same
404 as none. Creating a batch only records it (`validating`): the tasks
process validates and runs it (run.py).
"""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qs

import orjson

from router.admission import Call, admit, ready_snapshot
from router.core.errors import InvalidJSON, InvalidRequest, MethodNotAllowed, NotFound, RequestTooLarge
from router.frontends.direct import drain, send_json, serve_guarded

from .. import db
from ..owner import owner_of
from . import store, wire

PREFIX = "/v1/batches"
MAX_BODY = 64 * 1024  # a create's JSON: ids, the endpoint and at most 16 metadata pairs
MAX_METADATA = 16
log = logging.getLogger(__name__)


def handles(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


async def serve(scope: dict[str, Any], receive, send) -> None:
    await serve_guarded(_serve, scope, receive, send)


async def _serve(scope: dict[str, Any], receive, send) -> None:
    path = scope["path"]
    parts = path[len(PREFIX) :].strip("/").split("/") if path != PREFIX else []
    method = scope["method"]
    if len(parts) > 2 or (len(parts) == 2 and parts[1] != "cancel") or (parts and not parts[0]):
        raise NotFound(f"Unknown path: {path}")
    allowed = ("GET", "POST") if not parts else ("GET",) if len(parts) == 1 else ("POST",)
    if method not in allowed:
        raise MethodNotAllowed(f"{method} is not allowed on {path}.", headers={"Allow": ", ".join(allowed)})
    caller = await admit(Call(scope), await ready_snapshot())
    owner = owner_of(caller)
    if not parts and method == "POST":
        body = await _read_json(receive)
        if body is None:
            return
        fields = _create_fields(body)
        name = caller.key.name if caller.key is not None else ""
        row = await db.run(store.batch_create, owner=owner, owner_name=name, **fields)
        await send_json(send, wire.batch_object(row))
        return
    if not await drain(receive):
        return
    if not parts:
        query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin1")).items()}
        try:
            limit = int(query.get("limit", store.DEFAULT_PAGE))
        except ValueError:
            limit = -1
        if not 1 <= limit <= store.MAX_PAGE:
            raise InvalidRequest(f"'limit' must be an integer from 1 to {store.MAX_PAGE}.", param="limit")
        rows, more = await db.run(store.batch_page, owner, limit=limit, after=query.get("after") or None)
        await send_json(send, wire.batch_list(rows, has_more=more))
    elif len(parts) == 2:
        await send_json(send, wire.batch_object(await db.run(store.batch_cancel, owner, parts[0])))
    else:
        await send_json(send, wire.batch_object(await db.run(store.batch_get, owner, parts[0])))


async def _read_json(receive) -> dict[str, Any] | None:
    """The create's JSON object (at most MAX_BODY bytes); None if the client left."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            raise RequestTooLarge(f"A batch's create request is at most {MAX_BODY} bytes.",
                                  headers={"connection": "close"})
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError:
        raise InvalidJSON("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise InvalidJSON("The request body must be a JSON object.")
    return body


def _create_fields(body: dict[str, Any]) -> dict[str, Any]:
    input_file_id = body.get("input_file_id")
    if not isinstance(input_file_id, str) or not input_file_id:
        raise InvalidRequest("'input_file_id' must name an uploaded file.", param="input_file_id")
    endpoint = body.get("endpoint")
    if endpoint not in wire.ENDPOINTS:
        raise InvalidRequest(f"'endpoint' must be one of {', '.join(sorted(wire.ENDPOINTS))}.", param="endpoint")
    window = body.get("completion_window")
    if window not in wire.WINDOWS:
        raise InvalidRequest("'completion_window' must be '24h'.", param="completion_window")
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA:
            raise InvalidRequest(f"'metadata' must be an object of at most {MAX_METADATA} pairs.", param="metadata")
        for key, value in metadata.items():
            if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
                raise InvalidRequest("'metadata' keys are at most 64 characters, values strings of at most 512.",
                                     param="metadata")
    return {"input_file_id": input_file_id, "endpoint": endpoint, "window": window, "metadata": metadata}

"""The `/v1/files` door: a plain ASGI callable config/asgi.py hands these paths.

Off the chat hot path, so it may use the DB (async ORM, or a thread for the
writes) and the storage backend. Per request, in this order: the caller is
admitted as any /v1 request (router.admission: the key gate); the owner is
the caller's key (`""`, one shared pool, for the anonymous callers of an open
router); then the operation. A file of another owner is the same 404 as no
file. An upload is refused with a 413 when its declared length, or the bytes
arrived so far, pass its room (the per-file limit and what is left of the
owner's total) — before it is stored; downloads are sent in slices.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from router.admission import Call, admit, ready_snapshot
from router.core.errors import (
    FileQuotaExceeded,
    FileTooLarge,
    InvalidRequest,
    MethodNotAllowed,
    NotFound,
    RouterError,
    TooManyUploads,
)
from router.frontends.direct import declared_length, drain, send_json, serve_guarded

from . import db, selectors, services, upload, wire
from .owner import owner_of

PREFIX = "/v1/files"
SLICE = 1 << 20  # a download is sent in slices of this many bytes
log = logging.getLogger(__name__)


def handles(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


_uploads = 0  # uploads under way in this process (one event loop: no lock)


async def serve(scope: dict[str, Any], receive, send) -> None:
    await serve_guarded(_serve, scope, receive, send, shaped=_closing)


def _closing(exc: RouterError) -> RouterError:
    if exc.status == 413:  # the rest of the body is never read
        exc.headers.setdefault("connection", "close")
    return exc


async def _serve(scope: dict[str, Any], receive, send) -> None:
    parts = scope["path"][len(PREFIX) :].strip("/").split("/") if scope["path"] != PREFIX else []
    method = scope["method"]
    if len(parts) > 2 or (len(parts) == 2 and parts[1] != "content") or (parts and not parts[0]):
        raise NotFound(f"Unknown path: {scope['path']}")
    allowed = ("GET", "POST") if not parts else ("GET", "DELETE") if len(parts) == 1 else ("GET",)
    if method not in allowed:
        raise MethodNotAllowed(f"{method} is not allowed on {scope['path']}.", headers={"Allow": ", ".join(allowed)})
    caller = await admit(Call(scope), await ready_snapshot())
    owner = owner_of(caller)
    if method == "POST":
        await _create(scope, receive, send, owner, caller.key.name if caller.key is not None else "")
        return
    if not await drain(receive):
        return
    if not parts:
        await _list(scope, send, owner)
        return
    row = await db.run(selectors.file_get, owner, parts[0])
    if len(parts) == 2:
        await _content(send, row)
    elif method == "DELETE":
        await services.file_delete(row)
        await send_json(send, wire.file_deleted(row.id))
    else:
        await send_json(send, wire.file_object(row))


async def _create(scope: dict[str, Any], receive, send, owner: str, owner_name: str) -> None:
    """One upload, while this process takes fewer than ROUTER_FILES_MAX_UPLOADS
    (each may spool up to its room to disk): past them a 503 + Retry-After."""
    global _uploads
    if _uploads >= settings.ROUTER_FILES_MAX_UPLOADS:
        raise TooManyUploads(headers={"Retry-After": "1", "connection": "close"})
    _uploads += 1
    try:
        await _upload(scope, receive, send, owner, owner_name)
    finally:
        _uploads -= 1


async def _upload(scope: dict[str, Any], receive, send, owner: str, owner_name: str) -> None:
    max_file = settings.ROUTER_FILES_MAX_BYTES
    used, count = await db.run(selectors.held, owner)
    services.check_count(count)  # before a byte of the body is read
    left = settings.ROUTER_FILES_MAX_BYTES_PER_KEY - used
    refusal = FileTooLarge if max_file <= left else FileQuotaExceeded
    room = min(max_file, left) + upload.FRAMING
    if declared_length(scope) > room:
        raise refusal(_too_large_message(refusal, max_file, left), param="file")
    try:
        body = await upload.spool(receive, room)
    except upload.TooLarge:
        raise refusal(_too_large_message(refusal, max_file, left), param="file") from None
    if body is None:
        return  # the client went away
    content_type = dict(scope["headers"]).get(b"content-type", b"").decode("latin1")
    try:
        fields, file = await asyncio.to_thread(upload.parse, body, content_type)
    finally:
        body.close()
    try:
        purpose = fields.get("purpose")
        if purpose not in wire.PURPOSES:
            raise InvalidRequest(f"'purpose' must be one of {', '.join(sorted(wire.PURPOSES))}.", param="purpose")
        row = await services.file_create(owner=owner, owner_name=owner_name, upload=file, purpose=purpose)
    finally:
        await asyncio.to_thread(file.close)
    await send_json(send, wire.file_object(row))


def _too_large_message(refusal: type[RouterError], max_file: int, left: int) -> str:
    if refusal is FileTooLarge:
        return f"The file is larger than {max_file} bytes, the most this router accepts."
    return f"The file is larger than the {max(left, 0)} bytes left of this API key's file storage."


async def _list(scope: dict[str, Any], send, owner: str) -> None:
    query = {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode("latin1")).items()}
    try:
        limit = int(query.get("limit", selectors.MAX_PAGE))
    except ValueError:
        limit = -1
    if not 1 <= limit <= selectors.MAX_PAGE:
        raise InvalidRequest(f"'limit' must be an integer from 1 to {selectors.MAX_PAGE}.", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise InvalidRequest("'order' must be 'asc' or 'desc'.", param="order")
    rows, more = await db.run(
        selectors.file_page,
        owner,
        purpose=query.get("purpose") or None,
        limit=limit,
        after=query.get("after") or None,
        order=order,
    )
    await send_json(send, wire.file_list(rows, has_more=more))


async def _content(send, row) -> None:
    storage = services.file_storage()
    handle = await asyncio.to_thread(storage.open, row.storage_name, "rb")
    try:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"application/octet-stream"),
                    (b"content-length", str(row.bytes).encode()),
                ],
            }
        )
        while True:
            chunk = await asyncio.to_thread(handle.read, SLICE)
            if not chunk:
                break
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await asyncio.to_thread(handle.close)



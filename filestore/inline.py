"""Files in chat: content parts that name an uploaded file become inline data.

No upstream knows our file ids, so before a request is routed (a body
resolver, router/extensions.py) each part naming one is replaced by the
file's bytes as a base64 data URL:

- chat/completions: `{"type": "file", "file": {"file_id": …}}` →
  `{"type": "file", "file": {"filename", "file_data"}}`, or, for an image
  file (by its name's media type), the image part chat allows everywhere:
  `{"type": "image_url", "image_url": {"url": "data:image/…"}}`;
- responses: `{"type": "input_file", "file_id": …}` → `input_file` with
  `filename` and `file_data`; `{"type": "input_image", "file_id": …}` →
  `input_image` with `image_url` (its `detail` kept).

Only the caller's own files (filestore.owner): an unknown id and another
key's are the same 404 naming the id and where it was. What would make the
body pass `server.max_body_bytes` once inlined is refused (413) before a
byte of it is read; so a resolved body is bounded like any other.
"""

from __future__ import annotations

import asyncio
import base64
import mimetypes
from collections.abc import Iterator
from typing import Any

import orjson

from router.core.errors import FileNotFound, RequestTooLarge

from . import db, selectors, services
from .models import StoredFile
from .owner import owner_of

MARKER = b'"file_id"'

# (the part's list, its index, the file id, the part's kind, where it is)
Ref = tuple[list[Any], int, str, str, str]


async def resolve(caller: Any, endpoint: str, body: dict[str, Any]) -> dict[str, Any] | None:
    if endpoint not in ("chat/completions", "responses"):
        return None
    body = orjson.loads(orjson.dumps(body))  # ours to change: the caller's stays as sent
    refs = list(_chat_refs(body) if endpoint == "chat/completions" else _responses_refs(body))
    if not refs:
        return None
    owner = owner_of(caller)
    rows = await db.run(selectors.files_named, owner, sorted({ref[2] for ref in refs}))
    for _, _, file_id, _, where in refs:
        if file_id not in rows:
            raise FileNotFound(f"No such File object: {file_id}", param=where)
    inlined = sum(4 * (rows[i].bytes + 2) // 3 for i in {ref[2] for ref in refs})
    limit = caller.snap.max_body_bytes
    if inlined > limit:
        raise RequestTooLarge(f"The files this request names come to {inlined} bytes inlined; the limit is {limit}.")
    urls = {file_id: await _data_url(row) for file_id, row in rows.items()}
    for parts, index, file_id, kind, _ in refs:
        parts[index] = _inlined(parts[index], kind, rows[file_id], urls[file_id])
    return body


def _media_type(row: StoredFile) -> str:
    return mimetypes.guess_type(row.filename)[0] or "application/octet-stream"


async def _data_url(row: StoredFile) -> str:
    data = await asyncio.to_thread(_read, row)
    return f"data:{_media_type(row)};base64," + base64.b64encode(data).decode("ascii")


def _read(row: StoredFile) -> bytes:
    with services.file_storage().open(row.storage_name, "rb") as handle:
        return handle.read()


def _inlined(part: dict[str, Any], kind: str, row: StoredFile, url: str) -> dict[str, Any]:
    if kind == "file":
        if _media_type(row).startswith("image/"):
            return {"type": "image_url", "image_url": {"url": url}}
        inner = {k: v for k, v in part["file"].items() if k != "file_id"}
        return {**part, "file": {**inner, "filename": row.filename, "file_data": url}}
    rest = {k: v for k, v in part.items() if k != "file_id"}
    if kind == "input_file":
        return {**rest, "filename": row.filename, "file_data": url}
    return {**rest, "image_url": url}  # input_image


def _chat_refs(body: dict[str, Any]) -> Iterator[Ref]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        return
    for m, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") == "file" and isinstance(part.get("file"), dict):
                file_id = part["file"].get("file_id")
                if isinstance(file_id, str):
                    yield content, p, file_id, "file", f"messages[{m}].content[{p}].file.file_id"


def _responses_refs(body: dict[str, Any]) -> Iterator[Ref]:
    items = body.get("input")
    if not isinstance(items, list):
        return
    for i, item in enumerate(items):
        content = item.get("content") if isinstance(item, dict) else None
        if not isinstance(content, list):
            continue
        for p, part in enumerate(content):
            if isinstance(part, dict) and part.get("type") in ("input_file", "input_image"):
                file_id = part.get("file_id")
                if isinstance(file_id, str):
                    yield content, p, file_id, part["type"], f"input[{i}].content[{p}].file_id"

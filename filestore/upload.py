"""An upload's body: spooled to disk as it arrives, then parsed from disk.

Never whole in memory: the raw multipart body goes to a temporary file in
slices of `SLICE` bytes, counted against its limit as it comes (past it, the
request is refused and the rest never read); Django's multipart parser then
reads that file in a thread, writing the `file` part to a temporary upload
file, which the storage backend saves (a move, on the local filesystem).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import RequestAborted
from django.core.files.uploadedfile import UploadedFile
from django.core.files.uploadhandler import TemporaryFileUploadHandler
from django.http.multipartparser import MultiPartParser, MultiPartParserError

from router.core.errors import InvalidRequest

# Room for the multipart framing and the small fields (`purpose`) around the file.
FRAMING = 64 * 1024
SLICE = 1 << 20


class TooLarge(Exception):
    """The body passed its limit while arriving."""


def _spool_file() -> IO[bytes]:
    """An anonymous file in ROUTER_SPOOL_DIR (made on first use)."""
    os.makedirs(settings.ROUTER_SPOOL_DIR, exist_ok=True)
    return tempfile.TemporaryFile(dir=settings.ROUTER_SPOOL_DIR)


async def spool(receive, limit: int) -> IO[bytes] | None:
    """The whole body in a temporary file (positioned at 0); None if the
    client went away. Raises TooLarge once more than `limit` bytes came."""
    out = await asyncio.to_thread(_spool_file)
    size = 0
    pending: list[bytes] = []
    pending_size = 0
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                out.close()
                return None
            chunk = message.get("body", b"")
            if chunk:
                size += len(chunk)
                if size > limit:
                    raise TooLarge()
                pending.append(chunk)
                pending_size += len(chunk)
                if pending_size >= SLICE:
                    await asyncio.to_thread(out.write, b"".join(pending))
                    pending, pending_size = [], 0
            if not message.get("more_body", False):
                break
        if pending:
            await asyncio.to_thread(out.write, b"".join(pending))
        out.seek(0)
        return out
    except BaseException:
        out.close()
        raise


def parse(body: IO[bytes], content_type: str) -> tuple[dict[str, Any], UploadedFile]:
    """(the form fields, the `file` part) of a spooled multipart body. Sync."""
    length = body.seek(0, 2)
    body.seek(0)
    if not content_type.startswith("multipart/form-data"):
        raise InvalidRequest("Send the file as multipart/form-data with the fields 'file' and 'purpose'.")
    meta = {"CONTENT_TYPE": content_type, "CONTENT_LENGTH": str(length)}
    try:
        fields, files = MultiPartParser(meta, body, [TemporaryFileUploadHandler()], "utf-8").parse()
    except (MultiPartParserError, RequestAborted) as exc:
        raise InvalidRequest(f"The multipart body could not be parsed: {exc}") from exc
    upload = files.get("file")
    if upload is None:
        for extra in files.values():
            extra.close()
        raise InvalidRequest("The field 'file' is missing.", param="file")
    return fields, upload

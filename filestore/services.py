"""Writes of uploaded files.

Queries run on the files DB thread (filestore.db), bytes move on threads of
their own. The bytes are stored only once they fit their owner's room, and
before the row is written; the row is deleted before the bytes. So no row
ever names missing bytes, and a crash between the two steps can only leave
unreferenced bytes behind.
"""

from __future__ import annotations

import asyncio
import secrets
import time

from django.conf import settings
from django.core.files.storage import Storage, storages
from django.core.files.uploadedfile import UploadedFile

from router.core.errors import FileCountExceeded, FileQuotaExceeded, FileTooLarge

from . import db
from .models import StoredFile
from .selectors import held

STORAGE = "router_files"  # the STORAGES alias (config/settings.py)


def file_storage() -> Storage:
    return storages[STORAGE]


def check_room(owner: str, size: int) -> None:
    """413 for a file over the per-file limit, or one that takes its owner
    past the per-key total."""
    max_file = settings.ROUTER_FILES_MAX_BYTES
    if size > max_file:
        raise FileTooLarge(f"The file is larger than {max_file} bytes, the most this router accepts.", param="file")
    quota = settings.ROUTER_FILES_MAX_BYTES_PER_KEY
    used, count = held(owner)
    check_count(count)
    if used + size > quota:
        raise FileQuotaExceeded(
            f"The file would take this API key's files to {used + size} bytes; the most is {quota}.", param="file"
        )


def check_count(count: int) -> None:
    """413 when the owner already holds ROUTER_FILES_MAX_PER_KEY files."""
    most = settings.ROUTER_FILES_MAX_PER_KEY
    if count >= most:
        raise FileCountExceeded(
            f"This API key holds {count} files; the most is {most}. Delete some before uploading more.", param="file"
        )


async def file_create(*, owner: str, owner_name: str, upload: UploadedFile, purpose: str) -> StoredFile:
    size = upload.size or 0
    await db.run(check_room, owner, size)
    file_id = "file-" + secrets.token_hex(12)
    storage = file_storage()
    name = await asyncio.to_thread(storage.save, file_id, upload)
    try:
        return await db.run(
            StoredFile.objects.create,
            id=file_id,
            owner=owner,
            owner_name=owner_name,
            filename=(upload.name or "file")[:255],
            purpose=purpose,
            bytes=size,
            created_at=int(time.time()),
            storage_name=name,
        )
    except BaseException:
        await asyncio.to_thread(storage.delete, name)
        raise


async def file_delete(row: StoredFile) -> None:
    await db.run(StoredFile.objects.filter(pk=row.pk).delete)
    await asyncio.to_thread(file_storage().delete, row.storage_name)

"""The Files API's answers in OpenAI's shapes (openai-python's `FileObject`,
`FileDeleted` and the cursor page `SyncCursorPage[FileObject]`)."""

from __future__ import annotations

from typing import Any

from .models import StoredFile

# The purposes an upload may name (OpenAI's `FilePurpose`).
PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})


def file_object(row: StoredFile) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "file",
        "bytes": row.bytes,
        "created_at": row.created_at,
        "filename": row.filename,
        "purpose": row.purpose,
        "status": "processed",
        "status_details": None,
        "expires_at": None,
    }


def file_list(rows: list[StoredFile], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [file_object(r) for r in rows],
        "first_id": rows[0].id if rows else None,
        "last_id": rows[-1].id if rows else None,
        "has_more": has_more,
    }


def file_deleted(file_id: str) -> dict[str, Any]:
    return {"id": file_id, "object": "file", "deleted": True}

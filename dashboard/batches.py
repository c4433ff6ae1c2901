"""The Batches page: every key's batches with their progress and files
(filestore.batches; the owner's key by name, as the key pages show it)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from filestore.batches import store, wire

SHOWN = 200


def _iso(epoch: int | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch else None


def batch_rows() -> dict[str, Any]:
    rows, total = store.recent(SHOWN)
    out = []
    for b in rows:
        answered = b.completed + b.failed
        out.append({
            "id": b.id,
            "owner": b.owner_name or b.owner or "anonymous",
            "endpoint": b.endpoint,
            "model": b.model,
            "status": b.status,
            "running": b.status in wire.UNFINISHED,
            "total": b.total,
            "completed": b.completed,
            "failed": b.failed,
            "progress": answered / b.total if b.total else None,
            "created_at": _iso(b.created_at),
            "expires_at": _iso(b.expires_at),
            "input_file_id": b.input_file_id,
            "output_file_id": b.output_file_id,
            "error_file_id": b.error_file_id,
            "errors": len(b.errors or ()),
        })
    return {"rows": out, "total": total, "hidden": max(total - len(out), 0)}

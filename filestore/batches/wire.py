"""Batches in OpenAI's shapes: openai-python's `Batch` and the cursor page
`SyncCursorPage[Batch]`, and the lines of the output and error files."""

from __future__ import annotations

from typing import Any

from ..models import Batch

ENDPOINTS = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"})
WINDOWS = frozenset({"24h"})
WINDOW_SECONDS = {"24h": 24 * 3600}

VALIDATING = "validating"
FAILED = "failed"
IN_PROGRESS = "in_progress"
FINALIZING = "finalizing"
COMPLETED = "completed"
EXPIRED = "expired"
CANCELLING = "cancelling"
CANCELLED = "cancelled"
UNFINISHED = (VALIDATING, IN_PROGRESS, FINALIZING, CANCELLING)


def batch_object(row: Batch) -> dict[str, Any]:
    return {
        "id": row.id,
        "object": "batch",
        "endpoint": row.endpoint,
        "model": row.model or None,
        "errors": {"object": "list", "data": row.errors} if row.errors else None,
        "input_file_id": row.input_file_id,
        "completion_window": row.completion_window,
        "status": row.status,
        "output_file_id": row.output_file_id,
        "error_file_id": row.error_file_id,
        "created_at": row.created_at,
        "in_progress_at": row.in_progress_at,
        "expires_at": row.expires_at,
        "finalizing_at": row.finalizing_at,
        "completed_at": row.completed_at,
        "failed_at": row.failed_at,
        "expired_at": row.expired_at,
        "cancelling_at": row.cancelling_at,
        "cancelled_at": row.cancelled_at,
        "request_counts": {"total": row.total, "completed": row.completed, "failed": row.failed},
        "metadata": row.metadata,
    }


def batch_list(rows: list[Batch], *, has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": [batch_object(r) for r in rows],
        "first_id": rows[0].id if rows else None,
        "last_id": rows[-1].id if rows else None,
        "has_more": has_more,
    }


def result_line(
    line_id: str, custom_id: str, status: int, request_id: str, body: Any
) -> dict[str, Any]:
    """One line of the output (2xx) or error file: the answer the request got."""
    return {
        "id": line_id,
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }

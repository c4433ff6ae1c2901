"""`/api/v1/audit`: the audit log, newest first, paginated and filterable."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from .models import AuditEntry
from .paging import PageQuery, page

router = Router(tags=["audit"])


class AuditOut(Schema):
    id: int
    at: datetime
    actor: str = Field(description="token:<name> or user:<username>")
    action: str
    target: str
    before: str = Field(description="SHA-256 of the state before ('' when none)")
    after: str = Field(description="SHA-256 of the state after ('' when none)")
    detail: dict[str, Any]


class AuditPage(Schema):
    data: list[AuditOut]
    total: int
    limit: int
    offset: int


class AuditFilter(PageQuery):
    actor: str | None = None
    action: str | None = Field(None, description="exact (key.create) or a prefix ending in a dot (key.)")
    target: str | None = None


@router.get("", response=AuditPage, summary="The audit log, newest first")
def list_audit(request: HttpRequest, filters: Query[AuditFilter]) -> dict:
    qs = AuditEntry.objects.order_by("-at", "-id")
    if filters.actor:
        qs = qs.filter(actor=filters.actor)
    if filters.action:
        qs = qs.filter(action__startswith=filters.action) if filters.action.endswith(".") else qs.filter(
            action=filters.action
        )
    if filters.target:
        qs = qs.filter(target=filters.target)
    rows, facts = page(qs, filters)
    return {"data": [AuditOut.from_orm(e) for e in rows], **facts}

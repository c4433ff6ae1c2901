"""Offset pagination shared by every list: `?limit=&offset=`, bounded."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from ninja import Field, Schema

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


class PageQuery(Schema):
    limit: int = Field(DEFAULT_LIMIT, ge=1, le=MAX_LIMIT, description=f"at most {MAX_LIMIT}")
    offset: int = Field(0, ge=0)


def page(qs: QuerySet, query: PageQuery) -> tuple[list[Any], dict[str, int]]:
    """The rows of one page and the page's facts (total, limit, offset)."""
    total = qs.count()
    rows = list(qs[query.offset : query.offset + query.limit])
    return rows, {"total": total, "limit": query.limit, "offset": query.offset}

"""Reads of uploaded files, always scoped to one owner. Sync: the door runs
them on the files DB thread (filestore.db)."""

from __future__ import annotations

from django.db.models import Count, Q, Sum

from router.core.errors import FileNotFound, InvalidRequest

from .models import StoredFile

MAX_PAGE = 10_000  # OpenAI's ceiling for `limit`, and its default


def file_get(owner: str, file_id: str) -> StoredFile:
    """The owner's file; any other owner's (or none) is the same 404."""
    row = StoredFile.objects.filter(owner=owner, id=file_id).first()
    if row is None:
        raise FileNotFound(f"No such File object: {file_id}", param="id")
    return row


def file_page(
    owner: str, *, purpose: str | None, limit: int, after: str | None, order: str
) -> tuple[list[StoredFile], bool]:
    """One page of the owner's files, newest first (`desc`) or oldest first,
    after the cursor file `after`; and whether more follow."""
    qs = StoredFile.objects.filter(owner=owner)
    if purpose:
        qs = qs.filter(purpose=purpose)
    if after:
        cursor = StoredFile.objects.filter(owner=owner, id=after).first()
        if cursor is None:
            raise InvalidRequest(f"No such File object: {after}", param="after")
        c, i = cursor.created_at, cursor.id
        if order == "desc":
            qs = qs.filter(Q(created_at__lt=c) | Q(created_at=c, id__lt=i))
        else:
            qs = qs.filter(Q(created_at__gt=c) | Q(created_at=c, id__gt=i))
    qs = qs.order_by("-created_at", "-id") if order == "desc" else qs.order_by("created_at", "id")
    rows = list(qs[: limit + 1])
    return rows[:limit], len(rows) > limit


def held(owner: str) -> tuple[int, int]:
    """The bytes the owner's files take now, and how many they are (one query)."""
    row = StoredFile.objects.filter(owner=owner).aggregate(total=Sum("bytes"), n=Count("id"))
    return row["total"] or 0, row["n"]


def files_named(owner: str, ids: list[str]) -> dict[str, StoredFile]:
    """The owner's files among `ids`, by id (another owner's are left out)."""
    return {row.id: row for row in StoredFile.objects.filter(owner=owner, id__in=ids)}

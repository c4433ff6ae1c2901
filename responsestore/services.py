"""Writes of stored responses (run on the app's DB thread, never the event loop)."""

from __future__ import annotations

import time
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Count

from .models import StoredResponse
from .record import Record


def responses_save(records: Iterable[Record]) -> int:
    """Store the records not deleted meanwhile; an id already stored (a
    cached answer given again) keeps its first row. Returns how many were new."""
    rows = [StoredResponse(**r.row_values()) for r in records if not r.deleted]
    if not rows:
        return 0
    return len(StoredResponse.objects.bulk_create(rows, ignore_conflicts=True))


def response_delete(owner: str, response_id: str) -> bool:
    deleted, _ = StoredResponse.objects.filter(id=response_id, owner=owner).delete()
    return bool(deleted)


def responses_prune(*, now: float | None = None, retention_s: float | None = None) -> int:
    """Delete the rows older than the retention (ROUTER_RESPONSES_RETENTION_DAYS),
    in batches so no transaction holds a large table for long. Returns how many."""
    if retention_s is None:
        retention_s = settings.ROUTER_RESPONSES_RETENTION_DAYS * 86400.0
    cutoff = (time.time() if now is None else now) - retention_s
    total = 0
    while True:
        ids = list(
            StoredResponse.objects.filter(created_at__lt=cutoff).values_list("id", flat=True)[:PRUNE_BATCH]
        )
        if not ids:
            return total
        total += StoredResponse.objects.filter(id__in=ids).delete()[0]


def responses_cap(*, most: int | None = None) -> int:
    """Keep each owner's newest `most` (ROUTER_RESPONSES_MAX_PER_KEY) stored
    responses and delete the rest, oldest first, in batches. Returns how many."""
    if most is None:
        most = settings.ROUTER_RESPONSES_MAX_PER_KEY
    total = 0
    over = (
        StoredResponse.objects.values("owner").annotate(n=Count("id")).filter(n__gt=most).values_list("owner", "n")
    )
    for owner, n in list(over):
        excess = n - most
        while excess > 0:
            ids = list(
                StoredResponse.objects.filter(owner=owner)
                .order_by("created_at", "id")
                .values_list("id", flat=True)[: min(excess, PRUNE_BATCH)]
            )
            if not ids:
                break
            deleted = StoredResponse.objects.filter(id__in=ids).delete()[0]
            total += deleted
            excess -= len(ids)
    return total


PRUNE_BATCH = 1000

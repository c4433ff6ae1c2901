"""The batches' reads and writes (sync: callers run them on a DB thread).

Every status change is a conditional update on the statuses it may leave
(`move`), so the web process's cancel and the runner never overwrite each
other; a line's result is inserted once (`BatchLine`'s unique constraint).
"""

from __future__ import annotations

import secrets
import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from router.core.errors import BatchNotCancellable, BatchNotFound, InvalidRequest, TooManyBatches

from ..models import Batch, BatchLine, StoredFile
from ..selectors import file_get
from . import wire

MAX_PAGE = 100  # OpenAI's ceiling for a page of batches
DEFAULT_PAGE = 20


def batch_create(
    *, owner: str, owner_name: str, input_file_id: str, endpoint: str, window: str, metadata: dict | None
) -> Batch:
    source = file_get(owner, input_file_id)  # another owner's file: the same 404
    if source.purpose != "batch":
        raise InvalidRequest(f"The file {input_file_id} was not uploaded with purpose 'batch'.",
                             param="input_file_id")
    most = settings.ROUTER_BATCH_MAX_ACTIVE_PER_KEY
    unfinished = Batch.objects.filter(owner=owner, status__in=wire.UNFINISHED).count()
    if unfinished >= most:
        raise TooManyBatches(
            f"This API key has {unfinished} unfinished batches; the most is {most}. "
            "Wait for one to end, or cancel one."
        )
    now = int(time.time())
    return Batch.objects.create(
        id="batch_" + secrets.token_hex(12),
        owner=owner,
        owner_name=owner_name,
        endpoint=endpoint,
        input_file_id=input_file_id,
        completion_window=window,
        metadata=metadata,
        status=wire.VALIDATING,
        created_at=now,
        expires_at=now + wire.WINDOW_SECONDS[window],
    )


def batch_get(owner: str, batch_id: str) -> Batch:
    row = Batch.objects.filter(owner=owner, id=batch_id).first()
    if row is None:
        raise BatchNotFound(f"No such Batch object: {batch_id}", param="batch_id")
    return row


def batch_page(owner: str, *, limit: int, after: str | None) -> tuple[list[Batch], bool]:
    """The owner's batches, newest first, after the cursor batch `after`."""
    qs = Batch.objects.filter(owner=owner)
    if after:
        cursor = Batch.objects.filter(owner=owner, id=after).first()
        if cursor is None:
            raise InvalidRequest(f"No such Batch object: {after}", param="after")
        qs = qs.filter(Q(created_at__lt=cursor.created_at) | Q(created_at=cursor.created_at, id__lt=cursor.id))
    rows = list(qs.order_by("-created_at", "-id")[: limit + 1])
    return rows[:limit], len(rows) > limit


def recent(limit: int) -> tuple[list[Batch], int]:
    """Every owner's batches for the operator, unfinished ones first, then the
    newest; and how many there are in all."""
    qs = Batch.objects.all()
    unfinished = list(qs.filter(status__in=wire.UNFINISHED).order_by("-created_at", "-id")[:limit])
    rest = list(qs.exclude(status__in=wire.UNFINISHED).order_by("-created_at", "-id")[: limit - len(unfinished)])
    return unfinished + rest, qs.count()


def batch_cancel(owner: str, batch_id: str) -> Batch:
    """validating/in_progress → cancelling (the runner finishes the lines in
    flight, then cancelled); a batch already cancelling or cancelled is
    answered as it is; one that ended otherwise is a 409."""
    row = batch_get(owner, batch_id)
    if move(row.id, (wire.VALIDATING, wire.IN_PROGRESS), wire.CANCELLING, cancelling_at=int(time.time())):
        return batch_get(owner, batch_id)
    row = batch_get(owner, batch_id)
    if row.status in (wire.CANCELLING, wire.CANCELLED):
        return row
    raise BatchNotCancellable(f"The batch {batch_id} is {row.status} and can no longer be cancelled.")


def move(batch_id: str, leaving: tuple[str, ...], status: str, **fields: Any) -> bool:
    """The batch to `status` if it is in one of `leaving`; whether it moved."""
    return Batch.objects.filter(id=batch_id, status__in=leaving).update(status=status, **fields) == 1


def load(batch_id: str) -> Batch | None:
    return Batch.objects.filter(id=batch_id).first()


def status_of(batch_id: str) -> str | None:
    return Batch.objects.filter(id=batch_id).values_list("status", flat=True).first()


def unfinished(limit: int = 1000) -> list[str]:
    return list(Batch.objects.filter(status__in=wire.UNFINISHED).order_by("created_at").values_list("id", flat=True)
                [:limit])


def done_lines(batch_id: str) -> tuple[set[int], int, int]:
    """The lines with a result, and how many of them succeeded and failed."""
    done: set[int] = set()
    ok = 0
    for line, good in BatchLine.objects.filter(batch_id=batch_id).values_list("line", "ok").iterator():
        done.add(line)
        ok += good
    return done, ok, len(done) - ok


def record_lines(batch_id: str, results: list[tuple[int, bool, str]]) -> tuple[int, int]:
    """Insert results (line, ok, output); a line already recorded keeps its
    first result. The batch's counts are recounted from the rows: (ok, failed)."""
    with transaction.atomic():
        BatchLine.objects.bulk_create(
            [BatchLine(batch_id=batch_id, line=line, ok=ok, output=output) for line, ok, output in results],
            ignore_conflicts=True,
        )
        total = BatchLine.objects.filter(batch_id=batch_id).count()
        ok_count = BatchLine.objects.filter(batch_id=batch_id, ok=True).count()
        Batch.objects.filter(id=batch_id).update(completed=ok_count, failed=total - ok_count)
    return ok_count, total - ok_count


def line_outputs(batch_id: str, ok: bool, after: int, size: int = 500) -> list[tuple[int, str]]:
    """A page of the recorded outputs in line order (the files' order)."""
    return list(
        BatchLine.objects.filter(batch_id=batch_id, ok=ok, line__gt=after)
        .order_by("line")
        .values_list("line", "output")[:size]
    )


def finish(batch_id: str, leaving: tuple[str, ...], status: str, files: list[StoredFile], **fields: Any) -> bool:
    """The batch's end: its output files' rows and its final status in one
    transaction; then its line rows go (the files hold them now)."""
    with transaction.atomic():
        if not move(batch_id, leaving, status, **fields):
            return False
        for row in files:
            row.save(force_insert=True)
    BatchLine.objects.filter(batch_id=batch_id).delete()
    return True

"""Per-key usage pages (staff only): the detail page of one key with its
plot and hourly table, the plot's JSON, and CSV exports.

Numbers come from keys.usage (DB rows + the Redis buffer), the same reads
`manage.py keyusage` prints. Never a key's hash or secret: the page shows
the masked hint only. CSV cells are escaped against formula injection.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable

import orjson
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.cache import never_cache

from keys import usage

from .sections import Page
from .selectors import iso
from .views import POLL_MS, _nav

DEFAULT_DAYS = 7
MAX_DAYS = 400


def _days(request: HttpRequest, default: int = DEFAULT_DAYS) -> int:
    try:
        days = int(request.GET.get("days", default))
    except ValueError:
        return default
    return min(max(days, 1), MAX_DAYS)


class _Echo:
    def write(self, value: str) -> str:
        return value


def _csv(rows: Iterable[usage.Usage], filename: str) -> StreamingHttpResponse:
    writer = csv.writer(_Echo())
    response = StreamingHttpResponse((writer.writerow(r) for r in usage.csv_rows(rows)), content_type="text/csv")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


def _known(ref: str, rows: list[usage.Usage]):
    key = usage.key_for_ref(ref)
    if key is None and not rows and ref != usage.buffer.OVERFLOW:
        raise Http404("no such key")
    return key


@staff_member_required
@never_cache
def key_detail(request: HttpRequest, ref: str) -> HttpResponse:
    days = _days(request)
    start = usage.window_start(days=days)
    hours = usage.group(usage.hourly(start, ref), "hour")
    key = _known(ref, hours)
    total = usage.group(hours, "key")
    total_row = total[0] if total else usage.Usage(ref)
    name = key.name if key else (total_row.name or ref)
    last = usage.last_used([ref]).get(ref)
    return render(
        request,
        "dashboard/key_usage.html",
        {
            "page": Page("keys", f"Key usage: {name}", ()),
            "nav": _nav(),
            "poll_ms": POLL_MS,
            "ref": ref,
            "name": name,
            "key": (
                {
                    "source": key.source,
                    "owner": key.owner,
                    "hint": key.display_hint,
                    "revoked": key.revoked_at is not None,
                }
                if key
                else None
            ),
            "days": days,
            "day_choices": (1, 7, 30),
            "since": iso(start),
            "total": total_row,
            "last_used_at": iso(last),
            "hours": [
                {
                    "hour": iso(h.hour),
                    "requests": h.requests,
                    "errors": h.errors,
                    "prompt_tokens": h.prompt_tokens,
                    "completion_tokens": h.completion_tokens,
                    "last_used_at": iso(h.last_used_at),
                }
                for h in hours
            ],
            "days_rows": usage.group(hours, "day"),
        },
    )


@staff_member_required
@never_cache
def key_usage_json(request: HttpRequest, ref: str) -> HttpResponse:
    """{"t", "series": requests / prompt / completion tokens per hour, "unit"} (charts.js)."""
    start = usage.window_start(days=_days(request))
    return HttpResponse(orjson.dumps(usage.series(ref, start)), content_type="application/json")


@staff_member_required
@never_cache
def key_usage_csv(request: HttpRequest, ref: str) -> StreamingHttpResponse:
    rows = usage.group(usage.hourly(usage.window_start(days=_days(request, 30)), ref), "hour")
    _known(ref, rows)
    stamp = timezone.now().strftime("%Y%m%d")
    return _csv(rows, f"key-usage-{''.join(c if c.isalnum() else '-' for c in ref)}-{stamp}.csv")


@staff_member_required
@never_cache
def usage_csv(request: HttpRequest) -> StreamingHttpResponse:
    """Every key, per hour, for `?days=N` (default 30)."""
    rows = usage.group(usage.hourly(usage.window_start(days=_days(request, 30))), "hour")
    return _csv(rows, f"key-usage-{timezone.now():%Y%m%d}.csv")

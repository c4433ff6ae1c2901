"""The Files page (staff only): every key's uploaded files, by metadata only.

Filterable by purpose and owner, paginated (`PER_PAGE` rows, newest first),
with each owner's stored bytes against ROUTER_FILES_MAX_BYTES_PER_KEY. A
file's content is never read here: the page shows what `StoredFile` rows say.
`?file=<id>` shows one file (the Batches page links a batch's files so).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.contrib.admin.views.decorators import staff_member_required
from django.core.paginator import Paginator
from django.db.models import Count, Max, Sum
from django.http import HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render
from django.views.decorators.cache import never_cache

from filestore.models import StoredFile
from filestore.wire import PURPOSES

from .sections import PAGES
from .views import POLL_MS, _nav

PER_PAGE = 50
OWNERS_SHOWN = 50  # the per-key totals: the owners storing the most bytes
ANONYMOUS = "anonymous"  # the `owner` filter's value for an open router's shared pool ("")


def _iso(epoch: int | None) -> str | None:
    return datetime.fromtimestamp(epoch, UTC).isoformat() if epoch else None


def _owner_label(owner: str, name: str) -> str:
    return name or owner or ANONYMOUS


def owner_totals(limit: int) -> dict[str, Any]:
    """The owners storing the most bytes, each with its share of the per-key limit."""
    cap = settings.ROUTER_FILES_MAX_BYTES_PER_KEY
    grouped = (
        StoredFile.objects.values("owner")
        .annotate(used=Sum("bytes"), files=Count("id"), name=Max("owner_name"))
        .order_by("-used", "owner")
    )
    rows = list(grouped[: limit + 1])
    out = [
        {
            "owner": r["owner"],
            "param": r["owner"] or ANONYMOUS,
            "name": _owner_label(r["owner"], r["name"] or ""),
            "bytes": r["used"] or 0,
            "files": r["files"],
            "share": (r["used"] or 0) / cap if cap > 0 else None,
            "full": (r["used"] or 0) >= cap,
        }
        for r in rows[:limit]
    ]
    return {"rows": out, "more": len(rows) > limit, "cap": cap}


def file_rows(query: QueryDict) -> dict[str, Any]:
    """One page of files under the query's filters (`purpose`, `owner`, `file`, `page`)."""
    purpose = query.get("purpose", "")
    owner = query.get("owner", "")
    file_id = query.get("file", "")
    qs = StoredFile.objects.order_by("-created_at", "-id")
    if purpose:
        qs = qs.filter(purpose=purpose)
    if owner:
        qs = qs.filter(owner="" if owner == ANONYMOUS else owner)
    if file_id:
        qs = qs.filter(id=file_id)
    paginator = Paginator(qs.only("id", "owner", "owner_name", "filename", "purpose", "bytes", "created_at"), PER_PAGE)
    page = paginator.get_page(query.get("page"))  # a bad or past-the-end number: the last or first page
    rows = [
        {
            "id": f.id,
            "filename": f.filename,
            "purpose": f.purpose,
            "bytes": f.bytes,
            "owner": _owner_label(f.owner, f.owner_name),
            "owner_param": f.owner or ANONYMOUS,
            "created_at": _iso(f.created_at),
        }
        for f in page.object_list
    ]

    def link(number: int) -> str:
        q = query.copy()
        q["page"] = str(number)
        return "?" + q.urlencode()

    return {
        "rows": rows,
        "count": paginator.count,
        "page": page.number,
        "pages": paginator.num_pages,
        "previous": link(page.previous_page_number()) if page.has_previous() else None,
        "next": link(page.next_page_number()) if page.has_next() else None,
        "filters": {"purpose": purpose, "owner": owner, "file": file_id},
    }


@staff_member_required
@never_cache
def files_page(request: HttpRequest) -> HttpResponse:
    page = next(p for p in PAGES if p.slug == "files")
    files, owners = file_rows(request.GET), owner_totals(OWNERS_SHOWN)
    context = {
        "page": page,
        "nav": _nav(),
        "poll_ms": POLL_MS,
        "files": files,
        "owners": owners,
        "owner_listed": any(o["param"] == files["filters"]["owner"] for o in owners["rows"]),
        "purposes": sorted(PURPOSES),
        "max_file": settings.ROUTER_FILES_MAX_BYTES,
    }
    return render(request, "dashboard/files.html", context)

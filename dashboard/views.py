"""Operator dashboard views (OPS-1): thin — read sections, render.

Staff only (`staff_member_required` sends everyone else to /admin/login/).
Every page is a list of live sections (dashboard.sections); `live_json`
serves the same sections as data plus their re-rendered HTML, which the
page's inline script swaps in every 2 s.
"""

from __future__ import annotations

import orjson
from django.contrib.admin.views.decorators import staff_member_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import never_cache
from redis.exceptions import RedisError

from . import charts, mirror, modes
from .sections import PAGES, SECTIONS, Page, Reading, render_sections
from .selectors import iso

POLL_MS = 2000


def _nav() -> list[dict]:
    """The pages whose models exist and whose AppProxy mode is on; the others
    still answer at their URL (with a notice saying how to turn them on)."""
    have, on = mirror.available(), modes.current()
    return [
        {"slug": p.slug, "title": p.title, "url": reverse(f"dashboard:{p.slug}")}
        for p in PAGES
        if (p.needs is None or have.get(p.needs)) and modes.in_nav(p.modes, on)
    ]


def _page(request: HttpRequest, page: Page) -> HttpResponse:
    sections = render_sections(page.sections)
    # An appproxy page whose models (or tables) are missing renders no section.
    available = page.needs is None or any(s["data"] is not None for s in sections.values())
    return render(
        request,
        "dashboard/page.html",
        {
            "page": page,
            "nav": _nav(),
            "available": available,
            "sections": sections,
            "poll_ms": POLL_MS,
        },
    )


def _view(page: Page):
    @staff_member_required
    @never_cache
    def view(request: HttpRequest) -> HttpResponse:
        return _page(request, page)

    view.__name__ = f"{page.slug}_view"
    return view


PAGE_VIEWS = {page.slug: _view(page) for page in PAGES}


@staff_member_required
@never_cache
def charts_page(request: HttpRequest) -> HttpResponse:
    """Plots of the router's time-bucketed aggregates (dashboard.charts)."""
    page = next(p for p in PAGES if p.slug == "charts")
    context = {"page": page, "nav": _nav(), "poll_ms": POLL_MS, **charts.page_context(request.GET)}
    return render(request, "dashboard/charts.html", context)


@staff_member_required
@never_cache
def chart_json(request: HttpRequest, metric: str) -> HttpResponse:
    """`/dashboard/charts/<metric>.json?window=15m|1h|24h&by=node|model|backend`."""
    try:
        body = charts.chart_data(metric, request.GET)
    except LookupError:
        raise Http404("unknown metric") from None
    except ValueError as exc:
        return HttpResponse(orjson.dumps({"error": str(exc)}), status=400, content_type="application/json")
    except RedisError:
        return HttpResponse(orjson.dumps({"error": "redis unavailable"}), status=503, content_type="application/json")
    return HttpResponse(orjson.dumps(body), content_type="application/json")


PAGE_VIEWS["charts"] = charts_page


def _api_page(slug: str, template: str):
    """A page whose script reads and changes through the admin API
    (/api/v1, the staff session with its CSRF token): the view renders the
    frame only, so the operations exist once, in adminapi."""

    @staff_member_required
    @never_cache
    def view(request: HttpRequest) -> HttpResponse:
        page = next(p for p in PAGES if p.slug == slug)
        return render(request, template, {"page": page, "nav": _nav(), "poll_ms": POLL_MS})

    view.__name__ = f"{slug}_page"
    return view


PAGE_VIEWS["config"] = _api_page("config", "dashboard/config.html")
PAGE_VIEWS["audit"] = _api_page("audit", "dashboard/audit.html")


@staff_member_required
@never_cache
def live_json(request: HttpRequest) -> HttpResponse:
    """`?sections=a,b` (default: all) → {"generated_at", "revision", "sections"}."""
    wanted = [s for s in request.GET.get("sections", "").split(",") if s] or list(SECTIONS)
    reading = Reading()
    body = {
        "generated_at": iso(timezone.now()),
        "revision": reading.view.snapshot.revision,
        "sections": render_sections(wanted, reading),
    }
    return HttpResponse(orjson.dumps(body), content_type="application/json")

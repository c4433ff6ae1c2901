"""The dashboard's live sections: one name → one loader and one partial.

A page is a list of section names. The page renders each partial once; the
inline script then polls `/dashboard/live.json?sections=…` every 2 s and
swaps in the re-rendered partials. Both paths call the same loader and the
same template, so the first paint and the live refresh are identical.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from django.template.loader import render_to_string
from django.utils.safestring import mark_safe

from router.runtime import Runtime, get_runtime

from . import batches, cluster, mirror, modes, recent, selectors, traffic


class Reading:
    """What one request reads, each part at most once (sections share rows)."""

    def __init__(self, rt: Runtime | None = None) -> None:
        self.rt = rt or get_runtime()

    @cached_property
    def view(self) -> selectors.RoutingView:
        return selectors.routing_view(self.rt)

    @cached_property
    def backends(self) -> list[dict[str, Any]]:
        return selectors.backend_rows(self.rt, self.view)

    @cached_property
    def router(self) -> dict[str, Any] | None:
        return mirror.router_reading(self.view.snapshot)

    @cached_property
    def key_usage_day(self) -> list[Any]:
        return selectors.key_usage_day()


@dataclass(frozen=True, slots=True)
class Section:
    name: str
    title: str
    load: Callable[[Reading], Any]
    partial: str = ""  # the template's name when sections share one

    @property
    def template(self) -> str:
        return f"dashboard/sections/{self.partial or self.name}.html"


SECTIONS: dict[str, Section] = {
    s.name: s
    for s in (
        Section("node", "Node", lambda r: selectors.node_facts(r.rt, r.view, r.backends)),
        Section("traffic", "Traffic", lambda r: traffic.traffic(cache=r.view.snapshot.response_cache is not None)),
        Section("workers", "AppProxy worker", lambda r: mirror.worker_rows()),
        Section("backends", "Backends", lambda r: selectors.backends_shown(r.backends, r.rt)),
        Section(
            "models",
            "Models and aliases",
            lambda r: {
                **selectors.models_shown(selectors.model_rows(r.backends, r.view)),
                "fallback_chains": selectors.fallback_rows(r.view),
            },
        ),
        Section("circuits_off", "AppProxy mode", lambda r: modes.off_notice("circuits"), "appproxy_off"),
        Section("events_off", "AppProxy mode", lambda r: modes.off_notice("events"), "appproxy_off"),
        Section("circuits", "Circuits and routes", lambda r: mirror.circuit_rows()),
        Section("keys", "API keys", lambda r: selectors.key_rows(r.key_usage_day)),
        Section("top_keys", "Top users", lambda r: selectors.top_key_rows(r.key_usage_day)),
        Section("recent", "Recent requests", lambda r: recent.recent_requests()),
        Section("batches", "Batches", lambda r: batches.batch_rows()),
        Section("events", "Recent events", lambda r: mirror.event_rows()),
        Section("router", "Router worker", lambda r: mirror.router_worker_data(r.router)),
        Section("publications", "Publications", lambda r: mirror.publications_data(r.router)),
        Section("cluster", "Cluster", lambda r: cluster.cluster_view()),
    )
}


@dataclass(frozen=True, slots=True)
class Page:
    slug: str
    title: str
    sections: tuple[str, ...]
    needs: str | None = None  # an appproxy model the page is about
    modes: tuple[str, ...] = ()  # listed in the nav only while one of these AppProxy modes is on (dashboard.modes)
    tools: str = ""  # a partial above the sections: forms that call the admin API (not live)


PAGES: tuple[Page, ...] = (
    Page("overview", "Overview", ("node", "traffic", "workers")),
    Page("charts", "Charts", ()),  # plots, not live sections: views.charts_page
    Page("backends", "Backends", ("backends",)),
    Page("cluster", "Cluster", ("cluster",)),
    Page("models", "Models", ("models",)),
    Page("circuits", "Circuits", ("circuits_off", "circuits"), needs="Circuit", modes=modes.ANY),
    Page("keys", "Keys", ("top_keys", "keys"), tools="dashboard/tools/key_create.html"),
    Page("config", "Config", ()),  # the editor and the history: views.config_page
    Page("requests", "Requests", ("recent",)),
    Page("batches", "Batches", ("batches",)),
    Page("files", "Files", ()),  # a filtered, paged table, not live sections: dashboard.files
    Page("audit", "Audit", ()),  # the audit log: views.audit_page
    Page("events", "Events", ("events_off", "events"), needs="EventRecord", modes=modes.ANY),
    Page("publications", "Publications", ("publications", "router"), needs="Publication", modes=(modes.ROUTER,)),
)


def render_sections(names: Iterable[str], reading: Reading | None = None) -> dict[str, dict[str, Any]]:
    """{name: {"title", "data", "html"}} for the known names, in order."""
    reading = reading or Reading()
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        section = SECTIONS.get(name)
        if section is None or name in out:
            continue
        data = section.load(reading)
        html = mark_safe(render_to_string(section.template, {"data": data, "section": section}).strip())
        out[name] = {"title": section.title, "data": data, "html": html}
    return out

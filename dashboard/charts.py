"""The Charts page: which plots it draws and the JSON each plot reads.

The page is static HTML with one `<div class="chart" data-chart-src=…>` per
metric; charts.js fetches `/dashboard/charts/<metric>.json?window=&by=` and
refreshes it every 10 s. The numbers come from node.timeseries, which reads
the Redis hashes (laid out by router.timeseries) that the observation drainers
of every web process write, so the page covers every process and node
sharing this Redis prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import QueryDict
from django.urls import reverse

from node import timeseries
from router.timeseries import VALUE_CAP

WINDOWS = (("15m", "15 min"), ("1h", "1 h"), ("24h", "24 h"))
BREAKDOWNS = (("", "all"), ("node", "per node"), ("model", "per model"), ("backend", "per backend"))
DEFAULT_WINDOW = "1h"


@dataclass(frozen=True, slots=True)
class Chart:
    metric: str
    title: str
    note: str
    by: str | None = None  # a breakdown of its own, whatever the page's
    empty: str = ""  # why a window can be empty, beyond "no requests"


CHARTS = (
    Chart("requests", "Request rate", "requests answered per second, every status"),
    Chart("errors", "Errors by status class", "4xx and 5xx answers per second (per value: both together)"),
    Chart("latency", "Latency", "time to the last byte, p50 / p95 / p99 (per value: p95)"),
    Chart("ttft", "Time to first byte", "streamed requests only: arrival to the upstream's first streamed byte, p50 / p95 / p99 (per value: p95)"),
    Chart("tokens", "Output tokens/s", "completion tokens the backends reported, per second"),
    Chart(
        "speed", "Generation speed", "output tokens per second of producing them (after the first byte if streamed)"
    ),
    # Per model whatever the page's breakdown: an entry belongs to a model, and
    # a hit names no backend.
    Chart(
        "cache", "Response cache", "hit ratio per model: hits / (hits + misses); a bypass is not counted",
        by="model", empty=" met the response cache (it is off, or every request was bypassed)",
    ),
)
METRICS = {c.metric for c in CHARTS}


@dataclass(frozen=True, slots=True)
class Choice:
    window: str
    by: str  # "" = all

    @classmethod
    def of(cls, query: QueryDict) -> Choice:
        """The query's window and breakdown; anything unknown falls back to
        the default (a hand-edited URL never errors the page)."""
        window = query.get("window", DEFAULT_WINDOW)
        by = query.get("by", "")
        return cls(
            window if window in dict(WINDOWS) else DEFAULT_WINDOW,
            by if by in dict(BREAKDOWNS) else "",
        )

    def query(self, **change: str) -> str:
        values = {"window": self.window, "by": self.by, **change}
        return urlencode({k: v for k, v in values.items() if v})


def page_context(query: QueryDict) -> dict[str, Any]:
    choice = Choice.of(query)
    resolution, buckets = timeseries.WINDOWS[choice.window]
    return {
        "choice": choice,
        "windows": [{"value": v, "title": t, "query": choice.query(window=v)} for v, t in WINDOWS],
        "breakdowns": [{"value": v, "title": t, "query": choice.query(by=v)} for v, t in BREAKDOWNS],
        "charts": [
            {
                "chart": c,
                "src": reverse("dashboard:chart", args=[c.metric]) + "?" + choice.query(**({"by": c.by} if c.by else {})),
            }
            for c in CHARTS
        ],
        "resolution_s": resolution,
        "buckets": buckets,
        "window_title": dict(WINDOWS)[choice.window],
        "by_title": dict(BREAKDOWNS)[choice.by],
        "value_cap": VALUE_CAP,
        "top": timeseries.TOP,
    }


def chart_data(metric: str, query: QueryDict) -> dict[str, Any]:
    """The JSON of one plot: `window`, `by`, and optionally one of `node=`,
    `model=`, `backend=` to keep one value. Raises LookupError on an unknown
    metric, ValueError on an unknown window, breakdown or filter."""
    if metric not in METRICS:
        raise LookupError(metric)
    window = query.get("window", DEFAULT_WINDOW)
    by = query.get("by") or None
    keep = {dim: query[dim] for dim in timeseries.DIMS if dim in query}
    return timeseries.series(metric, window, by, keep)

"""`/api/v1/backends`: every backend with its live state, read-only.

The state is the answering web process's own: its snapshot, its in-flight
counts, latency and breakers, and the health verdicts and load reports every
process receives from the tasks process. Before the process has a ready
snapshot the list is compiled from the mirror, with no live state (`live`
false).
"""

from __future__ import annotations

import time
from typing import Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from router.cluster import verdict
from router.core.backend import masked_url
from router.core.health import IDLE
from router.runtime import get_runtime
from router.selectors import compile_snapshot

from .paging import PageQuery

router = Router(tags=["backends"])


class BackendOut(Schema):
    name: str
    source: str = Field(description="config (the YAML), admin, appproxy")
    kind: str
    url: str = Field(description="userinfo masked")
    models: list[str]
    weight: int
    capacity: int | None
    priority: int
    health: str = Field(description="healthy, trial, breaker_open, probe_failing or warming_up")
    usable: bool
    in_flight: int = Field(description="this process's requests in flight to it")
    ewma_ms: float | None
    reported_load: int | None = Field(description="running + waiting, as the backend last reported it (fresh only)")
    kv_usage: float | None


class BackendPage(Schema):
    live: bool = Field(description="false: compiled from the mirror, no live state yet")
    data: list[BackendOut]
    total: int
    limit: int
    offset: int


class BackendFilter(PageQuery):
    source: Literal["config", "admin", "appproxy"] | None = None
    model: str | None = Field(None, description="backends serving this model name")
    health: str | None = None


@router.get("", response=BackendPage, summary="Backends with their live health, in-flight and load")
def list_backends(request: HttpRequest, filters: Query[BackendFilter]) -> dict:
    rt = get_runtime()
    live = rt.ready
    snapshot = rt.snapshot if live else compile_snapshot()
    now = time.monotonic()
    rows = []
    for spec in sorted(snapshot.backends.values(), key=lambda s: (s.source, s.name)):
        if filters.source and spec.source != filters.source:
            continue
        if filters.model and filters.model not in spec.models:
            continue
        state = (rt.states.peek(spec.name) if live else None) or IDLE
        health, _ = verdict(state, now)
        if filters.health and health != filters.health:
            continue
        rows.append(BackendOut(
            name=spec.name, source=spec.source, kind=spec.kind, url=masked_url(spec.url), models=list(spec.models),
            weight=spec.weight, capacity=spec.capacity, priority=spec.priority, health=health,
            usable=state.usable(now), in_flight=state.in_flight,
            ewma_ms=round(state.ewma_ms, 1) if state.ewma_ms is not None else None,
            reported_load=state.reported_load(now), kv_usage=state.kv_usage,
        ))  # fmt: skip
    chunk = rows[filters.offset : filters.offset + filters.limit]
    return {"live": live, "data": chunk, "total": len(rows), "limit": filters.limit, "offset": filters.offset}

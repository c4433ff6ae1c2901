"""`/api/v1/backends`: every backend with its live state; drain and undrain.

The state is the answering web process's own: its snapshot, its in-flight
counts, latency and breakers, and the health verdicts and load reports every
process receives from the tasks process. Before the process has a ready
snapshot the list is compiled from the mirror, with no live state (`live`
false).

A drain (router/drain.py) is a routing change like any other: written to
the mirror with the revision bump, it reaches every web process's snapshot,
so the answer of a drain says what was written, and the list shows it once
this process's snapshot has it.
"""

from __future__ import annotations

import time
from typing import Literal

from django.db import transaction
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from router.cluster import verdict
from router.core.backend import masked_url
from router.core.health import IDLE
from router.drain import UnknownBackend, backend_drain
from router.runtime import get_runtime
from router.selectors import compile_snapshot

from . import audit
from .auth import actor_of
from .errors import NotFound
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
    drained: bool = Field(description="an operator's drain: no new request is sent to it (POST {name}/undrain ends it)")
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
    drained: bool | None = None


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
        if filters.drained is not None and spec.drained != filters.drained:
            continue
        state = (rt.states.peek(spec.name) if live else None) or IDLE
        health, _ = verdict(state, now)
        if filters.health and health != filters.health:
            continue
        rows.append(BackendOut(
            name=spec.name, source=spec.source, kind=spec.kind, url=masked_url(spec.url), models=list(spec.models),
            weight=spec.weight, capacity=spec.capacity, priority=spec.priority, drained=spec.drained, health=health,
            usable=state.usable(now), in_flight=state.in_flight,
            ewma_ms=round(state.ewma_ms, 1) if state.ewma_ms is not None else None,
            reported_load=state.reported_load(now), kv_usage=state.kv_usage,
        ))  # fmt: skip
    chunk = rows[filters.offset : filters.offset + filters.limit]
    return {"live": live, "data": chunk, "total": len(rows), "limit": filters.limit, "offset": filters.offset}


class Drained(Schema):
    name: str
    drained: bool
    changed: bool = Field(description="false: it already was (or was not) drained; nothing was written")


def _drain(request: HttpRequest, name: str, drained: bool) -> dict:
    with transaction.atomic():
        try:
            changed = backend_drain(name, drained=drained)
        except UnknownBackend:
            raise NotFound(f"No backend named {name!r}.", param="name") from None
        if changed:
            audit.record(actor_of(request).name, "backend.drain" if drained else "backend.undrain", f"backend:{name}",
                         before={"drained": not drained}, after={"drained": drained})
    return {"name": name, "drained": drained, "changed": changed}


@router.post("/{name}/drain", response=Drained, summary="Stop new requests to a backend; running ones finish")
def drain_backend(request: HttpRequest, name: str) -> dict:
    return _drain(request, name, True)


@router.post("/{name}/undrain", response=Drained, summary="Let a drained backend take new requests again")
def undrain_backend(request: HttpRequest, name: str) -> dict:
    return _drain(request, name, False)

"""Operator endpoints: /livez, /readyz, /metrics, /status.

Apps above the router add their readiness checks and /status sections
through router.extensions.
"""

from __future__ import annotations

import time

import orjson
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from . import extensions
from .nodestate import node_health
from .observe import IN_FLIGHT
from .runtime import get_runtime


def _json(obj: dict, status: int = 200) -> HttpResponse:
    return HttpResponse(orjson.dumps(obj), status=status, content_type="application/json")


async def livez(request: HttpRequest) -> HttpResponse:
    return _json({"status": "ok"})


def readiness() -> tuple[bool, dict]:
    rt = get_runtime()
    checks = {"snapshot": rt.ready}
    snap = rt.snapshot
    for check in extensions.readiness_checks():
        checks.update(check(snap))
    return all(checks.values()), checks


async def readyz(request: HttpRequest) -> HttpResponse:
    rt = get_runtime()
    if not rt.ready:
        await rt.start()
        await rt.wait_ready(2.0)
    ok, checks = readiness()
    return _json(
        {"status": "ok" if ok else "unavailable", "checks": checks, "revision": rt.snapshot.revision,
         "node": node_health()},  # degraded processes / Redis: detail only, still 200
        200 if ok else 503,
    )


def _refresh_backend_gauges() -> None:
    rt = get_runtime()
    for name, state in rt.states.items():
        IN_FLIGHT.labels(name).set(state.in_flight)


async def metrics(request: HttpRequest) -> HttpResponse:
    _refresh_backend_gauges()
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


async def status(request: HttpRequest) -> HttpResponse:
    rt = get_runtime()
    snap = rt.snapshot
    now = time.monotonic()
    body: dict = {
        "api_version": "v2",
        "ready": rt.ready,
        "revision": snap.revision,
        "uptime_s": round(time.time() - rt.started_at, 1),
        "strategy": snap.strategy,
        "api_keys_mode": snap.api_keys_mode,
        "waiting": rt.waiting,  # requests queued for capacity (MIX-1)
        "backends": [
            {
                "name": spec.name,
                "source": spec.source,
                "kind": spec.kind,
                "models": list(spec.models),
                "weight": spec.weight,
                "healthy": rt.states.get(spec.name).usable(now),
                "in_flight": rt.states.get(spec.name).in_flight,
                "ewma_ms": rt.states.get(spec.name).ewma_ms,
            }
            for spec in snap.backends.values()
        ],
        "last_error": rt.last_error,
        "node": node_health(),
    }
    for name, section in extensions.status_sections().items():
        body[name] = section(snap)
    return _json(body)

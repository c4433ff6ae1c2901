"""Operator endpoints: /livez, /readyz, /metrics, /status.

Apps above the router add their readiness checks and /status sections
through router.extensions.

What is public: /livez (the process runs) and /readyz (ready or not, with
only the boolean result of each check). /status names backends, models,
health, weights, the key mode and config errors, so it answers only a staff
session or `Authorization: Bearer <ROUTER_STATUS_TOKEN>` (compared in
constant time); anyone else gets a 401 (403 for a signed-in non-staff user).
"""

from __future__ import annotations

import asyncio
import hmac
import time

import orjson
from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.multiprocess import MultiProcessCollector

from router import extensions
from router.cluster import verdict
from router.core.health import IDLE
from router.observe import MULTIPROC, refresh_in_flight
from router.runtime import get_runtime
from router.selectors import REFRESHES

from .nodestate import node_health


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
    # Public: booleans only (the revision and every detail are on /status).
    return _json(
        {"status": "ok" if ok else "unavailable", "checks": {str(k): bool(v) for k, v in checks.items()},
         # Degraded parts by name only (processes, Redis, keyspace): they do not
         # fail readiness, /v1 still serves from the snapshot; detail is on /status.
         "degraded": list(node_health()["degraded"])},
        200 if ok else 503,
    )


def _refresh_backend_gauges() -> None:
    # Rebuilt each scrape: a backend that left the snapshot leaves no series behind
    # (with several workers each one also publishes its own every second).
    refresh_in_flight(get_runtime().states)


class _Custom:
    """The collectors of the default registry that keep no values of their
    own in the multiprocess files (e.g. appproxy's Redis-backed one): the
    router's metric objects and the per-process default collectors are left
    out, the files already hold the metrics of every worker."""

    def collect(self):  # type: ignore[no-untyped-def]
        for collector in list(REGISTRY._collector_to_names):  # no public listing
            if isinstance(collector, MetricWrapperBase) or type(collector).__module__.startswith("prometheus_client"):
                continue
            yield from collector.collect()


def _registry() -> CollectorRegistry:
    if not MULTIPROC:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry)  # PROMETHEUS_MULTIPROC_DIR: every worker's files
    registry.register(_Custom())  # type: ignore[arg-type]
    return registry


async def metrics(request: HttpRequest) -> HttpResponse:
    _refresh_backend_gauges()
    return HttpResponse(generate_latest(_registry()), content_type=CONTENT_TYPE_LATEST)


def _bearer_ok(request: HttpRequest) -> bool:
    token = settings.ROUTER_STATUS_TOKEN
    if not token:
        return False
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


async def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the caller may read /status, else the 401/403 to send."""
    if _bearer_ok(request):
        return None
    auser = getattr(request, "auser", None)  # set by AuthenticationMiddleware
    user = await auser() if auser is not None else None
    if user is not None and user.is_active and user.is_staff:
        return None
    if user is not None and user.is_authenticated:
        return _json({"error": "forbidden", "detail": "/status needs a staff account."}, 403)
    response = _json(
        {
            "error": "unauthorized",
            "detail": "/status needs a staff session or 'Authorization: Bearer <ROUTER_STATUS_TOKEN>'; "
            "/livez and /readyz are public.",
        },
        401,
    )
    response["WWW-Authenticate"] = 'Bearer realm="router-status"'
    return response


def _backend_row(spec, state, now: float) -> dict:
    return {
        "name": spec.name,
        "source": spec.source,
        "kind": spec.kind,
        "models": list(spec.models),
        "weight": spec.weight,
        "drained": spec.drained,  # an operator's drain: no new requests
        "healthy": state.usable(now),
        "health": verdict(state, now)[0],
        "in_flight": state.in_flight,
        "ewma_ms": state.ewma_ms,
        "reported_load": state.reported_load(now),
        "kv_usage": state.kv_usage if state.reported_until > now else None,
        "prompt_cache_hit_ratio": state.cache_hit_ratio,
        # Seconds this process skips it for: its upstream quota had no room.
        "quota_limited_s": round(state.limited_until - now, 3) if state.limited_until > now else None,
    }


def _backends(rt, snap, now: float, every: bool = False) -> dict:
    """Every backend up to ROUTER_STATUS_BACKENDS (or `every`:
    ``/status?backends=all``); past it, only those that are not healthy or
    have requests in flight (``backends_listed`` says which), found among
    the backends that have a state: one a request or probe never touched is
    idle and healthy. A state is read, never made (one per backend per read
    stayed for the process's life)."""
    limit = settings.ROUTER_STATUS_BACKENDS
    total = len(snap.backends)
    if every or total <= limit:
        specs = sorted(snap.backends.values(), key=lambda spec: (spec.source, spec.name))  # (a map has no order)
        rows = [_backend_row(spec, rt.states.peek(spec.name) or IDLE, now) for spec in specs]
        healthy = sum(1 for row in rows if row["healthy"])
        listed = "all"
    else:
        rows, unhealthy = [], 0
        for name, state in rt.states.items():
            spec = snap.backends.get(name)
            if spec is None:
                continue
            usable = state.usable(now)
            unhealthy += not usable
            if (not usable or state.in_flight) and len(rows) < limit:
                rows.append(_backend_row(spec, state, now))
        rows.sort(key=lambda row: (row["source"], row["name"]))
        healthy, listed = total - unhealthy, "not healthy or in flight"
    return {"backends_total": total, "backends_healthy": healthy, "backends_listed": listed, "backends": rows}


async def status(request: HttpRequest) -> HttpResponse:
    refusal = await _refusal(request)
    if refusal is not None:
        return refusal
    rt = get_runtime()
    snap = rt.snapshot
    now = time.monotonic()
    body: dict = {
        "api_version": "v2",
        "ready": rt.ready,
        "revision": snap.revision,
        "uptime_s": round(time.time() - rt.started_at, 1),
        "strategy": snap.strategy,
        # cache_aware: this process's index of prompt blocks (null otherwise).
        "prefix_index": None if rt.prefix_index is None else {
            "entries": len(rt.prefix_index),
            "max_entries": rt.prefix_index.max_entries,
            "replicas": rt.prefix_index.replicas(),
        },
        "api_keys_mode": snap.api_keys_mode,
        "waiting": rt.waiting,  # requests queued for capacity (MIX-1)
        # How this process's snapshots were made: in place from the change log,
        # or compiled from scratch (start, a pruned log, a writer that named nothing).
        "snapshot_refreshes": dict(REFRESHES),
        **_backends(rt, snap, now, request.GET.get("backends") == "all"),
        "last_error": rt.last_error,
        "node": node_health(),
    }
    for name, section in extensions.status_sections().items():
        # A section may wait on a DB read (appproxy's live facts, up to 2 s):
        # off the event loop, so the requests it serves do not wait with it.
        body[name] = await asyncio.to_thread(section, snap)
    return _json(body)

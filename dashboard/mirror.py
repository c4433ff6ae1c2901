"""Reads of the AppProxy mirror (workers, circuits, routes, events).

The appproxy models are optional: a build without them (or before their
migration) still renders every page. Each reader returns None when its model
is not installed, and the page then hides that section.

Row builders take plain objects (anything with the attributes) so they are
testable without the models; a missing attribute renders as empty, never as
an error. `raw` payloads and anything that could hold a secret are never
copied into a row.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import DatabaseError
from django.utils import timezone

from .selectors import iso

LIMIT = 100


def model(name: str):
    """`appproxy.<name>` or None when the app does not define it (yet)."""
    try:
        return apps.get_model("appproxy", name)
    except LookupError:
        return None


def available() -> dict[str, bool]:
    return {name: model(name) is not None for name in ("WorkerState", "Circuit", "EventRecord")}


def _get(obj: Any, name: str, default: Any = None) -> Any:
    value = getattr(obj, name, default)
    if isinstance(value, datetime):
        return iso(value)
    return value


def _seconds_between(later: datetime | None, earlier: datetime | None) -> float | None:
    if not isinstance(later, datetime) or not isinstance(earlier, datetime):
        return None
    return (later - earlier).total_seconds()


def _ms_between(later: Any, earlier: Any) -> float | None:
    seconds = _seconds_between(later, earlier)
    return None if seconds is None else round(seconds * 1000.0, 1)


def _ips(value: Any) -> list[str]:
    if not value:
        return []
    if isinstance(value, str):
        return [p.strip() for p in value.split(",") if p.strip()]
    return [str(v) for v in value]


# -- row builders (pure) ------------------------------------------------------
def subscriber_alive(authority: str) -> bool | None:
    """Whether the events process is subscribed for `authority` (None: unknown)."""
    # Imported when asked, not at the top: appproxy is optional for the
    # dashboard (see the module docstring), and its subscriber module needs
    # the appproxy models loaded.
    try:
        from appproxy.subscriber import subscriber_alive as alive
    except ImportError:
        return None
    try:
        return bool(alive(authority))
    except Exception:  # a status read must never fail the page
        return None


def worker_row(w: Any, now: datetime, events_alive: bool | None = None) -> dict[str, Any]:
    heartbeat = getattr(w, "last_heartbeat_at", None)
    age = _seconds_between(now, heartbeat)
    return {
        "authority": _get(w, "authority", ""),
        "worker_id": _get(w, "worker_id", ""),
        "node_id": _get(w, "node_id", ""),
        "status": _get(w, "status", ""),
        "registered_at": _get(w, "registered_at"),
        "last_heartbeat_at": _get(w, "last_heartbeat_at"),
        "heartbeat_age_s": None if age is None else round(age, 1),
        "last_pull_at": _get(w, "last_pull_at"),
        "first_pull_applied": bool(getattr(w, "first_pull_applied", False)),
        "circuits": _get(w, "circuits"),
        "failures": _get(w, "failures") or 0,
        "retry_at": _get(w, "retry_at"),
        "events_subscriber": events_alive,
        "last_error": _get(w, "last_error", "") or "",
    }


def route_row(r: Any) -> dict[str, Any]:
    return {
        "route_id": str(_get(r, "route_id", "")),
        "session_id": str(_get(r, "session_id", "") or ""),
        "kernel_host": _get(r, "kernel_host", "") or "",
        "kernel_port": _get(r, "kernel_port"),
        "protocol": _get(r, "protocol", "") or "",
        "traffic_ratio": _get(r, "traffic_ratio"),
        "backend_name": _get(r, "backend_name", "") or "",
    }


def circuit_row(c: Any, routes: Iterable[Any]) -> dict[str, Any]:
    return {
        "circuit_id": str(_get(c, "circuit_id", "")),
        "subdomain": _get(c, "subdomain", "") or "",
        "app": _get(c, "app", "") or "",
        "app_mode": _get(c, "app_mode", "") or "",
        "model": _get(c, "model", "") or "",
        "endpoint_id": str(_get(c, "endpoint_id", "") or ""),
        "open_to_public": bool(getattr(c, "open_to_public", False)),
        "allowed_client_ips": _ips(getattr(c, "allowed_client_ips", None)),
        "runtime_variant": _get(c, "runtime_variant", "") or "",
        "updated_at": _get(c, "updated_at"),
        "routes": [route_row(r) for r in routes],
    }


def event_row(e: Any) -> dict[str, Any]:
    received = getattr(e, "received_at", None)
    ok = getattr(e, "ok", None)
    return {
        "name": _get(e, "name", ""),
        "fmt": _get(e, "fmt", "") or "",
        "authority": _get(e, "authority", "") or "",
        "circuit_ids": [str(i) for i in getattr(e, "circuit_ids", None) or []],
        "received_at": _get(e, "received_at"),
        "applied_at": _get(e, "applied_at"),
        "acked_at": _get(e, "acked_at"),
        "apply_ms": _ms_between(getattr(e, "applied_at", None), received),
        "ack_ms": _ms_between(getattr(e, "acked_at", None), received),
        "ok": None if ok is None else bool(ok),
        "detail": str(_get(e, "detail", "") or "")[:300],
    }


# -- queries ------------------------------------------------------------------
def _newest(model_cls, limit: int = LIMIT):
    return model_cls.objects.order_by("-pk")[:limit]


def worker_rows() -> list[dict[str, Any]] | None:
    cls = model("WorkerState")
    if cls is None:
        return None
    now = timezone.now()
    try:
        workers = list(cls.objects.order_by("pk"))
    except DatabaseError:  # model installed, migration not applied yet
        return None
    return [worker_row(w, now, subscriber_alive(getattr(w, "authority", ""))) for w in workers]


def circuit_rows() -> list[dict[str, Any]] | None:
    cls = model("Circuit")
    if cls is None:
        return None
    try:
        circuits = list(cls.objects.order_by("pk").prefetch_related("routes"))
        return [circuit_row(c, c.routes.all()) for c in circuits]
    except DatabaseError:
        return None


def event_rows(limit: int = LIMIT) -> list[dict[str, Any]] | None:
    cls = model("EventRecord")
    if cls is None:
        return None
    try:
        return [event_row(e) for e in _newest(cls, limit)]
    except DatabaseError:
        return None

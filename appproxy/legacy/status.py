"""/readyz and /status facts for the web process (LEG-8, OPS-3).

Registered with router.extensions (appproxy/legacy/mode.py); the router passes the
snapshot a request reads. The web process never talks to the coordinator.
Readiness comes from that snapshot (its ingress carries WorkerState as of the
compile; registration and the first pull bump the revision), so /readyz costs
no query. /status adds the live WorkerState (heartbeat and pull times), read in
a short-lived thread and cached for ``facts.STATUS_TTL`` seconds. Nothing here
ever includes a secret.
"""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections

from router.core.snapshot import Snapshot

from .. import node
from ..facts import LiveFacts
from ..models import EventRecord, WorkerState
from ..subscribed import subscriber_alive
from .config import load_settings
from .ingress import Ingress

__all__ = ["readiness", "worker_status"]

_facts = LiveFacts("appproxy-status")


def _ingress(snap: Snapshot) -> Ingress | None:
    return snap.ingress


def readiness(snap: Snapshot) -> dict[str, bool]:
    """Empty when appproxy is disabled; else registered + first pull applied."""
    ingress = _ingress(snap)
    if ingress is None:
        return {}
    return {
        "appproxy_registered": ingress.registered,
        "appproxy_first_pull": ingress.first_pull_applied,
    }


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _live(authority: str) -> dict[str, Any]:
    close_old_connections()
    try:
        row = WorkerState.objects.filter(authority=authority, node_id=node.current()).first()
        last_event = EventRecord.objects.order_by("-pk").first()
        settings = None
        try:
            settings = load_settings()
        except Exception:
            pass
        out: dict[str, Any] = {
            "events_subscriber": subscriber_alive(authority),
            "last_event": None
            if last_event is None
            else {
                "name": last_event.name,
                "fmt": last_event.fmt,
                "received_at": _iso(last_event.received_at),
                "ok": last_event.ok,
            },
        }
        if settings is not None:
            out["config"] = settings.public()
        if row is not None:
            out.update(
                status=row.status,
                node_id=row.node_id,
                registered_at=_iso(row.registered_at),
                last_heartbeat_at=_iso(row.last_heartbeat_at),
                last_pull_at=_iso(row.last_pull_at),
                last_error=row.last_error or None,
                failures=row.failures,
            )
        return out
    finally:
        close_old_connections()


def worker_status(snap: Snapshot) -> dict[str, Any]:
    """The worker's /status section (never a secret)."""
    ingress = _ingress(snap)
    if ingress is None:
        return {"enabled": False}
    body: dict[str, Any] = {
        "enabled": True,
        "frontend_mode": "wildcard",
        "authority": ingress.authority,
        "worker_id": ingress.worker_id or None,
        "wildcard_domain": ingress.domain,
        "aggregation_hosts": sorted(ingress.aggregate_hosts),
        "registered": ingress.registered,
        "first_pull_applied": ingress.first_pull_applied,
        "circuits": len(ingress.table),
        "circuits_with_routes": sum(1 for e in ingress.table.values() if e.has_routes),
    }
    body.update(_facts.get(ingress.authority, _live, ingress.authority))
    return body

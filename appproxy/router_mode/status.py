"""What the ROUTER worker plugs into the data plane (router.extensions).

- snapshot part ``api_keys_mode``: ``blocking`` whenever ``appproxy_router``
  is enabled (seed §9.4 step 1), so the very first snapshot of a web process
  already refuses an unknown key with 401 — before any coordinator key or
  publication has arrived, nothing passes;
- snapshot part ``listed``: every published name and alias (an empty or
  pending publication stays listed and resolves like "all replicas down");
- snapshot part ``worker``: this node's registration facts at compile time,
  for /readyz (registered + first pull applied: no query per /readyz);
- the /status section (live facts, read in a short-lived thread, cached 1 s).

Nothing here ever includes a token hash or the api_secret.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from keys.coordinator import coordinator_key_count
from router.core.snapshot import Snapshot

from .. import node
from ..backends import SOURCE
from ..facts import LiveFacts
from ..models import Circuit, EventRecord, Publication, Route, WorkerState
from ..subscribed import subscriber_alive
from .config import RouterSettings, parse_router_section, weighting
from .plan import MirrorSummary, summarize

__all__ = [
    "compile_listed",
    "compile_mode",
    "compile_worker",
    "mirror_summary",
    "readiness",
    "routed",
    "router_status",
]


@dataclass(frozen=True, slots=True)
class WorkerFacts:
    authority: str
    node_id: str
    worker_id: str
    registered: bool
    first_pull_applied: bool
    revision: str


def _enabled(cfg: Any) -> RouterSettings | None:
    try:
        s = parse_router_section(getattr(cfg, "appproxy_router", None))
    except ValueError:
        return None
    return s if s is not None and s.enabled else None


def compile_mode(cfg: Any) -> str:
    return "blocking" if _enabled(cfg) is not None else cfg.api_keys.mode


def compile_listed(cfg: Any) -> tuple[str, ...]:
    s = _enabled(cfg)
    if s is None:
        return ()
    names: dict[str, None] = {}
    for model, aliases in Publication.objects.filter(authority=s.authority).values_list("model", "aliases"):
        names.setdefault(model, None)
        for alias in aliases or ():
            if isinstance(alias, str):
                names.setdefault(alias, None)
    return tuple(names)


def compile_worker(cfg: Any) -> WorkerFacts | None:
    s = _enabled(cfg)
    if s is None:
        return None
    node_id = node.current()
    row = WorkerState.objects.filter(authority=s.authority, node_id=node_id).first() if node_id else None
    return WorkerFacts(
        authority=s.authority,
        node_id=node_id,
        worker_id=row.worker_id if row else "",
        registered=bool(row and row.worker_id),
        first_pull_applied=bool(row and row.first_pull_applied),
        revision=row.revision if row else "",
    )


def readiness(snap: Snapshot) -> dict[str, bool]:
    facts = snap.worker
    if not isinstance(facts, WorkerFacts):
        return {}
    return {"appproxy_router_registered": facts.registered, "appproxy_router_first_pull": facts.first_pull_applied}


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


_facts = LiveFacts("appproxy-router-status")
_cache = _facts.cache


def routed(snap: Snapshot) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The ``appproxy`` backends of `snap` by name, sorted, and its published
    names, sorted: what /status and the dashboard show of the plan, read from
    the snapshot the process routes with instead of planning the mirror."""
    backends = {name: spec for name, spec in sorted(snap.backends.items()) if spec.source == SOURCE}
    return backends, tuple(sorted(set(snap.listed)))


def mirror_summary(authority: str) -> MirrorSummary:
    """What the mirror's plan has pending or drained, from stored columns."""
    return summarize(
        Publication.objects.filter(authority=authority).values_list("model", "mappings").iterator(),
        Circuit.objects.values_list("pk", "circuit_id", "endpoint_id", "app_mode").order_by().iterator(),
        Route.objects.values_list("circuit_id", "traffic_ratio").order_by().iterator(chunk_size=2000),
    )


def _live(authority: str, node_id: str, snap: Snapshot) -> dict[str, Any]:
    """The mirror as /status tells it. The backends (and their weights) and
    the published names are those of the snapshot this process routes with;
    what is pending or drained is counted from the mirror's columns
    (plan.summarize): no circuit is parsed, no backend built."""
    close_old_connections()
    try:
        row = WorkerState.objects.filter(authority=authority, node_id=node_id).first() if node_id else None
        row = row.with_unchanged_pulls() if row is not None else None
        summary = mirror_summary(authority)
        ours, published = routed(snap)
        counts = Counter(spec.weight for spec in ours.values())
        nodes = list(WorkerState.objects.filter(authority=authority).values("node_id", "status", "last_heartbeat_at"))
        events = [
            {
                "name": e.name,
                "fmt": e.fmt,
                "id": (e.circuit_ids or [None])[0],
                "received_at": _iso(e.received_at),
                "ok": e.ok,
                "ack_ms": round((e.acked_at - e.received_at).total_seconds() * 1000, 1) if e.acked_at else None,
            }
            for e in EventRecord.objects.filter(name__startswith="appproxy_router_").order_by("-pk")[:10]
        ]
        out: dict[str, Any] = {
            "events_subscriber": subscriber_alive(authority),
            "publications": Publication.objects.filter(authority=authority).count(),
            "coordinator_keys": coordinator_key_count(),
            "backends": len(ours),
            "weighting": weighting(),
            # Each backend's weight up to ROUTER_STATUS_BACKENDS of them
            # (else null: 20,000 names are no status); how many have each
            # weight, always.
            "backend_weights": (
                {name: spec.weight for name, spec in ours.items()}
                if len(ours) <= settings.ROUTER_STATUS_BACKENDS
                else None
            ),
            "backend_weight_counts": {str(w): n for w, n in sorted(counts.items())},
            "published_names": list(published),
            "pending_circuits": list(summary.pending_circuits),
            "pending_publications": list(summary.pending_publications),
            "drained_routes": summary.drained,
            "nodes_in_db": [
                {"node_id": n["node_id"], "status": n["status"], "last_heartbeat_at": _iso(n["last_heartbeat_at"])}
                for n in nodes
            ],
            "recent_events": events,
        }
        if row is not None:
            out.update(
                status=row.status,
                registered_at=_iso(row.registered_at),
                last_heartbeat_at=_iso(row.last_heartbeat_at),
                last_pull_at=_iso(row.last_pull_at),
                last_pull_result=row.last_pull_result or None,
                pulls_full=row.pulls_full,
                pulls_unchanged=row.pulls_unchanged,
                last_pull_cpu_ms=getattr(row, "last_pull_cpu_ms", None),
                last_error=row.last_error or None,
                failures=row.failures,
            )
        return out
    finally:
        close_old_connections()


def router_status(snap: Snapshot) -> dict[str, Any]:
    facts = snap.worker
    if not isinstance(facts, WorkerFacts):
        return {"enabled": False}
    body: dict[str, Any] = {
        "enabled": True,
        "frontend_mode": "router",
        "authority": facts.authority,
        "node_id": facts.node_id or None,
        "worker_id": facts.worker_id or None,
        "registered": facts.registered,
        "first_pull_applied": facts.first_pull_applied,
        "revision": facts.revision or None,
        "api_keys_mode": snap.api_keys_mode,
    }
    body.update(
        _facts.get((facts.authority, facts.node_id, snap.revision), _live, facts.authority, facts.node_id, snap)
    )
    return body

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

from collections.abc import Container, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.apps import apps
from django.db import DatabaseError
from django.utils import timezone

from keys.coordinator import coordinator_key_count
from router.core.backend import masked_url

from .modes import ABOUT, ROUTER_HOW
from .selectors import iso, shown

LIMIT = 100


def model(name: str):
    """`appproxy.<name>` or None when the app does not define it (yet)."""
    try:
        return apps.get_model("appproxy", name)
    except LookupError:
        return None


def available() -> dict[str, bool]:
    return {name: model(name) is not None for name in ("WorkerState", "Circuit", "EventRecord", "Publication")}


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
        from appproxy.subscribed import subscriber_alive as alive
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


# -- ROUTER mode (seed §9): publications and the router worker -------------------
ROUTER_EVENT_PREFIX = "appproxy_router_"
ROUTER_EVENTS_SHOWN = 20
# Publications the table renders (and live.json sends every 2 s): 2,000 of
# them with their 20,000 backends were 3.8 MB of HTML and ~2 s of the web
# process's interpreter per refresh.
PUBLICATIONS_SHOWN = 200


@dataclass(frozen=True, slots=True)
class RouterView:
    """What the ROUTER pages show of the mirror's plan, without planning it:
    the ``appproxy`` backends of the snapshot this process routes with (by
    name), its published names, and what ``router_status.mirror_summary``
    counts from the stored columns (pending circuits and publications, the
    drained routes). Planning the whole mirror on every 2-s refresh of the
    page was ~0.4 s of the web process at 5,000 circuits."""

    backends: dict[str, Any]
    published: tuple[str, ...]
    pending_circuits: tuple[str, ...]
    pending_publications: tuple[str, ...]
    drained: int


def router_reading(snapshot: Any) -> dict[str, Any] | None:
    """What the ROUTER pages read, once per request (None: appproxy absent).

    {"enabled": False, "error"?} when the mode is off (or its section does not
    parse); else {"enabled": True, "settings", "node_id", "plan",
    "plan_error"}: ``plan`` a RouterView of `snapshot` (the one the page
    shows) and the mirror's columns.
    """
    if model("Publication") is None:
        return None
    # Imported when asked (appproxy is optional for the dashboard).
    try:
        from appproxy import node
        from appproxy.router_mode.config import load_router_settings
        from appproxy.router_mode.status import mirror_summary, routed
    except ImportError:
        return None
    try:
        s = load_router_settings()
    except Exception as exc:  # an unparsable section must not fail the page
        return {"enabled": False, "error": f"{type(exc).__name__}: {exc}"}
    if s is None or not s.enabled:
        return {"enabled": False, "error": None}
    backends, published = routed(snapshot)
    try:
        summary = mirror_summary(s.authority)
        plan = RouterView(backends, published, summary.pending_circuits, summary.pending_publications, summary.drained)
        plan_error = None
    except Exception as exc:  # e.g. a mirrored row that no longer reads: report it
        plan, plan_error = RouterView(backends, published, (), (), 0), f"{type(exc).__name__}: {exc}"
    return {"enabled": True, "settings": s, "node_id": node.current(), "plan": plan, "plan_error": plan_error}


def backends_by_name(plan: Any) -> dict[str, list[Any]]:
    """The plan's backends under every name they serve, in the plan's order:
    one pass, so a page of 2,000 publications does not walk 20,000 backends
    for each of them."""
    out: dict[str, list[Any]] = {}
    for spec in plan.backends.values():
        for name in spec.models:
            out.setdefault(name, []).append(spec)
    return out


def publication_row(
    p: Any, by_name: Mapping[str, list[Any]], pending: Container[str], here: set[str]
) -> dict[str, Any]:
    """One publication with the backends the plan makes of it (no secret).

    ``by_name``: the plan's backends by name (``backends_by_name``);
    ``pending``: the plan's pending publications; ``here``: the endpoint ids
    (lower case) of the circuits mirrored on this node. A backend belongs to
    the publication when it serves its primary name (the plan gives a
    backend every name of every publication mapping its endpoint)."""
    name = str(_get(p, "model", "") or "")
    mappings = _mappings(p, here)
    backends = [
        {"name": spec.name, "url": masked_url(spec.url), "weight": spec.weight} for spec in by_name.get(name, ())
    ]
    return {
        "model": name,
        "aliases": [str(a) for a in getattr(p, "aliases", None) or [] if isinstance(a, str)],
        "mappings": mappings,
        "control_mode": _get(p, "control_mode", "") or "",
        "revision": _get(p, "revision", "") or "",
        "updated_at": _get(p, "updated_at"),
        "backends": backends,
        "state": publication_state(p, by_name, here, mappings),
        "pending": name in pending,
    }


def _mappings(p: Any, here: set[str]) -> list[dict[str, Any]]:
    out = []
    for m in getattr(p, "mappings", None) or []:
        if not isinstance(m, dict):
            continue
        endpoint = str(m.get("endpoint_id") or "")
        out.append({"endpoint_id": endpoint, "ratio": m.get("ratio"), "assigned": endpoint.lower() in here})
    return out


def publication_state(
    p: Any, by_name: Mapping[str, list[Any]], here: set[str], mappings: list[dict[str, Any]] | None = None
) -> str:
    """serving (a backend here serves its name), drained (a circuit of its
    endpoints is here, but no backend), pending (none is here) or empty (no
    mappings)."""
    mappings = _mappings(p, here) if mappings is None else mappings
    if not mappings:
        return "empty"
    if by_name.get(str(_get(p, "model", "") or "")):
        return "serving"
    return "drained" if any(m["assigned"] for m in mappings) else "pending"


def publications_data(reading: dict[str, Any] | None) -> dict[str, Any] | None:
    if reading is None:
        return None
    if not reading["enabled"]:
        return {"enabled": False, "error": reading.get("error"), "about": ABOUT["publications"], "how": ROUTER_HOW}
    pub_cls, circuit_cls = model("Publication"), model("Circuit")
    s, plan = reading["settings"], reading["plan"]
    try:
        circuits = (
            list(circuit_cls.objects.values_list("circuit_id", "subdomain", "endpoint_id")) if circuit_cls else []
        )
        pubs = list(pub_cls.objects.filter(authority=s.authority).order_by("model"))
    except DatabaseError:
        return None
    here = {str(ep).lower() for _cid, _sub, ep in circuits if ep}
    by_name, pending = backends_by_name(plan), set(plan.pending_publications)
    by_id = {str(cid).lower(): (sub, ep) for cid, sub, ep in circuits}
    pending_circuits = []
    for cid in plan.pending_circuits:
        sub, ep = by_id.get(cid.lower(), ("", ""))
        pending_circuits.append({"circuit_id": cid, "subdomain": sub or "", "endpoint_id": str(ep or "")})
    # Every publication's state (cheap), a whole row only for those shown.
    capped = shown(
        [(p, publication_state(p, by_name, here)) for p in pubs], PUBLICATIONS_SHOWN, lambda ps: ps[1] != "serving"
    )
    return {
        "enabled": True,
        "authority": s.authority,
        "plan_error": reading.get("plan_error"),
        "items": [publication_row(p, by_name, pending, here) for p, _state in capped["rows"]],
        "items_hidden": capped["hidden"],
        "items_total": capped["total"],
        "published": list(plan.published),
        "pending_circuits": pending_circuits,
        "pending_publications": list(plan.pending_publications),
        "drained": plan.drained,
        "backends": len(plan.backends),
    }


def router_event_rows(limit: int = ROUTER_EVENTS_SHOWN) -> list[dict[str, Any]]:
    cls = model("EventRecord")
    if cls is None:
        return []
    rows = []
    for e in cls.objects.filter(name__startswith=ROUTER_EVENT_PREFIX).order_by("-pk")[:limit]:
        row = event_row(e)
        row["id"] = row["circuit_ids"][0] if row["circuit_ids"] else ""
        rows.append(row)
    return rows


def router_worker_data(reading: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ROUTER worker panel: this node's registration, pulls, the node
    sessions in the DB, coordinator key count, recent router events.
    Never a token hash, never the api_secret (only ``public()`` facts)."""
    if reading is None:
        return None
    if not reading["enabled"]:
        return {"enabled": False}
    cls = model("WorkerState")
    s, node_id, plan = reading["settings"], reading["node_id"], reading["plan"]
    now = timezone.now()
    try:
        states = (
            [w.with_unchanged_pulls() for w in cls.objects.filter(authority=s.authority).order_by("pk")] if cls else []
        )
        pub_cls = model("Publication")
        publications = pub_cls.objects.filter(authority=s.authority).count() if pub_cls else 0
        keys = coordinator_key_count()
        events = router_event_rows()
    except DatabaseError:
        return None
    mine = next((w for w in states if node_id and getattr(w, "node_id", "") == node_id), None)
    nodes = []
    for w in states:
        age = _seconds_between(now, getattr(w, "last_heartbeat_at", None))
        nodes.append(
            {
                "node_id": _get(w, "node_id", "") or "",
                "worker_id": _get(w, "worker_id", "") or "",
                "status": _get(w, "status", "") or "",
                "last_heartbeat_at": _get(w, "last_heartbeat_at"),
                "heartbeat_age_s": None if age is None else round(age, 1),
                "this_node": w is mine,
            }
        )
    public = s.public()
    out: dict[str, Any] = {
        "enabled": True,
        "authority": s.authority,
        "coordinator_url": public["coordinator_url"],
        "node_id": node_id,
        "registered": bool(mine is not None and getattr(mine, "worker_id", "")),
        "events_subscriber": subscriber_alive(s.authority),
        "publications": publications,
        "coordinator_keys": keys,
        "backends": len(plan.backends),
        "nodes": nodes,
        "events": events,
        "worker": None,
    }
    if mine is not None:
        w = worker_row(mine, now)
        w.update(
            revision=_get(mine, "revision", "") or "",
            last_pull_result=_get(mine, "last_pull_result", "") or "",
            pulls_full=_get(mine, "pulls_full") or 0,
            pulls_unchanged=_get(mine, "pulls_unchanged") or 0,
        )
        out["worker"] = w
    return out

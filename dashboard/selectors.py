"""Reads for the operator dashboard: the routing view of *this* web process.

Invariants:
- Every function returns plain JSON-able data (str, int, float, bool, None,
  lists, dicts); the HTML partials and `/dashboard/live.json` render the same
  rows, so the page and the live feed never disagree.
- The routing facts come from the process's live snapshot (what actually
  serves traffic). A process whose runtime has not loaded (WSGI, tests, a
  failed first load) compiles the snapshot from the DB mirror instead, and
  says so (`snapshot_source`).
- Runtime states are only *read* here (`StateTable.peek`): the dashboard
  runs in a worker thread and must never create or mutate a BackendState.
- No secret leaves this module: backend api keys, key hashes and headers are
  never copied into a row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q
from django.utils import timezone

from keys import usage as key_usage
from keys.selectors import key_list, record_id
from node.nodestate import node_health
from node.ops import readiness
from router.cluster import verdict
from router.core.backend import masked_url
from router.core.health import IDLE, BackendState
from router.core.snapshot import EMPTY, Snapshot
from router.providers import path_of
from router.revision import current_revision
from router.runtime import Runtime
from router.selectors import compile_snapshot


def iso(value: datetime | float | None) -> str | None:
    """UTC ISO-8601 with second precision (`2025-01-31T12:00:03Z`)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, tz=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True, slots=True)
class RoutingView:
    snapshot: Snapshot
    source: str  # "live" | "db" | "unavailable"
    error: str | None = None


def routing_view(rt: Runtime) -> RoutingView:
    """The snapshot to show: the live one, else one compiled from the DB."""
    if rt.ready:
        return RoutingView(rt.snapshot, "live")
    try:
        return RoutingView(compile_snapshot(), "db")
    except Exception as exc:  # a broken mirror must not take the dashboard down
        return RoutingView(EMPTY, "unavailable", f"{type(exc).__name__}: {exc}")


def _state(rt: Runtime, view: RoutingView, name: str) -> BackendState:
    if view.source != "live":
        return IDLE
    return rt.states.peek(name) or IDLE


# ('healthy' | 'trial' | 'breaker_open' | 'probe_failing' | 'warming_up', seconds to the
# trial): the verdict every process publishes to the Cluster view too.
health_label = verdict


# Rows the Backends section renders (and live.json sends every 2 s): at
# cluster size (20,000 backends) the whole table was 15 MB of HTML and
# 1.5 s of the web process's interpreter per refresh.
BACKENDS_SHOWN = 500


def _needs_attention(row: dict[str, Any]) -> bool:
    return row["health"] != "healthy" or row["drained"] or bool(row["in_flight"]) or bool(row["failures"])


def shown(rows: list[Any], limit: int, needs_attention: Callable[[Any], bool]) -> dict[str, Any]:
    """At most `limit` of `rows`, in their order: every row that needs
    attention first, then the rest up to the limit. ``hidden``: how many
    were left out (none of them needs attention unless more than `limit`
    do)."""
    if len(rows) <= limit:
        return {"rows": rows, "hidden": 0, "total": len(rows)}
    keep = set([i for i, row in enumerate(rows) if needs_attention(row)][:limit])
    for i in range(len(rows)):
        if len(keep) >= limit:
            break
        keep.add(i)
    return {"rows": [rows[i] for i in sorted(keep)], "hidden": len(rows) - len(keep), "total": len(rows)}


def backends_shown(rows: list[dict[str, Any]], rt: Runtime | None = None) -> dict[str, Any]:
    """The Backends section: at most BACKENDS_SHOWN rows; those left out are
    healthy, idle and never failed; and, under cache_aware, the size of this
    process's prompt index."""
    out = shown(rows, BACKENDS_SHOWN, _needs_attention)
    index = rt.prefix_index if rt is not None else None
    if index is not None:
        out["prefix_index"] = {"entries": len(index), "max_entries": index.max_entries, "replicas": index.replicas()}
    return out


def backend_rows(rt: Runtime, view: RoutingView) -> list[dict[str, Any]]:
    now = time.monotonic()
    rows = []
    for spec in sorted(view.snapshot.backends.values(), key=lambda s: (s.source, s.name)):
        state = _state(rt, view, spec.name)
        health, retry_in = health_label(state, now)
        rows.append(
            {
                "name": spec.name,
                "source": spec.source,
                "kind": spec.kind,
                "path": path_of(spec.kind),
                "url": masked_url(spec.url),
                "models": list(spec.models),
                "served_model": spec.served_model,
                "weight": spec.weight,
                "capacity": spec.capacity,
                "priority": spec.priority,
                "drained": spec.drained,
                "healthy": state.usable(now),
                "health": health,
                "probe_healthy": state.probe_healthy,
                "breaker": state.breaker,
                "breaker_retry_s": retry_in,
                "in_flight": state.in_flight,
                "reported_load": state.reported_load(now),
                "kv_usage": state.kv_usage if state.reported_until > now else None,
                "ewma_ms": rounded(state.ewma_ms),
                "requests": state.total,
                "prompt_cache_hit_ratio": state.cache_hit_ratio,
                "failures": state.failures,
            }
        )
    return rows


def model_rows(backends: list[dict[str, Any]], view: RoutingView) -> list[dict[str, Any]]:
    """Every client-facing name (aliases are more names) → its backends."""
    by_model: dict[str, list[dict[str, Any]]] = {}
    for row in backends:
        for name in row["models"]:
            by_model.setdefault(name, []).append(
                {"name": row["name"], "healthy": row["healthy"], "health": row["health"]}
            )
    chains = view.snapshot.fallback_chains
    rows = []
    for name in sorted(by_model):
        members = by_model[name]
        rows.append(
            {
                "name": name,
                "backends": members,
                "usable": sum(1 for m in members if m["healthy"]),
                "total": len(members),
                "fallback": list(chains.get(name, ())),
            }
        )
    return rows


MODELS_SHOWN = 500  # names the Models section renders (2,000 at cluster size: 3.6 MB per refresh)


def models_shown(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """At most MODELS_SHOWN names: every one with a backend that is not
    usable first; those left out have every backend usable."""
    capped = shown(rows, MODELS_SHOWN, lambda m: m["usable"] < m["total"])
    return {"models": capped["rows"], "models_hidden": capped["hidden"], "models_total": capped["total"]}


def fallback_rows(view: RoutingView) -> list[dict[str, Any]]:
    known = view.snapshot.by_model
    return [
        {"model": model, "known": model in known, "chain": [{"name": m, "known": m in known} for m in chain]}
        for model, chain in sorted(view.snapshot.fallback_chains.items())
    ]


# Backends the Overview names when they are not healthy (the Backends page
# lists every one that needs attention).
DOWN_NAMED = 10


def node_facts(rt: Runtime, view: RoutingView, backends: list[dict[str, Any]]) -> dict[str, Any]:
    ready, checks = readiness()
    snap = view.snapshot
    down = [b for b in backends if b["health"] != "healthy"]
    return {
        "ready": ready,
        "checks": {str(k): bool(v) for k, v in checks.items()},
        "snapshot_source": view.source,
        "snapshot_error": view.error,
        "revision": snap.revision,
        "db_revision": current_revision(),
        "strategy": snap.strategy,
        "api_keys_mode": snap.api_keys_mode,
        "rate_limit_scope": snap.rate_limit_scope,
        "started_at": iso(rt.started_at),
        "uptime_s": round(time.time() - rt.started_at, 1),
        "last_error": rt.last_error,
        "waiting": rt.waiting,
        "backends_total": len(backends),
        "backends_healthy": len(backends) - len(down),
        "backends_down": [
            {"name": b["name"], "health": b["health"], "retry_s": b["breaker_retry_s"]} for b in down[:DOWN_NAMED]
        ],
        "backends_down_more": max(len(down) - DOWN_NAMED, 0),
        "in_flight": sum(b["in_flight"] for b in backends),
        "models_total": len(snap.by_model),
        "node": node_health(),
    }


def key_usage_day() -> list[key_usage.Usage]:
    """Per-key totals of the last 24 hour buckets (DB + Redis buffer, keys/usage.py)."""
    return key_usage.totals(key_usage.window_start(days=1))


LAST_USE_DAYS = 30  # the Keys page's "last use" looks this far back


# Keys the Keys section renders (and live.json sends every 2 s): 100,000
# keys were 74 MB of HTML and ~11 s of the web process per refresh.
KEYS_SHOWN = 500


def _used_first(qs: Any, refs: Iterable[str], limit: int) -> list[Any]:
    """At most `limit` keys of `qs` in its order: those named by `refs`
    (used in the last day, most requests first) first, then the rest. Two bounded reads,
    never the whole table."""
    pks, coordinator_ids = [], []
    for ref in list(refs)[:limit]:  # the usage rows come most requests first
        source, _, ident = ref.partition(":")
        if source == "coordinator":
            coordinator_ids.append(ident)
        elif ident.isdigit():
            pks.append(int(ident))
    chosen = {k.pk: k for k in qs.filter(Q(pk__in=pks) | Q(source="coordinator", key_id__in=coordinator_ids))[:limit]}
    for key in qs[:limit]:
        if len(chosen) >= limit:
            break
        chosen.setdefault(key.pk, key)
    order = {pk: i for i, pk in enumerate(qs.filter(pk__in=list(chosen)).values_list("pk", flat=True))}
    return sorted(chosen.values(), key=lambda k: order.get(k.pk, len(order)))


def key_rows(day: list[key_usage.Usage] | None = None) -> dict[str, Any]:
    """Masked fields only: never `key_hash`, never a plaintext. Usage columns:
    the last 24 hour buckets; last use within LAST_USE_DAYS. Past KEYS_SHOWN
    keys: the keys used in the last 24 hours first, then the rest in the
    table's order (``hidden``: how many were left out)."""
    now = timezone.now()
    by_ref = {u.key_ref: u for u in (key_usage_day() if day is None else day)}
    fields = (
        "pk",
        "name",
        "owner",
        "source",
        "key_id",
        "hint",
        "allowed_models",
        "expires_at",
        "rate_limit",
        "allowed_client_ips",
        "revoked_at",
        "disabled_at",
        "created_at",
    )
    qs = key_list().only(*fields)
    total = qs.count()
    keys = list(qs) if total <= KEYS_SHOWN else _used_first(qs, by_ref, KEYS_SHOWN)
    since = key_usage.window_start(days=LAST_USE_DAYS)
    last = key_usage.last_used(None if total <= KEYS_SHOWN else [record_id(k) for k in keys], since=since)
    rows = []
    for key in keys:
        ref = record_id(key)
        used = by_ref.get(ref)
        rows.append(
            {
                "id": key.pk,
                "ref": ref,
                "requests_24h": used.requests if used else 0,
                "tokens_24h": used.tokens if used else 0,
                "errors_24h": used.errors if used else 0,
                "last_used_at": iso(last.get(ref)),
                "name": key.name,
                "owner": key.owner,
                "source": key.source,
                # Coordinator keys belong to the AppProxy coordinator (ROUTER
                # mode): shown, never editable here or in the admin.
                "read_only": key.source == "coordinator",
                "hint": key.display_hint,
                "models": list(key.allowed_models or []),
                "client_ips": list(key.allowed_client_ips or []),
                "expires_at": iso(key.expires_at),
                "expired": key.expires_at is not None and key.expires_at <= now,
                "rate_limit": key.rate_limit,
                "revoked": key.revoked_at is not None,
                "disabled": key.disabled_at is not None,
                "revoked_at": iso(key.revoked_at),
                "created_at": iso(key.created_at),
            }
        )
    return {"rows": rows, "hidden": total - len(rows), "total": total}


TOP_KEYS = 10


def top_key_rows(day: list[key_usage.Usage] | None = None) -> dict[str, Any]:
    """The keys with the most requests in the last 24 hour buckets (including
    keys no longer in the table and the over-the-cap bucket)."""
    rows = key_usage_day() if day is None else day
    return {
        "days": 1,
        "keys": [
            {
                "ref": u.key_ref,
                "name": u.name,
                "source": u.source,
                "requests": u.requests,
                "errors": u.errors,
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "tokens": u.tokens,
                "last_used_at": iso(u.last_used_at),
            }
            for u in rows[:TOP_KEYS]
        ],
        "total_requests": sum(u.requests for u in rows),
        "total_tokens": sum(u.tokens for u in rows),
    }

"""Prometheus metrics of the ROUTER worker, across the node's processes.

The pulls happen in the tasks process and the events in the events process,
but ``/metrics`` is served by the web process (node.ops, prometheus_client's
default REGISTRY). So the writers put their counts into ONE Redis hash in the
node's namespace, and a custom collector in the web process reads that hash
(one HGETALL) at scrape time.

Writers (call them from the worker; each never raises — a Redis error is
swallowed and the count is lost, never the pull or the event):

- ``record_pull(result)`` — after every router-config pull; ``result`` is
  ``"200"`` (full snapshot), ``"304"`` (unchanged) or ``"error"`` (the pull
  or its apply failed). Anything else counts as ``"other"``.
- ``record_event(event, ok, apply_seconds, ack_seconds)`` — after handling
  one inbound router event. ``event`` is its name, full
  (``appproxy_router_model_updated_event``) or short (``model_updated``);
  ``ok`` whether it was applied; ``apply_seconds`` received → applied and
  ``ack_seconds`` received → acked (None when it did not happen, e.g. not
  acked: nothing is observed then).
- ``record_revision(rev)`` — whenever the node's stored revision changes:
  the new revision after an applied 200 pull, ``""`` when it is dropped
  (re-registration, failed apply). The hash outlives a node restart, so
  call it with ``""`` at registration too.

Series (only while ``appproxy_router`` is enabled; otherwise none):

- ``appproxy_router_pulls_total{result}`` — result ∈ 200, 304, error, other
  (the first three are always present, from 0);
- ``appproxy_router_events_total{event,result}`` — event ∈ model_updated,
  model_removed, key_updated, key_removed, other; result ∈ ok, error;
- ``appproxy_router_event_apply_seconds{event}`` and
  ``appproxy_router_event_ack_seconds{event}`` — histograms with the fixed
  ``BUCKETS`` (the coordinator waits up to 15 s for an ack);
- ``appproxy_router_revision_info{revision}`` — 1 for the current revision
  (from ``record_revision``; until it was ever called on this node, the
  WorkerState row of this node session). None while there is no revision.

Label values come from the fixed sets above (an unknown event is
``other``), so the cardinality is bounded: at most 4 + 10 + 2 × 5 histograms
of 15 buckets, plus one revision.

Whether ROUTER mode is on is read from the applied routing document
(``load_router_settings``, cached by its digest) in a one-thread pool: the
scrape runs in the web process's event loop, where Django forbids queries.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.conf import settings
from django.db import close_old_connections
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import REGISTRY, CollectorRegistry
from prometheus_client.utils import floatToGoString

from router.redis import sync_client

__all__ = [
    "BUCKETS",
    "EVENTS",
    "PULL_RESULTS",
    "RouterCollector",
    "metrics_key",
    "record_event",
    "record_pull",
    "record_revision",
    "register",
]

log = logging.getLogger(__name__)

PULL_RESULTS = ("200", "304", "error")
EVENTS = ("model_updated", "model_removed", "key_updated", "key_removed")
OTHER = "other"
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 30.0, 60.0)
HISTOGRAMS = {"apply": "appproxy_router_event_apply_seconds", "ack": "appproxy_router_event_ack_seconds"}
REVISION_MAX = 200  # characters of the revision label
SEP = "|"


def metrics_key() -> str:
    """The node's hash (the var-dir fingerprint keeps nodes sharing a namespace apart)."""
    return f"{settings.ROUTER_REDIS_PREFIX}appproxy:router:metrics:{settings.ROUTER_NODE_ID}"


def _event_label(event: str) -> str:
    name = str(event or "")
    if name.startswith("appproxy_router_"):
        name = name[len("appproxy_router_") :]
    if name.endswith("_event"):
        name = name[: -len("_event")]
    return name if name in EVENTS else OTHER


def _bucket(seconds: float) -> int:
    """Index of the first bucket whose bound holds ``seconds`` (len = +Inf)."""
    for i, bound in enumerate(BUCKETS):
        if seconds <= bound:
            return i
    return len(BUCKETS)


def _seconds(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(seconds):
        return None
    return max(seconds, 0.0)


def record_pull(result: str) -> None:
    """Count one router-config pull (``"200"``, ``"304"`` or ``"error"``)."""
    label = str(result) if str(result) in PULL_RESULTS else OTHER
    try:
        sync_client().hincrby(metrics_key(), f"pulls{SEP}{label}", 1)
    except Exception as exc:  # a metric never fails the pull
        log.debug("appproxy_router: pull not counted: %s", type(exc).__name__)


def record_event(event: str, ok: bool, apply_seconds: float | None, ack_seconds: float | None) -> None:
    """Count one router event and observe its apply and ack latencies."""
    label = _event_label(event)
    try:
        pipe = sync_client().pipeline(transaction=False)
        key = metrics_key()
        pipe.hincrby(key, f"events{SEP}{label}{SEP}{'ok' if ok else 'error'}", 1)
        for kind, value in (("apply", apply_seconds), ("ack", ack_seconds)):
            seconds = _seconds(value)
            if seconds is None:
                continue
            prefix = f"{kind}{SEP}{label}{SEP}"
            pipe.hincrby(key, f"{prefix}bucket{SEP}{_bucket(seconds)}", 1)
            pipe.hincrbyfloat(key, f"{prefix}sum", seconds)
        pipe.execute()
    except Exception as exc:  # a metric never fails the event
        log.debug("appproxy_router: event not counted: %s", type(exc).__name__)


def record_revision(rev: str) -> None:
    """The node's current applied revision (``""``: none)."""
    try:
        sync_client().hset(metrics_key(), "revision", str(rev or "")[:REVISION_MAX])
    except Exception as exc:
        log.debug("appproxy_router: revision not recorded: %s", type(exc).__name__)


# -- the collector (web process) ------------------------------------------------
STATE_TIMEOUT = 2.0
_pool = ThreadPoolExecutor(1, thread_name_prefix="appproxy-router-metrics")


def _router_state() -> dict[str, Any] | None:
    """{"authority", "revision" (this node session's WorkerState)} or None
    when ROUTER mode is off. Runs in ``_pool`` (its own DB connection)."""
    # Imported here: models exist only once Django's apps are loaded.
    from .. import node
    from ..models import WorkerState
    from .config import load_router_settings

    close_old_connections()
    try:
        s = load_router_settings()
        if s is None or not s.enabled:
            return None
        node_id = node.current()
        rows = WorkerState.objects.filter(authority=s.authority, node_id=node_id) if node_id else None
        revision = rows.values_list("revision", flat=True).first() if rows is not None else None
        return {"authority": s.authority, "revision": revision or ""}
    finally:
        close_old_connections()


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: str) -> int:
    try:
        return int(float(value))
    except ValueError:
        return 0


def _float(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        return 0.0


class RouterCollector:
    """Reads the node's hash at scrape time (one HGETALL)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last_state: dict[str, Any] | None = None

    def describe(self) -> list[Metric]:
        # Nothing at registration (it would query the DB in ready()).
        return []

    def _state(self) -> dict[str, Any] | None:
        try:
            state = _pool.submit(_router_state).result(timeout=STATE_TIMEOUT)
        except Exception as exc:  # keep the last known state through a DB hiccup
            log.warning("appproxy_router: metrics state unavailable: %s", type(exc).__name__)
            with self._lock:
                return self._last_state
        with self._lock:
            self._last_state = state
        return state

    def collect(self) -> Iterator[Metric]:
        state = self._state()
        if state is None:
            return
        try:
            raw = sync_client().hgetall(metrics_key())
        except Exception as exc:  # Redis down: the series are absent, /metrics still answers
            log.warning("appproxy_router: metrics not read: %s", type(exc).__name__)
            return
        fields = {_text(k): _text(v) for k, v in raw.items()}
        yield from self._families(fields, state)

    def _families(self, fields: dict[str, str], state: dict[str, Any]) -> Iterator[Metric]:
        pulls = CounterMetricFamily("appproxy_router_pulls", "Router-config pulls by result", labels=["result"])
        counts = {result: 0 for result in PULL_RESULTS}
        events = CounterMetricFamily(
            "appproxy_router_events", "Inbound router events by event and result", labels=["event", "result"]
        )
        event_counts: dict[tuple[str, str], int] = {}
        hist: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in HISTOGRAMS}
        for name, value in fields.items():
            parts = name.split(SEP)
            if parts[0] == "pulls" and len(parts) == 2:
                label = parts[1] if parts[1] in (*PULL_RESULTS, OTHER) else OTHER
                counts[label] = counts.get(label, 0) + _int(value)
            elif parts[0] == "events" and len(parts) == 3:
                event = parts[1] if parts[1] in (*EVENTS, OTHER) else OTHER
                result = "ok" if parts[2] == "ok" else "error"
                event_counts[(event, result)] = event_counts.get((event, result), 0) + _int(value)
            elif parts[0] in HISTOGRAMS and len(parts) >= 3:
                event = parts[1] if parts[1] in (*EVENTS, OTHER) else OTHER
                h = hist[parts[0]].setdefault(event, {"buckets": [0] * (len(BUCKETS) + 1), "sum": 0.0})
                if parts[2] == "bucket" and len(parts) == 4 and parts[3].isdigit() and int(parts[3]) <= len(BUCKETS):
                    h["buckets"][int(parts[3])] += _int(value)
                elif parts[2] == "sum":
                    h["sum"] += _float(value)
        for label, count in counts.items():
            pulls.add_metric([label], count)
        yield pulls
        for (event, result), count in sorted(event_counts.items()):
            events.add_metric([event, result], count)
        yield events
        for kind, metric_name in HISTOGRAMS.items():
            what = "received → applied" if kind == "apply" else "received → acked"
            family = HistogramMetricFamily(metric_name, f"Router event latency, {what}", labels=["event"])
            for event, h in sorted(hist[kind].items()):
                cumulative, buckets = 0, []
                for bound, n in zip((*BUCKETS, math.inf), h["buckets"], strict=True):
                    cumulative += n
                    buckets.append((floatToGoString(bound), cumulative))
                family.add_metric([event], buckets, h["sum"])
            yield family
        revision = fields["revision"] if "revision" in fields else state.get("revision", "")
        info = GaugeMetricFamily(
            "appproxy_router_revision_info", "The router-config revision this node applied", labels=["revision"]
        )
        if revision:
            info.add_metric([revision[:REVISION_MAX]], 1)
        yield info


COLLECTOR = RouterCollector()
_registered: set[int] = set()
_register_lock = threading.Lock()


def register(registry: CollectorRegistry = REGISTRY) -> None:
    """Add ``COLLECTOR`` to ``registry`` once (AppproxyConfig.ready)."""
    with _register_lock:
        if id(registry) in _registered:
            return
        registry.register(COLLECTOR)  # type: ignore[arg-type]
        _registered.add(id(registry))

"""Per-request observations (MIX-6): structured logs, metrics, recent list.

The hot path only appends to a bounded deque (`record`); a background task
drains it into the log, Prometheus and a capped Redis list the dashboard
reads. Observations never reach the client's response.

Cardinality: a metric label never takes a client-chosen value. The model
label is fixed at admission (`model_label`): a name the request's snapshot
publishes (capped at LABEL_MAX characters), `other` for any other name, and
`-` for a request refused before admission (bad body, no or wrong key, …),
so unauthenticated traffic only ever touches the fixed `-` series of its
status. The other labels are operator-defined (backend names, decisions,
paths) or a status code. The strings an observation stores (log line, Redis
list) are capped at FIELD_MAX characters and lists at LIST_MAX entries.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Any

import orjson
from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram

from . import timeseries
from . import usage as key_usage
from .redis import async_client

log = logging.getLogger("router.requests")

RECENT_MAX = 200
LABEL_MAX = 100  # characters of a model label
FIELD_MAX = 200  # characters of any string an observation keeps
LIST_MAX = 20  # entries of any list an observation keeps
OTHER = "other"  # the one bucket of model names the snapshot does not publish
UNADMITTED = "-"  # refused before admission: no client value reaches a label

REQUESTS = Counter(
    "router_requests_total", "Requests answered", ["model", "provider", "path", "status"]
)
LATENCY = Histogram(
    "router_request_seconds", "Total request latency", ["model", "path"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
TTFT = Histogram(
    "router_ttft_seconds", "Time to first streamed byte", ["model"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TOKENS = Counter("router_tokens_total", "Tokens reported by providers", ["model", "kind"])
RETRIES = Counter("router_retries_total", "Attempts beyond the first", ["model"])
FALLBACKS = Counter("router_fallbacks_total", "Requests answered through a fallback chain", ["model"])
QUEUE = Counter("router_queue_decisions_total", "Capacity queue decisions", ["decision"])
DROPPED = Counter("router_observations_dropped_total", "Observations dropped (queue full)")
IN_FLIGHT = Gauge("router_backend_in_flight", "Requests in flight per backend", ["backend"])

_queue: deque[dict] = deque(maxlen=10_000)


def recent_key() -> str:
    return settings.ROUTER_REDIS_PREFIX + "recent"


def model_label(name: object, known: bool) -> str:
    """The metric label of an admitted request's model: the published name
    (capped) or the `other` bucket."""
    if not known or not isinstance(name, str) or not name:
        return OTHER
    return name[:LABEL_MAX]


def _capped(value: object) -> object:
    if isinstance(value, str):
        return value if len(value) <= FIELD_MAX else value[: FIELD_MAX - 1] + "…"
    if isinstance(value, list):
        return [_capped(v) for v in value[:LIST_MAX]]
    return value


def bounded(obs: dict) -> dict:
    """The observation as stored: every string and list capped (a 10 KB model
    name or request id never reaches the log or the Redis list whole)."""
    return {k: _capped(v) for k, v in obs.items()}


def record(obs: dict) -> None:
    """O(1), never blocks, never raises."""
    if len(_queue) == _queue.maxlen:
        DROPPED.inc()
    obs["ts"] = time.time()
    _queue.append(obs)


def drain() -> list[dict]:
    items = list(_queue)
    _queue.clear()
    return items


# Each metric's labelled children, looked up once per label values (the
# labels are bounded, see above): `labels()` validates and locks on every call.
_children: dict[tuple, Any] = {}


def _child(metric: Any, *values: str) -> Any:
    key = (metric, values)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*values)
    return child


def _emit(obs: dict) -> None:
    model = obs.pop("label", None) or UNADMITTED
    status = str(obs.get("status", ""))
    path = obs.get("path") or "-"
    _child(REQUESTS, model, obs.get("provider") or "-", path, status).inc()
    if "latency_ms" in obs:
        _child(LATENCY, model, path).observe(obs["latency_ms"] / 1000.0)
    if obs.get("ttft_ms") is not None:
        _child(TTFT, model).observe(obs["ttft_ms"] / 1000.0)
    usage = obs.get("usage")
    if isinstance(usage, dict):
        for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int):
                _child(TOKENS, model, key).inc(value)
    attempts = obs.get("attempts") or 1
    if attempts > 1:
        _child(RETRIES, model).inc(attempts - 1)
    if obs.get("hops"):
        _child(FALLBACKS, model).inc()
    if obs.get("queue"):  # rejected before selection: no queue decision was made
        _child(QUEUE, obs["queue"]).inc()
    log.info("request", extra={"obs": obs})


# Observations emitted per turn of the event loop. A batch is a quarter
# second of traffic (hundreds at full load); emitted in one go it held the
# loop for several ms at a time, which every request in flight waited out.
SLICE = 32


async def run_drainer(interval: float = 0.25) -> None:
    """Background task of each web process."""
    while True:
        await asyncio.sleep(interval)
        items = drain()
        if not items:
            continue
        batch = timeseries.Aggregate()  # request aggregates for the plots
        stored = []
        for i, obs in enumerate(items):
            if i and not i % SLICE:
                await asyncio.sleep(0)  # let the requests in flight run
            try:
                obs = bounded(obs)
                batch.add(obs)  # before _emit pops "label"; never raises
                _emit(obs)
            except Exception:  # bookkeeping must never take the process down
                logging.getLogger(__name__).exception("observation not emitted")
            stored.append(obs)
        items = stored
        try:
            client = async_client()
            pipe = client.pipeline(transaction=False)
            key = recent_key()
            pipe.lpush(key, *[orjson.dumps(o, default=str) for o in items[-RECENT_MAX:]])
            pipe.ltrim(key, 0, RECENT_MAX - 1)
            key_usage.add(pipe, items)  # per-key usage buffer (router/usage.py)
            timeseries.add(pipe, batch)  # per-minute plot aggregates (router/timeseries.py)
            await pipe.execute()
        except Exception:
            pass

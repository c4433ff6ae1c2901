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
import atexit
import logging
import os
import time
from bisect import bisect_left
from collections import deque
from typing import TYPE_CHECKING, Any

import orjson
from django.conf import settings
from prometheus_client import Counter, Gauge, Histogram, multiprocess

from . import timeseries
from . import usage as key_usage
from .aio import check_cancelled
from .redis import async_client

if TYPE_CHECKING:
    from .core.health import StateTable

log = logging.getLogger("router.requests")

RECENT_MAX = 200
LABEL_MAX = 100  # characters of a model label
FIELD_MAX = 200  # characters of any string an observation keeps
LIST_MAX = 20  # entries of any list an observation keeps
OTHER = "other"  # the one bucket of model names the snapshot does not publish
UNADMITTED = "-"  # refused before admission: no client value reaches a label

# Backend names are operator-defined, but in ROUTER mode the coordinator
# defines them (thousands): a process gives its first MAX_BACKENDS distinct
# names a label of their own and counts every later one as `other`.
MAX_BACKENDS = int(os.environ.get("ROUTER_METRICS_MAX_BACKENDS", "200"))
KEY_SOURCES = frozenset({"operator", "coordinator"})  # else `-` (no key)

# Set (by runnode, for a web server of several workers) before this module
# is first imported: every process then writes its values to files there and
# /metrics sums them (node/ops.py). Gauges sum over the live processes.
MULTIPROC = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
if MULTIPROC:  # a worker that exits leaves its gauges out of the sums
    atexit.register(lambda: multiprocess.mark_process_dead(os.getpid()))

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
ITL_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)

REQUESTS = Counter(
    "router_requests_total", "Requests answered",
    ["model", "provider", "path", "status", "key_source"],
)
LATENCY = Histogram("router_request_seconds", "Total request latency", ["model", "path"], buckets=_SECONDS)
TTFT = Histogram(
    "router_ttft_seconds", "Time to the first streamed byte (request start to the upstream's first byte)",
    ["model", "backend"], buckets=_SECONDS[:11],
)
ITL = Histogram(
    "router_inter_token_seconds", "Gaps between successive streamed chunks handed to the client",
    ["model"], buckets=ITL_BUCKETS,
)
UPSTREAM = Histogram(
    "router_upstream_seconds", "Time from dispatch to the backend's first byte", ["backend"], buckets=_SECONDS
)
TOKENS = Counter("router_tokens_total", "Tokens reported by providers, by usage field", ["model", "kind"])
PROMPT_TOKENS = Counter(
    "router_prompt_tokens_total", "Prompt (input) tokens reported by providers", ["model", "backend", "key_source"]
)
COMPLETION_TOKENS = Counter(
    "router_completion_tokens_total", "Completion (output) tokens reported by providers",
    ["model", "backend", "key_source"],
)
CACHED_TOKENS = Counter(
    "router_cached_tokens_total",
    "Prompt tokens the backend reported serving from its prompt cache (usage cached_tokens)",
    ["model", "backend"],
)
RETRIES = Counter("router_retries_total", "Attempts beyond the first", ["model"])
FALLBACKS = Counter("router_fallbacks_total", "Requests answered through a fallback chain", ["model"])
QUEUE = Counter("router_queue_decisions_total", "Capacity queue decisions", ["decision"])
RATE_LIMITED = Counter(
    "router_rate_limited_total",
    "Requests refused 429 by the router's own limits: global, per_ip (rate_limits) or upstream_quota"
    " (every backend of the model at its quota)",
    ["limit"],
)
PREFIX = Counter(
    "router_prefix_decisions_total",
    "prefix_hash and cache_aware picks: the replica holding the prompt (cached), the key's own backend"
    " (owner) or the next one past its load bound (spill)",
    ["decision"],
)
DROPPED = Counter("router_observations_dropped_total", "Observations dropped (queue full)")
IN_FLIGHT = Gauge(
    "router_backend_in_flight", "Requests in flight per backend", ["backend"], multiprocess_mode="livesum"
)

INDEX_ENTRIES = Gauge(
    "router_prefix_index_entries", "Prompt blocks the cache_aware index remembers (every web process together)",
    multiprocess_mode="livesum",
)

CACHE = Counter(
    "router_response_cache_requests_total",
    "Requests of a cacheable endpoint by what the response cache did: hit, miss or bypass",
    ["model", "result"],
)
CACHE_BYTES = Counter(
    "router_response_cache_bytes_total",
    "Answer bytes the response cache served (hit) or stored (stored)",
    ["model", "result"],
)
CACHE_MEMORY_BYTES = Gauge(
    "router_response_cache_memory_bytes", "Bytes held by the response cache's memory tier (every web process together)",
    multiprocess_mode="livesum",
)

# Disaggregated prefill/decode (docs/disaggregation.md): the routing path of
# each request of a disaggregated model, and each phase's latency.
ROUTING_PATH = Counter(
    "router_routing_path_total",
    "Requests of a disaggregated model by routing path: prefill_then_decode, unified or fallback",
    ["model", "path"],
)
PREFILL = Histogram(
    "router_prefill_seconds", "Disaggregated requests: the prefill phase's time (vLLM: its whole answer)",
    ["model"], buckets=_SECONDS,
)
DECODE_TTFT = Histogram(
    "router_decode_ttft_seconds", "Disaggregated requests: the decode replica's time to its first byte",
    ["model"], buckets=_SECONDS,
)

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


_backends: set[str] = set()


def backend_label(name: object) -> str:
    """A backend's metric label: its name while fewer than MAX_BACKENDS
    names have one in this process, else `other`; `-` for none."""
    if not isinstance(name, str) or not name:
        return UNADMITTED
    name = name[:LABEL_MAX]
    if name in _backends:
        return name
    if len(_backends) < MAX_BACKENDS:
        _backends.add(name)
        return name
    return OTHER


class Gaps:
    """The gaps between a stream's chunks, counted into ITL's buckets as they
    happen (a clock read, a bisect and three adds per chunk, nothing
    allocated but the float) and observed by the drainer in one go."""

    __slots__ = ("buckets", "count", "last", "sum")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.last = 0.0
        self.buckets = [0] * (len(ITL_BUCKETS) + 1)  # the last one is +Inf

    def tick(self, now: float) -> None:
        last, self.last = self.last, now
        if last:
            gap = now - last
            self.count += 1
            self.sum += gap
            self.buckets[bisect_left(ITL_BUCKETS, gap)] += 1


def _observe_gaps(histogram: Any, gaps: Gaps) -> None:
    """Add a whole Gaps to a histogram child. prometheus_client has no batch
    observe; its child keeps one (non-cumulative) value per bucket and a sum,
    which this adds to as `observe()` would, one inc per non-empty bucket."""
    if not gaps.count:
        return
    buckets = histogram._buckets
    assert len(buckets) == len(gaps.buckets), "ITL buckets and Gaps disagree"
    for i, n in enumerate(gaps.buckets):
        if n:
            buckets[i].inc(n)
    histogram._sum.inc(gaps.sum)


def _emit(obs: dict) -> None:
    model = obs.pop("label", None) or UNADMITTED
    gaps = obs.pop("gaps", None)
    status = str(obs.get("status", ""))
    path = obs.get("path") or "-"
    backend = backend_label(obs.get("provider"))
    source = obs.get("key_source")
    source = source if source in KEY_SOURCES else UNADMITTED
    _child(REQUESTS, model, backend, path, status, source).inc()
    if "latency_ms" in obs:
        _child(LATENCY, model, path).observe(obs["latency_ms"] / 1000.0)
    if obs.get("ttft_ms") is not None:
        _child(TTFT, model, backend).observe(obs["ttft_ms"] / 1000.0)
    if obs.get("upstream_ms"):
        _child(UPSTREAM, backend).observe(obs["upstream_ms"] / 1000.0)
    if isinstance(gaps, Gaps):
        _observe_gaps(_child(ITL, model), gaps)
    usage = obs.get("usage")
    if isinstance(usage, dict):
        counted = {}
        for key in ("prompt_tokens", "completion_tokens", "input_tokens", "output_tokens"):
            value = usage.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                _child(TOKENS, model, key).inc(value)
                counted[key] = value
        # Chat and completions say prompt/completion, Responses input/output.
        prompt = counted.get("prompt_tokens", counted.get("input_tokens"))
        completion = counted.get("completion_tokens", counted.get("output_tokens"))
        if prompt is not None:
            _child(PROMPT_TOKENS, model, backend, source).inc(prompt)
        if completion is not None:
            _child(COMPLETION_TOKENS, model, backend, source).inc(completion)
        cached = cached_tokens(usage)
        if cached:
            _child(CACHED_TOKENS, model, backend).inc(cached)
    attempts = obs.get("attempts") or 1
    if attempts > 1:
        _child(RETRIES, model).inc(attempts - 1)
    if obs.get("hops"):
        _child(FALLBACKS, model).inc()
    if obs.get("queue"):  # rejected before selection: no queue decision was made
        _child(QUEUE, obs["queue"]).inc()
    if obs.get("prefix"):
        _child(PREFIX, obs["prefix"]).inc()
    limited = obs.get("rate_limited")
    if limited is not None:
        _child(RATE_LIMITED, limited).inc()
    routing = obs.get("routing_path")
    if routing is not None:
        _child(ROUTING_PATH, model, routing).inc()
        if obs.get("prefill_ms") is not None:
            _child(PREFILL, model).observe(obs["prefill_ms"] / 1000.0)
        if obs.get("decode_ttft_ms") is not None:
            _child(DECODE_TTFT, model).observe(obs["decode_ttft_ms"] / 1000.0)
    cache = obs.get("cache")
    if cache is not None:
        _child(CACHE, model, cache).inc()
        if obs.get("cache_bytes"):
            _child(CACHE_BYTES, model, "hit").inc(obs["cache_bytes"])
        if obs.get("cache_stored"):
            _child(CACHE_BYTES, model, "stored").inc(obs["cache_stored"])
    if log.isEnabledFor(logging.INFO):
        # `log.info` without its caller lookup (a walk up the stack per line,
        # ~1 % of the web process's CPU at INFO): the line is always this one.
        log.handle(log.makeRecord(log.name, logging.INFO, __file__, _EMIT_LINE, "request", (), None,
                                  func="_emit", extra={"obs": obs}))


_in_flight_labels: set[str] = set()


def cached_tokens(usage: object) -> int | None:
    """The prompt tokens a backend says it served from its prompt cache, or
    None when its usage does not say: OpenAI's and vLLM's
    `prompt_tokens_details.cached_tokens` (Responses: `input_tokens_details`),
    Anthropic's `cache_read_input_tokens`."""
    if not isinstance(usage, dict):
        return None
    for field in ("prompt_tokens_details", "input_tokens_details"):
        details = usage.get(field)
        if isinstance(details, dict):
            value = details.get("cached_tokens")
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                return value
    value = usage.get("cache_read_input_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


_EMIT_LINE = _emit.__code__.co_firstlineno  # what a record of the request line says of its origin


def refresh_in_flight(states: StateTable) -> None:
    """Set the in-flight gauge from the backends' states (capped labels; the
    `other` series sums the rest). A label no longer present reads 0 (the
    multiprocess files cannot drop a series; a single process rebuilds)."""
    totals: dict[str, int] = {}
    for name, state in states.items():
        label = backend_label(name)
        totals[label] = totals.get(label, 0) + state.in_flight
    if not MULTIPROC:
        IN_FLIGHT.clear()
        _in_flight_labels.clear()
    for label in _in_flight_labels - totals.keys():
        IN_FLIGHT.labels(label).set(0)
    for label, value in totals.items():
        IN_FLIGHT.labels(label).set(value)
    _in_flight_labels.update(totals)


IN_FLIGHT_EVERY_S = 1.0
_in_flight_at = 0.0


def _publish_in_flight(states: StateTable | None) -> None:
    """With several workers a scrape reaches one of them, so each process
    writes its own in-flight values (once a second) for the others' scrapes."""
    global _in_flight_at
    now = time.monotonic()
    if not MULTIPROC or states is None or now - _in_flight_at < IN_FLIGHT_EVERY_S:
        return
    _in_flight_at = now
    try:
        refresh_in_flight(states)
    except Exception:  # bookkeeping must never take the drainer down
        logging.getLogger(__name__).exception("in-flight gauges not published")


# Observations emitted per turn of the event loop. A batch is a quarter
# second of traffic (hundreds at full load); emitted in one go it held the
# loop for several ms at a time, which every request in flight waited out.
# 32 at a time still held it ~0.5 ms per turn at 16 connections, a step in
# the streams' p99 (docs/performance.md, fourteenth round); 8 costs one more
# turn of the loop per 8 requests, which is nothing beside them.
SLICE = 8


async def run_drainer(interval: float = 0.25, states: StateTable | None = None) -> None:
    """Background task of each web process (`states`: its backends' states,
    for the in-flight gauges of a multiprocess /metrics)."""
    while True:
        await asyncio.sleep(interval)
        _publish_in_flight(states)
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
        check_cancelled()


"""Background work of the router (Celery worker, scheduled by beat).

`probe_backends` runs every ~2 s (one round at a time per process: a tick
that finds the last one still running skips, so slow rounds never pile up
on the worker's threads) and probes each backend whose health
interval has elapsed (GET the URL its provider declares: `probe_url`),
applies the healthy/unhealthy thresholds, stores the verdicts in the Redis
hash `<prefix>health` and publishes the changes on that channel; every web
process applies them at once. Passive circuit breaking happens in the web
processes themselves.

A backend that is starting (503 or connection refused while it loads a
model: router.core.health's warm-up rule) is `warming_up`: its verdict is
"w" in the hash and "warming_up" on the channel (else "1"/"0", true/false),
it is out of rotation, and it is probed every `health.warmup_interval`
instead of `health.interval` until it answers or `health.warmup_timeout`
passes.

The same round reads each self-hosted OpenAI-compatible backend's own load
every `health.load_interval` (GET `health.load_path`, /metrics: vLLM,
SGLang, llama.cpp; router.core.loadreport) and publishes the reports on
`<prefix>load`, good for three intervals (three ticks, if longer). A
backend whose answer holds no load is asked again only after
NO_LOAD_RETRY_S; one whose prefix-cache counters went backwards restarted,
and is announced as such (its prompt cache is gone).
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson
from celery import shared_task

from router import cluster
from router.core.health import Probe, StateTable
from router.core.loadreport import MAX_TEXT, LoadReport, parse
from router.core.snapshot import EMPTY
from router.providers import listed_models, load_url, probe_headers, probe_url
from router.redis import sync_client
from router.runtime import health_key, load_key
from router.selectors import refresh_snapshot
from router.services import discovered_models_apply

log = logging.getLogger(__name__)

_states = StateTable()
_last_probe: dict[str, float] = {}
_last_load: dict[str, float] = {}  # when each backend's load was last read
_no_load_until: dict[str, float] = {}  # backends that publish none, until when we believe it
_cache_queries: dict[str, float] = {}  # each one's prefix-cache query counter, last seen
NO_LOAD_RETRY_S = 600.0
TICK_S = 2.0  # the beat schedule of router.probe_backends (config/celery.py)
# This process's view of the mirror, kept current from the change log;
# without the requests-only parts (the keyring): this process serves no request.
_snapshot = EMPTY
_round = threading.Lock()


# How much of a 503's body is searched for a loading message.
LOADING_SNIFF = 2048


def probe_once(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[Probe, bytes]:
    """What a probe found, and the body of a 200 (its model list)."""
    try:
        response = client.get(url, headers=headers)
    except httpx.ConnectError:
        return Probe.UNREACHABLE, b""
    except httpx.HTTPError:
        return Probe.FAILED, b""
    status = response.status_code
    if status < 500:
        return Probe.OK, response.content if status == 200 else b""
    if status == 503:
        # llama.cpp's server: {"error": {"message": "Loading model", ...}}
        loading = b"loading" in response.content[:LOADING_SNIFF].lower()
        return (Probe.LOADING if loading else Probe.UNAVAILABLE), b""
    return Probe.FAILED, b""


def verdict_of(state) -> str:
    """A state's verdict as the health hash stores it."""
    return "w" if state.warming else "1" if state.probe_healthy else "0"


_ON_CHANNEL = {"1": True, "0": False, "w": "warming_up"}


def read_load(client: httpx.Client, url: str, headers: dict[str, str]) -> LoadReport | None:
    """A backend's own load, or None when it publishes none (or did not answer)."""
    try:
        with client.stream("GET", url, headers=headers) as response:
            if response.status_code != 200:
                return None
            text = bytearray()
            for chunk in response.iter_bytes():
                text += chunk
                if len(text) > MAX_TEXT:  # not a load report we read
                    return None
    except httpx.HTTPError:
        return None
    return parse(bytes(text))


@shared_task(name="router.probe_backends", ignore_result=True, expires=5)
def probe_backends() -> dict[str, str]:
    # Four worker threads and a tick every 2 s: the first round after a start
    # compiles the mirror (~0.5 s at 20,000 backends, seconds when the threads
    # compiled side by side and took the interpreter from the YAML watcher).
    if not _round.acquire(blocking=False):
        return {}
    try:
        return _probe_round()
    finally:
        _round.release()


def _probe_round() -> dict[str, str]:
    global _snapshot
    snap = _snapshot = refresh_snapshot(_snapshot, serving=False)
    cluster.tasks_heartbeat(snap.revision)  # the cluster view's record of this process
    policy = snap.health
    if not snap.health_enabled or policy is None:
        return {}
    _states.set_policy(policy)
    _states.retain(snap.backends)
    now = time.monotonic()
    due = []
    for spec in snap.backends.values():
        target = probe_url(spec, policy.path)
        if target is None:
            continue
        state = _states.peek(spec.name)
        interval = state.probe_interval() if state is not None else policy.interval_s
        if now - _last_probe.get(spec.name, 0.0) < interval:
            continue
        due.append((spec.name, target, probe_headers(spec), spec.kind))
    loads = _due_loads(snap, policy, now)
    if not due and not loads:
        return {}
    with httpx.Client(timeout=policy.timeout_s) as client, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda d: (d[0], d[3], *probe_once(client, d[1], d[2])), due))
        reports = list(pool.map(lambda d: (d[0], read_load(client, d[1], d[2])), loads))
    if reports:
        _publish_loads(reports, policy.load_interval_s, now)
    verdicts: dict[str, str] = {}
    found: dict[str, list[str]] = {}
    for name, kind, result, body in results:
        if result is Probe.OK and body:
            names = listed_models(kind, body)
            if names:
                found[name] = names
        _last_probe[name] = now
        state = _states.get(name)
        state.on_probe(result, now)
        verdicts[name] = verdict_of(state)
    if found:
        discovered_models_apply(found)
    if not verdicts:
        return verdicts
    redis = sync_client()
    try:
        redis.hset(health_key(), mapping=verdicts)
        redis.publish(health_key(), orjson.dumps({k: _ON_CHANNEL[v] for k, v in verdicts.items()}))
    except Exception as exc:
        log.warning("health verdicts not published: %s", type(exc).__name__)
    return verdicts


def _due_loads(snap, policy, now: float) -> list[tuple[str, str, dict[str, str]]]:
    """The backends whose load is due a read: (name, url, headers)."""
    if not policy.load_path:
        return []
    if len(_last_load) > 2 * len(snap.backends) + 100:  # backends gone: forget what was kept of them
        for table in (_last_load, _no_load_until, _cache_queries):
            for name in [n for n in table if n not in snap.backends]:
                del table[name]
    due = []
    for spec in snap.backends.values():
        name = spec.name
        if now - _last_load.get(name, -1e18) < policy.load_interval_s or _no_load_until.get(name, 0.0) > now:
            continue
        target = load_url(spec, policy.load_path)
        if target is not None:
            due.append((name, target, probe_headers(spec)))
    return due


def _publish_loads(reports: list[tuple[str, LoadReport | None]], interval_s: float, now: float) -> None:
    """Announce what the backends reported (good for three intervals) and
    which of them restarted."""
    loads: dict[str, list] = {}
    restarted: list[str] = []
    for name, report in reports:
        _last_load[name] = now
        if report is None:
            _no_load_until[name] = now + NO_LOAD_RETRY_S
            _cache_queries.pop(name, None)
            continue
        _no_load_until.pop(name, None)
        loads[name] = [report.load, report.kv_usage]
        if report.cache_queries is not None:
            before = _cache_queries.get(name)
            if before is not None and report.cache_queries < before:
                restarted.append(name)
            _cache_queries[name] = report.cache_queries
    if not loads and not restarted:
        return
    # Good for three reads: a read comes at most every tick, however short the interval.
    message = {"ttl": max(interval_s, TICK_S) * 3, "load": loads, "restarted": restarted}
    try:
        sync_client().publish(load_key(), orjson.dumps(message))
    except Exception as exc:
        log.warning("load reports not published: %s", type(exc).__name__)

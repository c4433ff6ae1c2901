"""Background work of the router (Celery worker, scheduled by beat).

`probe_backends` runs every ~2 s (one round at a time per process: a tick
that finds the last one still running skips, so slow rounds never pile up
on the worker's threads) and probes each backend whose health
interval has elapsed (GET the URL its provider declares: `probe_url`),
applies the healthy/unhealthy thresholds, stores the verdicts in the Redis
hash `<prefix>health` and publishes the changes on that channel; every web
process applies them at once. Passive circuit breaking happens in the web
processes themselves.
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
from router.core.health import StateTable
from router.core.snapshot import EMPTY
from router.providers import listed_models, probe_headers, probe_url
from router.redis import sync_client
from router.runtime import health_key
from router.selectors import refresh_snapshot
from router.services import discovered_models_apply

log = logging.getLogger(__name__)

_states = StateTable()
_last_probe: dict[str, float] = {}
# This process's view of the mirror, kept current from the change log;
# without the requests-only parts (the keyring): this process serves no request.
_snapshot = EMPTY
_round = threading.Lock()


def probe_once(client: httpx.Client, url: str, headers: dict[str, str]) -> tuple[bool, bytes]:
    try:
        response = client.get(url, headers=headers)
    except httpx.HTTPError:
        return False, b""
    return response.status_code < 500, response.content if response.status_code == 200 else b""


@shared_task(name="router.probe_backends", ignore_result=True, expires=5)
def probe_backends() -> dict[str, bool]:
    # Four worker threads and a tick every 2 s: the first round after a start
    # compiles the mirror (~0.5 s at 20,000 backends, seconds when the threads
    # compiled side by side and took the interpreter from the YAML watcher).
    if not _round.acquire(blocking=False):
        return {}
    try:
        return _probe_round()
    finally:
        _round.release()


def _probe_round() -> dict[str, bool]:
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
        if target is None or now - _last_probe.get(spec.name, 0.0) < policy.interval_s:
            continue
        due.append((spec.name, target, probe_headers(spec), spec.kind))
    if not due:
        return {}
    with httpx.Client(timeout=policy.timeout_s) as client, ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda d: (d[0], d[3], *probe_once(client, d[1], d[2])), due))
    verdicts: dict[str, bool] = {}
    found: dict[str, list[str]] = {}
    for name, kind, ok, body in results:
        if ok and body:
            names = listed_models(kind, body)
            if names:
                found[name] = names
        _last_probe[name] = now
        state = _states.get(name)
        state.on_probe(ok, now)
        verdicts[name] = state.probe_healthy
    if found:
        discovered_models_apply(found)
    redis = sync_client()
    try:
        redis.hset(health_key(), mapping={k: "1" if v else "0" for k, v in verdicts.items()})
        redis.publish(health_key(), orjson.dumps(verdicts))
    except Exception as exc:
        log.warning("health verdicts not published: %s", type(exc).__name__)
    return verdicts

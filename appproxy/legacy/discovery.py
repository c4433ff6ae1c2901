"""Model discovery (seed §5.3, §11): the coordinator never names the model.

A circuit's model is the first id a replica lists on ``GET /v1/models``,
cached by endpoint_id (``wire.Circuit.model_key``): in the DB on the Circuit
row (the durable cache, shared by the tasks and events processes) and in this
process's memory (bounded TTL, so a redeployed endpoint is rediscovered).

Invariants:
- Only circuits with at least one usable route and no known model are asked;
  all of them concurrently, each replica with ``timeout`` seconds.
- An unreachable replica is not an error: the circuit stays registered
  without backends and the next reconcile asks again.
- Never called while holding a DB transaction.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor

import httpx
import orjson

from ..backends import route_url
from ..wire import Circuit
from .plan import weight_from_ratio

__all__ = ["discover_models", "forget", "forget_all", "remember"]

log = logging.getLogger(__name__)

CACHE_TTL = 300.0
_lock = threading.Lock()
_memory: dict[str, tuple[str, float]] = {}  # model_key → (model, stored at)


def remember(key: str, model: str, now: float | None = None) -> None:
    with _lock:
        _memory[key] = (model, time.monotonic() if now is None else now)


def forget(keys: Iterable[str]) -> None:
    with _lock:
        for key in keys:
            _memory.pop(key, None)


def forget_all() -> None:
    """Empty this process's cache (the legacy worker is not the active mode)."""
    with _lock:
        _memory.clear()


def _cached(key: str, now: float) -> str | None:
    with _lock:
        hit = _memory.get(key)
        if hit is None:
            return None
        if now - hit[1] > CACHE_TTL:
            del _memory[key]
            return None
        return hit[0]


def first_model(body: bytes) -> str | None:
    """The first model id of an OpenAI ``/v1/models`` answer."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        return None
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]:
            return item["id"]
    return None


def _ask(client: httpx.Client, urls: list[str]) -> str | None:
    for url in urls:
        try:
            response = client.get(url)
        except httpx.HTTPError as exc:
            log.info("appproxy: model discovery at %s failed (%s)", url, type(exc).__name__)
            continue
        if response.status_code == 200:
            model = first_model(response.content)
            if model:
                return model
        log.info("appproxy: model discovery at %s got %s", url, response.status_code)
    return None


def discover_models(
    circuits: Iterable[Circuit],
    known: Mapping[str, str],
    *,
    timeout: float = 2.0,
) -> dict[str, str]:
    """model_key → model for the given circuits: known, cached or discovered."""
    now = time.monotonic()
    out: dict[str, str] = {}
    wanted: dict[str, list[str]] = {}
    for circuit in circuits:
        if not circuit.is_inference:
            continue
        key = circuit.model_key
        model = known.get(key) or _cached(key, now)
        if model:
            out[key] = model
            continue
        urls = [
            route_url(r) + "/v1/models" for r in circuit.route_info if weight_from_ratio(r.traffic_ratio) is not None
        ]
        targets = wanted.setdefault(key, []) if urls else []
        for url in urls:
            if url not in targets:
                targets.append(url)
    if not wanted:
        return out
    with (
        httpx.Client(timeout=httpx.Timeout(timeout), trust_env=False) as client,
        ThreadPoolExecutor(min(8, len(wanted)), thread_name_prefix="appproxy-discovery") as pool,
    ):
        answers = dict(zip(wanted, pool.map(lambda urls: _ask(client, urls), wanted.values()), strict=True))
    for key, model in answers.items():
        if model:
            out[key] = model
            remember(key, model)
            log.info("appproxy: discovered model", extra={"model_key": key, "model": model})
    return out

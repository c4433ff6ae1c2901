"""The Overview's traffic figures: requests per minute, the error rate and
latency of the last few minutes, over every web process and node sharing the
Redis prefix.

They are read from the same per-minute aggregates as the Charts page's
plots (laid out by router/timeseries.py, read with node/timeseries.py): two
pipelined reads of WINDOW_MINUTES hashes each, summed over nodes, and the
latencies' observed extremes, which keep a percentile within what was
really seen (as on the plots). While this process's snapshot has the
response cache on, a third read of the same minutes per model adds its hit
ratio (hits / (hits + misses), as the Charts page plots it). The
current minute is still filling, so a rate divides by the seconds the window
has really covered, not by whole minutes. Redis being down is reported in the
section, never raised.
"""

from __future__ import annotations

import time
from typing import Any

from redis.exceptions import RedisError

from node.timeseries import Span, hit_ratio, percentile, read_buckets
from router.timeseries import CACHE_HIT_BYTES, MINUTE, STATUS_CODES, Counts

WINDOW_MINUTES = 5
CACHE_MODELS = 5  # models named beside the cache's hit ratio, by lookups


def _sum(rows: list[dict[str, Counts]]) -> Counts:
    total: Counts = {}
    for row in rows:
        for counts in row.values():
            for code, n in counts.items():
                total[code] = total.get(code, 0) + n
    return total


def _span(rows: list[dict[str, Counts]], extremes: list[dict[str, Span]]) -> Span | None:
    """(min, max) of every latency in the window; None when a value with
    samples recorded no extremes (written before they existed)."""
    low, high, seen = float("inf"), float("-inf"), False
    for row, spans in zip(rows, extremes, strict=True):
        for value, counts in row.items():
            if not any(counts.values()):
                continue
            if value not in spans:
                return None
            low, high, seen = min(low, spans[value][0]), max(high, spans[value][1]), True
    return (low, high) if seen else None


def _hist(counts: Counts, prefix: str) -> dict[int, int]:
    return {int(c[1:]): n for c, n in counts.items() if c[0] == prefix and c[1:].isdigit()}


def _rounded(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def figures(counts: Counts, latency: Counts, seconds: float, span: Span | None = None) -> dict[str, Any]:
    """The figures of one window's summed counters, `seconds` long, its
    latencies observed within `span` (if known)."""
    requests = sum(counts.get(c, 0) for c in STATUS_CODES)
    errors_4xx, errors_5xx = counts.get("s4", 0), counts.get("s5", 0)
    hist = _hist(latency, "l")
    per_min = 60.0 / max(seconds, 1.0)
    return {
        "requests": requests,
        "requests_per_min": _rounded(requests * per_min),
        "errors_4xx": errors_4xx,
        "errors_5xx": errors_5xx,
        "no_status": counts.get("s0", 0),  # ended before a status was sent (a stream cut, a client gone)
        # As the Charts page's errors plot counts them: 4xx and 5xx answers.
        "error_rate_pct": _rounded(100.0 * (errors_4xx + errors_5xx) / requests) if requests else None,
        "p50_ms": _rounded(percentile(hist, 0.50, span)),
        "p95_ms": _rounded(percentile(hist, 0.95, span)),
        "tokens_out_per_min": _rounded(counts.get("to", 0) * per_min),
    }


def cache_figures(by_model: list[dict[str, Counts]]) -> dict[str, Any]:
    """The response cache's figures of one window, from its per-model rows:
    totals and the CACHE_MODELS models with the most lookups."""
    models: dict[str, Counts] = {}
    for row in by_model:
        for model, counts in row.items():
            into = models.setdefault(model, {})
            for code, n in counts.items():
                into[code] = into.get(code, 0) + n
    total = _sum([models])
    ranked = sorted(
        ((m, c.get("ch", 0) + c.get("cm", 0)) for m, c in models.items()),
        key=lambda item: (-item[1], item[0]),
    )
    return {
        "hit_ratio_pct": _rounded(hit_ratio(total)),
        "hits": total.get("ch", 0),
        "misses": total.get("cm", 0),
        "bypasses": total.get("cb", 0),
        "hit_bytes": total.get(CACHE_HIT_BYTES, 0),
        "models": [
            {"model": m, "lookups": n, "hit_ratio_pct": _rounded(hit_ratio(models[m]))}
            for m, n in ranked[:CACHE_MODELS] if n
        ],
    }


def traffic(*, cache: bool = False, client: Any = None, now: float | None = None) -> dict[str, Any]:
    """{"minutes", "error"?, figures…, "cache"} of the last WINDOW_MINUTES
    minutes; `cache` (the response cache is on): its figures, else None."""
    now = time.time() if now is None else now
    last = int(now // MINUTE) * MINUTE
    buckets = [last - i * MINUTE for i in range(WINDOW_MINUTES)]
    seconds = (WINDOW_MINUTES - 1) * MINUTE + (now - last)
    out: dict[str, Any] = {"minutes": WINDOW_MINUTES, "error": None, "cache": None}
    try:
        if client is None:
            from router.redis import sync_client  # looked up per call: the process's client as it is now

            client = sync_client()
        counts, _ = read_buckets(client, MINUTE, buckets, "node", "n")
        latency, extremes = read_buckets(client, MINUTE, buckets, "node", "l")
        by_model = read_buckets(client, MINUTE, buckets, "model", "n")[0] if cache else None
    except RedisError as exc:
        return {**out, "error": f"Redis unavailable: {type(exc).__name__}: {exc}"}
    if by_model is not None:
        out["cache"] = cache_figures(by_model)
    return {**out, **figures(_sum(counts), _sum(latency), seconds, _span(latency, extremes))}

"""The dashboard's plots read from the request aggregates the observation
drainers write (router/timeseries.py: the layout of the Redis hashes).

`series(metric, window, by, filter)` reads the buckets of one window (one
pipelined HGETALL per bucket) and shapes them for a plot: totals or one
series per value, the top TOP by volume and the rest summed into `other`.
Nothing here writes.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from router.timeseries import DIMS, EDGES_MS, MINUTE, OTHER, ROLLUP, STATUS_CODES, Counts, key

WINDOWS = {"15m": (MINUTE, 15), "1h": (MINUTE, 60), "24h": (ROLLUP, 288)}
TOP = 7  # series drawn; the rest are summed into `other`

METRICS = {
    "requests": "req/s",
    "errors": "req/s",
    "latency": "ms",
    "ttft": "ms",
    "tokens": "tokens/s",
    "speed": "tokens/s",
}
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def percentile(hist: Mapping[int, int], q: float) -> float | None:
    """The q-quantile of a binned sample, interpolated linearly in its bin
    (the overflow bin reports its lower edge)."""
    total = sum(hist.values())
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i in sorted(hist):
        n = hist[i]
        if n <= 0:
            continue
        if seen + n >= rank:
            lo = EDGES_MS[i - 1] if i > 0 else 0.0
            if i >= len(EDGES_MS):
                return float(lo)
            return lo + (EDGES_MS[i] - lo) * (rank - seen) / n
        seen += n
    return float(EDGES_MS[-1])


FAMILY = {"requests": "n", "errors": "n", "tokens": "n", "speed": "n", "latency": "l", "ttft": "f"}


def read_buckets(client: Any, res: int, buckets: list[int], dim: str, family: str) -> list[dict[str, Counts]]:
    """Per bucket: {value: {code: count}} (one pipelined HGETALL per bucket)."""
    pipe = client.pipeline(transaction=False)
    for bucket in buckets:
        pipe.hgetall(key(res, bucket, dim, family))
    out: list[dict[str, Counts]] = []
    for raw in pipe.execute():
        values: dict[str, Counts] = defaultdict(dict)
        for field, n in raw.items():
            value, _, code = field.decode().rpartition("|")
            values[value][code] = int(n)
        out.append(values)
    return out


def _weight(metric: str, counts: Counts) -> int:
    if metric in ("latency", "ttft"):
        return sum(counts.values())  # the histogram's samples
    if metric in ("tokens", "speed"):
        return counts.get("to", 0)
    if metric == "errors":
        return counts.get("s4", 0) + counts.get("s5", 0)
    return sum(counts.get(c, 0) for c in STATUS_CODES)


def _merge(into: Counts, counts: Counts) -> None:
    for code, n in counts.items():
        into[code] = into.get(code, 0) + n


def _hist(counts: Counts, prefix: str) -> dict[int, int]:
    return {int(c[1:]): n for c, n in counts.items() if c[0] == prefix and c[1:].isdigit()}


def _points(metric: str, counts: Counts, res: int, split: bool) -> dict[str, float | None]:
    """The plotted values of one group in one bucket, by series suffix: the
    totals split by status class / percentile, or one value per group."""
    if metric == "requests":
        return {"": _weight(metric, counts) / res}
    if metric == "errors":
        if not split:
            return {"": _weight(metric, counts) / res}
        return {"4xx": counts.get("s4", 0) / res, "5xx": counts.get("s5", 0) / res}
    if metric == "tokens":
        return {"": counts.get("to", 0) / res}
    if metric == "speed":  # output tokens per second spent producing them
        spent = counts.get("tm", 0)
        return {"": counts.get("to", 0) * 1000 / spent if spent else None}
    hist = _hist(counts, "l" if metric == "latency" else "f")
    if not split:
        return {"p95": percentile(hist, 0.95)}
    return {name: percentile(hist, q) for name, q in PERCENTILES}


def series(
    metric: str,
    window: str = "1h",
    by: str | None = None,
    filter: Mapping[str, str] | None = None,
    *,
    client: Any = None,
    now: float | None = None,
    top: int = TOP,
) -> dict[str, Any]:
    """{"t", "series": [{"label", "values", "total"}], "unit", "step"} for the
    dashboard's plots. Without `by`: one series of the totals (errors split
    4xx/5xx, latency and TTFT as p50/p95/p99); with `by`: one series per
    value (errors 4xx+5xx, latency and TTFT p95), the top `top` by volume
    with the rest summed into `other`. `filter` selects one value of one
    dimension; with `by` it must name the same dimension (the hashes keep
    each dimension apart).
    `total` is the series' count over the window for rates (requests,
    errors, tokens out), else null."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    if window not in WINDOWS:
        raise ValueError(f"unknown window {window!r}")
    if by is not None and by not in DIMS:
        raise ValueError(f"unknown breakdown {by!r}")
    wanted = dict(filter or {})
    if len(wanted) > 1 or any(d not in DIMS for d in wanted) or (wanted and by and by not in wanted):
        raise ValueError("filter names one dimension, the breakdown's if there is one")
    res, n = WINDOWS[window]
    if client is None:
        from router.redis import sync_client  # looked up per call: the process's client as it is now

        client = sync_client()
    last = int((now if now is not None else time.time()) // res) * res
    ts = [last - (n - 1 - i) * res for i in range(n)]
    dim = by or next(iter(wanted), "node")
    rows = read_buckets(client, res, ts, dim, FAMILY[metric])
    if wanted:
        rows = [{v: c for v, c in row.items() if v == wanted[dim]} for row in rows]

    # Groups: one per value (top by volume, the rest summed into `other`) or all.
    groups: list[str] = [""]
    if by is not None:
        volume: dict[str, int] = defaultdict(int)
        for row in rows:
            for value, counts in row.items():
                volume[value] += _weight(metric, counts)
        ranked = sorted((v for v in volume if volume[v] > 0 and v != OTHER), key=lambda v: (-volume[v], v))
        overflow = volume.get(OTHER, 0) > 0
        keep = ranked if len(ranked) + overflow <= top else ranked[: top - 1]
        groups = [*keep, OTHER] if overflow or len(keep) < len(ranked) else keep  # `other` drawn last
    columns: dict[str, list[float | None]] = {}
    for i, row in enumerate(rows):
        merged: dict[str, Counts] = {g: {} for g in groups}
        for value, counts in row.items():
            group = "" if by is None else (value if value in merged else OTHER)
            if group in merged:
                _merge(merged[group], counts)
        for group, counts in merged.items():
            for suffix, point in _points(metric, counts, res, by is None).items():
                label = " ".join(p for p in (group, suffix) if p) or metric
                columns.setdefault(label, [None] * len(rows))[i] = point
    out = []
    for label, values in columns.items():
        rate = metric in ("requests", "errors", "tokens")
        if rate:
            values = [0.0 if v is None else v for v in values]
        total = round(sum(values) * res) if rate else None  # type: ignore[arg-type]
        out.append({"label": label, "values": [_rounded(v) for v in values], "total": total})
    return {"t": ts, "series": out, "unit": METRICS[metric], "step": res}


def _rounded(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, 4)

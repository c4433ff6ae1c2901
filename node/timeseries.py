"""The dashboard's plots read from the request aggregates the observation
drainers write (router/timeseries.py: the layout of the Redis hashes).

`series(metric, window, by, filter)` reads the buckets of one window (one
pipelined HGETALL per bucket, plus the bucket's observed min and max for a
latency or TTFT plot) and shapes them for a plot: totals or one series per value,
the top TOP by volume and the rest summed into `other`. Nothing here writes.

Invariant: a percentile lies within [min, max] of what its group observed
in its bucket whenever every value of the group recorded its extremes
(buckets written before the extremes existed are interpolated in their bin
as before).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from router.timeseries import DIMS, EDGES_MS, MAX, MIN, MINUTE, OTHER, ROLLUP, STATUS_CODES, UNKNOWN, Counts, key

WINDOWS = {"15m": (MINUTE, 15), "1h": (MINUTE, 60), "24h": (ROLLUP, 288)}
TOP = 7  # series drawn; the rest are summed into `other`

METRICS = {
    "requests": "req/s",
    "errors": "req/s",
    "latency": "ms",
    "ttft": "ms",
    "tokens": "tokens/s",
    "speed": "tokens/s",
    "cache": "%",  # the response cache's hit ratio: hits / (hits + misses)
}
PERCENTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))
# What a series of the values written as UNKNOWN is called: no model label
# reaches a request refused before admission, no backend one not routed.
UNKNOWN_LABELS = {"model": "refused before routing", "backend": "not routed"}

Span = tuple[float, float]  # observed (min ms, max ms)


def percentile(hist: Mapping[int, int], q: float, span: Span | None = None) -> float | None:
    """The q-quantile of a binned sample, interpolated linearly in its bin.
    With the sample's observed `span` the bin is first narrowed to it, so
    the answer never leaves [min, max]; without it the overflow bin reports
    its lower edge."""
    total = sum(n for n in hist.values() if n > 0)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    found = float(EDGES_MS[-1])
    for i in sorted(hist):
        n = hist[i]
        if n <= 0:
            continue
        if seen + n >= rank:
            lo = float(EDGES_MS[i - 1]) if i > 0 else 0.0
            hi = float(EDGES_MS[i]) if i < len(EDGES_MS) else (span[1] if span else lo)
            if span is not None:
                lo, hi = max(lo, span[0]), min(hi, span[1])
                hi = max(hi, lo)  # extremes from another bin (a mixed old/new bucket)
            found = lo + (hi - lo) * (rank - seen) / n
            break
        seen += n
    if span is not None:
        found = min(max(found, span[0]), span[1])
    return found


FAMILY = {"requests": "n", "errors": "n", "tokens": "n", "speed": "n", "cache": "n", "latency": "l", "ttft": "f"}


def hit_ratio(counts: Counts) -> float | None:
    """The response cache's hit ratio in %: hits over the requests it could
    have answered (hits + misses; a bypass was never cacheable), None when
    there were none."""
    hits, lookups = counts.get("ch", 0), counts.get("ch", 0) + counts.get("cm", 0)
    return 100.0 * hits / lookups if lookups else None


def read_buckets(
    client: Any, res: int, buckets: list[int], dim: str, family: str
) -> tuple[list[dict[str, Counts]], list[dict[str, Span]]]:
    """Per bucket: {value: {code: count}}, and for a histogram family
    {value: (min ms, max ms)} of the values that recorded their extremes
    (one round trip: an HGETALL per bucket, two ZRANGEs more for a histogram)."""
    spans = family in ("l", "f")
    pipe = client.pipeline(transaction=False)
    for bucket in buckets:
        pipe.hgetall(key(res, bucket, dim, family))
        if spans:
            pipe.zrange(key(res, bucket, dim, MIN), 0, -1, withscores=True)
            pipe.zrange(key(res, bucket, dim, MAX), 0, -1, withscores=True)
    replies = pipe.execute()
    step = 3 if spans else 1
    rows: list[dict[str, Counts]] = []
    extremes: list[dict[str, Span]] = []
    for at in range(0, len(replies), step):
        values: dict[str, Counts] = defaultdict(dict)
        for field, n in replies[at].items():
            value, _, code = field.decode().rpartition("|")
            values[value][code] = int(n)
        rows.append(values)
        found: dict[str, Span] = {}
        if spans:
            lows = {m.decode(): s for m, s in replies[at + 1]}
            for member, high in replies[at + 2]:
                value, _, of = member.decode().rpartition("|")
                if of == family:
                    found[value] = (lows.get(member.decode(), 0.0), high)
        extremes.append(found)
    return rows, extremes


def _weight(metric: str, counts: Counts) -> int:
    if metric in ("latency", "ttft"):
        return sum(counts.values())  # the histogram's samples (its hash holds nothing else)
    if metric in ("tokens", "speed"):
        return counts.get("to", 0)
    if metric == "errors":
        return counts.get("s4", 0) + counts.get("s5", 0)
    if metric == "cache":
        return counts.get("ch", 0) + counts.get("cm", 0)
    return sum(counts.get(c, 0) for c in STATUS_CODES)


def _merge(into: Counts, counts: Counts) -> None:
    for code, n in counts.items():
        into[code] = into.get(code, 0) + n


def _hist(counts: Counts, prefix: str) -> dict[int, int]:
    return {int(c[1:]): n for c, n in counts.items() if c[0] == prefix and c[1:].isdigit()}


_NONE_YET: Any = object()  # a group's span before its first value


def _widen(had: Span | None, span: Span | None) -> Span | None:
    """A group's span over one more value; unknown (None) once any of its
    values has samples but no recorded extremes."""
    if had is _NONE_YET:
        return span
    if had is None or span is None:
        return None
    return (min(had[0], span[0]), max(had[1], span[1]))


def _points(metric: str, counts: Counts, res: int, split: bool, span: Span | None = None) -> dict[str, float | None]:
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
    if metric == "cache":
        return {"hit ratio" if split else "": hit_ratio(counts)}
    hist = _hist(counts, "l" if metric == "latency" else "f")
    if not split:
        return {"p95": percentile(hist, 0.95, span)}
    return {name: percentile(hist, q, span) for name, q in PERCENTILES}


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
    """{"t", "series": [{"label", "key", "values", "total"}], "unit", "step"} for the
    dashboard's plots. Without `by`: one series of the totals (errors split
    4xx/5xx, latency and TTFT as p50/p95/p99); with `by`: one series per
    value (errors 4xx+5xx, latency and TTFT p95), the top `top` by volume
    with the rest summed into `other`. `filter` selects one value of one
    dimension; with `by` it must name the same dimension (the hashes keep
    each dimension apart). `cache` is the response cache's hit ratio (%),
    one series in both shapes, its values ranked by hits + misses.
    `key` is the series' value (the stored one: `-` for UNKNOWN, which its
    label spells out) with a breakdown, else null: what a plot colours by,
    so one backend has one colour on every plot.
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
    rows, spans = read_buckets(client, res, ts, dim, FAMILY[metric])
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
    keys: dict[str, str | None] = {}
    for i, row in enumerate(rows):
        merged: dict[str, Counts] = {g: {} for g in groups}
        widest: dict[str, Span | None] = {}
        for value, counts in row.items():
            group = "" if by is None else (value if value in merged else OTHER)
            if group in merged:
                _merge(merged[group], counts)
                widest[group] = _widen(widest.get(group, _NONE_YET), spans[i].get(value))
        for group, counts in merged.items():
            span = widest.get(group)
            for suffix, point in _points(metric, counts, res, by is None, span).items():
                name = UNKNOWN_LABELS.get(dim, group) if group == UNKNOWN else group
                label = " ".join(p for p in (name, suffix) if p) or metric
                columns.setdefault(label, [None] * len(rows))[i] = point
                keys[label] = group or None
    out = []
    for label, values in columns.items():
        rate = metric in ("requests", "errors", "tokens")
        if rate:
            values = [0.0 if v is None else v for v in values]
        total = round(sum(values) * res) if rate else None  # type: ignore[arg-type]
        out.append({"label": label, "key": keys[label], "values": [_rounded(v) for v in values], "total": total})
    return {"t": ts, "series": out, "unit": METRICS[metric], "step": res}


def _rounded(value: float | None) -> float | None:
    if value is None or math.isnan(value):
        return None
    return round(value, 4)

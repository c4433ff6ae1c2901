"""Time-bucketed request aggregates for the dashboard's plots: their layout
and their writer (node/timeseries.py reads them).

Written by the observation drainer, never by a request: an `Aggregate`
folds one drained batch into integer counters in Python, and `add(pipe,
aggregate)` queues one HINCRBY per (hash, field) that the batch touched plus
one EXPIRE per hash on the drainer's existing pipeline (same round trip).

Layout: one Redis hash per (resolution, bucket start, dimension, family)

    <prefix>ts:<res>:<bucket epoch s>:<dim>:<family>   field "<value>|<code>"

`res` is 60 s (kept MINUTE_TTL) and 300 s (kept ROLLUP_TTL, ~25 h); `dim`
is `node`, `model` or `backend` (the totals are the sum over nodes). Family
`n`: `s2`…`s5`/`s0` requests by status class, `ti`/`to` tokens in/out,
`tm` milliseconds spent producing the output tokens, and the response
cache's verdicts (router/respcache/): `ch` hits, `cm` misses, `cb`
bypasses and `cv` the bytes the hits answered; family `l` / `f`:
latency / TTFT histogram bins `l<i>` / `f<i>` over the fixed EDGES_MS. A
plot reads one family of one dimension (the families are apart so a rate
plot never parses histogram fields).

Beside the histograms, the observed extremes, because a 1-2-5 bin is wide
(a p99 interpolated in the 2–5 s bin can lie far above the slowest request):

    <prefix>ts:<res>:<bucket epoch s>:<dim>:max   sorted set, member "<value>|l" or "<value>|f", score ms
    <prefix>ts:<res>:<bucket epoch s>:<dim>:min   the same, the smallest

written with ZADD GT / ZADD LT, so every process and node merges into the
bucket's true max / min without a read (one ZADD per hash per batch, all
its values in it). The reader clamps each percentile to [min, max]; a bucket
written before the extremes existed has none and is read as before.

Cardinality: model values are the bounded metric label (router.observe),
backend values operator names, node values node ids; on top of that each
process admits at most VALUE_CAP distinct values per dimension per
5-minute bucket and counts the rest as `other`, so a hash holds at most
VALUE_CAP × writers values × a fixed set of codes, and every key expires.
"""

from __future__ import annotations

import bisect
import logging
import math
import time
from collections.abc import Iterable, Mapping
from typing import Any

from django.conf import settings

log = logging.getLogger(__name__)

DIMS = ("node", "model", "backend")
MINUTE, ROLLUP = 60, 300
MINUTE_TTL = 3 * 3600  # the 15 min and 1 h windows read minutes
ROLLUP_TTL = 25 * 3600  # the 24 h window reads 5-minute rollups
RESOLUTIONS = ((MINUTE, MINUTE_TTL), (ROLLUP, ROLLUP_TTL))
VALUE_CAP = 20  # distinct values per dimension, 5-minute bucket and process
VALUE_MAX = 100  # characters of a value
OTHER = "other"
UNKNOWN = "-"

# Histogram bin upper edges (ms), a 1-2-5 ladder; bin i holds EDGES[i-1] < x
# <= EDGES[i], the last bin everything above 200 s. Percentiles interpolate
# inside a bin, so they are exact to the bin's width.
EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000)
STATUS_CODES = ("s2", "s3", "s4", "s5", "s0")
# The response cache's verdict (an observation's `cache`) → its code in family
# `n`; `cv` adds a hit's bytes. Four fixed codes: no new key, no new dimension.
CACHE_CODES = {"hit": "ch", "miss": "cm", "bypass": "cb"}
CACHE_HIT_BYTES = "cv"

SPANS = (("l", "latency_ms"), ("f", "ttft_ms"))  # histogram family, observation field
MAX, MIN = "max", "min"  # the extremes' families: sorted sets, not hashes

Counts = dict[str, int]  # "<value>|<code>" → increment
# (res, bucket, dim, family) → counts; for MAX / MIN: "<value>|<l|f>" → ms
Batch = dict[tuple[int, int, str, str], dict[str, float]]

# Values admitted per (prefix, 5-minute bucket, dim) by this process.
_admitted: dict[tuple[str, int, str], set[str]] = {}


def key(res: int, bucket: int, dim: str, family: str) -> str:
    return f"{settings.ROUTER_REDIS_PREFIX}ts:{res}:{bucket}:{dim}:{family}"


def bin_of(ms: float) -> int:
    return bisect.bisect_left(EDGES_MS, ms)


def status_code(status: object) -> str:
    if isinstance(status, int) and 200 <= status < 600:
        return f"s{status // 100}"
    return "s0"


def _admit(bucket: int, dim: str, value: object) -> str:
    text = value[:VALUE_MAX] if isinstance(value, str) and value else UNKNOWN
    slot = (settings.ROUTER_REDIS_PREFIX, bucket, dim)
    seen = _admitted.get(slot)
    if seen is None:
        for old in [k for k in _admitted if k[1] < bucket - ROLLUP]:
            del _admitted[old]
        seen = _admitted[slot] = set()
    if text in seen:
        return text
    if len(seen) >= VALUE_CAP:
        return OTHER
    seen.add(text)
    return text


def _tokens(usage: object) -> tuple[int, int]:
    if not isinstance(usage, dict):
        return 0, 0
    found = []
    for names in (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")):
        value = next((usage[n] for n in names if isinstance(usage.get(n), int)), 0)
        found.append(max(value, 0))
    return found[0], found[1]


def _codes(obs: Mapping[str, Any]) -> Counts:
    codes: Counts = {status_code(obs.get("status")): 1}
    latency = obs.get("latency_ms")
    if isinstance(latency, int | float):
        codes[f"l{bin_of(latency)}"] = 1
    ttft = obs.get("ttft_ms")
    if isinstance(ttft, int | float):
        codes[f"f{bin_of(ttft)}"] = 1
    tokens_in, tokens_out = _tokens(obs.get("usage"))
    if tokens_in:
        codes["ti"] = tokens_in
    if tokens_out:
        codes["to"] = tokens_out
        if isinstance(latency, int | float):
            spent = latency - ttft if isinstance(ttft, int | float) else latency
            codes["tm"] = max(round(spent), 1)
    verdict = obs.get("cache")
    cache = CACHE_CODES.get(verdict) if isinstance(verdict, str) else None
    if cache is not None:
        codes[cache] = 1
        hit_bytes = obs.get("cache_bytes")
        if cache == "ch" and isinstance(hit_bytes, int) and hit_bytes > 0:
            codes[CACHE_HIT_BYTES] = hit_bytes
    return codes


def _family(code: str) -> str:
    return code[0] if code[0] in "lf" else "n"


class Aggregate:
    """One drained batch being folded, an observation at a time (the drainer
    calls `add` inside its sliced loop, before `_emit` pops `label`). The
    per-observation work is one tuple and a few dict increments; values are
    capped and expanded per distinct (minute, model, backend) in `batch()`."""

    __slots__ = ("combos", "spans")

    def __init__(self) -> None:
        self.combos: dict[tuple[int, object, object], Counts] = {}
        # (combo, "l" | "f") → [min ms, max ms]
        self.spans: dict[tuple[tuple[int, object, object], str], list[float]] = {}

    def add(self, obs: Mapping[str, Any]) -> None:
        """Never raises: a malformed observation is skipped."""
        try:
            ts = obs.get("ts")
            minute = int((ts if isinstance(ts, int | float) else time.time()) // MINUTE) * MINUTE
            combo = (minute, obs.get("label"), obs.get("provider"))
            counts = self.combos.get(combo)
            if counts is None:
                counts = self.combos[combo] = {}
            for code, n in _codes(obs).items():
                counts[code] = counts.get(code, 0) + n
            for family, name in SPANS:
                ms = obs.get(name)
                if isinstance(ms, int | float) and math.isfinite(ms):
                    span = self.spans.get((combo, family))
                    if span is None:
                        self.spans[(combo, family)] = [ms, ms]
                    elif ms > span[1]:
                        span[1] = ms
                    elif ms < span[0]:
                        span[0] = ms
        except Exception:  # bookkeeping never takes the drainer down
            log.exception("observation not aggregated")

    def batch(self) -> Batch:
        batch: Batch = {}
        node = settings.ROUTER_NODE_ID
        for combo, counts in self.combos.items():
            minute, label, provider = combo
            rollup = minute // ROLLUP * ROLLUP
            values = (
                ("node", _admit(rollup, "node", node)),
                ("model", _admit(rollup, "model", label)),
                ("backend", _admit(rollup, "backend", provider)),
            )
            spans = [(f, s) for f, _ in SPANS if (s := self.spans.get((combo, f))) is not None]
            for res, bucket in ((MINUTE, minute), (ROLLUP, rollup)):
                for dim, value in values:
                    for code, n in counts.items():
                        into = batch.setdefault((res, bucket, dim, _family(code)), {})
                        field = f"{value}|{code}"
                        into[field] = into.get(field, 0) + n
                    for family, (low, high) in spans:
                        field = f"{value}|{family}"
                        top = batch.setdefault((res, bucket, dim, MAX), {})
                        top[field] = max(top.get(field, high), high)
                        bottom = batch.setdefault((res, bucket, dim, MIN), {})
                        bottom[field] = min(bottom.get(field, low), low)
        return batch


def aggregate(items: Iterable[Mapping[str, Any]]) -> Batch:
    """Fold observations (with their `label`) into per-bucket counts."""
    acc = Aggregate()
    for obs in items:
        acc.add(obs)
    return acc.batch()


def add(pipe: Any, batch: Batch | Aggregate) -> None:
    """Queue the batch's increments, extremes and TTLs on a (sync or async)
    pipeline."""
    if isinstance(batch, Aggregate):
        batch = batch.batch()
    ttls = dict(RESOLUTIONS)
    for (res, bucket, dim, family), counts in batch.items():
        name = key(res, bucket, dim, family)
        if family == MAX:
            pipe.zadd(name, counts, gt=True)  # merged by max across writers
        elif family == MIN:
            pipe.zadd(name, counts, lt=True)
        else:
            for field, n in counts.items():
                pipe.hincrby(name, field, n)
        pipe.expire(name, ttls[res])

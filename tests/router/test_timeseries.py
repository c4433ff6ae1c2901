"""Time-bucketed aggregates: observations recorded with observe.record reach
per-minute and 5-minute Redis hashes through the real drainer, and the
reader (node/timeseries.py) turns them into the plots' series (real Redis,
a prefix per test)."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from django.conf import settings as django_settings

from node import timeseries as reader
from router import observe, timeseries
from router.redis import sync_client
from tests.support.redisns import isolated_prefix


@pytest.fixture(autouse=True)
def prefix(settings):
    observe.drain()  # observations other tests left in this process's queue
    yield from isolated_prefix(settings, "ts")


def requests_in_redis() -> int:
    """Requests counted in the node hashes of every minute bucket so far."""
    client = sync_client()
    total = 0
    for name in client.scan_iter(match=f"{django_settings.ROUTER_REDIS_PREFIX}ts:60:*:node:n"):
        for field, n in client.hgetall(name).items():
            if field.decode().rpartition("|")[2].startswith("s"):
                total += int(n)
    return total


def drain_through(*observations: dict, timeout: float = 60.0) -> list[dict]:
    """Record observations as the request path does and run the real drainer
    until Redis counts all of them (plus any counted before)."""
    observe.drain()  # only these: drop what other code of this process recorded
    before = requests_in_redis()
    # One batch lands in one minute (and so one 5-minute) bucket: record
    # clear of a boundary (record() stamps the time; one in the next 2 s is waited out).
    while time.time() % timeseries.MINUTE > timeseries.MINUTE - 2:
        time.sleep(0.1)
    for obs in observations:
        observe.record(obs)

    async def run() -> None:
        task = asyncio.create_task(observe.run_drainer(interval=0.01))
        try:
            deadline = time.monotonic() + timeout
            # Counted off the loop (a scan of the whole keyspace must not
            # starve the drainer it waits for), a few times a second.
            while await asyncio.to_thread(requests_in_redis) < before + len(observations):
                if task.done():
                    task.result()
                if time.monotonic() > deadline:
                    raise AssertionError(f"drainer did not write {len(observations)} observations")
                await asyncio.sleep(0.1)
        finally:
            task.cancel()

    asyncio.run(run())
    return list(observations)


def obs(label="chat", provider="a", status=200, latency_ms=120.0, ttft_ms=None, usage=None, **extra):
    return {
        "label": label,
        "provider": provider,
        "status": status,
        "latency_ms": latency_ms,
        "ttft_ms": ttft_ms,
        "usage": usage,
        "path": "openai",
        **extra,
    }


def hash_of(res: int, bucket: int, dim: str) -> dict[str, int]:
    """All families of one dimension's bucket, merged."""
    out = {}
    for family in ("n", "l", "f"):
        raw = sync_client().hgetall(timeseries.key(res, bucket, dim, family))
        out.update({k.decode(): int(v) for k, v in raw.items()})
    return out


def test_counts_tokens_and_status_classes_per_bucket_and_dimension():
    """Each minute and 5-minute bucket holds exactly the batch's counts per
    node, model and backend; every hash has a TTL."""
    items = drain_through(
        obs("chat", "a", 200, 120.0, usage={"prompt_tokens": 11, "completion_tokens": 7}),
        obs("chat", "b", 200, 900.0, ttft_ms=300.0, usage={"input_tokens": 5, "output_tokens": 20}),
        obs("chat", "a", 429, 3.0),
        obs("embed", "b", 502, 40.0),
    )
    node = django_settings.ROUTER_NODE_ID
    expected: dict[tuple[int, int, str], dict[str, int]] = {}

    def bump(res, ts, dim, field, n=1):
        counts = expected.setdefault((res, int(ts // res) * res, dim), {})
        counts[field] = counts.get(field, 0) + n

    for o in items:
        for res in (60, 300):
            values = {"node": node, "model": o["label"], "backend": o["provider"]}
            for dim, value in values.items():
                bump(res, o["ts"], dim, f"{value}|s{o['status'] // 100}")
                bump(res, o["ts"], dim, f"{value}|l{timeseries.bin_of(o['latency_ms'])}")
                if o["ttft_ms"] is not None:
                    bump(res, o["ts"], dim, f"{value}|f{timeseries.bin_of(o['ttft_ms'])}")
    # tokens, written out by hand: 11+5 in, 7+20 out; token time 120 and 900-300
    for res in (60, 300):
        for o, tin, tout, tm in ((items[0], 11, 7, 120), (items[1], 5, 20, 600)):
            for dim, value in {"node": node, "model": "chat", "backend": o["provider"]}.items():
                bump(res, o["ts"], dim, f"{value}|ti", tin)
                bump(res, o["ts"], dim, f"{value}|to", tout)
                bump(res, o["ts"], dim, f"{value}|tm", tm)

    client = sync_client()
    keys = set()
    for (res, bucket, dim), counts in expected.items():
        assert hash_of(res, bucket, dim) == counts, (res, dim)
        families = {"n"} | {f for f in "lf" if any(c.split("|")[1].startswith(f) for c in counts)}
        for family in families:
            keys.add(timeseries.key(res, bucket, dim, family))
            ttl = client.ttl(timeseries.key(res, bucket, dim, family))
            assert 0 < ttl <= (timeseries.MINUTE_TTL if res == 60 else timeseries.ROLLUP_TTL)
            assert ttl > (timeseries.MINUTE_TTL if res == 60 else timeseries.ROLLUP_TTL) - 120
    # beside each histogram, the observed extremes per value: latency "l", TTFT "f"
    spans: dict[tuple[int, int, str], dict[str, list[float]]] = {}
    for o in items:
        for res in (60, 300):
            for dim, value in {"node": node, "model": o["label"], "backend": o["provider"]}.items():
                for family, ms in (("l", o["latency_ms"]), ("f", o["ttft_ms"])):
                    if ms is not None:
                        span = spans.setdefault((res, int(o["ts"] // res) * res, dim), {}).setdefault(
                            f"{value}|{family}", [ms, ms]
                        )
                        span[:] = [min(span[0], ms), max(span[1], ms)]
    for (res, bucket, dim), extremes in spans.items():
        for family, side in (("min", 0), ("max", 1)):
            name = timeseries.key(res, bucket, dim, family)
            stored = {m.decode(): s for m, s in client.zrange(name, 0, -1, withscores=True)}
            assert stored == {field: span[side] for field, span in extremes.items()}, (res, dim, family)
            assert 0 < client.ttl(name) <= (timeseries.MINUTE_TTL if res == 60 else timeseries.ROLLUP_TTL)
            keys.add(name)
    # nothing else was written under the prefix
    written = {k.decode() for k in client.scan_iter(match=django_settings.ROUTER_REDIS_PREFIX + "ts:*")}
    assert written == keys


def test_reader_rates_totals_breakdowns_and_filter():
    """series() gives req/s per bucket whose window totals are the exact
    counts, per model and per backend, errors split by class, tokens out."""
    drain_through(
        obs("chat", "a", 200, usage={"completion_tokens": 30}),
        obs("chat", "a", 200, usage={"completion_tokens": 12}),
        obs("chat", "b", 503),
        obs("code", "b", 404),
        obs("code", "b", 200, usage={"output_tokens": 8}),
    )
    for window in ("15m", "1h", "24h"):
        total = reader.series("requests", window)
        assert [s["label"] for s in total["series"]] == ["requests"]
        assert total["series"][0]["total"] == 5 and total["unit"] == "req/s"
        assert len(total["t"]) == len(total["series"][0]["values"]) == reader.WINDOWS[window][1]
        assert total["step"] == reader.WINDOWS[window][0]
    per_model = reader.series("requests", "15m", by="model")
    assert {s["label"]: s["total"] for s in per_model["series"]} == {"chat": 3, "code": 2}
    assert per_model["series"][0]["label"] == "chat"  # ranked by volume
    per_backend = reader.series("requests", "1h", by="backend")
    assert {s["label"]: s["total"] for s in per_backend["series"]} == {"a": 2, "b": 3}
    errors = reader.series("errors", "15m")
    assert {s["label"]: s["total"] for s in errors["series"]} == {"4xx": 1, "5xx": 1}
    errors_by_model = reader.series("errors", "15m", by="model")
    assert {s["label"]: s["total"] for s in errors_by_model["series"]} == {"chat": 1, "code": 1}
    tokens = reader.series("tokens", "24h")
    assert tokens["series"][0]["total"] == 50 and tokens["unit"] == "tokens/s"
    only_b = reader.series("tokens", "15m", filter={"backend": "b"})
    assert only_b["series"][0]["total"] == 8
    assert reader.series("requests", "15m", by="model", filter={"model": "code"})["series"][0]["total"] == 2
    # the values are rates: a bucket's value × its width is its count
    minute = reader.series("requests", "15m")["series"][0]["values"]
    assert sum(round(v * 60) for v in minute) == 5


def test_generation_speed_is_output_tokens_over_the_time_spent_on_them():
    """Speed = output tokens ÷ (latency − TTFT when streamed, else latency)."""
    drain_through(
        obs("chat", "a", 200, 900.0, ttft_ms=300.0, usage={"completion_tokens": 20}),  # 600 ms of tokens
        obs("chat", "b", 200, 120.0, usage={"completion_tokens": 7}),  # 120 ms
        obs("chat", "b", 200, 50.0),  # no tokens: not part of the speed
    )
    speed = reader.series("speed", "24h")
    points = [v for v in speed["series"][0]["values"] if v is not None]
    assert len(points) == 1  # one 5-minute bucket (drain_through records clear of a boundary)
    assert points[0] == pytest.approx(27 * 1000 / 720, abs=1e-3) and speed["unit"] == "tokens/s"
    per_backend = reader.series("speed", "15m", by="backend")
    by_label = {s["label"]: [v for v in s["values"] if v is not None] for s in per_backend["series"]}
    assert by_label == {"a": [pytest.approx(20 * 1000 / 600, abs=1e-3)], "b": [pytest.approx(7 * 1000 / 120, abs=1e-3)]}


def test_latency_and_ttft_percentiles_are_within_their_bin():
    """p50/p95/p99 estimated from the bins lie in the bin of the exact quantile."""
    rng = random.Random(11)
    latencies = [rng.lognormvariate(6, 1) for _ in range(400)]  # ~400 ms median
    ttfts = [rng.uniform(20, 900) for _ in range(400)]
    drain_through(*[obs(latency_ms=lat, ttft_ms=tt) for lat, tt in zip(latencies, ttfts, strict=True)])
    for metric, sample in (("latency", latencies), ("ttft", ttfts)):
        result = reader.series(metric, "24h")  # one 5-minute bucket unless a boundary passed
        assert result["unit"] == "ms"
        labels = [s["label"] for s in result["series"]]
        assert labels == ["p50", "p95", "p99"]
        assert len([v for v in result["series"][0]["values"] if v is not None]) == 1  # one bucket
        ordered = sorted(sample)
        for s, q in zip(result["series"], (0.50, 0.95, 0.99), strict=True):
            estimate = next(v for v in s["values"] if v is not None)
            exact = ordered[min(len(ordered) - 1, int(q * len(ordered)))]
            i = timeseries.bin_of(exact)
            lo = timeseries.EDGES_MS[i - 1] if i else 0
            assert lo <= estimate <= timeseries.EDGES_MS[i], (metric, q, estimate, exact)
    # a breakdown plots one p95 per value
    per_backend = reader.series("latency", "15m", by="backend")
    assert [s["label"] for s in per_backend["series"]] == ["a p95"]


def test_percentile_interpolates_inside_a_bin():
    """Four samples in the 100–200 ms bin: the median is its midpoint."""
    assert reader.percentile({7: 4}, 0.5) == 150.0
    assert reader.percentile({}, 0.5) is None
    assert reader.percentile({len(timeseries.EDGES_MS): 3}, 0.99) == timeseries.EDGES_MS[-1]


def test_caps_hold_under_ten_thousand_distinct_values():
    """10,000 distinct backend and model values: each dimension's hash keeps at
    most VALUE_CAP values plus `other`, every request is still counted, and a
    breakdown draws at most TOP series."""
    n = 10_000
    drain_through(
        *[obs(f"model-{i}", f"backend-{i}", 200, 50.0, usage={"completion_tokens": 1}) for i in range(n)], timeout=120
    )
    client = sync_client()
    for dim in ("model", "backend"):
        for name in client.scan_iter(match=f"{django_settings.ROUTER_REDIS_PREFIX}ts:*:{dim}:*"):
            kind = client.type(name)
            fields = client.hkeys(name) if kind == b"hash" else client.zrange(name, 0, -1)
            values = {f.decode().rpartition("|")[0] for f in fields}
            assert len(values) <= timeseries.VALUE_CAP + 1, (name, len(values))
            assert "other" in values or len(values) <= timeseries.VALUE_CAP
        result = reader.series("requests", "1h", by=dim)
        assert len(result["series"]) <= reader.TOP
        assert sum(s["total"] for s in result["series"]) == n
        assert result["series"][-1]["label"] == "other"
    assert reader.series("tokens", "24h")["series"][0]["total"] == n


def test_reader_rejects_unknown_arguments():
    for args, kwargs in (
        (("nope",), {}),
        (("requests", "7d"), {}),
        (("requests", "1h", "key"), {}),
        (("requests", "1h", "model"), {"filter": {"backend": "a"}}),
        (("requests", "1h"), {"filter": {"model": "a", "backend": "b"}}),
    ):
        with pytest.raises(ValueError):
            reader.series(*args, **kwargs)


def test_an_empty_window_has_all_buckets_and_no_points():
    result = reader.series("latency", "1h")
    assert len(result["t"]) == 60
    assert all(v is None for s in result["series"] for v in s["values"])
    assert [b - a for a, b in zip(result["t"], result["t"][1:], strict=False)] == [60] * 59
    assert result["t"][-1] <= time.time() < result["t"][-1] + 120

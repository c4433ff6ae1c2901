"""The response cache in the dashboard's time series: each observation's
`cache` verdict (and a hit's bytes) lands as fixed codes in the `n` family
of every dimension (router/timeseries.py), and the reader's `cache` metric
(node/timeseries.py) is the hit ratio, summed over writers and nodes. Real
Redis, a prefix per test; the real drainer once, the writer's own `add` on a
real pipeline elsewhere."""

from __future__ import annotations

import time

import pytest

from node import timeseries as reader
from router import observe, timeseries
from router.redis import sync_client
from tests.node.test_timeseries import write
from tests.router.test_timeseries import drain_through, obs
from tests.support.redisns import isolated_prefix


@pytest.fixture(autouse=True)
def prefix(settings):
    observe.drain()  # observations other tests left in this process's queue
    yield from isolated_prefix(settings, "tscache")


def hit(label: str, nbytes: int, ts: float) -> dict:
    return obs(label, None, 200, 0.05, cache="hit", cache_tier="memory", cache_bytes=nbytes, path="cache", ts=ts)


def fields(res: int, ts: float, dim: str) -> dict[str, int]:
    raw = sync_client().hgetall(timeseries.key(res, int(ts // res) * res, dim, "n"))
    return {k.decode(): int(v) for k, v in raw.items()}


def ratios(by: str | None, ts: float, window: str = "15m") -> dict[str, list[float]]:
    result = reader.series("cache", window, by, now=ts)
    assert result["unit"] == "%"
    return {s["label"]: [v for v in s["values"] if v is not None] for s in result["series"]}


def test_verdicts_and_hit_bytes_are_counted_per_model_in_every_bucket(settings):
    """Hits, misses, bypasses and the hits' bytes are per-model codes beside
    the status counts, in the minute and the 5-minute bucket, per node and
    per model; an observation without a verdict (cache off) adds none, and a
    request is still counted once by its status."""
    ts = time.time()
    write([
        hit("chat", 300, ts), hit("chat", 500, ts),
        obs("chat", "a", 200, 90.0, cache="miss", cache_stored=400, ts=ts),
        obs("code", "b", 200, 80.0, cache="bypass", ts=ts),
        obs("code", "b", 200, 80.0, ts=ts),  # the cache off: no verdict
        obs("code", "b", 200, 80.0, cache="weird", ts=ts),  # not a verdict: ignored, still a request
    ])
    for res in (60, 300):
        model = fields(res, ts, "model")
        assert {k: v for k, v in model.items() if k.split("|")[1][0] == "c"} == {
            "chat|ch": 2, "chat|cv": 800, "chat|cm": 1, "code|cb": 1,
        }
        assert model["chat|s2"] == 3 and model["code|s2"] == 3
        node = fields(res, ts, "node")
        me = settings.ROUTER_NODE_ID
        assert (node[f"{me}|ch"], node[f"{me}|cm"], node[f"{me}|cb"], node[f"{me}|cv"]) == (2, 1, 1, 800)
    # the request rate does not count the cache codes
    assert sum(sum(s["values"]) for s in reader.series("requests", "15m", now=ts)["series"]) * 60 == pytest.approx(6)


def test_the_hit_ratio_per_model_and_in_total_over_two_nodes(settings):
    """The ratio is hits / (hits + misses) of everything every node wrote;
    a model whose requests were all bypassed (or that never met the cache)
    has no series, and `other` sums the values beyond the top (with room
    for one series, every model)."""
    ts = time.time()
    settings.ROUTER_NODE_ID = "node-1"
    write([hit("chat", 100, ts)] * 3 + [obs("chat", "a", cache="miss", ts=ts)])
    settings.ROUTER_NODE_ID = "node-2"
    write([obs("chat", "a", cache="miss", ts=ts)] * 2 + [hit("code", 50, ts)]
          + [obs("embed", "a", cache="bypass", ts=ts)] * 5 + [obs("plain", "a", ts=ts)])
    assert ratios("model", ts) == {"chat": [50.0], "code": [100.0]}
    assert ratios("model", ts, "24h") == {"chat": [50.0], "code": [100.0]}  # the 5-minute rollup
    assert ratios(None, ts) == {"hit ratio": [pytest.approx(4 / 7 * 100, abs=1e-3)]}
    assert ratios("node", ts) == {"node-1": [75.0], "node-2": [pytest.approx(100 / 3, abs=1e-3)]}
    one = reader.series("cache", "15m", "model", now=ts, top=1)["series"]
    assert [(s["label"], [v for v in s["values"] if v is not None]) for s in one] == [("other", [57.1429])]


def test_a_minute_without_lookups_is_a_gap_not_zero():
    """A minute with requests but no hit or miss has no ratio (null), so a
    plot is not dragged to 0 % by traffic the cache never saw."""
    ts = time.time()
    write([obs("chat", "a", cache="bypass", ts=ts - 120), hit("chat", 10, ts)])
    result = reader.series("cache", "15m", now=ts)
    values = result["series"][0]["values"]
    assert values[-1] == 100.0 and values[-3] is None


def test_the_real_drainer_writes_the_verdicts():
    """Observations recorded as the request path records them reach the
    plot through the real drainer."""
    drain_through(
        obs("chat", None, 200, 0.1, cache="hit", cache_tier="redis", cache_bytes=1234, path="cache"),
        obs("chat", "a", 200, 50.0, cache="miss"),
        obs("chat", "a", 200, 50.0, cache="miss"),
        obs("chat", "a", 200, 50.0, cache="miss"),
    )
    assert ratios("model", time.time()) == {"chat": [25.0]}
    assert fields(60, time.time(), "model")["chat|cv"] == 1234

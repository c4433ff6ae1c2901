"""The plots' percentiles stay inside what was observed: every writer records
each bucket's min and max next to its histogram (merged across writers by
ZADD GT / LT), and the reader (node/timeseries.py) clamps each percentile to
them. Real Redis, a prefix per test; the real drainer where timing allows,
the writer's own `add` on a real pipeline where hypothesis needs speed."""

from __future__ import annotations

import random
import time

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from node import timeseries as reader
from router import observe, timeseries
from router.redis import sync_client
from tests.router.test_timeseries import drain_through, obs
from tests.support.redisns import drop_prefix, isolated_prefix

MODELS = ("chat", "code")
BACKENDS = ("a", "b", "c")


@pytest.fixture(autouse=True)
def prefix(settings):
    observe.drain()  # observations other tests left in this process's queue
    yield from isolated_prefix(settings, "tsx")


def write(observations: list[dict]) -> None:
    """One drained batch through the writer onto a real Redis pipeline."""
    pipe = sync_client().pipeline(transaction=False)
    timeseries.add(pipe, timeseries.aggregate(observations))
    pipe.execute()


def points(metric: str, window: str, by: str | None, now: float) -> dict[str, list[float]]:
    """{series key ("" for the totals): its non-null values}."""
    out: dict[str, list[float]] = {}
    for s in reader.series(metric, window, by, now=now)["series"]:
        out.setdefault(s["key"] or "", []).extend(v for v in s["values"] if v is not None)
    return out


def test_p99_of_a_minute_stays_below_its_slowest_request(prefix):
    """The trial's case: 97 requests near 300 ms and 3 between 2 and 2.7 s.
    Interpolated in the 2–5 s bin alone, p99 is 4 s; clamped to the observed
    max it lies between 2 s and 2.7 s. A bucket without recorded extremes
    (written before they existed) still reads, interpolated as before."""
    slow = [2000.5, 2400.0, 2700.0]
    drain_through(*[obs(latency_ms=300.0 + i) for i in range(97)], *[obs(latency_ms=ms) for ms in slow])
    now = time.time()

    def p(name: str) -> float:
        result = reader.series("latency", "15m", now=now)
        values = next(s["values"] for s in result["series"] if s["label"] == name)
        found = [v for v in values if v is not None]
        assert len(found) == 1, found
        return found[0]

    assert 2000 <= p("p99") <= 2700
    assert 300 <= p("p50") <= 500  # the 200–500 ms bin, narrowed to the observed min
    client = sync_client()
    for family in ("max", "min"):
        for name in client.scan_iter(match=f"{prefix}ts:*:{family}"):
            client.delete(name)
    assert p("p99") == pytest.approx(4000.0)  # the old estimate: readable, unclamped


def test_extremes_merge_across_writers_by_max_and_min(settings):
    """Two nodes write the same minute: the stored max is the larger of their
    maxima, the min the smaller, and the totals' p99 never passes the max."""
    ts = time.time()
    settings.ROUTER_NODE_ID = "node-1"
    write([obs(latency_ms=ms, ts=ts) for ms in (40.0, 180.0, 1200.0)])
    settings.ROUTER_NODE_ID = "node-2"
    write([obs(latency_ms=ms, ts=ts) for ms in (25.0, 900.0, 3100.0)])
    write([obs(latency_ms=ms, ts=ts) for ms in (30.0, 2500.0)])  # a smaller max does not lower it
    minute = int(ts // 60) * 60
    client = sync_client()
    for dim, member in (("model", "chat|l"), ("backend", "a|l")):
        assert client.zscore(timeseries.key(60, minute, dim, "max"), member) == 3100.0
        assert client.zscore(timeseries.key(60, minute, dim, "min"), member) == 25.0
    nodes = {m.decode(): s for m, s in client.zrange(timeseries.key(60, minute, "node", "max"), 0, -1, withscores=True)}
    assert nodes == {"node-1|l": 1200.0, "node-2|l": 3100.0}
    totals = points("latency", "15m", None, ts)
    assert totals and all(25.0 <= v <= 3100.0 for v in totals[""])
    per_node = points("latency", "15m", "node", ts)
    assert max(per_node["node-1"]) <= 1200.0 and max(per_node["node-2"]) <= 3100.0


latency = st.floats(min_value=0.0, max_value=400_000.0, allow_nan=False, allow_infinity=False)
sample = st.tuples(st.sampled_from(MODELS), st.sampled_from(BACKENDS), latency, st.none() | latency)


@hsettings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(sample, min_size=1, max_size=60))
def test_a_percentile_never_leaves_the_observed_range(prefix, samples):
    """Whatever the sample, every plotted percentile of latency and TTFT —
    totals and per node, model and backend, minutes and 5-minute rollups —
    lies within the min and max the writers recorded, and those are the
    sample's own min and max."""
    from django.conf import settings

    drop_prefix(prefix)
    ts = time.time()
    write([obs(m, b, 200, lat, ttft_ms=tt, ts=ts) for m, b, lat, tt in samples])
    client = sync_client()
    for metric, family, at in (("latency", "l", 2), ("ttft", "f", 3)):
        for by in (None, "node", "model", "backend"):
            dim = by or "node"
            groups: dict[str, list[float]] = {}  # stored value → its sample
            for s in samples:
                if s[at] is not None:
                    value = {"node": settings.ROUTER_NODE_ID, "model": s[0], "backend": s[1]}[dim]
                    groups.setdefault(value, []).append(s[at])
            for window, res in (("15m", 60), ("24h", 300)):
                found = {k: v for k, v in points(metric, window, by, ts).items() if v}
                if by is None:  # one node: the totals are its values
                    found = {settings.ROUTER_NODE_ID: found[""]} if found else {}
                assert set(found) == set(groups), (metric, by, window)
                bucket = int(ts // res) * res
                highs = dict(client.zrange(timeseries.key(res, bucket, dim, "max"), 0, -1, withscores=True))
                lows = dict(client.zrange(timeseries.key(res, bucket, dim, "min"), 0, -1, withscores=True))
                for group, values in found.items():
                    member = f"{group}|{family}".encode()
                    assert (lows[member], highs[member]) == (min(groups[group]), max(groups[group]))
                    for v in values:  # the reader rounds to 4 decimals
                        assert lows[member] - 1e-4 <= v <= highs[member] + 1e-4, (metric, by, window, group, v)


def test_percentile_narrows_its_bin_to_the_observed_span():
    """Pure: the overflow bin interpolates up to the max; one sample is itself."""
    top = len(timeseries.EDGES_MS)
    assert reader.percentile({top: 2}, 0.5) == timeseries.EDGES_MS[-1]  # no span: the lower edge
    assert reader.percentile({top: 2}, 1.0, (210_000.0, 300_000.0)) == 300_000.0
    assert reader.percentile({11: 1}, 0.99, (2700.0, 2700.0)) == 2700.0
    assert reader.percentile({7: 4}, 0.5, (100.0, 200.0)) == 150.0  # a span as wide as the bin changes nothing
    rng = random.Random(5)
    for _ in range(500):
        values = [rng.lognormvariate(5, 2) for _ in range(rng.randint(1, 40))]
        hist: dict[int, int] = {}
        for v in values:
            hist[timeseries.bin_of(v)] = hist.get(timeseries.bin_of(v), 0) + 1
        for q in (0.5, 0.95, 0.99, 1.0):
            got = reader.percentile(hist, q, (min(values), max(values)))
            assert got is not None and min(values) <= got <= max(values)


def test_requests_that_were_never_routed_have_a_name():
    """The series of UNKNOWN values (`-`) reads as what it is; its key stays
    the stored value, which a filter and the plot's colour go by."""
    drain_through(obs("-", None, 401, 2.0), obs("chat", "a", 200, 50.0), obs("chat", None, 503, 4.0))
    by_model = {s["label"]: s for s in reader.series("requests", "15m", by="model")["series"]}
    assert set(by_model) == {"chat", "refused before routing"}
    assert by_model["refused before routing"]["key"] == "-" and by_model["refused before routing"]["total"] == 1
    by_backend = {s["label"]: s for s in reader.series("latency", "15m", by="backend")["series"]}
    assert set(by_backend) == {"a p95", "not routed p95"} and by_backend["not routed p95"]["key"] == "-"
    assert reader.series("requests", "15m")["series"][0]["key"] is None
    assert reader.series("requests", "15m", filter={"backend": "-"})["series"][0]["total"] == 2

"""The Overview's traffic figures and its list of backends that are down.

The figures are read from real Redis aggregates written by the drainers'
own writer (router.timeseries), in the dashboard conftest's isolated prefix;
the backend states are a live runtime's, as in a serving web process.
"""

from __future__ import annotations

import time

import orjson
import pytest

from dashboard import traffic
from router.redis import sync_client
from router.timeseries import MINUTE, add, aggregate

pytestmark = pytest.mark.django_db


def write(*observations: dict) -> None:
    """Aggregate observations as a drainer does and store them."""
    pipe = sync_client().pipeline(transaction=False)
    add(pipe, aggregate(observations))
    pipe.execute()


def obs(ts: float, status: int, latency_ms: float, completion_tokens: int = 0) -> dict:
    return {
        "ts": ts,
        "status": status,
        "latency_ms": latency_ms,
        "label": "chat",
        "provider": "vllm-a",
        "usage": {"prompt_tokens": 3, "completion_tokens": completion_tokens},
    }


def test_the_figures_cover_the_last_minutes_and_divide_by_the_seconds_covered(redis_prefix):
    minute = (int(time.time()) // MINUTE - 2) * MINUTE
    now = minute + 30  # the window: four whole minutes before, and 30 s of this one
    write(
        *[obs(minute + 1, 200, 100.0, completion_tokens=9) for _ in range(6)],
        obs(minute - 3 * MINUTE, 500, 30.0),
        obs(minute - MINUTE, 404, 5.0),
        obs(minute - 5 * MINUTE, 200, 100.0),  # before the window
        obs(minute + MINUTE, 200, 100.0),  # after `now`
    )
    got = traffic.traffic(now=now)
    assert got["error"] is None and got["minutes"] == traffic.WINDOW_MINUTES == 5
    assert got["requests"] == 8
    assert got["requests_per_min"] == round(8 * 60 / 270, 1)
    assert (got["errors_5xx"], got["errors_4xx"], got["no_status"]) == (1, 1, 0)
    assert got["error_rate_pct"] == 25.0
    # Six of eight took 100 ms (bin 50-100 ms), one 30 ms, one 5 ms.
    assert 50.0 < got["p50_ms"] <= 100.0 and 50.0 < got["p95_ms"] <= 100.0
    assert got["tokens_out_per_min"] == round(54 * 60 / 270, 1)


def test_the_percentiles_stay_within_the_latencies_observed(redis_prefix):
    """Every request took 60 ms: interpolating in the 50-100 ms bin alone
    would say 75 ms for p50 and 97.5 ms for p95."""
    now = time.time()
    write(*[obs(now, 200, 60.0) for _ in range(4)])
    got = traffic.traffic(now=now)
    assert got["p50_ms"] == got["p95_ms"] == 60.0


def test_no_traffic_shows_zero_and_no_rate(redis_prefix):
    got = traffic.traffic()
    assert got["requests"] == 0 and got["requests_per_min"] == 0.0
    assert got["error_rate_pct"] is None and got["p50_ms"] is None


def test_the_overview_shows_the_traffic_of_the_last_minutes(staff, redis_prefix):
    now = time.time()
    write(*[obs(now, 200, 100.0) for _ in range(3)], obs(now, 503, 20.0))
    page = staff.get("/dashboard/").content.decode()
    assert 'data-live="traffic"' in page
    body = orjson.loads(staff.get("/dashboard/live.json?sections=traffic").content)
    html = body["sections"]["traffic"]["html"]
    assert "Requests / min" in html and "25.0 %" in html and "5xx: 1 · 4xx: 0" in html
    assert body["sections"]["traffic"]["data"]["requests"] == 4


def test_the_traffic_section_reports_redis_down_instead_of_failing(staff, monkeypatch):
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    from router import redis as router_redis

    # Nothing listens on port 1: a real refused connection, no retries.
    broken = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
    monkeypatch.setattr(router_redis, "sync_client", lambda: broken)
    body = orjson.loads(staff.get("/dashboard/live.json?sections=traffic").content)
    assert body["sections"]["traffic"]["data"]["error"].startswith("Redis unavailable")
    assert 'id="traffic-error"' in body["sections"]["traffic"]["html"]


def test_the_overview_names_the_backends_that_are_down(staff, mirror, live_runtime):
    rt = live_runtime()
    cloud = rt.states.get("cloud-c")
    for _ in range(cloud.policy.failure_threshold):
        cloud.on_start()
        cloud.on_failure(time.monotonic())
    rt.states.get("ollama-b").probe_healthy = False

    body = orjson.loads(staff.get("/dashboard/live.json?sections=node").content)
    node = body["sections"]["node"]["data"]
    down = {b["name"]: b for b in node["backends_down"]}
    assert set(down) == {"cloud-c", "ollama-b"} and node["backends_down_more"] == 0
    assert down["cloud-c"]["health"] == "breaker_open" and down["cloud-c"]["retry_s"] > 0
    html = body["sections"]["node"]["html"]
    assert 'id="backends-down"' in html and "2 of 4 backends healthy" in html
    assert "ollama-b</span> (probe failing)" in html
    assert "cloud-c</span> (breaker open, trial in " in html


def test_past_the_named_few_the_overview_counts_the_rest(staff, mirror, live_runtime, monkeypatch):
    from dashboard import selectors

    monkeypatch.setattr(selectors, "DOWN_NAMED", 1)
    rt = live_runtime()
    for name in ("ollama-b", "vllm-a"):
        rt.states.get(name).probe_healthy = False
    node = orjson.loads(staff.get("/dashboard/live.json?sections=node").content)["sections"]["node"]
    assert len(node["data"]["backends_down"]) == 1 and node["data"]["backends_down_more"] == 1
    assert "and 1 more" in node["html"]


def test_a_healthy_node_names_no_backend(staff, mirror, live_runtime):
    live_runtime()
    node = orjson.loads(staff.get("/dashboard/live.json?sections=node").content)["sections"]["node"]
    assert node["data"]["backends_down"] == [] and 'id="backends-down"' not in node["html"]


def cache_obs(ts: float, label: str, verdict: str, nbytes: int = 0) -> dict:
    hit = verdict == "hit"
    return {"ts": ts, "status": 200, "latency_ms": 0.1 if hit else 90.0, "label": label,
            "provider": None if hit else "vllm-a", "cache": verdict, **({"cache_bytes": nbytes} if hit else {})}


def test_the_cache_figures_are_its_hit_ratio_per_model_over_the_last_minutes(redis_prefix):
    """Hits / (hits + misses) of every writer in the last 5 minutes, totals
    and per model by lookups; older minutes and a cache that is off add
    nothing."""
    now = time.time()
    write(*[cache_obs(now, "chat", "hit", 2048) for _ in range(3)], cache_obs(now, "chat", "miss"),
          cache_obs(now - 60, "code", "miss"), cache_obs(now - 60, "code", "bypass"), cache_obs(now - 60, "embed", "bypass"))
    write(*[cache_obs(now - 6 * MINUTE, "old", "hit", 10) for _ in range(9)])  # outside the window
    got = traffic.traffic(cache=True, now=now)["cache"]
    assert got == {
        "hit_ratio_pct": 60.0, "hits": 3, "misses": 2, "bypasses": 2, "hit_bytes": 6144,
        "models": [{"model": "chat", "lookups": 4, "hit_ratio_pct": 75.0},
                   {"model": "code", "lookups": 1, "hit_ratio_pct": 0.0}],
    }
    assert traffic.traffic(now=now)["cache"] is None


def test_the_traffic_section_shows_the_cache_only_while_it_is_on(staff, mirror, redis_prefix):
    """The snapshot (compiled from the mirror here) says whether the cache is
    on; off, the section has no cache figure even with cache counts stored."""
    now = time.time()
    write(cache_obs(now, "chat", "hit", 1500), cache_obs(now, "chat", "miss"))

    def section() -> tuple[str, dict]:
        body = orjson.loads(staff.get("/dashboard/live.json?sections=traffic").content)
        return body["sections"]["traffic"]["html"], body["sections"]["traffic"]["data"]

    html, data = section()
    assert data["cache"] is None and "traffic-cache" not in html and "Response cache" not in html
    from router.models import ConfigDocument
    from router.revision import bump_revision

    doc = ConfigDocument.objects.get(pk=1)
    doc.document = {**doc.document, "response_cache": {"enabled": True}}
    doc.save()
    bump_revision("cache on")
    html, data = section()
    assert data["cache"]["hit_ratio_pct"] == 50.0
    assert 'id="traffic-cache"' in html and 'data-value="50.0"' in html
    assert "1 hit (1.5\xa0KB) · 1 miss · 0 bypassed" in html
    assert '<span data-model="chat" data-value="50.0">chat 50.0 %</span>' in html

"""Rate limits: an exact 60 s sliding window, per node or shared via Redis."""

from __future__ import annotations

import asyncio
import logging

import pytest
from django.conf import settings

from keys.ratelimit import ClusterLimiter, NodeLimiter, make_limiter

T0 = 1_800_000_000.0


# -- node scope ----------------------------------------------------------------
def test_window_admits_limit_then_refuses_until_the_oldest_leaves():
    lim = NodeLimiter()
    assert lim.hit("k", 3, T0) == (True, 0)
    assert lim.hit("k", 3, T0 + 10) == (True, 0)
    assert lim.hit("k", 3, T0 + 20) == (True, 0)
    assert lim.hit("k", 3, T0 + 30) == (False, 30)  # T0 leaves at T0 + 60
    assert lim.hit("k", 3, T0 + 59.5) == (False, 1)  # rounded up, never 0
    assert lim.hit("k", 3, T0 + 60) == (True, 0)  # exactly 60 s later
    assert lim.hit("k", 3, T0 + 61) == (False, 9)  # T0+10 leaves at T0+70


def test_refused_requests_are_not_counted():
    """Hammering while limited does not push the reopening further out."""
    lim = NodeLimiter()
    lim.hit("k", 1, T0)
    for s in range(1, 60):
        assert lim.hit("k", 1, T0 + s)[0] is False
    assert lim.hit("k", 1, T0 + 60) == (True, 0)


def test_buckets_are_independent():
    lim = NodeLimiter()
    assert lim.hit("a", 1, T0)[0] and lim.hit("b", 1, T0)[0]
    assert not lim.hit("a", 1, T0)[0]


def test_lowered_limit_applies_at_once():
    lim = NodeLimiter()
    for s in range(5):
        lim.hit("k", 10, T0 + s)
    # Now 2/min: the request that must leave is the 2nd newest (T0 + 3).
    assert lim.hit("k", 2, T0 + 5) == (False, 58)


def test_memory_is_bounded():
    """Idle buckets are swept; the bucket count never exceeds max_buckets."""
    lim = NodeLimiter(max_buckets=100)
    for i in range(1_000):
        lim.hit(f"k{i}", 5, T0)
    assert len(lim) == 100
    lim.hit("late", 5, T0 + 61)  # the periodic sweep drops every idle bucket
    assert len(lim) == 1
    # A bucket holds at most `limit` timestamps however hard it is hit.
    for i in range(1_000):
        lim.hit("hot", 7, T0 + 100 + i * 0.001)
    assert len(lim._buckets["hot"]) == 7


async def test_make_limiter_by_scope():
    assert make_limiter("node").scope == "node"
    assert make_limiter("cluster", redis_url="redis://127.0.0.1:1/0").scope == "cluster"
    with pytest.raises(ValueError, match="node"):
        make_limiter("global")


# -- cluster scope -------------------------------------------------------------
def cluster(prefix, **kw):
    # The production 100 ms timeout falls back to per-node counting, which is
    # right for a slow Redis but not what these tests are about; on a busy
    # 2-core machine the first connect can exceed it.
    kw.setdefault("timeout", 2.0)
    return ClusterLimiter(redis_url=settings.REDIS_URL, prefix=prefix, **kw)


async def test_two_processes_share_one_limit(redis_prefix, redis_client):
    """Two independent limiters (two nodes) enforce one window per key."""
    a, b = cluster(redis_prefix), cluster(redis_prefix)
    try:
        assert await a.acquire("k", 3, T0) == (True, 0)
        assert await b.acquire("k", 3, T0 + 1) == (True, 0)
        assert await a.acquire("k", 3, T0 + 2) == (True, 0)
        assert await b.acquire("k", 3, T0 + 20) == (False, 40)
        assert await a.acquire("k", 3, T0 + 20) == (False, 40)
        assert await b.acquire("k", 3, T0 + 60) == (True, 0)
        assert await a.acquire("k", 3, T0 + 60.5) == (False, 1)
        assert await a.acquire("other", 3, T0 + 20) == (True, 0)
        assert not a.degraded and not b.degraded
        ttl = await redis_client.pttl(redis_prefix + "k")
        assert 0 < ttl <= 60_000  # the window key expires on its own
    finally:
        await a.aclose()
        await b.aclose()


async def test_concurrent_requests_from_two_nodes_never_exceed_the_limit(
    redis_prefix, redis_client
):
    """The Lua script is atomic: a burst across nodes admits exactly `limit`."""
    a, b = cluster(redis_prefix), cluster(redis_prefix)
    try:
        results = await asyncio.gather(
            *(lim.acquire("burst", 5, T0) for lim in (a, b) * 10)
        )
        assert sum(ok for ok, _ in results) == 5
        assert {wait for ok, wait in results if not ok} == {60}
    finally:
        await a.aclose()
        await b.aclose()


async def test_cluster_and_node_agree_on_semantics(redis_prefix, redis_client):
    node, shared = NodeLimiter(), cluster(redis_prefix)
    try:
        for t in (0, 10, 20, 30, 59.5, 60, 61, 75, 130):
            assert await shared.acquire("k", 3, T0 + t) == node.hit("k", 3, T0 + t), t
    finally:
        await shared.aclose()


async def test_redis_down_falls_back_to_node_and_warns_once(caplog, redis_prefix):
    """Unreachable Redis: per-node counting, one warning, no exception."""
    lim = ClusterLimiter(
        redis_url="redis://127.0.0.1:1/0", prefix=redis_prefix, cooldown=0
    )
    with caplog.at_level(logging.WARNING, logger="keys.ratelimit"):
        assert await lim.acquire("k", 2, T0) == (True, 0)
        assert await lim.acquire("k", 2, T0 + 1) == (True, 0)
        assert await lim.acquire("k", 2, T0 + 2) == (False, 58)
    assert lim.degraded
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "per node" in warnings[0].getMessage()
    await lim.aclose()


async def test_redis_down_is_skipped_during_the_cooldown(redis_prefix):
    """After a failure Redis is not retried on every request (no added latency)."""
    lim = ClusterLimiter(
        redis_url="redis://127.0.0.1:1/0", prefix=redis_prefix, cooldown=60
    )
    await lim.acquire("k", 5, T0)
    calls = []
    lim._script = lambda: calls.append(1)  # would be used only if Redis were retried
    assert await lim.acquire("k", 5, T0 + 1) == (True, 0)
    assert calls == []
    await lim.aclose()

"""The cluster's token buckets (router/quotas.py) on a real Redis: the script
does what the in-process buckets do, two processes share one bucket, and a
Redis that does not answer falls back to this process's buckets."""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
import redis
from django.conf import settings

from router.core.buckets import NodeBuckets, Quota, Rate, request_items, token_item
from router.quotas import LEASE_TTL, QuotaStore, lease_size, retry_after, store_for


def _prefix() -> str:
    return f"tq{uuid.uuid4().hex[:10]}:"


@pytest.fixture
def clean_redis():
    prefixes: list[str] = []
    yield prefixes
    r = redis.Redis.from_url(settings.REDIS_URL)
    for prefix in prefixes:
        for key in r.scan_iter(f"{prefix}*"):
            r.delete(key)


async def test_the_redis_script_decides_as_the_process_buckets_do(clean_redis) -> None:
    """A random sequence of takes and charges, at explicit times, gets the
    same answers from Redis as from the in-process buckets."""
    prefix = _prefix()
    clean_redis.append(prefix)
    shared = QuotaStore("cluster", prefix=prefix)
    local = NodeBuckets()
    rnd = random.Random(7)
    quota = Quota(rps=Rate(per_s=2.0, burst=3.0), tpm=Rate(per_s=50 / 60, burst=50.0))
    now = 1_700_000_000.0
    refusals = 0
    for _ in range(300):
        now += rnd.choice((0.0, 0.0, 0.1, 0.3, 1.5))
        if rnd.random() < 0.3:
            item = token_item("b", quota, rnd.randint(1, 40))
            assert item is not None
            assert await shared.take([item], now) == local.take([item], now) == (0.0, -1)
            continue
        items = request_items("b", quota)
        got, want = await shared.take(items, now), local.take(items, now)
        assert got[1] == want[1]
        assert got[0] == pytest.approx(want[0], abs=0.0011)  # Redis answers in whole ms, rounded up
        refusals += got[1] >= 0
    assert 20 < refusals < 280  # the sequence exercised both answers
    assert not shared.degraded
    ttl = redis.Redis.from_url(settings.REDIS_URL).pttl(f"{prefix}quota:b:b:r")
    assert 0 < ttl <= (3.0 / 2.0) * 1000 + 1000  # gone once it would be full again


async def test_two_processes_share_one_bucket(clean_redis) -> None:
    prefix = _prefix()
    clean_redis.append(prefix)
    one, two = QuotaStore("cluster", prefix=prefix), QuotaStore("cluster", prefix=prefix)
    item = [("g", Rate(per_s=0.001, burst=4.0), 1.0, 1.0)]
    now = 1_700_000_000.0
    answers = [await store.take(item, now) for store in (one, two, one, two, one, two)]
    assert [wait == 0 for wait, _ in answers] == [True] * 4 + [False] * 2
    assert answers[-1][1] == 0


async def test_redis_down_falls_back_to_this_process_and_says_so_once(caplog) -> None:
    store = QuotaStore("cluster", prefix=_prefix(), redis_url="redis://127.0.0.1:1/0", cooldown=60)
    item = [("g", Rate(per_s=0.001, burst=2.0), 1.0, 1.0)]
    now = 1_700_000_000.0
    answers = [(await store.take(item, now))[0] for _ in range(3)]
    assert answers[:2] == [0.0, 0.0] and answers[2] > 0  # the process's own bucket counted them
    assert store.degraded
    assert sum("cluster rate limits unavailable" in r.getMessage() for r in caplog.records) == 1


async def test_charges_are_paid_in_the_background_in_one_call(clean_redis) -> None:
    """Answers' tokens are summed per bucket and paid to Redis together a
    moment later: the caller never waits on Redis for them."""
    prefix = _prefix()
    clean_redis.append(prefix)
    store = QuotaStore("cluster", prefix=prefix)
    quota = Quota(tpm=Rate(per_s=10 / 60, burst=10.0))
    other = Quota(tpm=Rate(per_s=10 / 60, burst=10.0))
    now = 1_700_000_000.0
    for name, q, tokens in (("b", quota, 15), ("b", quota, 15), ("c", other, 4)):
        item = token_item(name, q, tokens)
        assert item is not None
        store.charge(item, now)
    assert not store._charges and store._owed["b:b:t"][1] == 30  # owed, not yet sent
    deadline = asyncio.get_running_loop().time() + 10
    while (store._owed or store._charges) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
    assert not store._owed and not store._charges
    # Paid at the flush's own clock (a moment after `now`): b is 10 - 30, floored at -10; c is 6.
    wait, _ = await store.take(request_items("b", quota), now)
    assert wait == pytest.approx(11 / (10 / 60), abs=0.1)
    assert await store.take(request_items("c", other), now) == (0.0, -1)


def test_scope_and_retry_after() -> None:
    node = store_for("node", None)
    assert store_for("node", node) is node
    assert store_for("cluster", node).scope == "cluster"
    with pytest.raises(ValueError, match=r"rate_limits\.scope"):
        QuotaStore("planet")
    assert [retry_after(w) for w in (0.001, 1.0, 1.2, float("inf"))] == ["1", "1", "2", "60"]


def _level(prefix: str, name: str) -> float:
    return float(redis.Redis.from_url(settings.REDIS_URL).hget(f"{prefix}quota:{name}", "l"))


async def test_a_busy_bucket_is_leased_a_slice_at_a_time(clean_redis) -> None:
    """2,000 a second: a take leases 100 (50 ms of the rate) from Redis and the
    next 99 are spent here; Redis's level says what left it, no more."""
    prefix = _prefix()
    clean_redis.append(prefix)
    store = QuotaStore("cluster", prefix=prefix)
    rate = Rate(per_s=2000.0, burst=2000.0)
    assert lease_size(rate) == 99
    item = [("g", rate, 1.0, 1.0)]
    now = 1_700_000_000.0
    for _ in range(200):
        assert await store.take(item, now) == (0.0, -1)
    assert _level(prefix, "g") == 1800.0  # two calls, 100 tokens each, all spent
    assert await store.take(item, now) == (0.0, -1)
    assert _level(prefix, "g") == 1700.0 and store._leases["g"][0] == 99.0
    # What is left of a lease past LEASE_TTL is dropped: the next take asks Redis again.
    later = now + LEASE_TTL + 0.01
    assert await store.take(item, later) == (0.0, -1)
    assert _level(prefix, "g") == pytest.approx(min(2000.0, 1700.0 + (LEASE_TTL + 0.01) * 2000.0) - 100.0)


async def test_leases_never_admit_more_than_the_bucket_holds(clean_redis) -> None:
    """Two processes spending one bucket through leases: exactly its tokens
    are admitted, however the takes interleave."""
    prefix = _prefix()
    clean_redis.append(prefix)
    one, two = QuotaStore("cluster", prefix=prefix), QuotaStore("cluster", prefix=prefix)
    item = [("g", Rate(per_s=400.0, burst=40.0), 1.0, 1.0)]
    assert lease_size(item[0][1]) == 4
    now = 1_700_000_000.0
    rnd = random.Random(3)
    admitted = 0
    for _ in range(80):
        wait, _ = await rnd.choice((one, two)).take(item, now)
        admitted += wait == 0
    assert admitted == 40


async def test_a_take_is_all_or_nothing_with_a_lease_in_it(clean_redis) -> None:
    """A request's global token is in this process's lease but its client's
    bucket is empty: refused, naming the client's bucket, and the lease keeps
    its token."""
    prefix = _prefix()
    clean_redis.append(prefix)
    store = QuotaStore("cluster", prefix=prefix)
    items = [("g", Rate(per_s=2000.0, burst=2000.0), 1.0, 1.0), ("ip:10.0.0.1", Rate(per_s=0.01, burst=1.0), 1.0, 1.0)]
    now = 1_700_000_000.0
    assert await store.take(items, now) == (0.0, -1)
    assert store._leases["g"][0] == 99.0 and "ip:10.0.0.1" not in store._leases  # a slow bucket is not leased
    wait, worst = await store.take(items, now)
    assert wait > 0 and worst == 1
    assert store._leases["g"][0] == 99.0


async def test_a_tpm_admission_holds_for_the_lease_ttl(clean_redis) -> None:
    """Not in debt, as Redis last said, for LEASE_TTL: then asked again, and
    the debt its answers' tokens made is seen."""
    prefix = _prefix()
    clean_redis.append(prefix)
    store = QuotaStore("cluster", prefix=prefix)
    quota = Quota(tpm=Rate(per_s=10 / 60, burst=10.0))
    now = 1_700_000_000.0
    assert await store.take(request_items("b", quota), now) == (0.0, -1)
    item = token_item("b", quota, 30)
    assert item is not None
    await store.take([item], now)  # the answer's tokens, paid at once: 10 - 30, floored at -10
    assert await store.take(request_items("b", quota), now + LEASE_TTL / 2) == (0.0, -1)  # still held
    wait, worst = await store.take(request_items("b", quota), now + LEASE_TTL + 0.01)
    assert worst == 0 and wait == pytest.approx(11 / (10 / 60) - (LEASE_TTL + 0.01), abs=0.01)

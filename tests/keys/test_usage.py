"""Per-key usage: the drainer's Redis buffer (router/usage.py) and its fold
into KeyUsage (keys/usage.py), against the real Redis and the test DB.

The observations are pushed through the drainer's own code path
(`usage.add` on a real redis.asyncio pipeline, as `observe.run_drainer`
does), and one test runs the drainer itself.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
import redis.asyncio as aioredis
from django.conf import settings

from keys import usage
from keys.models import KeyUsage, UsageFold
from router import observe
from router import usage as buffer
from router.redis import sync_client
from tests.support.redisns import drained_usage, isolated_prefix
from tests.support.routerproc import wait_until

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def prefix(settings):
    yield from isolated_prefix(settings, "usage")


push = drained_usage  # one drainer batch (tests/support/redisns.py)


NOW = time.time()
HOUR = int(NOW // 3600 * 3600)


def obs(ref: str = "operator:1", *, name: str = "alpha", status: int = 200, ts: float | None = None, **usage_):
    return {
        "key_id": ref,
        "key": name,
        "key_source": ref.split(":", 1)[0],
        "status": status,
        "usage": usage_ or None,
        "ts": NOW if ts is None else ts,
    }


def db_totals() -> dict[str, tuple[int, int, int, int]]:
    out: dict[str, list[int]] = {}
    for r in KeyUsage.objects.all():
        t = out.setdefault(r.key_ref, [0, 0, 0, 0])
        t[0] += r.requests
        t[1] += r.errors
        t[2] += r.prompt_tokens
        t[3] += r.completion_tokens
    return {k: tuple(v) for k, v in out.items()}


def read_totals(days: int = 2) -> dict[str, tuple[int, int, int, int]]:
    return {
        u.key_ref: (u.requests, u.errors, u.prompt_tokens, u.completion_tokens)
        for u in usage.totals(usage.window_start(days=days))
    }


def test_counts_per_key_and_hour_map_both_token_styles_and_errors():
    push(
        obs(prompt_tokens=7, completion_tokens=3),
        obs(status=429),
        obs("coordinator:c-9", name="beta", input_tokens=11, output_tokens=5),
    )
    push(obs(status=403), obs(prompt_tokens=2, completion_tokens=1, ts=NOW - 3600))
    assert read_totals() == {"operator:1": (4, 2, 9, 4), "coordinator:c-9": (1, 0, 11, 5)}
    rows = {(u.key_ref, u.hour): u for u in usage.hourly(usage.window_start(days=2))}
    this = datetime.fromtimestamp(HOUR, UTC)
    prev = datetime.fromtimestamp(HOUR - 3600, UTC)
    assert (rows[("operator:1", this)].requests, rows[("operator:1", prev)].requests) == (3, 1)
    assert rows[("coordinator:c-9", this)].name == "beta"
    assert rows[("coordinator:c-9", this)].source == "coordinator"
    # Everything buffered has a TTL: nothing a client sends outlives it.
    client = sync_client()
    for key in client.scan_iter(match=settings.ROUTER_REDIS_PREFIX + "*"):
        assert 0 < client.ttl(key) <= buffer.BUFFER_TTL_S, key


def test_observations_without_a_key_are_not_counted():
    push({"status": 401, "ts": NOW}, {"key_id": "", "status": 200, "ts": NOW}, obs())
    assert read_totals() == {"operator:1": (1, 0, 0, 0)}


def test_last_use_is_the_latest_observation_whatever_the_batch_order():
    push(obs(ts=NOW - 5))
    push(obs(ts=NOW - 60))  # a slower web process drains an older observation later
    (row,) = usage.totals(usage.window_start(days=1))
    assert row.last_used_at.timestamp() == pytest.approx(NOW - 5, abs=1e-3)
    usage.fold()
    push(obs(ts=NOW - 30))
    (row,) = usage.totals(usage.window_start(days=1))
    assert row.last_used_at.timestamp() == pytest.approx(NOW - 5, abs=1e-3)
    usage.fold()
    assert KeyUsage.objects.get().last_used_at.timestamp() == pytest.approx(NOW - 5, abs=1e-3)


def test_fold_moves_the_buffer_into_the_db_and_empties_redis():
    push(obs(prompt_tokens=5, completion_tokens=2), obs("operator:2", name="two", status=500))
    before = read_totals()
    assert usage.fold() == {"folded": 1, "released": 1}
    assert db_totals() == before == {"operator:1": (1, 0, 5, 2), "operator:2": (1, 1, 0, 0)}
    assert usage.buffered(usage.window_start(days=3)) == []
    client = sync_client()
    assert not client.exists(buffer.hour_key(HOUR))
    assert not client.smembers(buffer.pending_key())
    # More traffic into the same hour: F() increments on the same row.
    push(obs(prompt_tokens=1, completion_tokens=1), obs(prompt_tokens=1, completion_tokens=1))
    assert read_totals()["operator:1"] == (3, 0, 7, 4)
    usage.fold()
    assert db_totals()["operator:1"] == (3, 0, 7, 4)
    assert KeyUsage.objects.filter(key_ref="operator:1").count() == 1
    assert usage.fold() == {"folded": 0, "released": 0}  # nothing left: a no-op
    assert db_totals()["operator:1"] == (3, 0, 7, 4)


def test_a_fold_that_died_after_the_rename_loses_nothing():
    push(obs(prompt_tokens=4, completion_tokens=4))
    (claimed,) = usage.claim()  # ... and the task died here
    push(obs(prompt_tokens=1, completion_tokens=2))  # traffic goes on into a fresh hash
    assert read_totals() == {"operator:1": (2, 0, 5, 6)}  # readers see the claimed hash too
    assert usage.fold() == {"folded": 2, "released": 2}
    assert db_totals() == {"operator:1": (2, 0, 5, 6)}
    assert not sync_client().exists(claimed)


def test_a_fold_that_died_after_its_commit_counts_nothing_twice():
    push(obs(prompt_tokens=4, completion_tokens=4), obs(status=429))
    (claimed,) = usage.claim()
    assert usage.apply(claimed)  # committed; the task died before deleting the hash
    assert sync_client().exists(claimed)
    assert UsageFold.objects.filter(name=claimed).exists()
    assert read_totals() == {"operator:1": (2, 1, 4, 4)}  # not double: the folded hash is skipped
    assert usage.apply(claimed) is False  # a second apply is refused
    assert usage.fold() == {"folded": 0, "released": 1}
    assert db_totals() == {"operator:1": (2, 1, 4, 4)}
    assert not sync_client().exists(claimed)
    assert not sync_client().smembers(buffer.pending_key())


def test_distinct_keys_per_hour_are_capped(settings):
    settings.ROUTER_USAGE_KEYS_MAX = 3
    push(*(obs(f"coordinator:k{i}", name=f"k{i}", prompt_tokens=1) for i in range(5)))
    push(obs("coordinator:k0", name="k0", prompt_tokens=1), obs("coordinator:k9", name="k9", prompt_tokens=1))
    totals = read_totals()
    assert totals == {
        "coordinator:k0": (2, 0, 2, 0),
        "coordinator:k1": (1, 0, 1, 0),
        "coordinator:k2": (1, 0, 1, 0),
        buffer.OVERFLOW: (3, 0, 3, 0),
    }
    # The cap is per hour, not per buffer hash: a fold does not reset it.
    usage.fold()
    push(obs("coordinator:k7", name="k7"))
    assert usage.buffered(usage.window_start(days=1))[0].key_ref == buffer.OVERFLOW
    usage.fold()
    assert sum(t[0] for t in db_totals().values()) == 8
    assert KeyUsage.objects.values("key_ref").distinct().count() == 4
    assert KeyUsage.objects.get(key_ref=buffer.OVERFLOW).name == buffer.OVERFLOW_NAME


def test_the_running_drainer_counts_recorded_observations(settings):
    """observe.record → run_drainer → the usage hash (the hot path does no Redis call)."""

    async def run() -> None:
        task = asyncio.create_task(observe.run_drainer(0.05))
        try:
            observe.record(
                {
                    "key_id": "operator:7",
                    "key": "seven",
                    "key_source": "operator",
                    "status": 200,
                    "usage": {"prompt_tokens": 12, "completion_tokens": 34},
                }
            )
            client = aioredis.Redis.from_url(settings.REDIS_URL)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not await client.hget(
                buffer.hour_key(int(time.time() // 3600 * 3600)), "operator:7|completion"
            ):
                await asyncio.sleep(0.05)
            await client.aclose()
        finally:
            task.cancel()

    asyncio.run(run())
    wait_until(lambda: read_totals().get("operator:7"), 5, what="the drained usage")
    assert read_totals()["operator:7"] == (1, 0, 12, 34)


def test_beat_schedules_the_fold_as_a_registered_task():
    from config.celery import app

    app.loader.import_default_modules()  # what the worker does at start (autodiscovery)
    entry = app.conf.beat_schedule["keys-fold-usage"]
    assert entry["task"] in app.tasks
    assert entry["schedule"] <= 60


def test_the_task_folds(settings):
    from keys.tasks import fold_usage

    push(obs(prompt_tokens=3, completion_tokens=9))
    assert fold_usage() == {"folded": 1, "released": 1}
    assert db_totals() == {"operator:1": (1, 0, 3, 9)}


def keyusage(*args: str) -> str:
    from io import StringIO

    from django.core.management import call_command

    out = StringIO()
    call_command("keyusage", *args, stdout=out)
    return out.getvalue()


def test_keyusage_command_windows_keys_and_grouping():
    from django.core.management.base import CommandError

    from keys.models import ApiKey
    from keys.services import key_create

    key, _ = key_create(name="cli-key")
    ref = f"operator:{key.pk}"
    push(obs(ref, name="cli-key", prompt_tokens=5, completion_tokens=6), obs("operator:99", name="gone"))
    push(obs(ref, name="cli-key", status=500, ts=NOW - 2 * 86_400))  # outside --days 1
    usage.fold()
    push(obs(ref, name="cli-key", prompt_tokens=1, completion_tokens=1))  # buffered only

    table = keyusage("--days", "1").splitlines()
    row = next(li for li in table if li.startswith("cli-key "))
    assert row.split()[1:7] == [ref, "operator", "2", "0", "6", "7"]
    assert next(li for li in table if li.startswith("TOTAL")).split()[1:5] == ["3", "0", "6", "7"]
    assert "operator:99" in "\n".join(table)  # a key without a row any more still shows

    three = keyusage("--days", "3", "--key", "cli-key").splitlines()
    assert [li.split()[1:7] for li in three if li.startswith("cli-key ")] == [[ref, "operator", "3", "1", "6", "7"]]
    since = datetime.fromtimestamp(NOW - 2 * 86_400, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert keyusage("--since", since, "--key", ref, "--csv") == keyusage("--days", "3", "--key", ref, "--csv")
    by_day = [li for li in keyusage("--days", "3", "--key", ref, "--by", "day").splitlines() if ref in li]
    assert len(by_day) == 2  # two UTC days
    by_hour = keyusage("--days", "3", "--key", ref, "--by", "hour", "--csv").splitlines()
    assert by_hour[0].startswith("hour_utc,key_ref") and len(by_hour) == 3

    with pytest.raises(CommandError):
        keyusage("--days", "1", "--since", since)
    with pytest.raises(CommandError):
        keyusage("--key", "no-such-key")
    key_create(name="cli-key")  # two keys of one name: ask for the id
    with pytest.raises(CommandError, match="names 2 keys"):
        keyusage("--key", "cli-key")
    assert ApiKey.objects.filter(name="cli-key").count() == 2
    assert "No key usage" in keyusage("--since", "2001-01-01", "--key", "operator:12345")

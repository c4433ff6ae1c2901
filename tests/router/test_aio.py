"""check_cancelled (router/aio.py) against a real Redis: a loop of Redis
commands, cancelled at random moments, always stops. Without the check
about every other such cancel is lost on Python 3.11 (redis-py writes under
asyncio.wait_for, which drops a cancel that lands as the write completes)."""

from __future__ import annotations

import asyncio
import random
import uuid

import redis.asyncio as aioredis
from django.conf import settings

from router.aio import check_cancelled


async def test_a_loop_on_redis_commands_always_stops_when_cancelled() -> None:
    client = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=5)
    key = f"test:aio:{uuid.uuid4().hex}"
    rnd = random.Random(11)

    async def loop() -> None:
        while True:
            await client.set(key, "1", px=5000)
            check_cancelled()

    try:
        for _ in range(40):
            task = asyncio.create_task(loop())
            await asyncio.sleep(rnd.random() * 0.003)
            task.cancel()
            done, _ = await asyncio.wait([task], timeout=10)
            assert done and task.cancelled(), "the loop ran on after its cancel"
    finally:
        await client.delete(key)
        await client.aclose()


async def test_a_task_not_cancelled_goes_on() -> None:
    check_cancelled()
    await asyncio.sleep(0)
    check_cancelled()

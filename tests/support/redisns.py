"""A Redis namespace of one test: a unique ROUTER_REDIS_PREFIX, dropped after.

Tests share the machine's one Redis; every key the router writes starts with
ROUTER_REDIS_PREFIX, so a prefix of the test's own keeps tests apart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from redis.exceptions import RedisError

from router.redis import sync_client


def drop_prefix(prefix: str) -> None:
    """Delete every key under `prefix` (Redis being down is not the cleanup's failure)."""
    try:
        client = sync_client()
        keys = list(client.scan_iter(match=prefix + "*", count=1000))
        if keys:
            client.delete(*keys)
    except RedisError:
        pass


def isolated_prefix(settings, label: str) -> Iterator[str]:
    """Body of a fixture: point settings.ROUTER_REDIS_PREFIX at a fresh
    `test:<label>:<uuid>:` namespace, yield it, drop its keys afterwards."""
    value = f"test:{label}:{uuid.uuid4().hex}:"
    settings.ROUTER_REDIS_PREFIX = value
    yield value
    drop_prefix(value)


def drained_usage(*items: dict) -> None:
    """One drainer batch of observations through the real `router.usage.add`
    on a real async pipeline, executed (what `observe.run_drainer` does)."""
    import asyncio

    import redis.asyncio as aioredis
    from django.conf import settings

    from router import usage

    async def run() -> None:
        client = aioredis.Redis.from_url(settings.REDIS_URL)
        try:
            pipe = client.pipeline(transaction=False)
            usage.add(pipe, items)
            await pipe.execute()
        finally:
            await client.aclose()

    asyncio.run(run())

from __future__ import annotations

import uuid

import pytest
import redis.asyncio as aioredis
from django.conf import settings


@pytest.fixture
def redis_prefix() -> str:
    """A key prefix no other test run shares."""
    return f"test:keys:{uuid.uuid4().hex}:"


@pytest.fixture
async def redis_client(redis_prefix):
    client = aioredis.Redis.from_url(settings.REDIS_URL)
    yield client
    keys = [k async for k in client.scan_iter(match=redis_prefix + "*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()

"""Redis clients, one of each kind per process, created lazily."""

from __future__ import annotations

import asyncio
import functools

import redis
import redis.asyncio as aioredis
from django.conf import settings


@functools.cache
def sync_client() -> redis.Redis:
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


_async_clients: dict[int, aioredis.Redis] = {}


def async_client() -> aioredis.Redis:
    """One asyncio client per event loop (a client is bound to its loop)."""
    loop = asyncio.get_running_loop()
    client = _async_clients.get(id(loop))
    if client is None:
        client = aioredis.Redis.from_url(
            settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2
        )
        _async_clients[id(loop)] = client
    return client

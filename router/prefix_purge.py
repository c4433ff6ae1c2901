"""Purging the `cache_aware` prefix index of every web process.

Each web process keeps its own index (router/core/kvindex.py): what it
routed where. A purge is published on `<prefix>prefix-index:purge` and every
web process subscribed to it (over the runtime's one pub/sub connection,
`router.runtime.on_channel`) forgets, on its event loop, either one
backend's entries (the payload is its name; O(1): its epoch ends) or all of
them (an empty payload). The next requests rebuild it as they are routed.
A purge published while a process is not subscribed (a Redis outage) does
not reach it; PUBLISH's count says how many processes it reached.
"""

from __future__ import annotations

import logging

from django.conf import settings

from .redis import sync_client
from .runtime import get_runtime, on_channel

log = logging.getLogger(__name__)


def purge_channel() -> str:
    return settings.ROUTER_REDIS_PREFIX + "prefix-index:purge"


def purge(backend: str | None = None) -> int:
    """Tell every web process to forget `backend`'s prefixes (None: all);
    how many processes were subscribed to hear it. Raises RedisError."""
    return int(sync_client().publish(purge_channel(), (backend or "").encode()))


def purged(data: bytes | str | None) -> None:
    """A purge published by `purge` (any process): apply it to this
    process's index, if it has one (the strategy is cache_aware)."""
    name = data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")
    index = get_runtime().prefix_index
    if index is None:
        return
    if name:
        index.forget(name)
    else:
        index.clear()
    log.info("prefix index purged", extra={"backend": name or "*", "entries": len(index)})


on_channel(purge_channel, purged)

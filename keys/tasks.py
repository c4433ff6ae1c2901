"""Background work of the keys app (Celery worker, scheduled by beat).

`fold_usage` runs every ~30 s (config/celery.py) and moves the per-key usage
the web processes' drainers buffered in Redis into KeyUsage (keys/usage.py:
claim → apply → release, safe to die at any step).
"""

from __future__ import annotations

import logging

from celery import shared_task
from redis.exceptions import RedisError

from . import usage

log = logging.getLogger(__name__)


@shared_task(name="keys.fold_usage", ignore_result=True, expires=30)
def fold_usage() -> dict[str, int]:
    try:
        return usage.fold()
    except RedisError as exc:  # the buffer waits in Redis (TTL) for the next run
        log.warning("key usage not folded: %s", type(exc).__name__)
        return {"folded": 0, "released": 0}

"""Whether this node's events process is subscribed to the event bus.

While subscribed, the events process (appproxy/subscriber.py) keeps a
short-lived key in the node's Redis; registration waits for it (subscribe
before registering) and every mode's /status shows it. The key is per node
and authority: nodes sharing a deployment's Redis namespace each need their
own.
"""

from __future__ import annotations

from django.conf import settings as django_settings
from redis.exceptions import RedisError

from router.redis import sync_client

__all__ = ["alive_key", "subscriber_alive"]


def alive_key(authority: str) -> str:
    # Per node: nodes sharing a deployment's Redis namespace each need their own.
    return f"{django_settings.ROUTER_REDIS_PREFIX}appproxy:events:{django_settings.ROUTER_NODE_ID}:{authority}"


def subscriber_alive(authority: str) -> bool:
    try:
        return bool(sync_client().exists(alive_key(authority)))
    except RedisError:
        return False

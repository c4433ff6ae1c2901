"""This node's coordinator identity: one ``node_id`` per node start (seed §9.5).

The coordinator tracks liveness per node (TTL) and counts strict-revocation
acks per node, so every process of one node — web, tasks, events — must send
the same id, and a restarted node must send a new one. It is never written
to the database or to disk.

Where it comes from, in order:
1. ``APPPROXY_NODE_ID`` in the environment. ``manage.py runnode`` sets a fresh
   uuid4 there at every start, and its children inherit it.
2. Otherwise the tasks process (which owns registration) draws a uuid4 once
   per process start and announces it in the node's Redis namespace
   (``announce``, refreshed by the 1 s tick with a TTL); the web and events
   processes read it from there (``current``). A node whose processes are
   started one by one thus still shares one id; restarting its tasks
   process starts a new node session.

The announcement key carries ROUTER_NODE_ID (the var-dir fingerprint), so two
nodes that share a deployment's Redis namespace never read each other's id.
"""

from __future__ import annotations

import os
import uuid

from django.conf import settings
from redis.exceptions import RedisError

from router.redis import sync_client

__all__ = ["ENV", "announce", "current", "own"]

ENV = "APPPROXY_NODE_ID"
ANNOUNCE_TTL = 30  # seconds; the tick refreshes it every second
_own: str | None = None


def _key() -> str:
    return f"{settings.ROUTER_REDIS_PREFIX}appproxy:node:{settings.ROUTER_NODE_ID}"


def own() -> str:
    """The id this process registers with (the tasks process)."""
    global _own
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    if _own is None:
        _own = str(uuid.uuid4())
    return _own


def announce() -> None:
    """Publish ``own()`` for the node's other processes (no-op with the env set)."""
    if os.environ.get(ENV, "").strip():
        return
    try:
        sync_client().set(_key(), own(), ex=ANNOUNCE_TTL)
    except RedisError:
        pass


def current() -> str:
    """The node's id as seen from any of its processes ("" while unknown)."""
    env = os.environ.get(ENV, "").strip()
    if env:
        return env
    if _own is not None:
        return _own
    try:
        value = sync_client().get(_key())
    except RedisError:
        return ""
    if isinstance(value, bytes):
        return value.decode()
    return value or ""

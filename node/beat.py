"""The beat process: one per node, and quiet while Redis is away.

One beat per node: a Redis lock held (and renewed) by the beat process.

Two beats on one node (an orphan of a killed worker, a second `make run`)
would queue every periodic task twice. Beat takes the lock in `beat_init`
before it schedules anything; a second beat waits (logging once) until the
lock is free, so a restarted beat takes over as soon as the old one is gone
(at most LOCK_TTL_S after it was killed). A beat that finds its lock held by
another (Redis lost it during an outage and another beat took it) exits; its
supervisor restarts it and it waits.

The lock is per node (ROUTER_NODE_ID, the var dir), inside the deployment's
Redis namespace.

Without Redis (the broker) every due task fails to send; Celery's scheduler
logs each failure with a stack trace, several per second. QuietScheduler logs
one warning per outage and one on recovery instead.
"""

from __future__ import annotations

import atexit
import logging
import os
import socket
import threading
import time
import uuid

from celery.beat import PersistentScheduler
from django.conf import settings
from kombu.exceptions import OperationalError
from redis.exceptions import RedisError

from router.redis import sync_client

log = logging.getLogger(__name__)

LOCK_TTL_S = 15
RENEW_S = 5.0

# Renew if ours, take if free (expired during an outage), else report lost.
_RENEW = """
local v = redis.call('get', KEYS[1])
if v == ARGV[1] then redis.call('expire', KEYS[1], ARGV[2]) return 1 end
if not v then redis.call('set', KEYS[1], ARGV[1], 'EX', ARGV[2]) return 1 end
return 0
"""
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def lock_key() -> str:
    return f"{settings.ROUTER_REDIS_PREFIX}beat:{settings.ROUTER_NODE_ID}"


def acquire(poll_s: float = 1.0) -> str:
    """Block until this process holds the node's beat lock; return the token."""
    token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    key = lock_key()
    told: str | None = None
    while True:
        try:
            if sync_client().set(key, token, nx=True, ex=LOCK_TTL_S):
                if told:
                    log.warning("beat: lock %s acquired; scheduling", key)
                return token
            holder = sync_client().get(key)
            if isinstance(holder, bytes):
                holder = holder.decode(errors="replace")
            why = f"another beat ({holder or '?'}) holds {key}"
        except RedisError as exc:
            why = f"Redis unavailable for the beat lock ({type(exc).__name__})"
        if why != told:
            log.warning("beat: %s; waiting before scheduling anything", why)
            told = why
        time.sleep(poll_s)


def _renew_forever(token: str) -> None:
    key = lock_key()
    while True:
        time.sleep(RENEW_S)
        try:
            held = sync_client().eval(_RENEW, 1, key, token, LOCK_TTL_S)
        except RedisError:
            continue  # beat itself reports the broker outage, once
        if not held:
            log.error("beat: lock %s taken by another beat; exiting", key)
            os._exit(3)


def _release(token: str) -> None:
    try:
        sync_client().eval(_RELEASE, 1, lock_key(), token)
    except RedisError:
        pass


def hold() -> None:
    """Acquire, then renew in a daemon thread; released at exit."""
    token = acquire()
    atexit.register(_release, token)
    threading.Thread(target=_renew_forever, args=(token,), name="beat-lock", daemon=True).start()


def _broker_error(exc: BaseException) -> str | None:
    """The connection error under Celery's SchedulingError wrapper, if any."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, (OperationalError, RedisError, OSError)):
            return f"{type(seen).__name__}: {seen}"[:200]
        seen = seen.__cause__ or seen.__context__
    return None


class QuietScheduler(PersistentScheduler):
    """PersistentScheduler whose broker outages cost two log lines."""

    _down_since: float | None = None

    def _outage(self, cause: str) -> None:
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning("beat: broker unavailable (%s); periodic tasks (probes, config sync) are not "
                        "sent until it returns", cause)

    def _ensure_connected(self):
        # Celery logs an error for each connection retry; one warning per outage.
        def retrying(exc, interval):
            self._outage(f"{type(exc).__name__}: {exc}"[:200])

        return self.connection.ensure_connection(retrying, self.app.conf.broker_connection_max_retries)

    def apply_entry(self, entry, producer=None):
        try:
            self.apply_async(entry, producer=producer, advance=False)
        except Exception as exc:
            cause = _broker_error(exc)
            if cause is None:
                log.error("beat: scheduled task %s not sent: %s", entry.name, exc, exc_info=True)
            else:
                self._outage(cause)
        else:
            if self._down_since is not None:
                log.warning("beat: broker reachable again after %.0fs; periodic tasks resumed",
                            time.monotonic() - self._down_since)
                self._down_since = None

"""Celery tasks of the AppProxy worker (the tasks process owns the REST side).

Beat runs ``appproxy.tick`` every second; the tick reads the config and the
persisted WorkerState and sends whichever of ``appproxy.register``,
``appproxy.heartbeat`` and ``appproxy.reconcile`` is due
(``lifecycle.due``). Beat schedules are static and the intervals live in the
YAML, which can change at run time: hence a tick rather than one beat entry
per interval.

Invariants:
- Tasks take no arguments and are idempotent: each re-checks that its job is
  still due under a per-job Redis lock, so a duplicate send is a no-op.
- Each send sets ``expires`` no longer than the job's interval.
- ``BOOT_ID`` is fresh per tasks-process start (stored as WorkerState.node_id):
  a restarted process registers again and pulls in full.
- At graceful shutdown (``worker_shutdown``) the worker is deregistered.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterator

from celery import shared_task
from celery.signals import worker_shutdown
from django.conf import settings as django_settings
from redis.exceptions import LockError, RedisError

from router.config_schema import ConfigError
from router.redis import sync_client

from . import lifecycle, worker
from .config import AppProxySettings, load_settings
from .services import clear_mirror
from .subscriber import subscriber_alive

log = logging.getLogger(__name__)

BOOT_ID = str(uuid.uuid4())
JOB_TTL = 60.0
_waiting_since: dict[str, float] = {}


_UNSET = object()
_cleared_for: object = _UNSET


def _settings() -> AppProxySettings | None:
    """The enabled section, or None (disabled, absent or invalid)."""
    global _cleared_for

    try:
        s = load_settings()
    except ConfigError as exc:
        log.error("appproxy: config error: %s", exc)
        return None  # an invalid file never clears anything
    if s is not None and s.enabled:
        _cleared_for = _UNSET
        return s
    if _cleared_for is not s:  # once per config change: a disabled worker serves no circuits
        if clear_mirror() is not None:
            log.info("appproxy: disabled; mirrored circuits and their backends removed")
        _cleared_for = s
    return None


def _lock_name(authority: str, job: str) -> str:
    return f"{django_settings.ROUTER_REDIS_PREFIX}appproxy:job:{authority}:{job}"


_LOCK_OF = {lifecycle.REGISTER: "session", lifecycle.HEARTBEAT: "session", lifecycle.RECONCILE: "reconcile"}


@contextlib.contextmanager
def _exclusive(authority: str, job: str) -> Iterator[bool]:
    lock = sync_client().lock(_lock_name(authority, _LOCK_OF[job]), timeout=JOB_TTL, thread_local=False)
    try:
        got = lock.acquire(blocking=False)
    except RedisError as exc:
        log.warning("appproxy: Redis unavailable for the job lock (%s)", type(exc).__name__)
        got = False
    try:
        yield got
    finally:
        if got:
            with contextlib.suppress(LockError, RedisError):
                lock.release()


def _busy(authority: str, job: str) -> bool:
    try:
        return bool(sync_client().exists(_lock_name(authority, _LOCK_OF[job])))
    except RedisError:
        return True


def _subscriber_ready(s: AppProxySettings) -> bool:
    """Subscribe before registering (reference §4), within a grace period."""
    if not s.events_enabled:
        return True
    if subscriber_alive(s.authority):
        _waiting_since.pop(s.authority, None)
        return True
    if s.authority not in _waiting_since:
        log.info("appproxy: waiting for the events process to subscribe before registering")
    since = _waiting_since.setdefault(s.authority, time.monotonic())
    waited = time.monotonic() - since
    if waited >= s.subscribe_grace:
        log.warning(
            "appproxy: no events subscriber after %.0fs (is `manage.py runworker appproxy` running?); "
            "registering anyway, created events will not be acked",
            waited,
        )
        return True
    return False


@shared_task(name="appproxy.tick", ignore_result=True, expires=1.0)
def tick() -> list[str]:
    s = _settings()
    if s is None:
        return []
    row = worker.state(s.authority)
    jobs = lifecycle.due(
        worker.view(row),
        boot_id=BOOT_ID,
        now=time.time(),
        heartbeat_period=s.heartbeat_period,
        reconcile_interval=s.reconcile_interval,
    )
    sent = []
    for job in jobs:
        if _busy(s.authority, job):
            continue
        task, expires = _JOBS[job]
        task.apply_async(expires=expires(s))
        sent.append(job)
    return sent


@shared_task(name="appproxy.register", ignore_result=True, expires=10.0)
def register() -> None:
    s = _settings()
    if s is None:
        return
    with _exclusive(s.authority, lifecycle.REGISTER) as held:
        if not held:
            return
        decided = lifecycle.due(
            worker.view(worker.state(s.authority)),
            boot_id=BOOT_ID,
            now=time.time(),
            heartbeat_period=s.heartbeat_period,
            reconcile_interval=s.reconcile_interval,
        )
        if decided != (lifecycle.REGISTER,) or not _subscriber_ready(s):
            return
        worker.register(s, boot_id=BOOT_ID)


@shared_task(name="appproxy.heartbeat", ignore_result=True, expires=10.0)
def heartbeat() -> None:
    s = _settings()
    if s is None:
        return
    with _exclusive(s.authority, lifecycle.HEARTBEAT) as held:
        if held:
            worker.heartbeat(s, boot_id=BOOT_ID)


@shared_task(name="appproxy.reconcile", ignore_result=True, expires=15.0)
def reconcile() -> None:
    s = _settings()
    if s is None:
        return
    with _exclusive(s.authority, lifecycle.RECONCILE) as held:
        if held:
            worker.reconcile(s, boot_id=BOOT_ID)


_JOBS = {
    lifecycle.REGISTER: (register, lambda s: 10.0),
    lifecycle.HEARTBEAT: (heartbeat, lambda s: max(1.0, s.heartbeat_period)),
    lifecycle.RECONCILE: (reconcile, lambda s: max(1.0, s.reconcile_interval)),
}


@worker_shutdown.connect
def _deregister_at_shutdown(**_kwargs) -> None:
    s = _settings()
    if s is None:
        return
    try:
        worker.deregister(s, boot_id=BOOT_ID)
    except Exception:  # shutdown must go on
        log.exception("appproxy: deregistration at shutdown failed")

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
- The node session id (appproxy.node: ``APPPROXY_NODE_ID`` from runnode, else
  fresh per tasks-process start) keys this node's WorkerState row: a new
  session registers again and pulls in full; nodes sharing one database each
  keep their own row and never take turns registering.
- Both modes run here: the legacy wildcard worker (``appproxy``) and the
  ROUTER worker (``appproxy_router``); appproxy.modes picks the enabled one,
  and what only another mode keeps is dropped (``Mode.clear``).
- At graceful shutdown (``worker_shutdown``) the worker is deregistered.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

from celery import shared_task
from celery.signals import worker_ready, worker_shutdown
from django.conf import settings as django_settings
from redis.exceptions import LockError, RedisError

from router.config_schema import ConfigError
from router.redis import sync_client

from . import lifecycle, node, worker
from .modes import MODES, Settings, active_settings
from .reconcile import clear_mirror
from .subscribed import subscriber_alive

log = logging.getLogger(__name__)

JOB_TTL = 60.0
_waiting_since: dict[str, float] = {}


_UNSET = object()
_cleared_for: object = _UNSET
_others_cleared_for: object = _UNSET


def _settings() -> Settings | None:
    """The enabled section, or None (disabled, absent or invalid)."""
    global _cleared_for, _others_cleared_for

    try:
        s = active_settings()
    except ConfigError as exc:
        log.error("appproxy: config error: %s", exc)
        return None  # an invalid file never clears anything
    if s is not None and s.enabled:
        if _others_cleared_for is not s:
            # E.g. legacy mode: no coordinator key or publication of an
            # earlier ROUTER configuration may stay valid (checked once per config).
            for mode in MODES:
                if mode.name != s.mode and mode.clear():
                    log.info("%s: not the active mode; %s removed", mode.section, mode.cleared)
            _others_cleared_for = s
        _cleared_for = _UNSET
        return s
    if _cleared_for is not s:  # once per config change: a disabled worker serves no circuits
        if clear_mirror() is not None:
            log.info("appproxy: disabled; mirrored circuits and their backends removed")
        for mode in MODES:
            if mode.clear():
                log.info("%s: disabled; %s removed", mode.section, mode.cleared)
        _cleared_for = s
    return None


def _boot() -> str:
    return node.own()


def _lock_name(authority: str, job: str) -> str:
    return f"{django_settings.ROUTER_REDIS_PREFIX}appproxy:job:{django_settings.ROUTER_NODE_ID}:{authority}:{job}"


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


def _subscriber_ready(s: Settings) -> bool:
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


def own_queue(worker: str) -> str:
    """The queue only the worker named `worker` (its Celery nodename) consumes
    (config/celery.py adds it at the worker's start)."""
    return f"{django_settings.CELERY_TASK_DEFAULT_QUEUE}:{worker}"


@shared_task(name="appproxy.tick", ignore_result=True, expires=1.0, bind=True)
def tick(self) -> list[str]:
    s = _settings()
    if s is None:
        return []
    node.announce()
    row = worker.state(s.authority, _boot())
    jobs = lifecycle.due(
        worker.view(row),
        boot_id=_boot(),
        now=time.time(),
        heartbeat_period=s.heartbeat_period,
        reconcile_interval=s.reconcile_interval,
    )
    sent = []
    for job in jobs:
        if _busy(s.authority, job):
            continue
        if job == lifecycle.RECONCILE and _busy(s.authority, lifecycle.REGISTER):
            # A registration in flight pulls itself (worker.register), and a
            # heartbeat is over within the tick: a reconcile beside a first
            # pull fetched and compared the whole cluster a second time while
            # the first still wrote it (a first boot at 5,000 circuits: ~3 s
            # of CPU and the DB's write lock, beside the web processes' reload).
            continue
        task, expires = _JOBS[job]
        # To this worker's own queue: the job is about this node (see own_queue).
        worker_name = getattr(self.request, "hostname", None)
        if worker_name:
            task.apply_async(expires=expires(s), queue=own_queue(worker_name))
        else:  # called in-process (no worker): any worker of the node will do
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
            worker.view(worker.state(s.authority, _boot())),
            boot_id=_boot(),
            now=time.time(),
            heartbeat_period=s.heartbeat_period,
            reconcile_interval=s.reconcile_interval,
        )
        if decided != (lifecycle.REGISTER,) or not _subscriber_ready(s):
            return
        worker.register(s, boot_id=_boot())


@shared_task(name="appproxy.heartbeat", ignore_result=True, expires=10.0)
def heartbeat() -> None:
    s = _settings()
    if s is None:
        return
    with _exclusive(s.authority, lifecycle.HEARTBEAT) as held:
        if held:
            worker.heartbeat(s, boot_id=_boot())


@shared_task(name="appproxy.reconcile", ignore_result=True, expires=15.0)
def reconcile() -> None:
    s = _settings()
    if s is None:
        return
    with _exclusive(s.authority, lifecycle.RECONCILE) as held:
        if held:
            worker.reconcile(s, boot_id=_boot())


_JOBS = {
    lifecycle.REGISTER: (register, lambda s: 10.0),
    lifecycle.HEARTBEAT: (heartbeat, lambda s: max(1.0, s.heartbeat_period)),
    lifecycle.RECONCILE: (reconcile, lambda s: max(1.0, s.reconcile_interval)),
}


@worker_ready.connect
def _tick_at_start(sender=None, **_kwargs) -> None:
    """The first tick as soon as the worker consumes, not at beat's first
    second: a first boot registers (and pulls) up to a second or two
    earlier, beat still starting beside four other processes."""
    hostname = getattr(sender, "hostname", None)
    if not hostname:
        return
    try:
        tick.apply_async(expires=5.0, queue=own_queue(str(hostname)))
    except Exception:  # beat's tick follows anyway; never keep the worker from starting
        log.warning("appproxy: the first tick could not be sent; beat's follows", exc_info=True)


@worker_shutdown.connect
def _deregister_at_shutdown(**_kwargs) -> None:
    s = _settings()
    if s is None:
        return
    try:
        worker.deregister(s, boot_id=_boot())
    except Exception:  # shutdown must go on
        log.exception("appproxy: deregistration at shutdown failed")

"""The worker's conversation with the coordinator (reference §7.1, LEG-1/2).

Called by the Celery tasks (appproxy/tasks.py). Lifecycle of one tasks
process: wait until the events process has subscribed (bounded by
``subscribe_grace``) → PUT /api/worker → PATCH at once → full pull →
PATCH every ``heartbeat_period`` and pull every ``reconcile_interval`` →
DELETE at shutdown.

Invariants:
- Every outcome is persisted in WorkerState (the web process reads it for
  /readyz and /status; the tick reads it to decide what is due).
- A failed call never raises out of here: it is counted, logged without
  secrets, and delays the next call with exponential backoff (``retry_at``).
- A 404 on a worker path means the coordinator forgot us: the next tick
  registers again (the same authority keeps its id upstream).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone
from redis.exceptions import LockError

from router import gcwork

from . import lifecycle, modes
from .client import CoordinatorClient, CoordinatorError, CoordinatorUnavailable, WorkerNotFound, client_for
from .models import WorkerState

log = logging.getLogger(__name__)

__all__ = ["deregister", "heartbeat", "reconcile", "register", "request_pull", "state", "view"]


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def state(authority: str, node_id: str) -> WorkerState:
    """This node's row under the authority (one per node session)."""
    row, _ = WorkerState.objects.get_or_create(authority=authority, node_id=node_id)
    return row


def _rows(authority: str, node_id: str):
    return WorkerState.objects.filter(authority=authority, node_id=node_id)


def view(row: WorkerState) -> lifecycle.View:
    row.with_unchanged_pulls()  # an unchanged pull's time lives in Redis
    return lifecycle.View(
        worker_id=row.worker_id,
        node_id=row.node_id,
        last_heartbeat=_epoch(row.last_heartbeat_at),
        last_pull=_epoch(row.last_pull_at),
        retry_at=_epoch(row.retry_at),
        pull_requested=row.pull_requested_at is not None,
    )


def _ok(authority: str, node_id: str, **fields) -> None:
    _rows(authority, node_id).update(failures=0, retry_at=None, last_error="", updated_at=timezone.now(), **fields)


def _lost(authority: str, node_id: str, worker_id: str) -> None:
    log.warning("appproxy: the coordinator does not know worker %s; registering again", worker_id)
    _rows(authority, node_id).update(worker_id="", status="lost", revision="", updated_at=timezone.now())


def _prune(authority: str, node_id: str, heartbeat_period: float) -> None:
    """Drop the rows of node sessions that went quiet (restarted or gone)."""
    quiet = timezone.now() - timedelta(seconds=max(120.0, 6 * heartbeat_period))
    WorkerState.objects.filter(authority=authority, updated_at__lt=quiet).exclude(node_id=node_id).delete()


def _failed(settings: Any, what: str, exc: Exception, node_id: str) -> None:
    row = state(settings.authority, node_id)
    failures = row.failures + 1
    delay = lifecycle.backoff(failures, cap=settings.retry_backoff_max)
    status = "unreachable" if isinstance(exc, CoordinatorUnavailable) else "error"
    WorkerState.objects.filter(pk=row.pk).update(
        failures=failures,
        retry_at=timezone.now() + timedelta(seconds=delay),
        last_error=f"{what}: {exc}"[:500],
        status=status,
        updated_at=timezone.now(),
    )
    log.warning("appproxy: %s failed (%s); next try in %.1fs", what, exc, delay, extra={"failures": failures})


def register(settings: Any, *, boot_id: str) -> bool:
    """PUT /api/worker (the mode's body), then the first heartbeat and the first (full) pull."""
    mode = modes.of(settings)
    with client_for(settings) as client:
        try:
            info = mode.register(client, settings, boot_id)
        except CoordinatorError as exc:
            _failed(settings, "register", exc, boot_id)
            return False
        with transaction.atomic():
            row = state(settings.authority, boot_id)
            first = not row.worker_id
            _ok(
                settings.authority,
                boot_id,
                worker_id=str(info.id),
                mode=settings.mode,
                revision="",  # a (re)registration pulls in full
                registered_at=timezone.now(),
                status="registered",
            )
            _prune(settings.authority, boot_id, settings.heartbeat_period)
        mode.registered(settings, boot_id, first)
        log.info(
            "appproxy: registered",
            extra={
                "authority": settings.authority,
                "worker_id": str(info.id),
                "node_id": boot_id,
                "mode": settings.mode,
            },
        )
        _heartbeat(settings, client, str(info.id), boot_id)
        _pull(settings, client, str(info.id), boot_id)
    return True


def _heartbeat(settings: Any, client: CoordinatorClient, worker_id: str, node_id: str) -> None:
    try:
        client.heartbeat(worker_id, node_id if modes.of(settings).names_node else None)
    except WorkerNotFound:
        _lost(settings.authority, node_id, worker_id)
        return
    except CoordinatorError as exc:
        _failed(settings, "heartbeat", exc, node_id)
        return
    _ok(settings.authority, node_id, last_heartbeat_at=timezone.now(), status="registered")


def _pull(settings: Any, client: CoordinatorClient, worker_id: str, node_id: str) -> None:
    try:
        with gcwork.paused():  # a pull's objects all live until it ends (router.gcwork)
            _pull_and_apply(settings, client, worker_id, node_id)
    except WorkerNotFound:
        _lost(settings.authority, node_id, worker_id)
    except CoordinatorError as exc:
        _failed(settings, "pull", exc, node_id)
    except LockError:
        log.warning("appproxy: reconcile lock busy; the next tick pulls")


def _pull_and_apply(settings: Any, client: CoordinatorClient, worker_id: str, node_id: str) -> None:
    modes.of(settings).pull(settings, client=client, worker_id=worker_id, node_id=node_id)


def heartbeat(settings: Any, *, boot_id: str) -> None:
    row = state(settings.authority, boot_id)
    now = time.time()
    decided = lifecycle.due(
        view(row),
        boot_id=boot_id,
        now=now,
        heartbeat_period=settings.heartbeat_period,
        reconcile_interval=settings.reconcile_interval,
    )
    if lifecycle.HEARTBEAT not in decided:
        return  # a duplicate dispatch, or someone was faster
    with client_for(settings) as client:
        _heartbeat(settings, client, row.worker_id, boot_id)


def reconcile(settings: Any, *, boot_id: str) -> None:
    row = state(settings.authority, boot_id)
    decided = lifecycle.due(
        view(row),
        boot_id=boot_id,
        now=time.time(),
        heartbeat_period=settings.heartbeat_period,
        reconcile_interval=settings.reconcile_interval,
    )
    if lifecycle.RECONCILE not in decided:
        return
    with client_for(settings) as client:
        _pull(settings, client, row.worker_id, boot_id)


def deregister(settings: Any, *, boot_id: str) -> None:
    """DELETE /api/worker/{id} at graceful shutdown (only if we registered)."""
    row = _rows(settings.authority, boot_id).first()
    if row is None or not row.worker_id:
        return
    try:
        with CoordinatorClient(
            settings.coordinator_url, settings.api_secret, timeout=min(3.0, settings.request_timeout)
        ) as client:
            client.deregister(row.worker_id, boot_id if modes.of(settings).names_node else None)
    except CoordinatorError as exc:
        log.warning("appproxy: deregistration failed: %s", exc)
    WorkerState.objects.filter(pk=row.pk).update(worker_id="", status="deregistered", updated_at=timezone.now())
    log.info("appproxy: deregistered", extra={"authority": settings.authority, "worker_id": row.worker_id})


def request_pull(authority: str, node_id: str = "") -> None:
    """Ask this node's tasks process for a full pull at its next tick (every
    node session of the authority when the id is not known yet)."""
    rows = WorkerState.objects.filter(authority=authority)
    if node_id:
        rows = rows.filter(node_id=node_id)
    rows.update(pull_requested_at=timezone.now())

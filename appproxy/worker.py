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

from django.db import transaction
from django.utils import timezone
from redis.exceptions import LockError

from router.revision import bump_revision

from . import lifecycle
from .client import CoordinatorClient, CoordinatorError, CoordinatorUnavailable, WorkerNotFound
from .config import AppProxySettings
from .models import WorkerState
from .services import pull_and_apply
from .wire import WorkerRegistration

log = logging.getLogger(__name__)

__all__ = ["deregister", "heartbeat", "reconcile", "register", "request_pull", "state", "view"]


def _epoch(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def state(authority: str) -> WorkerState:
    row, _ = WorkerState.objects.get_or_create(authority=authority)
    return row


def view(row: WorkerState) -> lifecycle.View:
    return lifecycle.View(
        worker_id=row.worker_id,
        node_id=row.node_id,
        last_heartbeat=_epoch(row.last_heartbeat_at),
        last_pull=_epoch(row.last_pull_at),
        retry_at=_epoch(row.retry_at),
        pull_requested=row.pull_requested_at is not None,
    )


def client_for(settings: AppProxySettings) -> CoordinatorClient:
    return CoordinatorClient(settings.coordinator_url, settings.api_secret, timeout=settings.request_timeout)


def _ok(authority: str, **fields) -> None:
    WorkerState.objects.filter(authority=authority).update(
        failures=0, retry_at=None, last_error="", updated_at=timezone.now(), **fields
    )


def _failed(settings: AppProxySettings, what: str, exc: Exception) -> None:
    row = state(settings.authority)
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


def register(settings: AppProxySettings, *, boot_id: str) -> bool:
    """PUT /api/worker, then the first heartbeat and the first (full) pull."""
    registration = WorkerRegistration.from_settings(settings, api_port=settings.registration_port())
    with client_for(settings) as client:
        try:
            info = client.register(registration)
        except CoordinatorError as exc:
            _failed(settings, "register", exc)
            return False
        with transaction.atomic():
            row = state(settings.authority)
            first = not row.worker_id
            _ok(
                settings.authority,
                worker_id=str(info.id),
                node_id=boot_id,
                registered_at=timezone.now(),
                status="registered",
            )
            if first:
                bump_revision("appproxy registered")  # /readyz reads it
        log.info(
            "appproxy: registered",
            extra={"authority": settings.authority, "worker_id": str(info.id), "node_id": boot_id},
        )
        _heartbeat(settings, client, str(info.id))
        _pull(settings, client, str(info.id))
    return True


def _heartbeat(settings: AppProxySettings, client: CoordinatorClient, worker_id: str) -> None:
    try:
        client.heartbeat(worker_id)
    except WorkerNotFound:
        log.warning("appproxy: the coordinator does not know worker %s; registering again", worker_id)
        WorkerState.objects.filter(authority=settings.authority).update(node_id="", status="lost")
        return
    except CoordinatorError as exc:
        _failed(settings, "heartbeat", exc)
        return
    _ok(settings.authority, last_heartbeat_at=timezone.now(), status="registered")


def _pull(settings: AppProxySettings, client: CoordinatorClient, worker_id: str) -> None:
    try:
        pull_and_apply(settings, client=client, worker_id=worker_id)
    except WorkerNotFound:
        log.warning("appproxy: the coordinator does not know worker %s; registering again", worker_id)
        WorkerState.objects.filter(authority=settings.authority).update(node_id="", status="lost")
    except CoordinatorError as exc:
        _failed(settings, "pull", exc)
    except LockError:
        log.warning("appproxy: reconcile lock busy; the next tick pulls")


def heartbeat(settings: AppProxySettings, *, boot_id: str) -> None:
    row = state(settings.authority)
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
        _heartbeat(settings, client, row.worker_id)


def reconcile(settings: AppProxySettings, *, boot_id: str) -> None:
    row = state(settings.authority)
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
        _pull(settings, client, row.worker_id)


def deregister(settings: AppProxySettings, *, boot_id: str) -> None:
    """DELETE /api/worker/{id} at graceful shutdown (only if we registered)."""
    row = WorkerState.objects.filter(authority=settings.authority).first()
    if row is None or not row.worker_id or row.node_id != boot_id:
        return
    try:
        with CoordinatorClient(
            settings.coordinator_url, settings.api_secret, timeout=min(3.0, settings.request_timeout)
        ) as client:
            client.deregister(row.worker_id)
    except CoordinatorError as exc:
        log.warning("appproxy: deregistration failed: %s", exc)
    WorkerState.objects.filter(pk=row.pk).update(node_id="", status="deregistered", updated_at=timezone.now())
    log.info("appproxy: deregistered", extra={"authority": settings.authority, "worker_id": row.worker_id})


def request_pull(authority: str) -> None:
    """Ask the tasks process for a full pull at its next tick."""
    row = state(authority)
    WorkerState.objects.filter(pk=row.pk).update(pull_requested_at=timezone.now())

"""The tick (beat, 1 s) sends each due job of this node at most once at a
time, and no reconcile while a registration is in flight: the registration
pulls itself, and a second pull beside it fetched and compared the whole
cluster again while the first still wrote it (issue 13, first boot)."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from appproxy import node, tasks, worker
from appproxy.models import WorkerState
from router.models import ConfigDocument
from router.redis import sync_client

pytestmark = pytest.mark.django_db

ROUTER = {
    "enabled": True,
    "coordinator_url": "http://127.0.0.1:1",
    "api_secret": "a" * 40,
    "authority": f"tick-{uuid.uuid4().hex[:8]}",
    "hostname": "h",
}


@pytest.fixture
def registered(settings, monkeypatch):
    # Its own Redis namespace (the job locks), and a node id of its own: the
    # tick would otherwise make this process a node other tests see.
    settings.ROUTER_REDIS_PREFIX = f"t{uuid.uuid4().hex[:10]}:"
    monkeypatch.setenv(node.ENV, f"tick-{uuid.uuid4().hex[:8]}")
    ConfigDocument.objects.update_or_create(
        pk=1, defaults={"path": "/x/router.yaml", "digest": uuid.uuid4().hex, "document": {"appproxy_router": ROUTER}}
    )
    s = tasks._settings()
    assert s is not None and s.mode == "router"
    row = worker.state(s.authority, tasks._boot())  # registered, heartbeat fresh, never pulled
    WorkerState.objects.filter(pk=row.pk).update(worker_id=str(uuid.uuid4()), last_heartbeat_at=timezone.now())
    client = sync_client()
    queues = client.keys(settings.CELERY_TASK_DEFAULT_QUEUE + "*")
    yield s
    # What the ticks sent (no worker consumes it here) and the job locks.
    for key in set(client.keys(settings.CELERY_TASK_DEFAULT_QUEUE + "*")) - set(queues):
        client.delete(key)
    client.delete(*client.keys(settings.ROUTER_REDIS_PREFIX + "*") or ["-"])


def _held(s, job: str):
    return sync_client().lock(tasks._lock_name(s.authority, tasks._LOCK_OF[job]), timeout=30, thread_local=False)


@pytest.mark.parametrize("running", ["register", "reconcile"])
def test_no_reconcile_while_a_pull_is_in_flight(registered, running):
    # A registration pulls itself (its first pull); a reconcile is one pull.
    lock = _held(registered, running)
    assert lock.acquire(blocking=False)
    try:
        assert "reconcile" not in tasks.tick.apply().get()
    finally:
        lock.release()
    assert "reconcile" in tasks.tick.apply().get()  # due once nothing else pulls

"""A ROUTER reconcile pull that finds nothing changed neither parses the
circuits again nor touches the mirror, and writes nothing to the DB: its
pull time and count (which schedule the next pull) go to Redis, and every
reader of the node's row sees them; it bumps no revision. With Redis down it
writes the row instead. One that finds a change applies it. Real fake
coordinator (HTTP), real DB, Redis.
"""

from __future__ import annotations

import pytest
from django.db import connection

from appproxy import pulls, worker
from appproxy.models import WorkerState
from appproxy.router_mode import services as router_services
from keys.services import key_create
from router.models import Backend
from router.redis import sync_client
from router.revision import current_revision

from .router_support import registered_router

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(settings):
    with registered_router(settings, replicas=2, name="pull", ack_timeout=0.2) as s:
        endpoint, _ = s.manager.create("svc")  # committed; its 503 only says no ack came
        s.manager.routes(endpoint, s.replicas[0])
        s.manager.publish("chat", {endpoint: 1.0})
        s.endpoint = endpoint
        yield s


def pull(s) -> router_services.ApplyResult:
    return router_services.router_pull_and_apply(s.settings, client=s.client, worker_id=s.worker_id, node_id="n1")


READS: set[str] = set()  # the tables the last writes() call read


def writes(fn):
    """(result, the tables fn wrote to); what it read is left in READS."""
    tables: list[str] = []
    READS.clear()

    def record(execute, sql, params, many, context):
        verb = sql.lstrip().split(" ", 1)[0].upper()
        if verb in ("INSERT", "UPDATE", "DELETE"):
            tables.append(sql.split('"')[1] if '"' in sql else sql[:40])
        elif verb == "SELECT" and ' FROM "' in sql:
            READS.add(sql.split(' FROM "', 1)[1].split('"', 1)[0])
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        result = fn()
    return result, set(tables)


def test_a_pull_that_finds_nothing_changed_writes_nothing_to_the_db(setup):
    first = pull(setup)
    assert first.changed and [b.models for b in Backend.objects.all()] == [["chat"]]
    assert WorkerState.objects.get(node_id="n1").with_unchanged_pulls().last_pull_cpu_ms > 0  # a full pull costs
    revision = current_revision()
    stored = WorkerState.objects.get(node_id="n1")
    pulls, applied_at = stored.pulls_unchanged, stored.last_pull_at

    again, tables = writes(lambda: pull(setup))
    assert not again.changed and current_revision() == revision
    assert tables == set() and "appproxy_circuit" not in READS  # not even parsed
    row = WorkerState.objects.get(node_id="n1")
    assert (row.pulls_unchanged, row.last_pull_at) == (pulls, applied_at)  # the row is as the full pull left it
    seen = row.with_unchanged_pulls()  # what the schedule, /status and the dashboard read
    assert seen.pulls_unchanged == pulls + 1 and seen.last_pull_result == "304" and seen.last_pull_at > applied_at
    assert seen.last_pull_cpu_ms is not None and seen.last_pull_cpu_ms >= 0  # the pull's own CPU, for /status
    view = worker.view(WorkerState.objects.get(node_id="n1"))
    assert view.last_pull == seen.last_pull_at.timestamp()  # the next pull is scheduled from the unchanged one

    # A write that touches no circuit, publication or backend (an operator
    # key) does not make the next unchanged pull apply again.
    key_create(name="ops")
    later, tables = writes(lambda: pull(setup))
    assert not later.changed and tables == set() and "appproxy_circuit" not in READS
    revision = current_revision()

    # One change at the coordinator (a second replica): the next pull applies it.
    setup.manager.routes(setup.endpoint, *setup.replicas)
    changed, tables = writes(lambda: pull(setup))
    assert changed.changed and current_revision() == revision + 1
    assert "router_backend" in tables
    assert (len(changed.plan.add), len(changed.plan.remove)) == (2, 1)  # the list is replaced: new route ids


def test_when_redis_refuses_the_record_an_unchanged_pull_writes_the_row(setup):
    pull(setup)
    before = WorkerState.objects.get(node_id="n1")
    # A real Redis error at the record (a value of the wrong type in its key);
    # the reconcile lock, which also needs Redis, is taken before it.
    sync_client().set(pulls._key(setup.settings.authority, "n1"), "not a hash")
    again, tables = writes(lambda: pull(setup))
    assert not again.changed and tables == {"appproxy_workerstate"}
    row = WorkerState.objects.get(node_id="n1")
    assert row.pulls_unchanged == before.pulls_unchanged + 1 and row.last_pull_result == "304"
    assert row.last_pull_at > before.last_pull_at
    assert row.with_unchanged_pulls().last_pull_at == row.last_pull_at  # unreadable: the row as it is

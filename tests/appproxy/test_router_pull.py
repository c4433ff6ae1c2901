"""A ROUTER reconcile pull that finds nothing changed neither parses the
circuits again nor touches the mirror: it writes only the node's own pull
time and count (which schedule the next pull), and bumps no revision; one
that finds a change applies it. Real fake coordinator (HTTP), real DB, Redis.
"""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pytest
from django.db import connection

from appproxy import router_services
from appproxy.client import CoordinatorClient
from appproxy.models import WorkerState
from appproxy.router_wire import router_registration
from fakes import openai_backend
from keys.services import key_create
from router.core.secret import Secret
from router.models import Backend
from router.revision import current_revision

from .router_support import RouterManager
from .support import API_SECRET, coordinator

pytestmark = pytest.mark.django_db


@pytest.fixture
def setup(settings):
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    settings.ROUTER_REDIS_PREFIX = prefix
    settings.ROUTER_NOTICE_CHANNEL = prefix + "notice"
    replicas = [openai_backend.server_thread(f"pull-{i}", ["served"]).start() for i in range(2)]
    fc = coordinator(ack_timeout=0.2).start()  # no events process here: nothing acks
    authority = f"router-{uuid.uuid4().hex[:8]}"
    client = CoordinatorClient(fc.url, Secret(API_SECRET))
    info = client.register_router(
        router_registration(authority=authority, hostname="127.0.0.1", api_port=8000, traffic_port=None, node_id="n1")
    )
    WorkerState.objects.create(authority=authority, node_id="n1", worker_id=str(info.id), status="registered")
    manager = RouterManager(fc, authority)
    endpoint, _ = manager.create("svc")  # committed; its 503 only says no ack came
    manager.routes(endpoint, replicas[0])
    manager.publish("chat", {endpoint: 1.0})
    yield SimpleNamespace(
        client=client,
        worker_id=str(info.id),
        manager=manager,
        endpoint=endpoint,
        replicas=replicas,
        settings=SimpleNamespace(authority=authority),
    )
    client.close()
    fc.stop()
    for server in replicas:
        server.stop()


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


def test_a_pull_that_finds_nothing_changed_writes_only_the_nodes_pull_time(setup):
    first = pull(setup)
    assert first.changed and [b.models for b in Backend.objects.all()] == [["chat"]]
    revision = current_revision()
    pulls = WorkerState.objects.get(node_id="n1").pulls_unchanged

    again, tables = writes(lambda: pull(setup))
    assert not again.changed and current_revision() == revision
    assert tables == {"appproxy_workerstate"} and "appproxy_circuit" not in READS  # not even parsed
    row = WorkerState.objects.get(node_id="n1")
    assert row.pulls_unchanged == pulls + 1 and row.last_pull_result == "304"

    # A write that touches no circuit, publication or backend (an operator
    # key) does not make the next unchanged pull apply again.
    key_create(name="ops")
    later, tables = writes(lambda: pull(setup))
    assert not later.changed and tables == {"appproxy_workerstate"} and "appproxy_circuit" not in READS
    revision = current_revision()

    # One change at the coordinator (a second replica): the next pull applies it.
    setup.manager.routes(setup.endpoint, *setup.replicas)
    changed, tables = writes(lambda: pull(setup))
    assert changed.changed and current_revision() == revision + 1
    assert "router_backend" in tables
    assert (len(changed.plan.add), len(changed.plan.remove)) == (2, 1)  # the list is replaced: new route ids

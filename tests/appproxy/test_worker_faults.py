"""Faults, end to end: coordinator down at start, lost event-bus connection,
tasks and events process restarts, events disabled / ack timeouts.

The node under fault uses a long reconcile interval (60 s) where the test
must prove that something other than the periodic pull filled a gap.
"""

from __future__ import annotations

import time
import uuid

import pytest
import redis

from appproxy.envelope import ROUTE_UPDATED

from .support import REDIS_URL, Manager, Node, coordinator, eventually, routed_to

MODEL = "served-model"


@pytest.fixture(scope="module")
def replicas():
    from fakes import openai_backend

    servers = {name: openai_backend.server_thread(name, [MODEL]).start() for name in ("f-a", "f-b")}
    yield servers
    for server in servers.values():
        server.stop()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def _worker_state(node: Node) -> dict:
    cols = ["worker_id", "node_id", "status", "registered_at", "last_pull_at", "failures", "last_error"]
    # One row per node session: the newest is the running session's.
    rows = node.db(
        f"SELECT {', '.join(cols)} FROM appproxy_workerstate WHERE authority = ? ORDER BY updated_at DESC, id DESC",
        node.authority,
    )
    return dict(zip(cols, rows[0], strict=True)) if rows else {}


def test_coordinator_down_at_start_then_registers(replicas):
    """While the coordinator is unreachable the node retries with backoff and
    is not ready; once it is up, the node registers and becomes ready."""
    fc = coordinator()  # not started; its port is reserved by Node
    node = Node(fc, backoff_max="1s")
    try:
        node.start(wait_ready=False)
        eventually(lambda: (_worker_state(node).get("failures") or 0) >= 2, 30, "failed attempts")
        state = _worker_state(node)
        assert "register" in state["last_error"] and not state["worker_id"]
        # Once the web process has its first snapshot, /readyz names the reason.
        ready = eventually(lambda: "appproxy_registered" in (r := node.readyz()).json()["checks"] and r, 30)
        assert ready.status_code == 503 and ready.json()["checks"]["appproxy_registered"] is False
        assert "next try in" in node.tasks.logs()
        fc.start()
        node.wait_registered(30)
        eventually(lambda: node.readyz().status_code == 200, 30, "ready")
        assert _worker_state(node)["failures"] == 0
        manager = Manager(fc)
        name = _name("late")
        endpoint_id, created = manager.create(name)
        assert created.status_code == 200, created.text
        manager.routes(endpoint_id, replicas["f-a"])
        eventually(lambda: routed_to(node.chat(node.host(name))) == "f-a", 30, "routable")
    finally:
        node.stop()
        fc.stop()


@pytest.fixture(scope="module")
def slow_pull_node():
    fc = coordinator().start()
    node = Node(fc, reconcile="60s")
    try:
        node.start()
        yield node
    finally:
        node.stop()
        fc.stop()


def _subscriber_connection(authority: str) -> int | None:
    client = redis.Redis.from_url(REDIS_URL)
    for info in client.client_list():
        if info.get("name") == f"appproxy-events:{authority}" and int(info.get("sub", 0) or 0) > 0:
            return int(info["id"])
    return None


def test_lost_bus_connection_reconnects_and_pull_fills_the_gap(slow_pull_node, replicas):
    """CLIENT KILL of the subscriber's connection: it reconnects and the full
    pull it triggers applies the update whose event was lost, long before the
    60 s reconcile interval; later events are applied and acked again."""
    node = slow_pull_node
    manager = Manager(node.fc)
    name = _name("gap")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    conn = eventually(lambda: _subscriber_connection(node.authority), 15, "subscriber connection")
    node.fc.suppress_next_event()  # the update published "while disconnected"
    manager.routes(endpoint_id, replicas["f-a"])
    assert node.fc.events(ROUTE_UPDATED)[-1].suppressed
    redis.Redis.from_url(REDIS_URL).client_kill_filter(_id=conn)
    started = time.monotonic()
    eventually(lambda: routed_to(node.chat(node.host(name))) == "f-a", 20, "gap filled")
    assert time.monotonic() - started < 20
    new_conn = eventually(lambda: _subscriber_connection(node.authority), 15, "re-subscribed")
    assert new_conn != conn
    again = _name("after")
    endpoint2, created2 = manager.create(again)
    assert created2.status_code == 200, created2.text  # acked through the new connection
    manager.routes(endpoint2, replicas["f-b"])
    eventually(lambda: routed_to(node.chat(node.host(again))) == "f-b", 15, "event applied")
    manager.delete(endpoint_id)
    manager.delete(endpoint2)


def test_events_process_restart_pulls_what_it_missed(slow_pull_node, replicas):
    """An event published while the events process is down is lost on the
    bus; the restarted process subscribes, asks for a full pull, and the
    update is routable without waiting for the reconcile interval."""
    node = slow_pull_node
    manager = Manager(node.fc)
    name = _name("evrestart")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    node.events.stop()
    manager.routes(endpoint_id, replicas["f-b"])  # published, nobody listening
    node.events.start()
    eventually(lambda: routed_to(node.chat(node.host(name))) == "f-b", 30, "pulled after restart")
    manager.delete(endpoint_id)


def test_tasks_restart_deregisters_then_registers_and_pulls(slow_pull_node, replicas):
    """Graceful stop of the tasks process DELETEs the worker (LOST at 0 nodes);
    the restarted process registers again (same id) and pulls in full."""
    node = slow_pull_node
    manager = Manager(node.fc)
    name = _name("tasks")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200
    before = _worker_state(node)
    worker_id = before["worker_id"]
    node.tasks.stop()
    row = node.worker_row()
    assert row["status"] == "LOST" and row["nodes"] == 0
    assert _worker_state(node)["status"] == "deregistered"
    # The data plane keeps serving what it has while the tasks process is away.
    assert node.readyz().status_code == 200
    node.fc.suppress_next_event()
    manager.routes(endpoint_id, replicas["f-a"])  # only a pull can bring this
    node.tasks.start()
    eventually(lambda: (r := node.worker_row()) and r["status"] == "ALIVE" and r["nodes"] == 1, 60, "re-registered")
    eventually(lambda: routed_to(node.chat(node.host(name))) == "f-a", 30, "full pull after restart")
    after = _worker_state(node)
    assert after["worker_id"] == worker_id and after["node_id"] != before["node_id"]
    assert after["registered_at"] > before["registered_at"]
    assert after["last_pull_at"] > before["last_pull_at"]
    manager.delete(endpoint_id)


def test_forgotten_worker_registers_again(slow_pull_node, replicas):
    """A coordinator that lost our row answers the heartbeat with 404: the
    worker registers again (a new id) and mirrors that worker's circuits."""
    node = slow_pull_node
    old = node.wait_registered()
    with node.fc.state.lock:
        del node.fc.state.workers[old["id"]]
    fresh = eventually(lambda: (r := node.worker_row()) and r["id"] != old["id"] and r, 30, "registered again")
    eventually(lambda: _worker_state(node)["worker_id"] == fresh["id"], 15, "new id stored")
    manager = Manager(node.fc)
    name = _name("reborn")
    endpoint_id, created = manager.create(name)
    assert created.status_code == 200, created.text
    manager.routes(endpoint_id, replicas["f-b"])
    eventually(lambda: routed_to(node.chat(node.host(name))) == "f-b", 15, "routable")
    assert "registering again" in node.tasks.logs()
    manager.delete(endpoint_id)


def test_events_disabled_pull_converges_and_ack_timeout_path(replicas):
    """With events off the node never acks: the manager's create gets 503
    E10001 after the ack wait, yet the committed circuit, its routes and its
    removal all arrive through the pull within one reconcile interval."""
    fc = coordinator(ack_timeout=1.0).start()
    node = Node(fc, events=False, reconcile="1s")
    try:
        node.start()
        assert not node.events.logs().count("subscribed to the event bus")
        manager = Manager(fc)
        name = _name("noevents")
        endpoint_id, created = manager.create(name)
        assert created.status_code == 503 and "E10001" in created.text
        circuit = manager.circuit(endpoint_id)  # committed anyway
        manager.routes(endpoint_id, replicas["f-a"], replicas["f-b"])

        def converged():
            expected = {
                c["id"]: {(r["kernel_host"], r["kernel_port"]) for r in c["route_info"]}
                for c in fc.circuits()
                if c["worker"] == node.worker_row()["id"]
            }
            return node.mirror() == expected

        started = time.monotonic()
        eventually(converged, 15, "mirror equals the coordinator")
        # One reconcile interval (1 s) plus a tick; generous for a loaded CI box.
        assert time.monotonic() - started < 8
        eventually(lambda: routed_to(node.chat(node.host(name))) in {"f-a", "f-b"}, 15, "routable")
        assert not [a for a in fc.acks() if circuit["id"] in a.circuit_ids]
        manager.delete(endpoint_id)
        eventually(lambda: node.chat(node.host(name)).status_code == 404, 15, "removed by the pull")
        eventually(converged, 15, "mirror equals the coordinator again")
    finally:
        node.stop()
        fc.stop()

"""The cluster view (router/cluster.py writes, node/cluster.py reads) against real Redis: records built from
real Runtime / BackendState objects, published, and read back as processes, a
backend × process matrix and disagreement flags."""

from __future__ import annotations

import asyncio
import os
import time

import orjson
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_h
from hypothesis import strategies as st

from node import cluster as view
from router import cluster
from router.core.backend import BackendSpec
from router.core.health import HealthPolicy
from router.core.snapshot import Snapshot
from router.redis import sync_client
from router.runtime import Runtime
from tests.support.redisns import isolated_prefix
from tests.support.routerproc import wait_until

POLICY = HealthPolicy(failure_threshold=2, cooldown_s=60.0, max_cooldown_s=120.0)


@pytest.fixture(autouse=True)
def prefix(settings):
    yield from isolated_prefix(settings, "cluster")


def snapshot(revision: int, *names: str) -> Snapshot:
    specs = {n: BackendSpec(name=n, url=f"http://127.0.0.1:9/{n}", models=("m",)) for n in names}
    return Snapshot(revision=revision, backends=specs, by_model={"m": tuple(specs.values())}, health=POLICY)


def runtime(revision: int, *names: str, ready: bool = True) -> Runtime:
    rt = Runtime()
    rt.install(snapshot(revision, *names), ready=ready)
    return rt


def open_breaker(rt: Runtime, name: str) -> None:
    """Real requests failing: the breaker opens after failure_threshold."""
    state = rt.states.get(name)
    for _ in range(POLICY.failure_threshold):
        state.on_start()
        state.on_failure(time.monotonic())
    assert state.breaker == "open"


def publish_as(
    settings,
    node: str,
    rt: Runtime,
    *,
    revision_at: float | None = None,
    now: float | None = None,
    ttl: float = cluster.TTL_S,
) -> str:
    settings.ROUTER_NODE_ID = node
    now = time.time() if now is None else now
    record = cluster.web_record(rt, revision_at=now if revision_at is None else revision_at, now=now)
    cluster.publish_sync(record, ttl=ttl)
    return f"{node}/{os.getpid()}"


def kinds(state: dict) -> list[str]:
    return sorted(f["kind"] for f in state["flags"])


def test_matrix_lists_every_process_and_flags_a_backend_healthy_here_and_open_there(settings):
    a, b = runtime(3, "x", "y"), runtime(3, "x", "y")
    open_breaker(a, "x")
    y = b.states.get("y")
    y.on_start()  # one request in flight on b
    y.on_start()
    y.on_success(120.0, time.monotonic())
    pa = publish_as(settings, "node-a", a)
    pb = publish_as(settings, "node-b", b)

    state = view.cluster_state()
    assert [p["id"] for p in state["processes"]] == [pa, pb]
    assert all(p["role"] == "web" and p["ready"] and p["redis_ok"] for p in state["processes"])
    assert {p["id"]: p["in_flight"] for p in state["processes"]} == {pa: 0, pb: 1}
    matrix = {row["name"]: row for row in state["backends"]}
    assert set(matrix) == {"x", "y"}
    x = matrix["x"]["cells"]
    assert x[pa]["verdict"] == "breaker_open" and x[pa]["breaker"] == "open"
    assert 55 <= x[pa]["retry_s"] <= 60  # the next trial, counted down from the cooldown
    assert x[pb]["verdict"] == "healthy" and x[pb]["retry_s"] is None
    assert x[pa].get("flagged") is True and "flagged" not in x[pb]
    assert matrix["y"]["cells"][pb]["ewma_ms"] == 120.0 and matrix["y"]["cells"][pb]["in_flight"] == 1
    assert matrix["x"]["split"] and not matrix["y"]["split"]
    assert kinds(state) == ["backend_split"]
    flag = state["flags"][0]
    assert flag["backend"] == "x" and flag["healthy_on"] == [pb] and flag["unhealthy_on"] == [pa]
    assert "healthy on" in flag["explanation"] and "breaker open" in flag["explanation"]


def test_a_failing_probe_on_one_process_is_a_split_but_a_recovering_breaker_is_not(settings):
    a, b, c = runtime(3, "x", "y"), runtime(3, "x", "y"), runtime(3, "x", "y")
    a.states.get("y").probe_healthy = False
    # c: the breaker of x opened, and its cooldown has elapsed: the next request is the trial.
    state = c.states.get("x")
    state.open_until, state.cooldown = time.monotonic() - 1, 10.0
    publish_as(settings, "node-a", a)
    publish_as(settings, "node-b", b)
    publish_as(settings, "node-c", c)
    got = view.cluster_state()
    assert [(f["kind"], f["backend"]) for f in got["flags"]] == [("backend_split", "y")]
    cells = {row["name"]: row["cells"] for row in got["backends"]}
    assert cells["y"][f"node-a/{os.getpid()}"]["verdict"] == "probe_failing"
    assert cells["x"][f"node-c/{os.getpid()}"]["verdict"] == "trial"


def test_an_older_revision_is_catching_up_at_first_then_a_disagreement(settings):
    now = time.time()
    old, new = runtime(4, "x"), runtime(5, "x")
    pa = publish_as(settings, "node-a", old, revision_at=now - 100)
    publish_as(settings, "node-b", new, revision_at=now - 3)
    got = view.cluster_state(now=now)
    assert got["flags"] == []
    assert got["catching_up"] == [{"process": pa, "revision": 4, "newest": 5}]

    publish_as(settings, "node-b", new, revision_at=now - 30)
    got = view.cluster_state(now=now)
    assert got["catching_up"] == []
    assert kinds(got) == ["revision_behind"]
    assert got["flags"][0]["process"] == pa and got["flags"][0]["newest"] == 5
    assert "revision 4" in got["flags"][0]["explanation"]
    assert next(p for p in got["processes"] if p["id"] == pa)["revision_behind"] is True


def test_the_tasks_process_record_counts_for_the_revision(settings):
    now = time.time()
    publish_as(settings, "node-a", runtime(7, "x"), revision_at=now - 60)
    settings.ROUTER_NODE_ID = "node-t"  # (a real tasks process differs by pid; here by node)
    cluster.publish_sync(cluster.tasks_record(6, now - 120, now))
    got = view.cluster_state(now=now)
    assert [p["role"] for p in got["processes"]] == ["web", "tasks"]  # web processes first
    tasks = next(p for p in got["processes"] if p["role"] == "tasks")
    assert tasks["server"] == "celery" and tasks["backends_listed"] == 0
    assert [(f["kind"], f["process"]) for f in got["flags"]] == [("revision_behind", tasks["id"])]


def test_a_late_heartbeat_is_flagged_and_a_lapsed_ttl_removes_the_process(settings):
    now = time.time()
    live = publish_as(settings, "node-a", runtime(1, "x"))
    late = publish_as(settings, "node-b", runtime(1, "x"), now=now - 9)  # within the TTL, past LATE_S
    got = view.cluster_state()
    assert {p["id"] for p in got["processes"]} == {live, late}
    assert [(f["kind"], f["process"]) for f in got["flags"]] == [("heartbeat_late", late)]

    short = publish_as(settings, "node-c", runtime(1, "x"), ttl=1.0)
    assert short in {p["id"] for p in view.cluster_state()["processes"]}
    wait_until(
        lambda: short not in {p["id"] for p in view.cluster_state()["processes"]},
        15,
        interval=0.2,
        what="the lapsed record to drop out",
    )
    # The reader also dropped it from the index (no dead member accumulates).
    members = {m.decode() for m in sync_client().zrange(cluster.index_key(), 0, -1)}
    assert f"node-c:{os.getpid()}" not in members and f"node-a:{os.getpid()}" in members


def test_not_ready_and_redis_down_are_reported(settings):
    rt = runtime(1, "x", ready=False)
    rt.redis_error = "ConnectionError: refused"
    pid = publish_as(settings, "node-a", rt)
    got = view.cluster_state()
    assert [(f["kind"], f["process"]) for f in got["flags"]] == [("not_ready", pid), ("redis_down", pid)]


def test_the_payload_is_capped_and_keeps_the_unhealthy_backends(settings):
    names = [f"b{i:04d}" for i in range(cluster.MAX_BACKENDS + 100)]
    rt = runtime(1, *names)
    open_breaker(rt, names[-1])  # last by name: kept because it is unhealthy
    record = cluster.web_record(rt, revision_at=time.time())
    assert record["backends_total"] == len(names) and record["backends_healthy"] == len(names) - 1
    assert len(record["backends"]) == cluster.MAX_BACKENDS
    assert record["backends"][0]["n"] == names[-1] and record["backends"][0]["v"] == "breaker_open"
    assert len(orjson.dumps(record)) < 64 * 1024
    settings.ROUTER_NODE_ID = "node-a"
    cluster.publish_sync(record)
    (process,) = view.cluster_state()["processes"]
    assert process["backends_listed"] == cluster.MAX_BACKENDS and process["backends_total"] == len(names)


def test_stale_index_members_are_pruned_on_write(settings):
    settings.ROUTER_NODE_ID = "node-a"
    now = time.time()
    cluster.publish_sync(cluster.tasks_record(1, now, now - 60))  # a heartbeat long past the TTL
    cluster.publish_sync(cluster.tasks_record(1, now, now))  # same member, fresh
    settings.ROUTER_NODE_ID = "node-b"
    cluster.publish_sync(cluster.tasks_record(1, now, now))
    client = sync_client()
    assert client.zcard(cluster.index_key()) == 2
    assert 0 < client.ttl(cluster.index_key()) <= cluster.TTL_S * 5 + 1
    assert 0 < client.pttl(cluster.record_key(f"node-b:{os.getpid()}")) <= cluster.TTL_S * 1000


async def test_the_publisher_task_reports_the_live_runtime_and_withdraws_on_stop(settings):
    settings.ROUTER_NODE_ID = "node-a"
    rt = runtime(2, "x")
    task = asyncio.create_task(cluster.run_publisher(rt, every=0.05))
    me = f"node-a/{os.getpid()}"

    async def seen(pred):
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            got = await asyncio.to_thread(view.cluster_state)
            if pred(got):
                return got
            await asyncio.sleep(0.05)
        raise AssertionError("publisher state not seen")

    got = await seen(lambda s: [p["id"] for p in s["processes"]] == [me])
    assert got["processes"][0]["revision"] == 2
    open_breaker(rt, "x")  # a change in the live state reaches the next record
    await seen(lambda s: s["backends"] and s["backends"][0]["cells"][me]["verdict"] == "breaker_open")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (await asyncio.to_thread(view.cluster_state))["processes"] == []


def _full_pass(rt: Runtime, mono: float, max_backends: int) -> tuple[list[dict], int, int]:
    """What a record lists and counts by its definition: every backend of the
    snapshot with its verdict (idle ones healthy), by name; past the cap the
    unusable first, then by name; in-flight and healthy counted over all of them."""
    rows, in_flight, healthy = [], 0, 0
    for name in rt.snapshot.backends:
        state = rt.states.peek(name) or cluster.BackendState()
        word, retry_s = cluster.verdict(state, mono)
        in_flight += state.in_flight
        healthy += word == cluster.HEALTHY
        ewma = None if state.ewma_ms is None else round(state.ewma_ms, 1)
        rows.append({"n": name, "v": word, "b": state.breaker, "r": retry_s, "f": state.in_flight, "e": ewma})
    if len(rows) > max_backends:
        rows.sort(key=lambda r: (r["v"] not in cluster.UNHEALTHY, r["n"]))
        rows = rows[:max_backends]
    else:
        rows.sort(key=lambda r: r["n"])
    return rows, in_flight, healthy


EVENTS = ("start", "ok", "fail", "cancel", "probe_ok", "probe_fail")


@settings_h(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    n=st.integers(0, 40),
    cap=st.integers(1, 30),
    events=st.lists(st.tuples(st.integers(0, 45), st.sampled_from(EVENTS)), max_size=120),
    gone=st.sets(st.integers(0, 45), max_size=5),
)
def test_a_record_lists_and_counts_what_a_pass_over_every_backend_would(n, cap, events, gone):
    """The record walks only the backends that have a state (its cost follows
    them, not the cluster) and equals the definition: real BackendStates
    driven by requests and probes, states of backends no longer in the
    snapshot, listings above and below the cap, a snapshot swapped for
    another with the same names."""
    names = [f"b{i:03d}" for i in range(n)]
    rt = runtime(1, *reversed(names))  # the snapshot's order is not the names' order
    now = time.monotonic()
    for i, what in events:
        state = rt.states.get(f"b{i:03d}")  # i >= n: a state of a backend not in the snapshot
        if what == "start":
            state.on_start()
        elif what == "ok":
            state.on_success(5.0 + i, now)
        elif what == "fail":
            state.on_failure(now)
        elif what == "cancel":
            state.on_cancel()
        else:
            state.on_probe(what == "probe_ok", now)
    for _ in range(2):
        record = cluster.web_record(rt, revision_at=time.time(), mono=now + 1.0, max_backends=cap)
        rows, in_flight, healthy = _full_pass(rt, now + 1.0, cap)
        assert record["backends"] == rows
        assert (record["in_flight"], record["backends_healthy"], record["backends_total"]) == (in_flight, healthy, n)
        rt.install(snapshot(2, *(x for x in names if int(x[1:]) not in gone)), ready=True)
        n = len(rt.snapshot.backends)

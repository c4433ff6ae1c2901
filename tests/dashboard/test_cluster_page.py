"""The Cluster page: every process side by side, the backend × process
matrix, and the disagreements — from records published by real Runtime
objects (in-process), and end to end from two real router processes."""

from __future__ import annotations

import os
import re
import time
import uuid

import httpx
import pytest
from openai import APIStatusError, OpenAI

from router import cluster
from router.core.backend import BackendSpec
from router.core.health import HealthPolicy
from router.core.snapshot import Snapshot
from router.runtime import Runtime
from tests.support.routerproc import RouterProc, free_port, wait_until

pytestmark = pytest.mark.django_db
POLICY = HealthPolicy(failure_threshold=1, cooldown_s=60.0)


def runtime(revision: int, *names: str) -> Runtime:
    specs = {n: BackendSpec(name=n, url=f"http://127.0.0.1:9/{n}", models=("m",)) for n in names}
    rt = Runtime()
    rt.install(Snapshot(revision=revision, backends=specs, by_model={"m": tuple(specs.values())}, health=POLICY))
    return rt


def publish_as(settings, node: str, rt: Runtime) -> str:
    settings.ROUTER_NODE_ID = node
    cluster.publish_sync(cluster.web_record(rt, revision_at=time.time()))
    return f"{node}/{os.getpid()}"


def test_the_page_shows_processes_the_matrix_and_explains_the_disagreement(staff, settings):
    a, b = runtime(2, "alpha", "beta"), runtime(2, "alpha", "beta")
    state = a.states.get("alpha")
    state.on_start()
    state.on_failure(time.monotonic())  # a real failed request opens a's breaker
    pa, pb = publish_as(settings, "node-a", a), publish_as(settings, "node-b", b)

    html = staff.get("/dashboard/cluster/").content.decode()
    assert f'<tr data-process="{pa}" data-role="web"' in html and f'<tr data-process="{pb}" data-role="web"' in html
    assert 'id="cluster-flags" data-flags="1"' in html
    assert 'data-flag="backend_split" data-backend="alpha"' in html
    assert f"Backend alpha is healthy on {pb} but breaker open on {pa}" in html
    row = re.search(r'<tr data-backend="alpha" data-split="1">(.*?)</tr>', html, re.S).group(1)
    assert f'<td data-process="{pa}" data-verdict="breaker_open" data-flagged="1">' in row
    assert f'<td data-process="{pb}" data-verdict="healthy">' in row
    assert "trial in" in row
    assert '<tr data-backend="beta">' in html  # healthy everywhere: not flagged
    assert 'href="/dashboard/cluster/"' in html  # in the nav

    # The live refresh serves the same section.
    live = staff.get("/dashboard/live.json?sections=cluster").json()["sections"]["cluster"]
    assert [p["id"] for p in live["data"]["processes"]] == [pa, pb]
    assert [f["kind"] for f in live["data"]["flags"]] == ["backend_split"]
    assert 'data-flag="backend_split"' in live["html"]


def test_an_empty_cluster_says_so(staff):
    html = staff.get("/dashboard/cluster/").content.decode()
    assert 'data-flags="0"' in html and "No process has reported yet" in html


def test_the_backends_page_names_its_process_and_links_to_the_cluster(staff, settings):
    html = staff.get("/dashboard/backends/").content.decode()
    assert "this process's view" not in html
    assert f'id="rendered-by">{settings.ROUTER_NODE_ID}/{os.getpid()}</span>' in html
    assert 'href="/dashboard/cluster/">the other processes: Cluster</a>' in html


# -- end to end ----------------------------------------------------------------



def config(url: str) -> str:
    return (
        "health: {failure_threshold: 1, cooldown: 120, enabled: false}\n"
        "retry: {max_attempts: 1}\n"
        f"backends:\n  - {{name: shared, url: '{url}', models: [m]}}\n"
    )




def cluster_of(client: httpx.Client) -> dict:
    response = client.get("/dashboard/live.json", params={"sections": "cluster"})
    response.raise_for_status()
    return response.json()["sections"]["cluster"]


def test_two_router_processes_see_each_other_and_the_backend_one_of_them_cannot_reach(openai_backends):
    (live,) = openai_backends("live")
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    # One Redis namespace, two var dirs (so two node ids). Each has its own
    # YAML and DB: the same-named backend points at a live server on one and
    # at a closed port on the other.
    env = {"ROUTER_REDIS_PREFIX": prefix}
    one = RouterProc(config(live.url), env=env, tasks=True)  # with its node's tasks process
    two = RouterProc(config(dead), env=env)
    try:
        one.start()
        two.start()
        # A request through each: served on one, a connect failure on two, whose breaker opens.
        for proc, ok in ((one, True), (two, False)):
            sdk = OpenAI(base_url=proc.url + "/v1", api_key="none", max_retries=0, timeout=10)
            if ok:
                assert sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}]).choices
            else:
                with pytest.raises(APIStatusError) as refused:
                    sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
                assert refused.value.status_code >= 500
        sessions = {"one": one.staff_session(), "two": two.staff_session()}
        ids = {}
        for name in ("one", "two"):
            rendered_by = re.search(r'id="rendered-by">([^<]+)<', sessions[name].get("/dashboard/backends/").text)
            ids[name] = rendered_by.group(1)
        assert ids["one"] != ids["two"] and ids["one"].split("/")[0] != ids["two"].split("/")[0]  # distinct nodes

        def split_seen(client):
            data = cluster_of(client)["data"]
            flags = [f for f in data["flags"] if f["kind"] == "backend_split"]
            return data if flags and {p["id"] for p in data["processes"]} >= set(ids.values()) else None

        for client in sessions.values():  # either process serves the whole cluster
            data = wait_until(lambda c=client: split_seen(c), 30, interval=0.2, what="both processes and the split")
            (flag,) = [f for f in data["flags"] if f["kind"] == "backend_split"]
            assert flag["backend"] == "shared" and flag["healthy_on"] == [ids["one"]]
            assert flag["unhealthy_on"] == [ids["two"]]
            row = next(r for r in data["rows"] if r["name"] == "shared")
            cells = {c["process"]: c for c in row["cells"]}
            assert cells[ids["two"]]["verdict"] == "breaker_open" and cells[ids["two"]]["retry_s"] > 0
            assert cells[ids["one"]]["verdict"] == "healthy" and cells[ids["one"]]["ewma_ms"] is not None
        # The tasks process of one's node reports too (from its probe task), on one's node id.
        tasks = wait_until(
            lambda: [p for p in cluster_of(sessions["two"])["data"]["processes"] if p["role"] == "tasks"],
            60,
            interval=0.5,
            what="the tasks process's record",
        )
        assert [(p["node"], p["server"]) for p in tasks] == [(ids["one"].split("/")[0], "celery")]
        page = sessions["one"].get("/dashboard/cluster/").text
        assert f'data-process="{ids["one"]}"' in page and f'data-process="{ids["two"]}"' in page
        assert 'data-flag="backend_split" data-backend="shared"' in page
        assert f'data-process="{tasks[0]["id"]}" data-role="tasks"' in page

        # Killed (no clean withdrawal): its record lapses after the TTL.
        two.proc.kill()
        two.proc.wait(10)
        killed = time.monotonic()

        def late_flag():
            flags = cluster_of(sessions["one"])["data"]["flags"]
            return [f for f in flags if f["kind"] == "heartbeat_late" and f["process"] == ids["two"]]

        wait_until(late_flag, cluster.TTL_S + 30, interval=0.2, what="the killed process flagged late")
        wait_until(
            lambda: ids["two"] not in {p["id"] for p in cluster_of(sessions["one"])["data"]["processes"]},
            cluster.TTL_S + 30,
            interval=0.5,
            what="the stopped process to drop out",
        )
        # It lapsed (its last report was at most one interval before the kill); nobody removed it.
        assert time.monotonic() - killed >= cluster.TTL_S - cluster.PUBLISH_EVERY_S - 1
        data = cluster_of(sessions["one"])["data"]
        assert [p["id"] for p in data["processes"] if p["role"] == "web"] == [ids["one"]]
        assert not [f for f in data["flags"] if f["kind"] == "backend_split"]
    finally:
        one.stop()
        two.stop()

"""`runnode` supervises its children: restart with backoff, no orphans, one beat."""

from __future__ import annotations

import os
import signal
import subprocess
import threading

import httpx

from tests.support.nodeproc import pid_alive
from tests.support.routerproc import PY, ROOT, wait_until


def _pids(node) -> dict[str, int]:
    return {name: p["pid"] for name, p in node.node()["processes"].items()}


def test_a_killed_tasks_child_is_restarted_while_v1_keeps_serving(node_factory):
    """Killing the Celery worker leaves the web serving; the worker comes back
    and /readyz, /status report the restart."""
    node = node_factory().start()
    before = _pids(node)
    assert set(before) == {"web", "tasks", "beat"}
    failures: list[object] = []
    done = threading.Event()

    def hammer() -> None:
        with httpx.Client(timeout=5) as client:
            while not done.is_set():
                try:
                    r = client.get(node.url + "/v1/models")
                    if r.status_code != 200:
                        failures.append(r.status_code)
                except httpx.HTTPError as exc:
                    failures.append(repr(exc))

    thread = threading.Thread(target=hammer, daemon=True)
    thread.start()
    try:
        os.kill(before["tasks"], signal.SIGKILL)
        wait_until(lambda: node.node()["processes"]["tasks"]["restarts"] == 1
                   and node.node()["processes"]["tasks"]["state"] == "running", 60, what="tasks restarted")
    finally:
        done.set()
        thread.join(10)
    assert failures == []
    tasks = node.node()["processes"]["tasks"]
    assert tasks["last_exit"] == -signal.SIGKILL and tasks["pid"] != before["tasks"]
    assert pid_alive(before["web"]) and _pids(node)["web"] == before["web"]
    status = node.status()
    assert status["node"]["processes"]["tasks"]["restarts"] == 1
    assert "tasks exited with -9; restarting" in node.logs()


def test_a_dead_beat_shows_as_degraded_until_it_is_back(node_factory):
    """Beat dying is never silent: /readyz detail names it while it restarts."""
    node = node_factory().start()
    os.kill(_pids(node)["beat"], signal.SIGKILL)
    seen = wait_until(lambda: "beat" in node.node()["degraded"] and node.node(), 20, interval=0.02,
                      what="beat reported down")
    wait_until(lambda: "beat" in node.readyz().json()["degraded"] or node.node()["processes"]["beat"]["state"]
               == "running", 20, interval=0.02, what="/readyz to name beat (or beat already back)")
    assert seen["processes"]["beat"]["state"] == "restarting"
    wait_until(lambda: node.node()["processes"]["beat"]["state"] == "running", 60, what="beat back")


def test_a_killed_runnode_leaves_no_orphans(node_factory):
    """SIGKILL of runnode itself: every child (and beat) dies with it."""
    node = node_factory().start()
    pids = _pids(node)
    os.kill(node.proc.pid, signal.SIGKILL)
    node.proc.wait(5)
    wait_until(lambda: not any(pid_alive(p) for p in pids.values()), 40, interval=0.2,
               what=f"children {pids} gone")


def test_sigterm_stops_every_child_within_seconds(node_factory):
    node = node_factory().start()
    pids = _pids(node)
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(40) == 0
    assert not any(pid_alive(p) for p in pids.values())


def test_a_second_beat_of_one_node_waits_for_the_lock(node_factory):
    """Two beats on one node (same var dir) never schedule at once: the second
    waits for the lock and takes over only when the first is gone."""
    node = node_factory().start()
    second = subprocess.Popen([PY, "-m", "celery", "-A", "config", "beat", "--loglevel", "WARNING",
                               "--schedule", str(node.dir / "second-schedule")],
                              cwd=ROOT, env=node.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(iter(second.stdout.readline, "")), daemon=True).start()
    try:
        wait_until(lambda: any("another beat" in line and "waiting" in line for line in lines), 40,
                   what="second beat waiting")
        assert second.poll() is None
        node.stop()  # releases the first beat's lock
        wait_until(lambda: any("acquired; scheduling" in line for line in lines), 40, what="takeover")
    finally:
        os.killpg(second.pid, signal.SIGKILL)
        second.wait(5)

"""Faults injected into a real stack under load (`make faults`).

Each test runs a steady request loop (tests/faults/load.py), injects one
fault, keeps the load on past the recovery, and reports one row of the
table. The common bar: no request is lost — every client gets either its
answer or a clear error — except the faulted backend's own in-flight streams,
which end with an error event (counted as failed, never lost).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.faults.load import Load
from tests.support.nodeproc import NodeProc
from tests.support.routerproc import PY, ROOT, wait_until
from tests.support.services import OwnedPostgres, OwnedRedis, hold

pytestmark = pytest.mark.faults

HEALTH = "health: {enabled: true, failure_threshold: 1, cooldown: 30, unhealthy_threshold: 1, healthy_threshold: 1}\n"
RETRY = "retry: {max_attempts: 3, backoff: 0}\n"


def config(*backends, models: str = "m") -> str:
    rows = "".join(f"  - {{name: {b.name}, url: '{b.url}', models: [{models}]}}\n" for b in backends)
    return "backends:\n" + rows + HEALTH + RETRY


class Named:
    """A fake backend with the name the YAML gives it."""

    def __init__(self, name: str, server) -> None:
        self.name = name
        self.server = server
        self.url = server.url


def serves_after(load: Load, since: float, n: int, timeout: float = 60.0) -> bool:
    """True once `n` requests that ended after `since` succeeded (within `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if load.ok_after(since) >= n:
            return True
        time.sleep(0.1)
    return False


def named(openai_backends, *names: str) -> list[Named]:
    return [Named(n, s) for n, s in zip(names, openai_backends(*names), strict=True)]


def test_backend_killed_under_load(openai_backends, router_factory, report):
    a, b = named(openai_backends, "a", "b")
    for s in (a.server, b.server):
        s.behavior.chunk_delay_s = 0.02
    router = router_factory(config(a, b))
    with Load(router.url, stream=True, concurrency=8) as load:
        wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
        killed_at = time.monotonic()
        a.server.stop()
        recovered = serves_after(load, killed_at + 1.0, 40)
    c = load.counts
    # Only streams in flight on `a` when it died may fail: at most the concurrency.
    ok = recovered and c.lost == 0 and c.failed <= 8
    report("backend killed under load (8 streams)", c, ok, f"failed ≤ 8 in-flight on the killed backend; {c.lost_reasons}")
    assert ok, c


def test_hot_reloads_under_load(openai_backends, router_factory, report):
    a, b = named(openai_backends, "a", "b")
    router = router_factory(config(a, b), tasks=True)
    with Load(router.url, concurrency=8) as load:
        wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
        for i in range(5):
            weights = (100, 10 + 40 * i)
            rows = "".join(
                f"  - {{name: {x.name}, url: '{x.url}', models: [m], weight: {w}}}\n"
                for x, w in zip((a, b), weights, strict=True)
            )
            router.write_config("backends:\n" + rows + HEALTH + RETRY, timeout=30)
        done_at = time.monotonic()
        recovered = serves_after(load, done_at, 20)
    c = load.counts
    ok = recovered and c.lost == 0 and c.failed == 0
    report("5 YAML reloads under load", c, ok, str(c.lost_reasons or ""))
    assert ok, c


def test_redis_restart_under_load(openai_backends, router_factory, report):
    """A real redis-server (ours) killed and started again: /v1 keeps serving from
    the snapshot meanwhile; change notices work again afterwards."""
    (a,) = named(openai_backends, "a")
    redis = OwnedRedis().start()
    try:
        env = {"REDIS_URL": redis.url, "CELERY_BROKER_URL": redis.url, "ROUTER_POLL_SECONDS": "600"}
        router = router_factory(config(a), env=env)
        with Load(router.url, concurrency=8) as load:
            wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
            redis.stop()
            hold(3.0)  # the outage
            redis.start()
            back_at = time.monotonic()
            recovered = serves_after(load, back_at, 20)
        c = load.counts
        # Notices recover: an operator change reaches the web process through
        # Redis again (the DB safety poll is 600 s here, so only a notice can).
        before = router.revision()
        added = router.manage("routerbackend", "add", "--name", "late", "--url", a.url, "--models", "late-m")
        assert added.returncode == 0, added.stderr
        notified = True
        try:
            wait_until(lambda: router.revision() > before, 20, what="change notice after the Redis restart")
        except AssertionError:
            notified = False
        ok = recovered and c.lost == 0 and c.failed == 0 and notified
        report("Redis killed 3 s and restarted under load", c, ok, "notice after restart: " + ("yes" if notified else "NO"))
        assert ok, (c, notified)
    finally:
        redis.cleanup()


def test_postgres_unavailable_under_load(openai_backends, router_factory, report):
    """PostgreSQL (ours) down for 10 s: /v1 keeps serving from the snapshot, and
    a YAML edit made during the outage is applied once the database is back."""
    a, b = named(openai_backends, "a", "b")
    pg = OwnedPostgres().start()
    try:
        env = {"DATABASE_URL": pg.url}
        migrated = migrate(pg.url)
        assert migrated.returncode == 0, migrated.stderr
        router = router_factory(config(a), env=env, tasks=True)
        with Load(router.url, concurrency=8) as load:
            wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
            pg.stop()
            router.config_path.write_text(config(a, b, models="m, late-m"))  # a write while the DB is down
            hold(10.0)  # the outage
            pg.start()
            back_at = time.monotonic()
            recovered = serves_after(load, back_at, 20)
        c = load.counts
        applied = True
        try:
            wait_until(lambda: httpx.post(router.url + "/v1/chat/completions", timeout=10, json={
                "model": "late-m", "messages": [{"role": "user", "content": "x"}]}).status_code == 200,
                60, interval=0.5, what="the edit made during the outage to be applied")
        except AssertionError:
            applied = False
        ok = recovered and c.lost == 0 and c.failed == 0 and applied
        report("PostgreSQL down 10 s under load", c, ok, "edit made during outage applied: " + ("yes" if applied else "NO"))
        assert ok, (c, applied)
    finally:
        pg.cleanup()


def migrate(database_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": database_url}
    return subprocess.run([PY, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_hostile_input_under_load(openai_backends, router_factory, report):
    """Hostile requests beside a steady loop: each gets a clear 4xx, the node
    keeps serving, and a capacity-limited backend keeps every slot."""
    (a,) = named(openai_backends, "a")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m], capacity: 2}}\n" + RETRY
        + "queue: {max_wait: 5}\n"
    )
    hostile = [
        ("non-ASCII header", {"headers": [(b"user-agent", "caf\xe9 \xff".encode("latin-1"))]}),
        ("duplicate model key", {"content": b'{"model":"x","model":"m","messages":[{"role":"user","content":"x"}]}'}),
        ("model name 10 KB", {"content": b'{"model":"' + b"z" * 10_000 + b'","messages":[{"role":"user","content":"x"}]}'}),
        ("not JSON", {"content": b"{nope"}),
    ]
    refused_5xx = []
    with Load(router.url, concurrency=4) as load:
        wait_until(lambda: load.counts.ok >= 10, 60, what="load warmed up")
        with httpx.Client(base_url=router.url, timeout=30) as http:
            for _ in range(5):
                for what, kwargs in hostile:
                    headers = dict(kwargs.get("headers", []))
                    r = http.post("/v1/chat/completions", content=kwargs.get(
                        "content", b'{"model":"m","messages":[{"role":"user","content":"x"}]}'),
                        headers={"content-type": "application/json", **headers})
                    if r.status_code >= 500:
                        refused_5xx.append((what, r.status_code))
        after = time.monotonic()
        recovered = serves_after(load, after, 10)
    c = load.counts
    ok = recovered and c.lost == 0 and c.failed == 0 and not refused_5xx
    report("hostile requests beside a steady loop", c, ok, f"5xx answers to hostile requests: {refused_5xx or 'none'}")
    assert ok, (c, refused_5xx)


def test_half_sent_body_flood_beside_a_steady_client(openai_backends, router_factory, report):
    """300 connections that send a request head and half its body, then sit
    idle, against ROUTER_MAX_CONCURRENT=64, beside a steady loop: the loop
    loses nothing and is never shed (the idle senders hold no admission
    slot), and the flood is answered 408 at its body deadline."""
    (a,) = named(openai_backends, "a")
    router = router_factory(config(a), env={"ROUTER_MAX_CONCURRENT": "64", "ROUTER_BODY_TIMEOUT": "5"})
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\n\r\n" % len(body))
    flood: list[socket.socket] = []
    with Load(router.url, concurrency=4) as load:
        wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
        began = time.monotonic()
        try:
            for _ in range(300):
                sock = socket.create_connection(("127.0.0.1", router.port), timeout=30)
                sock.sendall(head + body[: len(body) // 2])
                flood.append(sock)
            answered = 0
            deadline = time.monotonic() + 60
            for sock in flood:  # each is told 408 at its deadline, then closed
                sock.settimeout(max(0.1, deadline - time.monotonic()))
                try:
                    answered += sock.recv(64).startswith(b"HTTP/1.1 408 ")
                except OSError:
                    pass
        finally:
            for sock in flood:
                sock.close()
        ended = time.monotonic()
        recovered = serves_after(load, ended, 10)
    c = load.counts
    p99 = c.p99_between(began, ended)
    shed = c.statuses.get(503, 0)
    ok = recovered and c.lost == 0 and c.failed == 0 and answered == len(flood)
    report("half-sent body flood (300) beside a steady loop", c, ok,
           f"flood answered 408: {answered}/{len(flood)}; steady p99 during it: "
           f"{p99 * 1000 if p99 is not None else float('nan'):.0f} ms; 503s: {shed}")
    assert ok, (c, answered)


def test_tasks_and_beat_killed_under_load(openai_backends, report):
    """A whole node (`runnode`): its Celery worker and its beat killed with SIGKILL
    while /v1 is under load. The web keeps serving and both come back."""
    (a,) = named(openai_backends, "a")
    node = NodeProc(config=config(a)).start()
    try:
        with Load(node.url, concurrency=4) as load:
            wait_until(lambda: load.counts.ok >= 20, 60, what="load warmed up")
            pids = {name: p["pid"] for name, p in node.node()["processes"].items()}
            os.kill(pids["tasks"], signal.SIGKILL)
            os.kill(pids["beat"], signal.SIGKILL)
            back = True
            try:
                wait_until(lambda: all(p["state"] == "running" and p["restarts"] >= 1
                                       for name, p in node.node()["processes"].items() if name in ("tasks", "beat")),
                           90, interval=0.2, what="tasks and beat restarted")
            except AssertionError:
                back = False
            back_at = time.monotonic()
            recovered = serves_after(load, back_at, 20)
        c = load.counts
        ok = recovered and back and c.lost == 0 and c.failed == 0
        report("runnode: tasks + beat SIGKILLed under load", c, ok, "both restarted: " + ("yes" if back else "NO"))
        assert ok, (c, back)
    finally:
        node.stop()


@pytest.mark.parametrize(("grace", "seconds"), [(30, 12.0), (1, 12.0)], ids=["within-grace", "past-grace"])
def test_graceful_stop_under_streaming_load(openai_backends, report, grace, seconds):
    """A whole node (`runnode`) stopped with SIGTERM under a steady streaming
    load. The loop stops sending as the stop begins (a balancer would send
    new requests elsewhere); every stream then in flight ends with [DONE]
    within ROUTER_STOP_GRACE, or with an error event past it: none is lost,
    and the node exits 0. The streams outlast the 10 s after which the
    supervisor used to kill the web."""
    (a,) = named(openai_backends, "a")
    a.server.behavior.chunk_delay_s = 0.25
    a.server.behavior.chunks = int(seconds / 0.25)
    node = NodeProc(config=config(a), env={"ROUTER_STOP_GRACE": str(grace)}).start()
    try:
        with Load(node.url, stream=True, concurrency=8, timeout=60) as load:
            wait_until(lambda: load.counts.ok >= 8, 120, what="load warmed up")
            load.stop_sending()
            wait_until(lambda: load.unanswered == 0, 60, what="every request sent to have its status")
            sent_before = load.counts.sent
            node.proc.send_signal(signal.SIGTERM)
            try:
                exited = node.proc.wait(grace + 60) == 0
            except subprocess.TimeoutExpired:
                exited = False
        c = load.counts
        in_flight = c.sent - sent_before
        if grace >= seconds:
            ok = exited and in_flight > 0 and c.lost == 0 and c.failed == 0
        else:  # the streams in flight past the grace were cut, each with its error event
            ok = exited and in_flight > 0 and c.lost == 0 and c.failed >= 1
        report(f"runnode SIGTERM: {seconds:g} s streams, {grace} s grace", c, ok,
               f"in flight at SIGTERM: {in_flight}; exited 0: {'yes' if exited else 'NO'}; {c.lost_reasons or ''}")
        assert ok, (c, in_flight, exited)
    finally:
        node.stop()

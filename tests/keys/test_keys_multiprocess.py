"""Keys across web processes (KEY-2, RTR-4): two real router processes share one
database, var dir and Redis prefix, as two workers of one deployment do.

Both run with ROUTER_POLL_SECONDS=30, so a change that reaches them within a
second was delivered by the Redis change notice, not by the safety poll; the
tests also watch the notice channel to see it published.
"""

from __future__ import annotations

import pytest
import redis
from django.conf import settings

from tests.keys.e2e import chat, code, create_key
from tests.support.routerproc import RouterProc, wait_until

POLL = {"ROUTER_POLL_SECONDS": "30"}


def config(url: str, scope: str = "node") -> str:
    return (
        f"backends:\n  - {{name: a, url: '{url}', models: [m, m-alias]}}\nhealth: {{enabled: false}}\n"
        f"api_keys: {{mode: blocking, rate_limit_scope: {scope}}}\n"
    )


@pytest.fixture
def pair(openai_backends, router_factory):
    """Factory: two router processes on one DB / var dir / Redis prefix."""

    def make(scope: str = "node") -> tuple[RouterProc, RouterProc]:
        (a,) = openai_backends("a", models=("m", "m-alias"))
        first = router_factory(config(a.url, scope), env=POLL)
        second = router_factory(
            config(a.url, scope), var_dir=first.dir, env={**POLL, "ROUTER_REDIS_PREFIX": first.prefix}
        )
        assert second.db == first.db
        wait_until(lambda: first.revision() == second.revision(), 10, what="both routers on one revision")
        return first, second

    return make


@pytest.fixture
def notices():
    """Subscribe to a router's change-notice channel; returns a reader of the
    revisions published on it since."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    pubsub = client.pubsub()

    def watch(proc: RouterProc):
        pubsub.subscribe(proc.env["ROUTER_REDIS_PREFIX"] + "notice")
        confirmed = wait_until(lambda: pubsub.get_message(timeout=0.1), 5, what="the subscription")
        assert confirmed["type"] == "subscribe"

        def published() -> list[int]:
            seen = []
            while (message := pubsub.get_message(timeout=0.2)) is not None:
                if message["type"] == "message":
                    seen.append(int(message["data"]))
            return seen

        return published

    yield watch
    pubsub.close()
    client.close()


def test_revocation_reaches_both_processes_by_the_notice(pair, notices):
    """Within the 10-s wait, a third of the 30-s safety poll: the notice
    carried it. How soon is bench/scale.py's row 2 (p95 ~20 ms), not a
    wall-clock bound in a test on a shared machine."""
    procs = pair()
    key = create_key(procs, name="leaving")
    assert all(chat(p, key).status_code == 200 for p in procs)
    published = notices(procs[0])
    revisions = [p.revision() for p in procs]

    out = procs[0].manage("revokeapikey", "--name", "leaving")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: all(chat(p, key).status_code == 401 for p in procs), 10, interval=0.01, what="revocation")

    assert all(code(chat(p, key)) == (401, "invalid_api_key") for p in procs)
    assert [p.revision() for p in procs] == [revisions[0] + 1] * 2
    assert published() == [revisions[0] + 1]  # delivered by the notice (the poll is 30 s)


def test_rotation_reaches_both_processes_by_the_notice(pair, notices):
    """Rotation issues a second key with the same settings and revokes the first,
    in one transaction: both processes switch over by the notice."""
    procs = pair()
    old = create_key(procs, "--models", "m", name="rotating")
    published = notices(procs[0])
    out = procs[0].manage(
        "shell",
        "-c",
        "from keys.models import ApiKey; from keys.services import key_rotate; "
        "new, plain = key_rotate(ApiKey.objects.get(name='rotating', revoked_at=None)); print('NEW', plain)",
    )
    assert out.returncode == 0, out.stderr
    new = next(line for line in out.stdout.splitlines() if line.startswith("NEW")).split()[1]
    wait_until(
        lambda: all(chat(p, old).status_code == 401 and chat(p, new).status_code == 200 for p in procs),
        10,
        interval=0.01,
        what="rotation",
    )
    assert all(code(chat(p, new, model="m-alias")) == (403, "model_not_allowed") for p in procs)  # same settings
    assert len(published()) == 1


def test_cluster_rate_limit_is_shared_by_every_process(pair):
    """rate_limit_scope: cluster — N requests per window in total, however they
    are spread; then 429 with Retry-After on every process."""
    first, second = procs = pair("cluster")
    key = create_key(procs, "--rate-limit", "4")
    statuses = [chat(p, key).status_code for p in (first, second, first, second, second, first)]
    assert statuses == [200, 200, 200, 200, 429, 429]
    for p in procs:
        r = chat(p, key)
        assert code(r) == (429, "rate_limit_exceeded")
        assert r.headers["retry-after"].isdigit() and 1 <= int(r.headers["retry-after"]) <= 60


def test_node_rate_limit_counts_in_each_process(pair):
    """rate_limit_scope: node (the default) — each process keeps its own window,
    so the cluster ceiling is limit times the number of processes."""
    first, second = procs = pair("node")
    key = create_key(procs, "--rate-limit", "2")
    assert [chat(first, key).status_code for _ in range(3)] == [200, 200, 429]
    assert [chat(second, key).status_code for _ in range(3)] == [200, 200, 429]
    assert int(chat(second, key).headers["retry-after"]) >= 1

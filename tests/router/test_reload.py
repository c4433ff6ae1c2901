"""Hot reload (CORE-8): DB changes reach every web process within 1 s through
the change notice; YAML edits apply without a restart; bad edits are refused."""

from __future__ import annotations

import itertools
import subprocess
import time
from datetime import datetime

import httpx
import orjson

from tests.support.answers import answered_by
from tests.support.routerproc import PY, ROOT, RouterProc, wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def test_two_web_processes_see_a_db_change_by_the_notice(openai_backends, router_factory):
    """Within the 10-s wait, a third of the 30-s safety poll: the notice
    carried it. How soon is bench/scale.py's row 2 (p95 ~20 ms), not a
    wall-clock bound in a test on a shared machine."""
    a, b = openai_backends("a", "b")
    cfg = f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n"
    # The safety poll is slowed to 30 s so only the change notice can deliver within the wait.
    first = router_factory(cfg, env={"ROUTER_POLL_SECONDS": "30"})
    second = router_factory(cfg, var_dir=first.dir, env={"ROUTER_POLL_SECONDS": "30", "ROUTER_WATCH_CONFIG": "0",
                                                        "ROUTER_REDIS_PREFIX": first.prefix})
    out = first.manage("routerbackend", "add", "--name", "extra", "--url", b.url, "--models", "new-model")
    assert out.returncode == 0, out.stderr

    def both_route():
        return all(
            httpx.post(p.url + "/v1/chat/completions", json={**CHAT, "model": "new-model"}, timeout=5).status_code == 200
            for p in (first, second)
        )

    wait_until(both_route, 10, interval=0.02, what="both processes routing the new model")
    out = first.manage("routerbackend", "remove", "--name", "extra")
    assert out.returncode == 0, out.stderr
    wait_until(
        lambda: all(httpx.post(p.url + "/v1/chat/completions", json={**CHAT, "model": "new-model"}, timeout=5).status_code == 404
                    for p in (first, second)),
        10, interval=0.02, what="removal everywhere",
    )
    # Both changes were applied in place from the change log: each process
    # compiled its snapshot from scratch once, when it started.
    for p in (first, second):
        refreshes = p.status()["snapshot_refreshes"]
        assert refreshes["compiled"] == 1 and refreshes["updated"] >= 2, refreshes


def test_yaml_edit_applies_without_restart_and_bad_edit_is_refused(openai_backends, router_factory):
    """The tasks process applies the edit; the web process reports a refused one."""
    a, b = openai_backends("a", "b")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n", tasks=True)
    assert httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "two"}).status_code == 404
    router.write_config(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n  - {{name: b, url: '{b.url}', models: [two]}}\n"
    )
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "two"})
    assert r.status_code == 200 and answered_by(r) == "b"
    revision = router.revision()
    router.config_path.write_text("backends:\n  - {name: a, url: 'http://x', models: [m], wieght: 2}\n")
    wait_until(lambda: "wieght" in (router.status()["last_error"] or ""), 10, what="the error to be reported")
    assert router.revision() == revision  # the old state keeps serving
    assert httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "two"}).status_code == 200
    assert "backends[0].wieght: unknown key" in router.logs()


def test_a_web_process_alone_applies_the_yaml_only_at_start(openai_backends, router_factory):
    """The tasks process is the one writer: without it an edit stays unapplied
    (the web process used to watch the file itself), and a restart applies it."""
    a, b = openai_backends("a", "b")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n")
    revision = router.revision()
    router.config_path.write_text(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n  - {{name: b, url: '{b.url}', models: [two]}}\n"
    )
    time.sleep(3)  # three times the 1 s file watch this process no longer runs
    assert router.revision() == revision
    assert httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "two"}).status_code == 404
    router.stop()
    router.start()
    assert router.revision() > revision
    assert httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "two"}).status_code == 200


def test_secret_from_env_reaches_upstream_but_not_the_db(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m], api_key: '${{UPSTREAM_KEY}}'}}\n",
        env={"UPSTREAM_KEY": "sk-upstream-secret-123"},
    )
    httpx.post(router.url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer client-key"})
    assert a.requests[-1].headers["authorization"] == "Bearer sk-upstream-secret-123"
    import sqlite3

    rows = sqlite3.connect(router.db).execute("select api_key from router_backend").fetchall()
    assert rows == [("${UPSTREAM_KEY}",)]
    assert "sk-upstream-secret-123" not in router.logs()
    assert "sk-upstream-secret-123" not in httpx.get(router.url + "/status", headers=router.status_headers).text


def test_daphne_serves_the_same_surface(openai_backends):
    """daphne (Channels' server) keeps working: no lifespan, runtime starts on first request."""
    (a,) = openai_backends("a")
    router = RouterProc(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n", server="daphne").start()
    try:
        r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=30)
        assert r.status_code == 200 and r.content.rstrip().endswith(b"[DONE]")
        assert httpx.get(router.url + "/v1/models").json()["data"][0]["id"] == "m"
    finally:
        router.stop()


BURST = """
import io, sys
import django
django.setup()
from django.core.management import call_command
n, url = int(sys.argv[1]), sys.argv[2]
for i in range(n):
    call_command("routerbackend", "add", "--name", f"burst-{i}", "--url", url, "--models", f"burst-{i}",
                 stdout=io.StringIO())
"""


def _installs(logs: str) -> list[tuple[float, int]]:
    """(wall-clock s, revision) of each snapshot this process installed, from its JSON log."""
    out = []
    for line in logs.splitlines():
        if '"routing snapshot installed"' in line:
            rec = orjson.loads(line)
            out.append((datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp(), rec["revision"]))
    return out


def test_a_burst_of_changes_is_applied_in_a_few_refreshes_and_none_is_lost(openai_backends, router_factory):
    """40 backend adds committed back to back (each its own revision and
    notice): the web process refreshes at most once per ROUTER_RELOAD_GAP_MS
    (its installs are that far apart, fewer than the changes), and every
    added model routes at the end. The first change after a quiet spell is
    not held back (test_two_web_processes_see_a_db_change_by_the_notice)."""
    (a,) = openai_backends("a")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n",
                            env={"ROUTER_POLL_SECONDS": "30", "ROUTER_RELOAD_GAP_MS": "40"})  # fmt: skip
    before = len(_installs(router.logs()))
    n = 40
    out = subprocess.run([PY, "-c", BURST, str(n), a.url], cwd=ROOT,
                         env={**router.env, "DJANGO_SETTINGS_MODULE": "config.settings"},
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]

    def last_routes() -> bool:
        r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": f"burst-{n - 1}"}, timeout=5)
        return r.status_code == 200

    wait_until(last_routes, 30, interval=0.02, what="the burst's last model to route")
    models = {m["id"] for m in httpx.get(router.url + "/v1/models", timeout=5).json()["data"]}
    assert {f"burst-{i}" for i in range(n)} <= models
    installs = _installs(router.logs())[before:]
    assert 1 <= len(installs) < n, installs
    gaps = sorted(later[0] - earlier[0] for earlier, later in itertools.pairwise(installs))
    # Refreshes start at least 40 ms apart; the log stamps when each ended, and
    # on a busy machine one refresh can run much longer than the next, so
    # single gaps vary: the typical (median) gap still shows the spacing.
    assert not gaps or gaps[len(gaps) // 2] >= 0.03, gaps

"""/readyz is 200 only once the configured state routes.

A web process applies the configured YAML when it starts; meanwhile its
notice listener and safety poll may install a snapshot of what the DB held
before (here: nothing). Such a node must stay unready — and answer 503, not
404 model_not_found — until the configured models route.
"""

from __future__ import annotations

import sqlite3

import httpx

from tests.support.routerproc import RouterProc, wait_until


def test_readyz_stays_503_until_the_configured_models_route(openai_backends):
    (backend,) = openai_backends("b1", models=("m",))
    proc = RouterProc(
        f"backends:\n  - {{name: b1, url: '{backend.url}', models: [m]}}\nhealth: {{enabled: false}}\n",
        env={"ROUTER_POLL_SECONDS": "0.5"},
    )
    # Another writer holds the DB (as a tasks process applying a large YAML
    # would): the web process's own sync of the file waits behind it.
    lock = sqlite3.connect(proc.db, isolation_level=None, timeout=30)
    lock.execute("BEGIN IMMEDIATE")
    try:
        proc.start(wait_ready=False)
        # The safety poll has installed the pre-config snapshot (revision 0).
        wait_until(lambda: _revision(proc) == 0, 60, what="the safety poll to install the empty snapshot")
        ready = httpx.get(proc.url + "/readyz", timeout=5)
        assert ready.status_code == 503, ready.text
        assert ready.json()["checks"]["snapshot"] is False
        chat = _chat(proc)
        assert chat.status_code == 503, chat.text  # not 404: the node is not serving yet

        lock.execute("ROLLBACK")
        wait_until(lambda: httpx.get(proc.url + "/readyz", timeout=5).status_code == 200, 60, what="ready")
        assert _chat(proc).status_code == 200
    finally:
        if lock.in_transaction:
            lock.execute("ROLLBACK")
        lock.close()
        proc.stop()


def _revision(proc: RouterProc) -> int | None:
    try:
        return proc.status(timeout=5)["revision"]
    except (httpx.HTTPError, KeyError, ValueError):
        return None


def _chat(proc: RouterProc) -> httpx.Response:
    # A node that is not ready holds a request up to 10 s for its first
    # snapshot (admission.ready_snapshot) before the 503: wait longer than that.
    return httpx.post(
        proc.url + "/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        timeout=30,
    )

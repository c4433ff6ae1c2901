"""Undoing a refused YAML edit clears `/status.last_error` (issue 12 #13).

The restored file is byte for byte what the DB already holds, so applying it
changes nothing — yet every web process must stop reporting the old refusal.
"""

from __future__ import annotations

import httpx

from tests.support.routerproc import wait_until

CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def test_restoring_the_good_file_clears_last_error(openai_backends, router_factory):
    (a,) = openai_backends("a")
    good = f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n"
    router = router_factory(good, tasks=True)
    router.config_path.write_text(good.replace("models: [m]", "models: [m], wieght: 2"))
    wait_until(lambda: "wieght" in (router.status()["last_error"] or ""), 20, what="the refusal to be reported")
    router.config_path.write_text(good)  # undo the edit
    wait_until(lambda: router.status()["last_error"] is None, 20, what="last_error to clear after the restore")
    assert httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "m"}, timeout=10).status_code == 200

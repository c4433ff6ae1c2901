"""/status is for operators (issue 12 #12): liveness and readiness are public,
readiness detail is booleans only, and everything else needs the status
token (or a staff session: tests/dashboard/test_status_access.py)."""

from __future__ import annotations

import httpx

CONFIG = "backends:\n  - {{name: secret-backend-name, url: '{url}', models: [private-model-x], weight: 317}}\n"


def test_status_needs_the_token_and_probes_stay_public(openai_backends, router_factory):
    (a,) = openai_backends("a", models=("private-model-x",))
    router = router_factory(CONFIG.format(url=a.url))
    private = ("secret-backend-name", "private-model-x", "317", str(router.config_path), "api_keys_mode")

    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic " + router.env["ROUTER_STATUS_TOKEN"]},
                    {"authorization": router.env["ROUTER_STATUS_TOKEN"]}):
        refused = httpx.get(router.url + "/status", headers=headers, timeout=5)
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert not any(word in refused.text for word in private), refused.text

    ok = httpx.get(router.url + "/status", headers=router.status_headers, timeout=5)
    assert ok.status_code == 200
    assert ok.json()["backends"][0]["name"] == "secret-backend-name"

    assert httpx.get(router.url + "/livez", timeout=5).json() == {"status": "ok"}
    ready = httpx.get(router.url + "/readyz", timeout=5)
    assert ready.status_code == 200
    body = ready.json()
    assert set(body) == {"status", "checks", "degraded"}
    assert body["checks"] and all(isinstance(v, bool) for v in body["checks"].values())
    # Degraded parts by name only (processes, redis, keyspace): never detail.
    assert set(body["degraded"]) <= {"redis", "keyspace", "web", "tasks", "beat", "events"}
    assert not any(word in ready.text for word in private)


def test_without_a_configured_token_no_bearer_opens_status(openai_backends, router_factory):
    """An empty ROUTER_STATUS_TOKEN disables the token: not even an empty Bearer passes."""
    (a,) = openai_backends("a", models=("private-model-x",))
    router = router_factory(CONFIG.format(url=a.url), env={"ROUTER_STATUS_TOKEN": ""})
    for value in ("Bearer", "Bearer x"):
        assert httpx.get(router.url + "/status", headers={"authorization": value}, timeout=5).status_code == 401


def test_reading_status_makes_no_backend_state(openai_backends, router_factory):
    """/status reads each backend's state and shows an untouched one as idle
    and healthy; it never makes one (a state made per backend per read stayed
    for the process's life: ~45 MB at 20,000 backends, and every later walk
    over the states walked them all). The states a process holds are what
    /metrics' in-flight gauge lists."""
    a, b = openai_backends("a", "b")
    router = router_factory(
        f"backends:\n  - {{name: one, url: '{a.url}', models: [m1]}}\n  - {{name: two, url: '{b.url}', models: [m2]}}\n"
    )

    def gauged() -> set[str]:
        text = httpx.get(router.url + "/metrics", headers=router.status_headers, timeout=5).text
        return {n for n in ("one", "two") if f'router_backend_in_flight{{backend="{n}"}}' in text}

    for _ in range(3):
        body = router.status()
    assert {(x["name"], x["healthy"], x["in_flight"], x["ewma_ms"]) for x in body["backends"]} == {
        ("one", True, 0, None), ("two", True, 0, None)}  # fmt: skip
    assert gauged() == set()
    chat = {"model": "m1", "messages": [{"role": "user", "content": "x"}]}
    assert httpx.post(router.url + "/v1/chat/completions", json=chat, timeout=5).status_code == 200
    assert gauged() == {"one"}  # a request made its backend's state, and only that one
    shown = {x["name"]: x for x in router.status()["backends"]}
    assert shown["one"]["ewma_ms"] is not None and shown["two"]["ewma_ms"] is None

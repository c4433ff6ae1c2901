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

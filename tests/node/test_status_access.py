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


def test_past_the_listing_cap_status_lists_only_backends_that_need_attention(openai_backends, router_factory):
    """At cluster size /status does not list 20,000 healthy idle backends
    (ROUTER_STATUS_BACKENDS): it counts them and lists the ones that are not
    healthy or have requests in flight."""
    a, b, c = openai_backends("a", "b", "c")
    router = router_factory(
        "".join(f"  - {{name: {n}, url: '{s.url}', models: [m]}}\n" for n, s in (("a", a), ("b", b), ("c", c)))
        .join(("backends:\n", "health: {enabled: true, failure_threshold: 1, cooldown: 60}\n"
               "retry: {max_attempts: 3, backoff: 0}\n")),
        env={"ROUTER_STATUS_BACKENDS": "2"},
    )
    body = router.status()
    assert (body["backends_total"], body["backends_healthy"], body["backends_listed"]) == (
        3, 3, "not healthy or in flight")  # fmt: skip
    assert body["backends"] == []
    a.stop()
    chat = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(12):  # one of them lands on a first: its breaker opens
            assert http.post("/v1/chat/completions", json=chat).status_code == 200
    body = router.status()
    assert [(x["name"], x["healthy"]) for x in body["backends"]] == [("a", False)]
    assert (body["backends_total"], body["backends_healthy"]) == (3, 2)
    # Asked for, every one.
    every = httpx.get(router.url + "/status?backends=all", headers=router.status_headers, timeout=5).json()
    assert [x["name"] for x in every["backends"]] == ["a", "b", "c"] and every["backends_listed"] == "all"


def test_under_the_cap_status_lists_every_backend(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(f"backends:\n  - {{name: one, url: '{a.url}', models: [m1]}}\n")
    body = router.status()
    assert (body["backends_total"], body["backends_healthy"], body["backends_listed"]) == (1, 1, "all")
    assert [x["name"] for x in body["backends"]] == ["one"]

"""Client-chosen model names never become metric series (issue 12 #2).

Hundreds of requests with random long model names — refused by the key gate
(no key / a wrong key) or naming models the router does not serve — leave
/metrics at a fixed size: an admitted request's model label is a published
name or `other`, a request refused before admission is `-`. The Redis
recent list and the log keep the model string capped, never whole.
"""

from __future__ import annotations

import secrets

import httpx

from tests.mix.conftest import metric_value, recent
from tests.support.routerproc import wait_until

N = 150
NAME_LEN = 2000
CHAT = {"messages": [{"role": "user", "content": "hi"}]}


def _random_name() -> str:
    return "evil-" + secrets.token_hex(NAME_LEN // 2)


def _series(text: str, metric: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(metric + "{")]


def _flood(router, names: list[str], headers: dict[str, str], expected: int) -> None:
    with httpx.Client(base_url=router.url, timeout=30) as client:
        for name in names:
            r = client.post("/v1/chat/completions", json={"model": name, **CHAT}, headers=headers)
            assert r.status_code == expected, r.text


def _counted(router, total: int) -> str:
    """/metrics once the drainer has counted `total` requests."""

    def scrape():
        text = httpx.get(router.url + "/metrics", timeout=10).text
        return text if metric_value(text, "router_requests_total") >= total else None

    return wait_until(scrape, 20, what=f"{total} requests counted")


def _assert_bounded(router, text: str, names: list[str], allowed: set[str], *, bodies_read: bool = True) -> None:
    assert len(text) < 60_000, f"/metrics grew to {len(text)} bytes"
    assert "evil-" not in text
    labels = {line.split('model="', 1)[1].split('"', 1)[0] for line in _series(text, "router_requests_total")}
    assert labels <= allowed, labels
    assert len(_series(text, "router_requests_total")) <= 6
    stored = [obs for obs in recent(router) if str(obs.get("model", "")).startswith("evil-")]
    if bodies_read:
        assert stored and all(len(obs["model"]) <= 200 for obs in stored)
    else:  # refused from the head alone: the body, and the name in it, never read
        assert stored == []
        assert any(obs.get("status") == 401 for obs in recent(router))
    logs = router.logs()
    assert not any(name in logs for name in names[:20])


def test_unauthenticated_long_names_create_no_series(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(
        f"api_keys: {{mode: blocking}}\nbackends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n"
    )
    names = [_random_name() for _ in range(N)]
    _flood(router, names[: N // 2], {}, 401)
    _flood(router, names[N // 2 :], {"authorization": "Bearer sk-not-a-key"}, 401)
    text = _counted(router, N)
    _assert_bounded(router, text, names, {"-"}, bodies_read=False)


def test_unknown_models_in_open_mode_share_one_bucket(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n")
    names = [_random_name() for _ in range(N)]
    _flood(router, names, {}, 404)
    _flood(router, ["m"], {}, 200)
    text = _counted(router, N + 1)
    _assert_bounded(router, text, names, {"other", "m"})
    assert metric_value(text, "router_requests_total", model="other", status="404") == N
    assert metric_value(text, "router_requests_total", model="m", status="200") == 1

"""Warm-up is not down (issue 41, item 5), end to end: a real router (web and
tasks processes) in front of fake OpenAI backends that answer 503 "Loading
model" as llama.cpp's server does while it loads: one warms up for 20 s,
one never comes up. The official ``openai`` SDK is the client; every wait
polls a condition with a generous deadline.
"""

from __future__ import annotations

import re
import time

import openai

from tests.support.answers import answered_by
from tests.support.routerproc import wait_until

WARM_S = 20.0
WINDOW_S = 45.0  # health.warmup_timeout


def _config(steady, warm, never) -> str:
    return f"""
backends:
  - {{name: steady, url: '{steady.url}', models: [m]}}
  - {{name: warm, url: '{warm.url}', models: [m]}}
  - {{name: never, url: '{never.url}', models: [other]}}
health: {{interval: 30, timeout: 2, unhealthy_threshold: 1, healthy_threshold: 1,
          warmup_interval: 1, warmup_timeout: {WINDOW_S}}}
retry: {{max_attempts: 1, backoff: 0}}
"""


def _health(router) -> dict[str, str]:
    return {b["name"]: b["health"] for b in router.status(timeout=10)["backends"]}


def _posts(server) -> int:
    return sum(1 for r in server.requests if r.method == "POST")


def test_a_backend_warms_up_for_20_s_and_one_that_never_comes_up_is_down(openai_backends, router_factory):
    steady, warm, never = openai_backends("steady", "warm", "never")
    started = time.time()
    warm.behavior.loading_until = started + WARM_S
    never.behavior.loading_until = started + 3600
    router = router_factory(_config(steady, warm, never), tasks=True)

    wait_until(lambda: _health(router)["warm"] == "warming_up", 60, what="warm shown warming up")
    assert _health(router)["never"] == "warming_up"
    staff = router.staff_session()
    page = staff.get("/dashboard/backends/").text
    assert re.search(r'<span class="pill warn">warming up</span>', page)
    wait_until(
        lambda: (
            'data-verdict="warming_up"'
            in staff.get("/dashboard/live.json?sections=cluster").json()["sections"]["cluster"]["html"]
        ),
        30,
        what="cluster view shows warming up",
    )

    # Out of rotation, not a failure: every request goes to the steady replica,
    # and the warming backend never shows as down while it loads.
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30)
    seen: list[str] = []
    before = _posts(warm)

    def came_up() -> bool:
        health = _health(router)["warm"]
        seen.append(health)
        if health == "warming_up":
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert answered_by(raw.http_response) == "steady"
        return health == "healthy"

    wait_until(came_up, WARM_S + 60, interval=0.5, what="warm healthy after loading")
    assert time.time() - started >= WARM_S - 1
    assert "probe_failing" not in seen and "breaker_open" not in seen, seen
    assert _posts(warm) == before  # no request was sent to it while it loaded

    # Back in rotation: the smooth weighted round robin reaches it at once.
    answered = {
        answered_by(client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        ).http_response)
        for _ in range(6)
    }  # fmt: skip
    assert answered == {"steady", "warm"}

    # The one that never comes up is down once the window is over, and shown so.
    wait_until(lambda: _health(router)["never"] == "probe_failing", WINDOW_S + 60, what="never down")
    assert time.time() - started >= WINDOW_S - 1
    # The cluster view says so too (each process reports every 2.5 s).
    wait_until(
        lambda: (
            'data-verdict="probe_failing"'
            in staff.get("/dashboard/live.json?sections=cluster").json()["sections"]["cluster"]["html"]
        ),
        30,
        what="cluster view verdict",
    )
    staff.close()
    with_never = openai.OpenAI(base_url=router.url + "/v1", api_key="none", max_retries=0, timeout=30)
    try:
        with_never.chat.completions.create(model="other", messages=[{"role": "user", "content": "hi"}])
    except openai.APIStatusError as exc:
        assert exc.status_code == 503
    else:
        raise AssertionError("a backend that never came up served a request")

"""Health, retries, fallback, streaming failures and disconnects, end to end."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.support.answers import answered_by
from tests.support.routerproc import wait_until

CHAT = {"model": "m", "messages": [{"role": "user", "content": "x"}]}


def posts(server):
    return [r for r in server.requests if r.method == "POST"]


def two_backends(a, b, extra=""):
    return (
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n  - {{name: b, url: '{b.url}', models: [m]}}\n"
        "health: {enabled: true, failure_threshold: 1, cooldown: 60, unhealthy_threshold: 1, healthy_threshold: 1}\n"
        "retry: {max_attempts: 3, backoff: 0}\n" + extra
    )


def test_killed_backend_is_retried_elsewhere_then_skipped(openai_backends, router_factory):
    """A dead backend's request is retried on the other one before any byte was sent;
    its breaker then opens and it receives nothing more."""
    a, b = openai_backends("a", "b")
    router = router_factory(two_backends(a, b))
    a.stop()
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(10):
            r = http.post("/v1/chat/completions", json=CHAT)
            assert r.status_code == 200
            assert answered_by(r) == "b"
    status = {x["name"]: x for x in router.status()["backends"]}
    assert status["a"]["healthy"] is False
    a.start()  # back, but its breaker is still open (cooldown 60 s): nothing lands there
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(6):
            assert answered_by(http.post("/v1/chat/completions", json=CHAT)) == "b"
    assert posts(a) == []


def test_drop_before_response_is_retried(openai_backends, router_factory):
    a, b = openai_backends("a", "b")
    a.behavior.drop_before_response = True
    router = router_factory(two_backends(a, b))
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(4):
            r = http.post("/v1/chat/completions", json={**CHAT, "stream": True})
            assert r.status_code == 200 and b"[DONE]" in r.content
    assert len(posts(a)) == 1  # tried once, then its breaker opened
    assert len(posts(b)) == 4


def test_active_probe_marks_unhealthy_until_recovery(openai_backends, router_factory):
    """The probe task's verdict reaches the web process; an unhealthy backend gets
    no traffic until a probe sees it healthy again."""
    a, b = openai_backends("a", "b")
    # Each probe below runs in a new process, to which every backend is
    # first seen: without warmup_timeout 0 a refused first probe would be a
    # start (warming up, tests/router/test_warmup.py), not an outage.
    router = router_factory(two_backends(a, b).replace("healthy_threshold: 1}", "healthy_threshold: 1, warmup_timeout: 0}"))
    probe = lambda: router.manage("shell", "-c", "from node.tasks import probe_backends; print(probe_backends())")  # noqa: E731
    a.stop()
    out = probe()
    assert "'a': '0'" in out.stdout, out.stderr
    wait_until(lambda: not {x["name"]: x for x in router.status()["backends"]}["a"]["healthy"], 10, what="probe verdict")
    a.start()  # alive again, but not yet probed: still out of rotation
    with httpx.Client(base_url=router.url, timeout=30) as http:
        for _ in range(6):
            assert answered_by(http.post("/v1/chat/completions", json=CHAT)) == "b"
    assert posts(a) == []
    # The probe task keeps its own per-backend interval; a fresh process probes at once.
    out = probe()
    assert "'a': '1'" in out.stdout, out.stderr
    wait_until(lambda: {x["name"]: x for x in router.status()["backends"]}["a"]["healthy"], 10, what="recovery")
    with httpx.Client(base_url=router.url, timeout=30) as http:
        seen = {answered_by(http.post("/v1/chat/completions", json=CHAT)) for _ in range(6)}
    assert seen == {"a", "b"}


PROBE_SIDE_BY_SIDE = """
import threading
from node import tasks
from router import selectors
start = threading.Barrier(4)
out = []
def tick():
    start.wait()
    out.append(tasks.probe_backends())
threads = [threading.Thread(target=tick) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(selectors.REFRESHES["compiled"], sorted(len(o) for o in out))
"""


def test_probe_ticks_that_overlap_run_one_round(openai_backends, router_factory):
    """The tasks process runs beat's probe ticks on four threads: ticks that
    overlap a round still running skip it instead of compiling the mirror and
    probing every backend again side by side (at 20,000 backends that pile-up
    took the interpreter from the YAML watcher for a minute after a start)."""
    a, b = openai_backends("a", "b")
    router = router_factory(two_backends(a, b))
    out = router.manage("shell", "-c", PROBE_SIDE_BY_SIDE)
    assert out.returncode == 0, out.stderr
    compiled, rounds = out.stdout.strip().splitlines()[-1].split(maxsplit=1)
    assert compiled == "1", out.stdout  # one compile of the mirror
    assert rounds.strip() == "[0, 0, 0, 2]", out.stdout  # one round probed both backends, three skipped


def test_fallback_chain_answers_when_all_backends_are_down(openai_backends, router_factory):
    a, b, c = openai_backends("a", "b", "c")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n  - {{name: b, url: '{b.url}', models: [m]}}\n"
        f"  - {{name: c, url: '{c.url}', models: [backup]}}\n"
        "fallback: {fallback_chains: {m: [backup]}}\nretry: {max_attempts: 3, backoff: 0}\n"
    )
    a.stop()
    b.stop()
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    out = client.chat.completions.create(**CHAT)
    assert out.choices[0].message.content.startswith("Hello from c")
    assert posts(c)[-1].json["model"] == "backup"
    # An unknown model never enters fallback.
    with pytest.raises(openai.NotFoundError) as err:
        client.chat.completions.create(model="unknown", messages=CHAT["messages"])
    assert err.value.body["code"] == "model_not_found"


def test_all_down_without_fallback_is_a_clear_5xx(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\nretry: {{max_attempts: 2, backoff: 0}}\nhealth: {{failure_threshold: 1}}\n")
    a.stop()
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_error"
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)  # breaker open now
    assert r.status_code == 503 and r.json()["error"]["code"] == "no_backend_available"


def test_backoff_waits_only_before_another_backend(openai_backends, router_factory):
    """The retry backoff is a pause before trying another backend: with no
    backend left to try, the error is answered at once, not after it (a
    60 s backoff here; the client gives up after 20 s)."""
    (a,) = openai_backends("a")
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\nretry: {{max_attempts: 3, backoff: 60}}\n"
        "health: {failure_threshold: 5}\n"
    )
    a.stop()
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=20)
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_error"


def test_upstream_error_status_is_relayed_after_retries(openai_backends, router_factory):
    a, b = openai_backends("a", "b")
    a.behavior.status = 503
    b.behavior.status = 503
    router = router_factory(
        f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n  - {{name: b, url: '{b.url}', models: [m]}}\n"
        "health: {failure_threshold: 10}\nretry: {max_attempts: 2, backoff: 0}\n"
    )
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 503  # the provider's own answer, as it came
    assert "error" in r.json()
    assert len(posts(a)) + len(posts(b)) == 2  # tried on both
    a.behavior.status = 400
    b.behavior.reset()
    b.behavior.status = 400
    r = httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 400  # client errors are not retried


def test_mid_stream_failure_ends_with_error_event(openai_backends, router_factory):
    (a,) = openai_backends("a")
    a.behavior.die_after_chunks = 2
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n")
    client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0)
    got = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(**CHAT, stream=True):
            got.append(chunk)
    assert got  # bytes had flowed: no retry after the first byte
    assert len(posts(a)) == 1


def test_client_disconnect_cancels_upstream(openai_backends, router_factory):
    (a,) = openai_backends("a")
    a.behavior.chunk_delay_s = 0.5
    a.behavior.chunks = 100
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m]}}\n")
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", router.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
    req = posts(a)[-1]
    assert req.finished.wait(10), "upstream still running after the client left"
    assert req.outcome == "cancelled"
    # The slot was released: the router still serves.
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")


def test_concurrent_streams_survive_a_reload_that_removes_their_backend(openai_backends, router_factory):
    """Removed backends drain: in-flight streams finish on the old snapshot."""
    a, b = openai_backends("a", "b")
    a.behavior.chunk_delay_s = 0.3
    a.behavior.chunks = 8
    cfg_ab = f"backends:\n  - {{name: a, url: '{a.url}', models: [slow]}}\n  - {{name: b, url: '{b.url}', models: [m]}}\n"
    router = router_factory(cfg_ab, tasks=True)  # the tasks process applies the YAML edit
    result = {}

    def consume():
        with httpx.Client(timeout=60) as http:
            r = http.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "slow", "stream": True})
            result["status"] = r.status_code
            result["body"] = r.content

    t = threading.Thread(target=consume)
    t.start()
    wait_until(lambda: posts(a), 10, what="stream start")
    router.write_config(f"backends:\n  - {{name: b, url: '{b.url}', models: [m]}}\n")
    t.join(30)
    assert result["status"] == 200
    assert result["body"].rstrip().endswith(b"data: [DONE]")
    r = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "model": "slow"}, timeout=30)
    assert r.status_code == 404


def test_client_disconnect_during_non_stream_wait_cancels_upstream(openai_backends, router_factory):
    """A client that gives up while the backend is still thinking cancels it, and the slot is freed."""
    (a,) = openai_backends("a")
    a.behavior.delay_s = 30
    router = router_factory(f"backends:\n  - {{name: a, url: '{a.url}', models: [m], capacity: 1}}\n")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=1.0)
    req = posts(a)[-1]
    assert req.finished.wait(10), "upstream still running after the client left"
    assert req.outcome == "cancelled"
    wait_until(lambda: router.status()["backends"][0]["in_flight"] == 0, 10, what="slot release")
    a.behavior.delay_s = 0
    assert httpx.post(router.url + "/v1/chat/completions", json=CHAT, timeout=30).status_code == 200


def test_backend_killed_mid_request_is_retried_elsewhere(openai_backends, router_factory):
    """The backend dies while it holds the request (no byte sent yet): the
    client still gets a full answer, from the other backend."""
    a, b = openai_backends("a", "b")
    a.behavior.delay_s = 30
    b.behavior.delay_s = 30
    router = router_factory(two_backends(a, b))
    result = {}

    def call():
        result["r"] = httpx.post(router.url + "/v1/chat/completions", json={**CHAT, "stream": True}, timeout=60)

    t = threading.Thread(target=call)
    t.start()
    holder = wait_until(lambda: next((s for s in (a, b) if posts(s)), None), 10, what="the request to land")
    other = b if holder is a else a
    other.behavior.delay_s = 0
    holder.stop()  # killed with the request in flight
    t.join(30)
    r = result["r"]
    assert r.status_code == 200 and r.content.rstrip().endswith(b"data: [DONE]")
    assert answered_by(r) == ("b" if holder is a else "a")
    assert len(posts(other)) == 1

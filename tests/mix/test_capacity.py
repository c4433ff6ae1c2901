"""Capacity, priority and the bounded queue (MIX-1; seed 002 S01 "queue policy").

The fakes carry a `Meter` (tests/mix/conftest.py) that counts requests in
flight inside the provider and can hold them at its door, so every step waits
on a condition: a request has arrived, the router reports N waiting, …
"""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.mix.conftest import (
    INFO,
    backend_status,
    in_threads,
    metric_value,
    observation,
    recent,
    rid,
)
from tests.support.routerproc import wait_until

CHAT = [{"role": "user", "content": "hi"}]


def _client(router):
    return openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0, timeout=60)


def _call(router, model: str, ids: list[str]):
    def call(i: int):
        out = _client(router).chat.completions.create(
            model=model, messages=CHAT, extra_headers={"x-request-id": ids[i]}
        )
        return out.choices[0].message.content

    return call


def _waiting(router) -> int:
    return router.status()["waiting"]


def test_capacity_one_queues_the_rest_and_never_overlaps(fakes, router_factory):
    """Capacity 1, 5 concurrent requests: one runs, four queue; the provider never
    has more than one in flight, and each queued request runs when the slot frees."""
    olla = fakes("ollama", "ollama-o")
    olla.behavior.delay_s = 0.1  # each request stays a while inside the provider
    router = router_factory(
        f"backends:\n  - {{name: ollama-o, url: '{olla.url}', kind: ollama, models: [solo], "
        "served_model: llama3.2, capacity: 1}\nqueue: {max_wait: 120, max_waiting: 10}\n",
        env=INFO,
    )
    meter = olla.meter
    meter.hold()
    ids = [rid() for _ in range(5)]
    call = _call(router, "solo", ids)
    first, results = in_threads(1, call)
    wait_until(lambda: meter.arrived == 1, 30, what="the first request at the provider")
    threads, more = in_threads(4, lambda i: call(i + 1))
    wait_until(lambda: _waiting(router) == 4, 30, what="four requests queued for capacity")
    # The slot holder is the executor: the router's slot and the provider agree.
    assert backend_status(router)["ollama-o"]["in_flight"] == 1
    assert meter.in_flight == 1 and meter.arrived == 1
    meter.open()
    for t in first + threads:
        t.join(60)
    results.update({i + 1: v for i, v in more.items()})
    assert all(results[i] == "Hello from ollama-o. This is a demo reply." for i in range(5)), results
    assert meter.arrived == 5
    assert meter.max_in_flight == 1
    decisions = sorted(observation(router, i)["queue"] for i in ids)
    assert decisions == ["direct", "queued", "queued", "queued", "queued"]
    assert all(observation(router, i)["queue_ms"] > 0 for i in ids if observation(router, i)["queue"] == "queued")
    metrics = httpx.get(router.url + "/metrics", timeout=10).text
    assert metric_value(metrics, "router_queue_decisions_total", decision="queued") == 4
    assert _waiting(router) == 0 and backend_status(router)["ollama-o"]["in_flight"] == 0


def test_full_preferred_provider_spills_to_the_next_priority(fakes, router_factory):
    """Capacity 1 on the preferred (priority 0) vLLM-kind provider: while it is busy,
    the other four requests go to the priority-1 Ollama provider at once, no queue."""
    vllm = fakes("openai", "vllm-a")
    olla = fakes("ollama", "ollama-o")
    router = router_factory(
        "backends:\n"
        f"  - {{name: vllm-a, url: '{vllm.url}', kind: vllm, models: [spill], capacity: 1, priority: 0}}\n"
        f"  - {{name: ollama-o, url: '{olla.url}', kind: ollama, models: [spill], served_model: llama3.2, "
        "capacity: 4, priority: 1}\n",
        env=INFO,
    )
    ids = [rid() for _ in range(5)]
    call = _call(router, "spill", ids)
    # Idle: the preferred tier always wins.
    assert call(0) == "Hello from vllm-a. This is a demo reply."
    assert observation(router, ids[0])["provider"] == "vllm-a"
    ids[0] = rid()
    vllm.meter.hold()
    first, results = in_threads(1, call)
    wait_until(lambda: vllm.meter.arrived == 2, 30, what="the held request at the preferred provider")
    threads, more = in_threads(4, lambda i: call(i + 1))
    for t in threads:
        t.join(60)
    # All four finished while the preferred provider still held its one request.
    assert [more[i] for i in range(4)] == ["Hello from ollama-o. This is a demo reply."] * 4
    assert vllm.meter.in_flight == 1 and olla.meter.arrived == 4
    vllm.meter.open()
    first[0].join(60)
    assert results[0] == "Hello from vllm-a. This is a demo reply."
    assert vllm.meter.max_in_flight == 1
    for i, request_id in enumerate(ids):
        obs = observation(router, request_id)
        assert obs["queue"] == "direct"
        assert obs["provider"] == ("vllm-a" if i == 0 else "ollama-o")
        assert obs["path"] == ("passthrough" if i == 0 else "normalized")


def test_many_concurrent_requests_respect_capacity(fakes, router_factory):
    """No door, real concurrency: 5 at once against capacity 1 (priority 0) and a
    capacity-2 spill tier; neither provider ever exceeds its capacity."""
    vllm = fakes("openai", "vllm-a")
    olla = fakes("ollama", "ollama-o")
    vllm.behavior.delay_s = 0.2
    olla.behavior.delay_s = 0.2
    router = router_factory(
        "backends:\n"
        f"  - {{name: vllm-a, url: '{vllm.url}', kind: vllm, models: [g], capacity: 1}}\n"
        f"  - {{name: ollama-o, url: '{olla.url}', kind: ollama, models: [g], served_model: llama3.2, "
        "capacity: 2, priority: 1}\nqueue: {max_wait: 120}\n",
        env=INFO,
    )
    ids = [rid() for _ in range(5)]
    threads, results = in_threads(5, _call(router, "g", ids))
    for t in threads:
        t.join(60)
    assert all(isinstance(results[i], str) and results[i].startswith("Hello from ") for i in range(5)), results
    assert vllm.meter.max_in_flight == 1
    assert olla.meter.max_in_flight <= 2
    assert vllm.meter.arrived + olla.meter.arrived == 5
    for i in ids:
        obs = observation(router, i)
        assert obs["queue"] in ("direct", "queued")
        assert obs["attempts"] == 1


def _solo(fakes, router_factory, queue: str):
    olla = fakes("ollama", "ollama-o")
    router = router_factory(
        f"backends:\n  - {{name: ollama-o, url: '{olla.url}', kind: ollama, models: [solo], "
        f"served_model: llama3.2, capacity: 1}}\nqueue: {queue}\n",
        env=INFO,
    )
    return olla, router


def _raw(router, request_id: str) -> httpx.Response:
    return httpx.post(
        router.url + "/v1/chat/completions",
        json={"model": "solo", "messages": CHAT},
        headers={"x-request-id": request_id},
        timeout=60,
    )


def test_queue_wait_is_bounded_in_time(fakes, router_factory):
    """Every provider at capacity: a request waits at most `queue.max_wait`, then
    gets 429 capacity_exhausted with Retry-After; nothing of it is dispatched."""
    olla, router = _solo(fakes, router_factory, "{max_wait: 1, max_waiting: 10}")
    olla.meter.hold()
    ids = [rid() for _ in range(2)]
    holder, held = in_threads(1, _call(router, "solo", ids))
    wait_until(lambda: olla.meter.arrived == 1, 30, what="the held request")
    timed_out = _raw(router, ids[1])
    assert timed_out.status_code == 429
    error = timed_out.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("server_overloaded", None, "capacity_exhausted")
    assert "stayed at capacity for 1s" in error["message"]
    assert timed_out.headers["retry-after"] == "1"
    assert olla.meter.arrived == 1  # the timed-out request never reached the provider
    olla.meter.open()
    holder[0].join(60)
    assert held[0] == "Hello from ollama-o. This is a demo reply."
    obs = observation(router, ids[1])
    assert (obs["queue"], obs["status"], obs["error"]) == ("timeout", 429, "capacity_exhausted")
    assert "provider" not in obs  # no provider was selected
    metrics = httpx.get(router.url + "/metrics", timeout=10).text
    assert metric_value(metrics, "router_queue_decisions_total", decision="timeout") == 1


def test_queue_is_bounded_in_size(fakes, router_factory):
    """Beyond `queue.max_waiting` waiters a request is refused at once with the same
    429; the waiter already queued is unaffected and runs when the slot frees."""
    olla, router = _solo(fakes, router_factory, "{max_wait: 120, max_waiting: 1}")
    olla.meter.hold()
    ids = [rid() for _ in range(3)]
    holder, held = in_threads(1, _call(router, "solo", ids))
    wait_until(lambda: olla.meter.arrived == 1, 30, what="the held request")
    waiter, waited = in_threads(1, lambda i: _raw(router, ids[1]))
    wait_until(lambda: _waiting(router) == 1, 30, what="one request queued")
    with pytest.raises(openai.RateLimitError) as err:  # the SDK sees a plain rate-limit error
        _client(router).chat.completions.create(model="solo", messages=CHAT, extra_headers={"x-request-id": ids[2]})
    assert err.value.status_code == 429
    assert err.value.body["code"] == "capacity_exhausted"
    assert err.value.response.headers["retry-after"] == "1"
    assert _waiting(router) == 1 and olla.meter.arrived == 1
    olla.meter.open()
    holder[0].join(60)
    waiter[0].join(60)
    assert held[0] == "Hello from ollama-o. This is a demo reply."
    assert waited[0].status_code == 200
    assert olla.meter.max_in_flight == 1
    decisions = [(observation(router, i)["queue"], observation(router, i)["status"]) for i in ids]
    assert decisions == [("direct", 200), ("queued", 200), ("rejected", 429)]
    assert not any("provider" in o for o in recent(router) if o.get("status") == 429)

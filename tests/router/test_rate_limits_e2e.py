"""Upstream quotas and the router's own rate limits, end to end: real router
processes, fake OpenAI backends on loopback, the official openai SDK.

- A backend at its quota (requests per second, tokens per minute) is skipped
  like a full one; only when every candidate is limited does the client get
  a 429 with Retry-After, and then no upstream is called. The buckets live
  in Redis (scope cluster).
- rate_limits: a router-wide bucket and one per client address for requests
  without a key (open mode), with networks and keys that bypass both."""

from __future__ import annotations

import httpx
import openai
import pytest
import redis
from django.conf import settings

from fakes.openai_backend import server_thread
from tests.keys.e2e import create_key
from tests.support.routerproc import RouterProc, wait_until

QUOTAS = """
backends:
  - {{name: capped, url: '{a}', models: [q], priority: 0, quota: {{rps: 0.001}}}}
  - {{name: open, url: '{b}', models: [q], priority: 1}}
  - {{name: only, url: '{a}', models: [only], quota: {{rps: 0.001, burst: 2}}}}
  - {{name: tokens, url: '{a}', models: [tok], priority: 0, quota: {{tpm: 5}}}}
  - {{name: spare, url: '{b}', models: [tok], priority: 1}}
health: {{enabled: false}}
retry: {{max_attempts: 3, backoff: 0}}
"""

LIMITS = """
backends:
  - {{name: m, url: '{a}', models: [m]}}
server: {{trusted_proxies: ['127.0.0.1/32']}}
rate_limits:
  scope: node
  global: {{rps: 0.001, burst: 8}}
  per_ip: {{rps: 0.001, burst: 2}}
  bypass: {{cidrs: ['10.9.0.0/16'], keys: [ci]}}
health: {{enabled: false}}
"""

HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fakes():
    a, b = server_thread("A", ["q"]).start(), server_thread("B", ["q"]).start()
    yield a, b
    a.stop()
    b.stop()


@pytest.fixture(scope="module")
def quotas(fakes):
    a, b = fakes
    proc = RouterProc(QUOTAS.format(a=a.url, b=b.url)).start()
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def limits(fakes):
    proc = RouterProc(LIMITS.format(a=fakes[0].url)).start()
    yield proc
    proc.stop()


def sdk(proc: RouterProc, key: str = "sk-none") -> openai.OpenAI:
    return openai.OpenAI(base_url=proc.url + "/v1", api_key=key, max_retries=0, timeout=30)


def answer(client: openai.OpenAI, model: str) -> str:
    return client.chat.completions.create(model=model, messages=HI).choices[0].message.content or ""


def test_a_backend_at_its_quota_is_skipped_like_a_full_one(quotas) -> None:
    client = sdk(quotas)
    assert answer(client, "q").startswith("Hello from A")  # the preferred tier, its one request
    assert answer(client, "q").startswith("Hello from B")  # at its quota: the next tier serves
    assert answer(client, "q").startswith("Hello from B")
    row = next(b for b in quotas.status()["backends"] if b["name"] == "capped")
    assert row["quota_limited_s"] > 900  # 1 request per 1,000 s
    keys = redis.Redis.from_url(settings.REDIS_URL).keys(f"{quotas.prefix}quota:*")
    assert {k.decode().removeprefix(quotas.prefix) for k in keys} >= {"quota:b:capped:r"}  # kept cluster-wide


def test_every_candidate_limited_is_a_429_with_retry_after_and_no_upstream_call(quotas, fakes) -> None:
    client = sdk(quotas)
    assert answer(client, "only") and answer(client, "only")  # its burst of 2
    before = len(fakes[0].requests)
    with pytest.raises(openai.RateLimitError) as err:
        client.chat.completions.create(model="only", messages=HI)
    assert err.value.body["code"] == "upstream_quota_exceeded"
    assert "'only'" in err.value.body["message"] and "upstream quota" in err.value.body["message"]
    assert int(err.value.response.headers["retry-after"]) > 900
    assert len(fakes[0].requests) == before
    wait_until(lambda: 'router_rate_limited_total{limit="upstream_quota"} 1.0'
               in httpx.get(quotas.url + "/metrics", timeout=10).text, 20, what="the refusal counted")


def test_tokens_per_minute_are_paid_by_the_answers(quotas) -> None:
    """The first answer's tokens (more than the 5 a minute allowed) put the
    backend in debt: the next requests go to the spare until it refills."""
    client = sdk(quotas)
    first = client.chat.completions.create(model="tok", messages=HI)
    assert first.choices[0].message.content.startswith("Hello from A")
    assert first.usage is not None and first.usage.total_tokens > 5
    # The charge is paid in the background: a request or two may still find room.
    wait_until(lambda: answer(client, "tok").startswith("Hello from B"), 20, what="the debt to show")
    assert answer(client, "tok").startswith("Hello from B")


def test_per_ip_limits_anonymous_clients_each_on_their_own(limits) -> None:
    def chat(ip: str, key: str | None = None) -> httpx.Response:
        headers = {"x-forwarded-for": ip, **({"authorization": f"Bearer {key}"} if key else {})}
        return httpx.post(limits.url + "/v1/chat/completions", json={"model": "m", "messages": HI},
                          headers=headers, timeout=30)

    assert [chat("192.0.2.1").status_code for _ in range(2)] == [200, 200]
    refused = chat("192.0.2.1")
    assert refused.status_code == 429
    error = refused.json()["error"]
    assert (error["code"], error["type"]) == ("rate_limit_exceeded", "requests")
    assert "client address" in error["message"]
    assert int(refused.headers["retry-after"]) > 900
    assert chat("192.0.2.2").status_code == 200  # another address, its own bucket
    key = create_key(limits)
    assert chat("192.0.2.1", key).status_code == 200  # a key's request: its own limits, not the address's
    ci = create_key(limits, name="ci")
    assert chat("192.0.2.1", ci).status_code == 200  # bypassed by name
    assert [chat("10.9.3.4").status_code for _ in range(12)] == [200] * 12  # a bypassed network: no limit
    # So far the global bucket paid for 2 + 1 + 1 = 4 of its 8.


def test_the_global_limit_holds_for_everyone_but_the_bypass(limits) -> None:
    statuses = [httpx.post(limits.url + "/v1/chat/completions", json={"model": "m", "messages": HI},
                           headers={"x-forwarded-for": f"198.51.100.{i}"}, timeout=30)
                for i in range(1, 8)]
    assert [r.status_code for r in statuses] == [200] * 4 + [429] * 3
    assert "the router's limit" in statuses[-1].json()["error"]["message"]
    bypassed = httpx.post(limits.url + "/v1/chat/completions", json={"model": "m", "messages": HI},
                          headers={"x-forwarded-for": "10.9.0.1"}, timeout=30)
    assert bypassed.status_code == 200


def test_two_nodes_share_a_backend_quota(fakes, router_factory) -> None:
    """Two web processes of one deployment (one DB, one Redis prefix) take
    from one bucket: two requests, one through each, spend a burst of 2, and
    then both refuse."""
    config = f"""
backends:
  - {{name: shared, url: '{fakes[0].url}', models: [s], quota: {{rps: 0.001, burst: 2}}}}
health: {{enabled: false}}
"""
    first = router_factory(config)
    second = router_factory(config, var_dir=first.dir, env={"ROUTER_REDIS_PREFIX": first.prefix})
    assert answer(sdk(first), "s") and answer(sdk(second), "s")
    for proc in (first, second):
        with pytest.raises(openai.RateLimitError) as err:
            sdk(proc).chat.completions.create(model="s", messages=HI)
        assert err.value.body["code"] == "upstream_quota_exceeded"

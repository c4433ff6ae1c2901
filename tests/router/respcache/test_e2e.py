"""The response cache end to end: the official SDKs → a real router process
(real Redis) → fake OpenAI-compatible backends (docs/response-cache.md)."""

from __future__ import annotations

import csv
import io
import time
import uuid

import anthropic
import httpx
import openai
import pytest
import redis

from tests.support.routerproc import wait_until
from tests.support.services import OwnedRedis

CONFIG = """
backends:
  - name: a
    url: {a}
    models: [m]
health:
  enabled: false
response_cache:
  enabled: true
{extra}
"""

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}


def posts(server) -> int:
    return len([r for r in server.requests if r.method == "POST"])


@pytest.fixture
def stack(openai_backends, router_factory):
    def make(extra: str = "", **kwargs):
        (a,) = openai_backends("a")
        router = router_factory(CONFIG.format(a=a.url, extra=extra), **kwargs)
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="sk-test", max_retries=0, timeout=30)
        return router, client, a

    return make


def chat(router, body=None, headers=None) -> httpx.Response:
    return httpx.post(router.url + "/v1/chat/completions", json=body or CHAT, headers=headers or {}, timeout=30)


def test_a_repeated_request_is_answered_from_the_cache(stack):
    """Miss, then hit: the backend answers once; the hit is the same object,
    with `x-cache: hit` and an `age`; the key order and spacing of the body
    do not matter."""
    router, client, a = stack()
    first = client.chat.completions.with_raw_response.create(**CHAT)
    assert first.headers["x-cache"] == "miss" and "age" not in first.headers
    reordered = b'{ "temperature": 0,  "messages": [{"content": "hi", "role": "user"}], "model": "m" }'
    second = httpx.post(router.url + "/v1/chat/completions", content=reordered,
                        headers={"content-type": "application/json"}, timeout=30)
    assert second.status_code == 200 and second.headers["x-cache"] == "hit"
    assert int(second.headers["age"]) >= 0
    stored = first.parse()
    assert second.json()["id"] == stored.id
    assert second.json()["choices"][0]["message"]["content"] == stored.choices[0].message.content
    assert posts(a) == 1


def test_a_stream_is_stored_and_replayed_to_stream_and_whole_requests(stack):
    """A streamed miss is assembled and stored; a streaming hit parses with
    the SDK into the same text, finish reason and usage; a non-streaming
    request gets the assembled object from the same entry."""
    _router, client, a = stack()
    live = client.chat.completions.create(**CHAT, stream=True, stream_options={"include_usage": True})
    live_chunks = list(live)
    text = "".join(c.choices[0].delta.content or "" for c in live_chunks if c.choices)
    live_usage = live_chunks[-1].usage
    assert text.startswith("Hello from a") and live_usage is not None
    with client.chat.completions.with_streaming_response.create(
        **CHAT, stream=True, stream_options={"include_usage": True}
    ) as raw:
        assert raw.headers["x-cache"] == "hit"
        chunks = list(raw.parse())
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage == live_usage
    whole = client.chat.completions.with_raw_response.create(**CHAT)
    assert whole.headers["x-cache"] == "hit"
    parsed = whole.parse()
    assert parsed.choices[0].message.content == text and parsed.usage == live_usage
    assert posts(a) == 1


def test_a_stream_asking_for_usage_is_not_served_an_entry_without_it(stack):
    _router, client, a = stack()
    list(client.chat.completions.create(**CHAT, stream=True))  # stored without usage
    raw = client.chat.completions.with_raw_response.create(**CHAT)  # a whole answer needs usage
    assert raw.headers["x-cache"] == "miss" and raw.parse().usage is not None
    again = client.chat.completions.with_raw_response.create(**CHAT)
    assert again.headers["x-cache"] == "hit"
    assert posts(a) == 2


def test_tool_calls_are_replayed(stack):
    _router, client, a = stack()
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    body = {**CHAT, "messages": [{"role": "user", "content": "weather in Seoul?"}], "tools": tools}
    live = client.chat.completions.create(**body)
    call = live.choices[0].message.tool_calls[0]
    stream = client.chat.completions.create(**body, stream=True)
    calls: dict[int, dict] = {}
    finish = None
    for chunk in stream:
        for c in chunk.choices[0].delta.tool_calls or ():
            known = calls.setdefault(c.index, {"id": c.id, "name": "", "arguments": ""})
            known["name"] += (c.function.name or "") if c.function else ""
            known["arguments"] += (c.function.arguments or "") if c.function else ""
        finish = chunk.choices[0].finish_reason or finish
    assert calls == {0: {"id": call.id, "name": "get_weather", "arguments": call.function.arguments}}
    assert finish == "tool_calls"
    assert posts(a) == 1


def test_completions_embeddings_and_responses_hit(stack):
    _router, client, a = stack()
    completion = client.completions.create(model="m", prompt="say hi", temperature=0)
    stream = client.completions.create(model="m", prompt="say hi", temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in stream if c.choices) == completion.choices[0].text
    e1 = client.embeddings.create(model="m", input=["x", "y"])
    e2 = client.embeddings.with_raw_response.create(model="m", input=["x", "y"])
    assert e2.headers["x-cache"] == "hit" and e2.parse().data[1].embedding == e1.data[1].embedding
    response = client.responses.create(model="m", input="hello", temperature=0)
    events = list(client.responses.create(model="m", input="hello", temperature=0, stream=True))
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    assert events[-1].response.output_text == response.output_text
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == response.output_text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert posts(a) == 3


def test_a_responses_stream_is_stored_from_its_completed_event(stack):
    _router, client, a = stack()
    events = list(client.responses.create(model="m", input="hello", temperature=0, stream=True))
    raw = client.responses.with_raw_response.create(model="m", input="hello", temperature=0)
    assert raw.headers["x-cache"] == "hit"
    assert raw.parse().output_text == events[-1].response.output_text
    assert posts(a) == 1


def test_non_deterministic_requests_bypass(stack):
    router, client, a = stack()
    for _ in range(2):
        raw = client.chat.completions.with_raw_response.create(model="m", messages=CHAT["messages"], temperature=0.7)
        assert raw.headers["x-cache"] == "bypass"
    seeded = {"model": "m", "messages": CHAT["messages"], "seed": 7}
    assert chat(router, seeded).headers["x-cache"] == "miss"
    assert chat(router, seeded).headers["x-cache"] == "hit"
    assert posts(a) == 3


def test_deterministic_only_false_caches_any_request(stack):
    router, _client, _a = stack("  deterministic_only: false")
    body = {"model": "m", "messages": CHAT["messages"], "temperature": 0.7}
    assert chat(router, body).headers["x-cache"] == "miss"
    assert chat(router, body).headers["x-cache"] == "hit"


def test_cache_control_no_cache_and_no_store(stack):
    """no-cache skips the lookup but stores; no-store neither reads nor writes."""
    router, _client, a = stack()
    assert chat(router).headers["x-cache"] == "miss"
    assert chat(router, headers={"cache-control": "no-cache"}).headers["x-cache"] == "miss"
    assert chat(router, headers={"cache-control": "no-store"}).headers["x-cache"] == "bypass"
    assert posts(a) == 3
    other = {**CHAT, "messages": [{"role": "user", "content": "other"}]}
    assert chat(router, other, {"cache-control": "no-store"}).headers["x-cache"] == "bypass"
    assert chat(router, other).headers["x-cache"] == "miss"  # no-store stored nothing
    fresh = {**CHAT, "messages": [{"role": "user", "content": "fresh"}]}
    assert chat(router, fresh, {"cache-control": "no-cache"}).headers["x-cache"] == "miss"
    assert chat(router, fresh).headers["x-cache"] == "hit"  # no-cache stored its answer


def test_entries_expire_after_ttl(stack):
    router, _client, _a = stack("  ttl: 1")
    assert chat(router).headers["x-cache"] == "miss"
    stored = time.monotonic()
    assert chat(router).headers["x-cache"] == "hit" or time.monotonic() - stored >= 1
    wait_until(lambda: chat(router).headers["x-cache"] == "miss", 15, interval=0.2, what="entry expired")
    assert time.monotonic() - stored >= 1


def test_errors_and_cut_streams_are_not_stored(stack):
    router, _client, a = stack()
    a.behavior.status = 400
    assert chat(router).status_code == 400
    a.behavior.reset()
    assert chat(router).headers["x-cache"] == "miss"  # the 400 was not stored
    body = {**CHAT, "messages": [{"role": "user", "content": "cut me"}], "stream": True}
    a.behavior.die_after_chunks = 2
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=30) as cut:
        assert cut.headers["x-cache"] == "miss"
        data = b"".join(cut.iter_bytes())
    assert b"[DONE]" not in data
    a.behavior.reset()
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=30) as whole:
        assert whole.headers["x-cache"] == "miss"  # the cut stream was not stored
        assert b"[DONE]" in b"".join(whole.iter_bytes())
    with httpx.stream("POST", router.url + "/v1/chat/completions", json=body, timeout=30) as hit:
        assert hit.headers["x-cache"] == "hit"


def test_an_answer_over_max_entry_bytes_is_not_stored(stack):
    router, _client, a = stack("  max_entry_bytes: 64")
    assert chat(router).headers["x-cache"] == "miss"
    assert chat(router).headers["x-cache"] == "miss"
    assert posts(a) == 2


def _key(router, name: str) -> str:
    out = router.manage("createapikey", "--name", name)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().splitlines()[-1]


def _authorized(router, key: str) -> None:
    wait_until(lambda: chat(router, headers={"authorization": f"Bearer {key}", "cache-control": "no-store"})
               .status_code == 200, 30, what="key known")


@pytest.mark.parametrize("scope", ["key", "global"])
def test_scope_key_keeps_an_entry_to_its_key(stack, scope):
    router, _client, _a = stack(f"  scope: {scope}\napi_keys: {{mode: blocking}}")
    alice, bob = _key(router, "alice"), _key(router, "bob")
    _authorized(router, alice)
    _authorized(router, bob)
    assert chat(router, headers={"authorization": f"Bearer {alice}"}).headers["x-cache"] == "miss"
    assert chat(router, headers={"authorization": f"Bearer {alice}"}).headers["x-cache"] == "hit"
    second = chat(router, headers={"authorization": f"Bearer {bob}"}).headers["x-cache"]
    assert second == ("miss" if scope == "key" else "hit")
    # A hit still needs a valid key.
    assert chat(router, headers={"authorization": "Bearer sk-nope"}).status_code == 401


def test_a_hit_counts_against_the_rate_limit_and_in_usage(stack):
    router, _client, _a = stack("api_keys: {mode: blocking}")
    out = router.manage("createapikey", "--name", "limited", "--rate-limit", "3")
    assert out.returncode == 0, out.stderr
    key = out.stdout.strip().splitlines()[-1]
    headers = {"authorization": f"Bearer {key}"}
    wait_until(lambda: chat(router, headers=headers).status_code == 200, 30, what="key known")
    results = [chat(router, headers=headers) for _ in range(3)]
    assert [r.status_code for r in results][:2] == [200, 200] and results[-1].status_code == 429
    assert results[0].headers["x-cache"] == "hit"

    def usage() -> dict:
        out = router.manage("keyusage", "--csv")
        rows = list(csv.DictReader(io.StringIO(out.stdout)))
        return next((r for r in rows if r["name"] == "limited"), {})

    # Marked as hits in the key's usage (the Redis buffer the keyusage command reads too).
    row = wait_until(lambda: (u := usage()) and int(u["cache_hits"]) >= 2 and u, 30, interval=0.5,
                     what="hits in the key's usage")
    assert int(row["requests"]) >= 3


def test_a_second_node_hits_the_first_nodes_entry(openai_backends, router_factory):
    (a,) = openai_backends("a")
    prefix = f"t{uuid.uuid4().hex[:10]}:"
    config = CONFIG.format(a=a.url, extra="")
    one = router_factory(config, env={"ROUTER_REDIS_PREFIX": prefix})
    two = router_factory(config, env={"ROUTER_REDIS_PREFIX": prefix})
    assert chat(one).headers["x-cache"] == "miss"
    wait_until(lambda: chat(two).headers["x-cache"] == "hit", 10, what="the shared entry")
    assert posts(a) == 1
    other = router_factory(config)  # another deployment: its own namespace
    assert chat(other).headers["x-cache"] == "miss"


def test_purge_by_model_and_whole(openai_backends, router_factory):
    (a,) = openai_backends("a")
    router = router_factory(CONFIG.format(a=a.url, extra="").replace("models: [m]", "models: [m, n]"))
    for model in ("m", "n"):
        assert chat(router, {**CHAT, "model": model}).headers["x-cache"] == "miss"
        assert chat(router, {**CHAT, "model": model}).headers["x-cache"] == "hit"
    client_redis = redis.Redis.from_url("redis://127.0.0.1:6379/0")
    channel = router.prefix + "respcache:purge"
    wait_until(lambda: client_redis.pubsub_numsub(channel)[0][1] >= 1, 10, what="purge listener")
    out = router.manage("purgeresponsecache", "--model", "m")
    assert out.returncode == 0 and "Purged 1 " in out.stdout, out.stdout + out.stderr
    wait_until(lambda: chat(router, {**CHAT, "model": "m"}).headers["x-cache"] == "miss", 10, what="m purged")
    assert chat(router, {**CHAT, "model": "n"}).headers["x-cache"] == "hit"
    out = router.manage("purgeresponsecache")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: chat(router, {**CHAT, "model": "n"}).headers["x-cache"] == "miss", 10, what="all purged")


def test_anthropic_messages_hit_and_stream_replay(stack):
    router, _client, a = stack()
    claude = anthropic.Anthropic(base_url=router.url, api_key="sk-test", max_retries=0, timeout=30)
    # (this SDK has no `temperature` argument: sent as an extra field)
    body = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}],
            "extra_body": {"temperature": 0}}
    first = claude.messages.with_raw_response.create(**body)
    assert first.headers["x-cache"] == "miss"
    text = first.parse().content[0].text
    second = claude.messages.with_raw_response.create(**body)
    assert second.headers["x-cache"] == "hit" and second.parse().content[0].text == text
    with claude.messages.stream(**body) as stream:
        streamed = stream.get_final_message()
    assert streamed.content[0].text == text and streamed.stop_reason == "end_turn"
    assert posts(a) == 1


def test_redis_killed_bypasses_and_every_request_is_served(stack):
    """With its Redis gone the cache answers from memory what it holds and
    bypasses the rest (one warning per outage); nothing fails; once Redis is
    back entries are shared again."""
    own = OwnedRedis().start()
    try:
        router, _client, _a = stack(env={"REDIS_URL": own.url})
        assert chat(router).headers["x-cache"] == "miss"
        own.stop()
        assert chat(router).headers["x-cache"] == "hit"  # the memory tier
        other = {**CHAT, "messages": [{"role": "user", "content": "other"}]}
        answers = [chat(router, other) for _ in range(5)]
        assert [r.status_code for r in answers] == [200] * 5
        assert {r.headers["x-cache"] for r in answers} == {"bypass"}
        wait_until(lambda: "response cache: Redis tier unreachable" in router.logs(), 10, what="the warning")
        assert router.logs().count("response cache: Redis tier unreachable") == 1
        own.start()
        wait_until(lambda: chat(router, other).headers["x-cache"] == "miss", 30, interval=0.2, what="Redis back")
        assert chat(router, other).headers["x-cache"] == "hit"
        assert "response cache: Redis tier back" in router.logs()
        assert "Traceback" not in router.logs()
    finally:
        own.cleanup()


def _metric(router, name: str, **labels: str) -> float:
    total = 0.0
    for line in httpx.get(router.url + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name) and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_memory_stays_under_max_bytes_under_distinct_requests_and_metrics_count(stack):
    """A workload of distinct requests: the memory tier stays under max_bytes
    (evicting the least recent), and /metrics counts hits, misses and bytes."""
    router, _client, _a = stack("  max_bytes: 8KiB\n  max_entry_bytes: 2KiB\n  shared: false")
    for i in range(60):
        assert chat(router, {**CHAT, "seed": i}).headers["x-cache"] == "miss"
        assert _metric(router, "router_response_cache_memory_bytes") <= 8 * 1024
    assert chat(router, {**CHAT, "seed": 59}).headers["x-cache"] == "hit"  # the most recent stays
    assert chat(router, {**CHAT, "seed": 0}).headers["x-cache"] == "miss"  # the oldest was evicted
    wait_until(lambda: _metric(router, "router_response_cache_requests_total", model="m", result="miss") == 61,
               15, what="misses counted")
    assert _metric(router, "router_response_cache_requests_total", model="m", result="hit") == 1
    assert _metric(router, "router_response_cache_bytes_total", model="m", result="stored") > 0
    assert _metric(router, "router_response_cache_bytes_total", model="m", result="hit") > 0

"""OpenTelemetry traces end to end: the official openai SDK → a router process
with OTEL_EXPORTER_OTLP_ENDPOINT set → fake OpenAI backends (one dead), and
the spans the router exported, as a real OTLP/HTTP collector on loopback
received and decoded them (fakes/otlp_collector.py)."""

from __future__ import annotations

import secrets
import socket
import time

import anthropic
import httpx
import openai
import pytest

from fakes.otlp_collector import Collector
from tests.keys.e2e import create_key
from tests.support.routerproc import free_port, wait_until

MESSAGES = [{"role": "user", "content": "hi"}]

CONFIG = """
backends:
  - {{name: dead, url: 'http://127.0.0.1:{dead}', models: [m, only-dead], priority: 0}}
  - {{name: live, url: '{live}', models: [m], priority: 1}}
  - {{name: spare, url: '{spare}', models: [backup]}}
health: {{enabled: false, failure_threshold: 1000}}
retry: {{max_attempts: 3, backoff: 0}}
fallback: {{fallback_chains: {{only-dead: [backup]}}}}
"""


def otel_env(endpoint: str, **extra: str) -> dict[str, str]:
    return {
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within 0.1 s (default 5 s)
        "OTEL_SERVICE_NAME": "",
        "OTEL_RESOURCE_ATTRIBUTES": "",
        "OTEL_SDK_DISABLED": "",
        "OTEL_TRACES_EXPORTER": "",
        **extra,
    }


@pytest.fixture
def collector():
    with Collector() as c:
        yield c


@pytest.fixture
def stack(openai_backends, router_factory, collector):
    live, spare = openai_backends("live", "spare", models=("m", "backup"))
    config = CONFIG.format(dead=free_port(), live=live.url, spare=spare.url)
    router = router_factory(config, env=otel_env(collector.url, OTEL_EXPORTER_OTLP_HEADERS="x-tenant=team%20a"))
    client = openai.OpenAI(
        base_url=router.url + "/v1", api_key="sk-client-" + secrets.token_hex(8), max_retries=0, timeout=30
    )
    return router, client, live, spare, collector


def trace_of(collector: Collector, trace_id: str, server_spans: int = 1) -> list[dict]:
    """The spans of one trace, once its server span(s) arrived (ended)."""

    def ready():
        spans = [s for s in collector.snapshot() if s["trace_id"] == trace_id]
        return spans if sum(s["kind"] == "SERVER" for s in spans) >= server_spans else None

    return wait_until(ready, 30, what=f"the spans of trace {trace_id}")


def parent(trace_id: str | None = None) -> tuple[str, str, str]:
    """A W3C traceparent of a caller's own span: (header, trace id, span id)."""
    tid, sid = trace_id or secrets.token_hex(16), secrets.token_hex(8)
    return f"00-{tid}-{sid}-01", tid, sid


def one(spans: list[dict], **where) -> dict:
    found = [s for s in spans if all(s.get(k) == v for k, v in where.items())]
    assert len(found) == 1, (where, [(s["name"], s["attributes"]) for s in spans])
    return found[0]


def children(spans: list[dict], of: dict, name: str) -> list[dict]:
    return sorted(
        (s for s in spans if s["parent_span_id"] == of["span_id"] and s["name"] == name), key=lambda s: s["start_ns"]
    )


def test_retry_shows_two_upstream_spans_under_the_callers_trace(stack):
    """A dead first backend and a retry: one server span, parented on the
    caller's traceparent; two select and two upstream children; the answer's
    tokens; the live backend got our upstream span as its traceparent."""
    _router, client, live, _spare, collector = stack
    header, tid, caller_span = parent()
    out = client.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"traceparent": header})
    assert out.choices[0].message.content.startswith("Hello from live")
    spans = trace_of(collector, tid)

    server = one(spans, kind="SERVER")
    assert server["name"] == "POST /v1/chat/completions"
    assert server["parent_span_id"] == caller_span
    a = server["attributes"]
    assert a["http.request.method"] == "POST" and a["http.route"] == "/v1/chat/completions"
    assert a["http.response.status_code"] == 200
    assert a["gen_ai.request.model"] == "m" and a["gen_ai.operation.name"] == "chat"
    assert a["router.backend"] == "live" and a["gen_ai.system"] == "openai_compat"
    assert a["router.attempts"] == 2
    assert a["gen_ai.usage.input_tokens"] == out.usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == out.usage.completion_tokens
    assert a["router.request_id"]
    assert server["status"] == "UNSET"
    assert server["resource"]["service.name"] == "llm-router"
    assert server["resource"]["router.node_id"] and server["resource"]["router.deployment_id"]

    selects = children(spans, server, "select")
    assert [s["attributes"].get("router.backend") for s in selects] == ["dead", "live"]
    assert all(s["attributes"]["router.queue"] == "direct" for s in selects)
    assert selects[0]["attributes"]["router.candidates"] == 2
    first, second = children(spans, server, "upstream")
    assert first["kind"] == second["kind"] == "CLIENT"
    assert first["attributes"]["router.backend"] == "dead" and first["attributes"]["router.retry"] == 0
    assert first["status"] == "ERROR" and first["attributes"]["error.type"] == "upstream_failed"
    assert second["attributes"]["router.backend"] == "live" and second["attributes"]["router.retry"] == 1
    assert second["attributes"]["http.response.status_code"] == 200 and second["status"] == "UNSET"
    assert first["end_ns"] <= second["start_ns"]
    assert {s["span_id"] for s in spans} == {
        server["span_id"],
        *(s["span_id"] for s in selects),
        first["span_id"],
        second["span_id"],
    }

    # The trace goes on upstream: the backend's parent is our attempt's span.
    sent = [r for r in live.requests if r.method == "POST"][-1]
    assert sent.headers["traceparent"] == f"00-{tid}-{second['span_id']}-01"
    assert all(client.api_key.encode() not in body for body in collector.bodies)
    # The SDK's own variables apply: the export carries OTEL_EXPORTER_OTLP_HEADERS.
    assert {h.get("x-tenant") for h in collector.headers} == {"team a"}


def test_stream_span_ends_with_the_stream(stack):
    """A stream's server span ends when its last chunk is sent, after the
    first_token event; the usage the stream reported is on it."""
    _router, client, live, _spare, collector = stack
    live.behavior.chunk_delay_s = 0.25
    live.behavior.chunks = 6
    header, tid, _ = parent()
    chunks = list(
        client.chat.completions.create(
            model="m",
            messages=MESSAGES,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"traceparent": header},
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    spans = trace_of(collector, tid)
    server = one(spans, kind="SERVER")
    a = server["attributes"]
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert a["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert a["router.ttft_ms"] < a["router.latency_ms"]
    (first_token,) = [e for e in server["events"] if e["name"] == "first_token"]
    assert server["end_ns"] - first_token["time_ns"] >= 1.0e9  # five more 0.25 s frames after the first
    live_attempt = children(spans, server, "upstream")[-1]
    assert live_attempt["attributes"]["router.backend"] == "live"
    assert live_attempt["end_ns"] >= first_token["time_ns"]  # the attempt lasts while its stream does


def test_fallback_hop_is_on_the_trace(stack):
    """The only backend of the model is dead: the chain's next model answers,
    and the trace shows the hop, the failed attempt and the fallback's."""
    _router, client, _live, spare, collector = stack
    header, tid, _ = parent()
    out = client.chat.completions.create(model="only-dead", messages=MESSAGES, extra_headers={"traceparent": header})
    assert out.choices[0].message.content.startswith("Hello from spare")
    spans = trace_of(collector, tid)
    server = one(spans, kind="SERVER")
    a = server["attributes"]
    assert a["router.fallback.hops"] == ["backup"]
    assert a["router.routed_model"] == "backup" and a["router.backend"] == "spare"
    assert a["gen_ai.request.model"] == "only-dead"
    hops = [e for e in server["events"] if e["name"] == "fallback"]
    assert [e["attributes"]["router.fallback.target"] for e in hops] == ["backup"]
    attempts = children(spans, server, "upstream")
    assert [(s["attributes"]["router.backend"], s["attributes"]["router.route.model"]) for s in attempts] == [
        ("dead", "only-dead"),
        ("spare", "backup"),
    ]
    selects = children(spans, server, "select")
    assert [(s["attributes"]["router.fallback.depth"], s["attributes"].get("router.backend")) for s in selects] == [
        (0, "dead"),
        (0, None),
        (1, "spare"),
    ]
    assert [r for r in spare.requests if r.method == "POST"][-1].json["model"] == "backup"


def test_no_traceparent_starts_a_new_trace_per_request(stack):
    _router, client, _live, _spare, collector = stack
    before = len(collector.snapshot())
    for _ in range(2):
        client.chat.completions.create(model="m", messages=MESSAGES)

    def servers():
        found = [s for s in collector.snapshot()[before:] if s["kind"] == "SERVER"]
        return found if len(found) == 2 else None

    a, b = wait_until(servers, 30, what="two server spans")
    assert a["trace_id"] != b["trace_id"]
    assert a["parent_span_id"] is None and b["parent_span_id"] is None


BLOCKING = """
backends:
  - {{name: live, url: '{live}', models: [m]}}
health: {{enabled: false}}
api_keys: {{mode: blocking}}
"""


def test_key_never_leaves_in_a_span(openai_backends, router_factory, collector):
    """Blocking mode: a keyed request's span says where the key came from, and
    neither the key nor the client's Authorization value is in any exported
    byte; a refused request is traced as its refusal, with no upstream span."""
    (live,) = openai_backends("live")
    router = router_factory(
        BLOCKING.format(live=live.url), env=otel_env(collector.url, OTEL_SERVICE_NAME="edge-router")
    )
    key = create_key(router, "--models", "m")
    client = openai.OpenAI(base_url=router.url + "/v1", api_key=key, max_retries=0, timeout=30)
    header, tid, _ = parent()
    client.chat.completions.create(model="m", messages=MESSAGES, extra_headers={"traceparent": header})
    server = one(trace_of(collector, tid), kind="SERVER")
    assert server["attributes"]["router.key_source"] == "operator"
    assert server["resource"]["service.name"] == "edge-router"

    bad_header, bad_tid, _ = parent()
    r = httpx.post(
        router.url + "/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"authorization": "Bearer " + key + "x", "traceparent": bad_header},
        timeout=30,
    )
    assert r.status_code == 401
    refused = trace_of(collector, bad_tid)
    (server,) = refused
    assert server["attributes"]["http.response.status_code"] == 401
    assert server["attributes"]["error.type"] == "invalid_api_key"
    assert server["status"] == "UNSET"  # a 4xx is the client's, not the server's error
    for body in collector.bodies:
        assert key.encode() not in body
        assert key[-12:].encode() not in body


def _blackhole() -> socket.socket:
    """A port that takes connections (the kernel's backlog) and never answers."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


@pytest.mark.parametrize("collector_state", ["refusing", "hanging"])
def test_a_dead_collector_never_fails_or_slows_a_request(openai_backends, router_factory, collector_state):
    """Nothing listens at the endpoint (or it never answers): every request,
    streamed or not, still succeeds, and none waits on the export."""
    (live,) = openai_backends("live")
    hole = _blackhole() if collector_state == "hanging" else None
    port = hole.getsockname()[1] if hole is not None else free_port()
    try:
        router = router_factory(
            BLOCKING.format(live=live.url).replace("api_keys: {mode: blocking}\n", ""),
            env=otel_env(f"http://127.0.0.1:{port}", OTEL_EXPORTER_OTLP_TIMEOUT="3"),
        )
        client = openai.OpenAI(base_url=router.url + "/v1", api_key="x", max_retries=0, timeout=30)
        slowest = 0.0
        deadline = time.monotonic() + 2.0  # spans past several 0.1 s export rounds
        sent = 0
        while sent < 10 or time.monotonic() < deadline:
            t0 = time.monotonic()
            if sent % 2:
                text = "".join(
                    c.choices[0].delta.content or ""
                    for c in client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
                    if c.choices
                )
            else:
                text = client.chat.completions.create(model="m", messages=MESSAGES).choices[0].message.content
            slowest = max(slowest, time.monotonic() - t0)
            assert text.startswith("Hello from live")
            sent += 1
        # An export that blocked the loop would hold a request for its whole timeout (3 s).
        assert slowest < 2.5, slowest
        assert router.proc is not None and router.proc.poll() is None
    finally:
        if hole is not None:
            hole.close()


def test_anthropic_door_is_traced_on_the_same_pipeline(stack):
    """POST /v1/messages (the official anthropic SDK): its own span name, the
    same children, the usage the client was told."""
    router, _client, _live, _spare, collector = stack
    header, tid, caller_span = parent()
    client = anthropic.Anthropic(base_url=router.url, api_key="x", max_retries=0, timeout=30)
    out = client.messages.create(model="m", max_tokens=64, messages=MESSAGES, extra_headers={"traceparent": header})
    assert out.content[0].text.startswith("Hello from live")
    spans = trace_of(collector, tid)
    server = one(spans, kind="SERVER")
    assert server["name"] == "POST /v1/messages" and server["parent_span_id"] == caller_span
    a = server["attributes"]
    assert a["http.route"] == "/v1/messages" and a["http.response.status_code"] == 200
    assert a["gen_ai.usage.input_tokens"] == out.usage.input_tokens
    assert a["gen_ai.usage.output_tokens"] == out.usage.output_tokens
    assert [s["attributes"]["router.backend"] for s in children(spans, server, "upstream")] == ["dead", "live"]


def test_a_malformed_traceparent_starts_a_new_trace(stack):
    """A traceparent that is not W3C's is ignored (never an error): the
    request is served and its span is a root of its own trace."""
    router, _client, _live, _spare, collector = stack
    before = len(collector.snapshot())
    r = httpx.post(
        router.url + "/v1/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={"traceparent": "00-not-a-trace-id-01", "x-request-id": "req-" + "x" * 1000},
        timeout=30,
    )
    assert r.status_code == 200

    def server():
        found = [s for s in collector.snapshot()[before:] if s["kind"] == "SERVER"]
        return found[0] if found else None

    span = wait_until(server, 30, what="the server span")
    assert span["parent_span_id"] is None and len(span["trace_id"]) == 32
    assert len(span["attributes"]["router.request_id"]) == 256  # a client's value is capped


def test_a_client_leaving_mid_stream_ends_the_span(stack):
    """The client closes a stream after its first chunk: the server span ends
    then (not at the backend's pace) and says the client left."""
    router, _client, live, _spare, collector = stack
    live.behavior.chunk_delay_s = 0.5
    live.behavior.chunks = 40  # 20 s if read to the end
    header, tid, _ = parent()
    t0 = time.monotonic()
    with (
        httpx.Client(timeout=30) as http,
        http.stream(
            "POST",
            router.url + "/v1/chat/completions",
            json={"model": "m", "messages": MESSAGES, "stream": True},
            headers={"traceparent": header},
        ) as r,
    ):
        assert r.status_code == 200
        next(r.iter_bytes())
    server = one(trace_of(collector, tid), kind="SERVER")
    assert time.monotonic() - t0 < 15
    assert server["attributes"]["router.client_disconnected"] is True
    assert server["end_ns"] - server["start_ns"] < 15e9

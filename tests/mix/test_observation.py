"""Standard responses out, observations inside (seed 002 S09; MIX-6).

A standard client gets exactly the OpenAI shapes — no router field in the
body, no router header — whichever provider served it; the selected provider,
path, queue decision, retries/hops, usage, latency and TTFT go to the
structured log, the Redis recent list and /metrics.
"""

from __future__ import annotations

import httpx
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response

from tests.mix.conftest import logged_observation, marker, metric_value, observation, rid
from tests.router.providers.openai_shapes import no_extras

# Headers any ASGI/HTTP server sets; everything else must come from the provider.
TRANSPORT_HEADERS = {"date", "server", "content-type", "content-length", "transfer-encoding"}
STREAM_HEADERS = {"cache-control", "x-accel-buffering"}  # standard SSE hints, no data


def _mix_until_both(stack, send):
    """Call `send(request_id)` on the mixed group until both providers answered."""
    out = {}
    for _ in range(4):
        request_id = rid()
        result = send(request_id)
        out.setdefault(observation(stack.router, request_id)["provider"], (request_id, result))
    assert set(out) == {"vllm-a", "ollama-o"}
    return out


def _direct_headers(stack, path: str, body: dict) -> set[str]:
    """The headers the vLLM-kind fake sends when asked directly (passthrough relays them)."""
    r = httpx.post(stack.vllm.url + path, json={**body, "model": "org/mix-8b"}, timeout=30)
    return set(r.headers)


def test_chat_answer_carries_no_custom_field_or_header(stack):
    """S09: non-streamed chat from either provider: the body validates as the SDK's
    ChatCompletion with no extra field and its keys are the standard ones; headers
    are transport headers or the provider's own (passthrough), never the router's."""
    body = {"model": "mix", "messages": [{"role": "user", "content": "hi"}]}
    got = _mix_until_both(
        stack,
        lambda request_id: httpx.post(
            stack.router.url + "/v1/chat/completions", json=body, headers={"x-request-id": request_id}, timeout=30
        ),
    )
    for provider, (request_id, r) in got.items():
        assert r.status_code == 200
        data = r.json()
        assert set(data) <= set(ChatCompletion.model_fields)
        assert set(data["choices"][0]["message"]) <= {
            "role",
            "content",
            "refusal",
            "annotations",
            "tool_calls",
            "audio",
        }
        no_extras(ChatCompletion.model_validate(data))
        if provider == "vllm-a":  # relayed: exactly the provider's own keys
            direct = httpx.post(
                stack.vllm.url + "/v1/chat/completions", json={**body, "model": "org/mix-8b"}, timeout=30
            )
            assert set(data) == set(direct.json())
        obs = observation(stack.router, request_id)
        for value in (obs["path"], obs["queue"], request_id):
            assert value not in r.text and value not in str(r.headers.values())
        allowed = TRANSPORT_HEADERS | (
            _direct_headers(stack, "/v1/chat/completions", body) if provider == "vllm-a" else set()
        )
        assert set(r.headers) <= allowed, provider


def test_streams_and_responses_carry_no_custom_field(stack):
    client = stack.client()

    def stream(request_id):
        raw = client.chat.completions.with_raw_response.create(
            model="mix",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-request-id": request_id},
        )
        return set(raw.headers), list(raw.parse())

    for provider, (_, (headers, chunks)) in _mix_until_both(stack, stream).items():
        for chunk in chunks:
            assert isinstance(chunk, ChatCompletionChunk)
            assert set(chunk.model_dump(exclude_unset=True)) <= set(ChatCompletionChunk.model_fields)
            no_extras(chunk)
        allowed = TRANSPORT_HEADERS | STREAM_HEADERS
        if provider == "vllm-a":
            allowed |= _direct_headers(
                stack, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True}
            )
        assert headers <= allowed, provider

    def responses(request_id):
        return httpx.post(
            stack.router.url + "/v1/responses",
            json={"model": "mix", "input": "hi"},
            headers={"x-request-id": request_id},
            timeout=30,
        ).json()

    for provider, (_, data) in _mix_until_both(stack, responses).items():
        resp = Response.model_validate(data)
        assert resp.model == "mix" and resp.output_text.startswith(f"Hello from {provider}.")
        if provider == "ollama-o":  # built by the router: exactly the SDK type
            assert set(data) <= set(Response.model_fields)
            no_extras(resp)
        else:  # relayed: exactly the provider's own keys (it may send fields the SDK lacks)
            direct = httpx.post(
                stack.vllm.url + "/v1/responses", json={"model": "org/mix-8b", "input": "hi"}, timeout=30
            ).json()
            assert set(data) == set(direct)


def test_error_bodies_are_plain_openai_errors(stack):
    r = httpx.post(
        stack.router.url + "/v1/chat/completions",
        json={"model": "olla", "messages": [{"role": "user", "content": "hi"}], "n": 3},
        timeout=30,
    )
    assert r.status_code == 400
    assert list(r.json()) == ["error"] and set(r.json()["error"]) == {"message", "type", "param", "code"}


def test_observation_names_provider_path_usage_latency_and_ttft(stack):
    """S09/MIX-6: one observation per request, the same in the structured log and the
    Redis recent list, with the selected provider, kind, adapter, served target,
    path, queue decision, retries/hops, usage, latency and (streams) TTFT."""
    client = stack.client()

    def send(request_id):
        return list(
            client.chat.completions.create(
                model="mix",
                messages=[{"role": "user", "content": "hi"}],
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"x-request-id": request_id},
            )
        )

    for provider, (request_id, _) in _mix_until_both(stack, send).items():
        obs = observation(stack.router, request_id)
        assert logged_observation(stack.router, request_id) == obs
        expected = {
            "vllm-a": {"kind": "vllm", "path": "passthrough", "served": "org/mix-8b"},
            "ollama-o": {"kind": "ollama", "path": "normalized", "served": "llama3.2", "adapter": "ollama"},
        }[provider]
        assert {k: obs.get(k) for k in expected} == expected
        if provider == "vllm-a":
            assert "adapter" not in obs
        assert obs["endpoint"] == "chat/completions" and obs["model"] == "mix" and obs["routed_model"] == "mix"
        assert obs["status"] == 200 and obs["queue"] == "direct"
        assert obs["attempts"] == 1 and obs["hops"] == []
        assert obs["usage"]["prompt_tokens"] > 0 and obs["usage"]["completion_tokens"] > 0
        assert 0 < obs["ttft_ms"] <= obs["latency_ms"]
        assert obs["upstream_ms"] > 0

    metrics = httpx.get(stack.router.url + "/metrics", timeout=10).text
    for provider, path in (("vllm-a", "passthrough"), ("ollama-o", "normalized")):
        assert (
            metric_value(metrics, "router_requests_total", model="mix", provider=provider, path=path, status="200") >= 1
        )
        assert metric_value(metrics, "router_request_seconds_count", model="mix", path=path) >= 1
    assert metric_value(metrics, "router_ttft_seconds_count", model="mix") >= 2
    assert metric_value(metrics, "router_tokens_total", model="mix", kind="completion_tokens") > 0
    assert metric_value(metrics, "router_queue_decisions_total", decision="direct") >= 2


def test_retry_and_fallback_hops_are_observed(stack):
    """A retry is a new selection that excludes the provider that failed before any
    byte; a fallback hop enters another model's group. Both are observed."""
    client = stack.client()
    mark, request_id = marker(), rid()
    out = client.chat.completions.create(
        model="flaky", messages=[{"role": "user", "content": mark}], extra_headers={"x-request-id": request_id}
    )
    assert out.choices[0].message.content.startswith("Hello from ollama-o.")
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["path"], obs["attempts"], obs["failures"]) == (
        "ollama-backup",
        "normalized",
        2,
        ["dead"],
    )
    assert obs["hops"] == []

    request_id = rid()
    out = client.chat.completions.create(
        model="gone", messages=[{"role": "user", "content": "hi"}], extra_headers={"x-request-id": request_id}
    )
    assert out.model == "gone"
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["routed_model"], obs["hops"], obs["path"]) == (
        "ollama-o",
        "olla",
        ["olla"],
        "normalized",
    )
    metrics = httpx.get(stack.router.url + "/metrics", timeout=10).text
    assert metric_value(metrics, "router_retries_total", model="flaky") >= 1
    assert metric_value(metrics, "router_fallbacks_total", model="gone") >= 1

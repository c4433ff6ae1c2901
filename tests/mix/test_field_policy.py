"""Custom and provider-specific fields on both paths (seed 002 S07, S08; MIX-4/5).

Passthrough: the upstream body is the client's, with only `model` rewritten
(and provider auth/headers set). Normalized: the standard subset (plus the
known extensions) is converted; unknown and `ignored` fields are recorded in
the observation and never sent; `unsupported` fields and unconvertible values
are a 400 `unsupported_parameter` before anything is dispatched.
"""

from __future__ import annotations

import httpx
import orjson
import pytest

from router.providers.ollama.policy import CHAT_POLICY, EMBED_POLICY, RESPONSES_POLICY
from tests.mix.conftest import UPSTREAM_KEY, marker, observation, received, rid

# Fields a Codex / vLLM / OpenAI client may send that no path may choke on.
CUSTOM = {
    "chat_template_kwargs": {"enable_thinking": False},  # vLLM
    "guided_json": {"type": "object"},  # vLLM
    "top_k": 20,  # extension: Ollama options.top_k
    "repetition_penalty": 1.05,  # extension: Ollama options.repeat_penalty
    "min_p": 0.1,  # extension: Ollama options.min_p
    "prompt_cache_key": "codex-session-1",  # OpenAI/Codex (ignored by Ollama)
    "metadata": {"workspace": "w1", "task_id": "t1"},  # routing metadata (ignored by Ollama)
    "x_vendor": {"nested": [1, {"deep": None}], "ok": True},  # unknown
    "store": False,
    "parallel_tool_calls": True,
    "top_logprobs": 2,
}
NOT_SENT_TO_OLLAMA = {
    "chat_template_kwargs",
    "guided_json",
    "prompt_cache_key",
    "metadata",
    "x_vendor",
    "store",
    "parallel_tool_calls",
    "top_logprobs",
}

# One plausible value per `ignored` field of each policy table.
IGNORED_VALUES = {
    "top_logprobs": 2,
    "parallel_tool_calls": False,
    "prediction": {"type": "content", "content": "x"},
    "user": "user-1",
    "safety_identifier": "sid-1",
    "prompt_cache_key": "k",
    "prompt_cache_retention": "24h",
    "metadata": {"k": "v"},
    "store": False,
    "service_tier": "auto",
    "verbosity": "low",
    "max_tool_calls": 3,
    "truncation": "auto",
    "stream_options": {"include_obfuscation": False},
}

# Fields refused outright (`unsupported`) and values refused by `conditional` rules:
# (field, value, extra fields needed, expected `param`).
CHAT_REFUSED = [
    ("audio", {"voice": "alloy", "format": "wav"}, {}, "audio"),
    ("functions", [{"name": "f", "parameters": {"type": "object"}}], {}, "functions"),
    ("function_call", "auto", {}, "function_call"),
    ("web_search_options", {}, {}, "web_search_options"),
    ("n", 2, {}, "n"),
    ("logprobs", True, {}, "logprobs"),
    ("modalities", ["text", "audio"], {}, "modalities"),
    ("logit_bias", {"50256": -100}, {}, "logit_bias"),
    ("response_format", {"type": "xml"}, {}, "response_format"),
    ("tools", [{"type": "custom", "custom": {"name": "x"}}], {}, "tools[0]"),
    (
        "tool_choice",
        "required",
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]},
        "tool_choice",
    ),
]
RESPONSES_REFUSED = [
    ("conversation", "conv_abc", {}, "conversation"),
    ("prompt", {"id": "pmpt_abc"}, {}, "prompt"),
    ("background", True, {}, "background"),
    ("include", ["message.output_text.logprobs"], {}, "include"),
    ("top_logprobs", 2, {}, "top_logprobs"),
    ("tools", [{"type": "web_search"}], {}, "tools[0]"),
    ("text", {"format": {"type": "grammar"}}, {}, "text.format"),
]


def _post(stack, endpoint: str, body: dict, request_id: str | None = None) -> httpx.Response:
    headers = {"authorization": "Bearer sk-client", "x-client-private": "do-not-forward"}
    if request_id:
        headers["x-request-id"] = request_id
    return httpx.post(f"{stack.router.url}/v1/{endpoint}", json=body, headers=headers, timeout=30)


# -- S07: passthrough ---------------------------------------------------------------


def test_passthrough_keeps_every_field_and_rewrites_only_the_model(stack):
    """S07: unknown/provider-specific fields reach the provider unchanged, in order;
    only `model` becomes the served name, and only provider auth/headers are set."""
    mark, request_id = marker(), rid()
    body = {
        "model": "pass",
        "messages": [{"role": "user", "content": mark}],
        "temperature": 0.3,
        **CUSTOM,
        "n": 2,
        "logprobs": True,
    }
    r = _post(stack, "chat/completions", body, request_id)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "pass"  # the served-name rewrite is undone on the way back
    (req,) = received(stack.vllm, mark)
    assert req.path == "/v1/chat/completions"
    assert req.json == {**body, "model": "org/mix-8b"}
    assert list(req.json) == list(body)  # field order kept too
    assert req.headers["authorization"] == f"Bearer {UPSTREAM_KEY}"  # the provider's key, not the client's
    assert req.headers["x-tenant"] == "team-a"
    assert req.headers["x-request-id"] == request_id
    assert "x-client-private" not in req.headers
    obs = observation(stack.router, request_id)
    assert (obs["path"], obs["served"]) == ("passthrough", "org/mix-8b")
    assert "ignored_fields" not in obs


def test_passthrough_without_rewrite_is_byte_for_byte(stack):
    mark = marker()
    raw = orjson.dumps({"model": "raw", "messages": [{"role": "user", "content": mark}], **CUSTOM})
    raw = raw.replace(b",", b", ")  # odd spacing survives too: the bytes are not re-encoded
    r = httpx.post(
        stack.router.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}, timeout=30
    )
    assert r.status_code == 200, r.text
    (req,) = received(stack.vllm, mark)
    assert req.body == raw


def test_passthrough_responses_keeps_codex_fields(stack):
    """S07 on /v1/responses, the surface Codex uses."""
    mark = marker()
    body = {
        "model": "pass",
        "instructions": "You are Codex.",
        "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": mark}]}],
        "tools": [{"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "text"}}],
        "include": ["reasoning.encrypted_content"],
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"verbosity": "low"},
        "store": False,
        "prompt_cache_key": "codex-session-1",
        "client_metadata": {"originator": "codex_cli_rs"},
    }
    r = _post(stack, "responses", body)
    assert r.status_code == 200, r.text
    (req,) = received(stack.vllm, mark)
    assert req.path == "/v1/responses"
    assert req.json == {**body, "model": "org/mix-8b"}


def test_passthrough_stream_is_relayed_with_the_fields_kept(stack):
    client = stack.client()
    mark = marker()
    chunks = list(
        client.chat.completions.create(
            model="pass",
            messages=[{"role": "user", "content": mark}],
            stream=True,
            extra_body={"chat_template_kwargs": {"enable_thinking": False}, "x_vendor": {"a": 1}},
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).startswith("Hello from vllm-a.")
    assert all(c.model == "pass" for c in chunks)
    (req,) = received(stack.vllm, mark)
    assert req.json["chat_template_kwargs"] == {"enable_thinking": False} and req.json["x_vendor"] == {"a": 1}
    assert req.json["stream"] is True and req.json["model"] == "org/mix-8b"


# -- S08: normalized ------------------------------------------------------------------


def test_normalized_converts_the_standard_subset_and_records_the_rest(stack):
    """S08: standard fields and known extensions become the Ollama request; the
    unknown and ignored ones are not invented into it, and the observation names them."""
    mark, request_id = marker(), rid()
    body = {"model": "olla", "messages": [{"role": "user", "content": mark}], "temperature": 0.3, **CUSTOM}
    r = _post(stack, "chat/completions", body, request_id)
    assert r.status_code == 200, r.text
    (req,) = received(stack.ollama, mark)
    assert req.json == {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": mark}],
        "stream": False,
        "options": {"temperature": 0.3, "top_k": 20, "repeat_penalty": 1.05, "min_p": 0.1},
    }
    assert "authorization" not in req.headers and "x-client-private" not in req.headers
    obs = observation(stack.router, request_id)
    assert set(obs["ignored_fields"]) == NOT_SENT_TO_OLLAMA
    assert (obs["path"], obs["adapter"], obs["status"]) == ("normalized", "ollama", 200)


def test_same_custom_request_on_a_mixed_group_follows_the_selected_kind(stack):
    """S07+S08 together: one body, sent to the mixed group until both providers took
    it; the vLLM-kind provider got every field, the Ollama one only the subset."""
    by_provider: dict[str, dict] = {}
    for _ in range(4):
        mark, request_id = marker(), rid()
        body = {"model": "mix", "messages": [{"role": "user", "content": mark}], **CUSTOM}
        assert _post(stack, "chat/completions", body, request_id).status_code == 200
        obs = observation(stack.router, request_id)
        server = stack.vllm if obs["provider"] == "vllm-a" else stack.ollama
        (req,) = received(server, mark)
        by_provider[obs["provider"]] = {"body": body, "sent": req.json, "obs": obs}
    vllm, olla = by_provider["vllm-a"], by_provider["ollama-o"]
    assert vllm["sent"] == {**vllm["body"], "model": "org/mix-8b"}
    assert not NOT_SENT_TO_OLLAMA & set(olla["sent"]) and not NOT_SENT_TO_OLLAMA & set(olla["sent"]["options"])
    assert set(olla["obs"]["ignored_fields"]) == NOT_SENT_TO_OLLAMA


@pytest.mark.parametrize(
    ("endpoint", "table", "base"),
    [
        ("chat/completions", CHAT_POLICY, {"messages": [{"role": "user", "content": "{mark}"}]}),
        ("responses", RESPONSES_POLICY, {"input": "{mark}"}),
        ("embeddings", EMBED_POLICY, {"input": "{mark}"}),
    ],
    ids=["chat", "responses", "embeddings"],
)
def test_every_ignored_field_is_recorded_not_sent(stack, endpoint, table, base):
    """S08, table-driven: each `ignored` field of the policy tables is accepted, left
    out of the Ollama request, and named in the observation."""
    ignored = sorted(f for f, (policy, _) in table.items() if policy == "ignored")
    assert set(ignored) <= set(IGNORED_VALUES), "add an example value for the new ignored field"
    mark, request_id = marker(), rid()
    body = orjson.loads(orjson.dumps(base).replace(b"{mark}", mark.encode()))
    body = {"model": "olla", **body, **{f: IGNORED_VALUES[f] for f in ignored}}
    r = _post(stack, endpoint, body, request_id)
    assert r.status_code == 200, r.text
    (req,) = received(stack.ollama, mark)
    assert not set(ignored) & set(req.json)
    assert set(observation(stack.router, request_id)["ignored_fields"]) == set(ignored)


@pytest.mark.parametrize(
    ("endpoint", "case"),
    [("chat/completions", c) for c in CHAT_REFUSED] + [("responses", c) for c in RESPONSES_REFUSED],
    ids=lambda v: v if isinstance(v, str) else v[0],
)
def test_unconvertible_field_is_refused_before_dispatch(stack, endpoint, case):
    """S08: a field Ollama cannot honour is an explicit 400 unsupported_parameter;
    the Ollama provider receives nothing and the observation names it and the path."""
    field, value, extra, param = case
    base = {"messages": [{"role": "user", "content": "hi"}]} if endpoint == "chat/completions" else {"input": "hi"}
    before = stack.ollama.meter.arrived
    request_id = rid()
    r = _post(stack, endpoint, {"model": "olla", **base, **extra, field: value}, request_id)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", "unsupported_parameter", param)
    assert stack.ollama.meter.arrived == before
    obs = observation(stack.router, request_id)
    assert (obs["status"], obs["error"]) == (400, "unsupported_parameter")
    assert (obs["provider"], obs["kind"], obs["path"]) == ("ollama-o", "ollama", "normalized")


# Never reaches a provider: the router sends the stored conversation in its
# place (docs/responses.md; tests/responsestore), or refuses an unknown id.
ROUTER_RESOLVED = {"previous_response_id"}


def test_an_unknown_previous_response_is_404_before_dispatch(stack):
    before = stack.ollama.meter.arrived
    r = _post(stack, "responses", {"model": "olla", "input": "hi", "previous_response_id": "resp_abc"})
    assert r.status_code == 404, r.text
    error = r.json()["error"]
    assert (error["code"], error["param"]) == ("previous_response_not_found", "previous_response_id")
    assert "resp_abc" in error["message"]
    assert stack.ollama.meter.arrived == before


def test_every_unsupported_policy_field_has_a_refusal_case():
    """The refusal cases above cover every `unsupported` row of the tables."""
    covered_chat = {c[0] for c in CHAT_REFUSED}
    covered_resp = {c[0] for c in RESPONSES_REFUSED} | ROUTER_RESOLVED
    assert {f for f, (p, _) in CHAT_POLICY.items() if p == "unsupported"} <= covered_chat
    assert {f for f, (p, _) in RESPONSES_POLICY.items() if p == "unsupported"} <= covered_resp


def test_token_id_embedding_input_is_refused(stack):
    before = stack.ollama.meter.arrived
    r = _post(stack, "embeddings", {"model": "olla", "input": [[1, 2, 3]]})
    assert r.status_code == 400 and r.json()["error"]["code"] == "unsupported_parameter"
    assert r.json()["error"]["param"] == "input"
    assert stack.ollama.meter.arrived == before

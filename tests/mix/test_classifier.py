"""The provider-path classifier (seed 002 S03, S04; MIX-3).

The execution path is a function of the selected provider's `kind` only:
OpenAI-compatible kinds pass through, `ollama` and `cli` are normalized.
"""

from __future__ import annotations

import httpx
import pytest

from router.core.backend import KINDS, NORMALIZED_KINDS
from router.core.backend import PASSTHROUGH_KINDS as CODE_PASSTHROUGH
from router.providers.base import provider_for
from tests.mix.conftest import PASSTHROUGH_KINDS, marker, observation, received, rid

SEED_PASSTHROUGH = {
    "openai_compat",
    "openai_api",
    "vllm",
    "vllm-mlx",
    "lemonade",
    "sglang",
    "seulgivibe_claude",
    "seulgivibe_openai",
}
SEED_NORMALIZED = {"ollama", "cli"}


def test_kind_tables_are_exactly_the_seed_lists():
    """S03/S04: the classifier's two lists are the seed's, and nothing else is a kind."""
    assert set(CODE_PASSTHROUGH) == SEED_PASSTHROUGH
    assert set(NORMALIZED_KINDS) == SEED_NORMALIZED
    assert set(KINDS) == SEED_PASSTHROUGH | SEED_NORMALIZED


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_dispatch_seam_follows_the_kind(kind):
    expected = "normalized" if kind in SEED_NORMALIZED else "passthrough"
    assert provider_for(kind).path == expected


@pytest.mark.parametrize("kind", PASSTHROUGH_KINDS, ids=lambda k: k or "kind-omitted")
def test_openai_compatible_kinds_pass_through(stack, kind):
    """S03: every OpenAI-compatible kind (and the default, kind omitted) gets the
    client's raw body on its own /v1 path; the observation says passthrough."""
    name = f"k-{kind or 'default'}"
    mark, request_id = marker(), rid()
    raw = (
        b'{"model": "'
        + name.encode()
        + b'", "messages": [{"role": "user", "content": "'
        + mark.encode()
        + b'"}], "x_provider_knob": {"keep": true}}'
    )
    r = httpx.post(
        stack.router.url + "/v1/chat/completions",
        content=raw,
        headers={"content-type": "application/json", "x-request-id": request_id},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    (req,) = received(stack.vllm, mark)
    assert req.path == "/v1/chat/completions"
    assert req.body == raw  # byte for byte: no served-name rewrite configured
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["kind"], obs["path"]) == (name, kind or "openai_compat", "passthrough")
    assert "adapter" not in obs


def test_ollama_kind_is_normalized_and_stays_a_candidate(stack):
    """S04: an `ollama` provider is classified normalized-only and is still selected
    (a group of one), answering through the native API."""
    mark, request_id = marker(), rid()
    r = httpx.post(
        stack.router.url + "/v1/chat/completions",
        json={"model": "k-ollama", "messages": [{"role": "user", "content": mark}]},
        headers={"x-request-id": request_id},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "Hello from ollama-o. This is a demo reply."
    (req,) = received(stack.ollama, mark)
    assert req.path == "/api/chat"
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["kind"], obs["path"], obs["adapter"]) == ("k-ollama", "ollama", "normalized", "ollama")


def test_cli_kind_is_normalized_and_never_tunnelled(stack):
    """S04: a `cli` provider is a normalized-only candidate: it is selected, never
    sent an OpenAI tunnel request; this router ships no CLI adapter, so the answer
    is an explicit 502 upstream_error (no silent passthrough fallback)."""
    before = stack.spare.meter.arrived
    request_id = rid()
    r = httpx.post(
        stack.router.url + "/v1/chat/completions",
        json={"model": "clim", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-request-id": request_id},
        timeout=30,
    )
    assert r.status_code == 502
    assert r.json()["error"]["code"] == "upstream_error"
    assert "no native adapter" in r.json()["error"]["message"]
    assert stack.spare.meter.arrived == before  # nothing went to the cli provider's URL
    obs = observation(stack.router, request_id)
    assert (obs["provider"], obs["kind"], obs["path"], obs["status"]) == ("cli-c", "cli", "normalized", 502)

"""The provider-path classifier (seed 002 S03, S04; MIX-3).

The execution path is a function of the selected provider's `kind` only:
OpenAI-compatible kinds pass through, `ollama` is normalized. The seed's `cli`
kind had no adapter in this router and is not a kind: config refuses it.
"""

from __future__ import annotations

import httpx
import pytest

from router.config_schema import ConfigError, parse
from router.providers import KINDS, PROVIDERS, provider_for
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
SEED_NORMALIZED = {"ollama", "anthropic"}  # anthropic: issue 10 (docs/providers/anthropic.md)


def kinds_on(path: str) -> set[str]:
    return {kind for provider in PROVIDERS if provider.path == path for kind in provider.kinds}


def test_kind_tables_are_exactly_the_seed_lists():
    """S03/S04: the registry's kinds per path are the seed's (less `cli`), and
    nothing else is a kind."""
    assert kinds_on("passthrough") == SEED_PASSTHROUGH
    assert kinds_on("normalized") == SEED_NORMALIZED
    assert set(KINDS) == SEED_PASSTHROUGH | SEED_NORMALIZED
    assert "cli" not in KINDS


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


def test_cli_kind_is_refused_at_config_load():
    """S04: `cli` has no adapter in this router, so it is not a kind: a config
    that names it is refused at load with the key's path and the known kinds,
    before any backend exists (it can never be selected, nor tunnelled)."""
    text = "backends:\n  - {name: ok, url: 'http://h:1', models: [m]}\n  - {name: cli-c, url: 'http://h:2', kind: cli, models: [clim]}\n"
    with pytest.raises(ConfigError) as err:
        parse(text, source="router.yaml")
    (line,) = str(err.value).splitlines()
    assert line.startswith("router.yaml: backends[1].kind: ")
    assert f"unknown kind 'cli'; one of: {', '.join(sorted(KINDS))}" in line

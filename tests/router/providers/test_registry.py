"""The provider registry is the one table of kinds (router/providers/__init__.py)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import orjson
import pytest

import router.core.backend
import router.core.health
from router.config_schema import BackendConfig
from router.core.backend import BackendSpec
from router.providers import (
    BY_KIND,
    COMMAND_KINDS,
    KINDS,
    PROVIDERS,
    RESPONSES_KINDS,
    listed_models,
    path_of,
    probe_url,
    provider_for,
)
from router.providers.anthropic.provider import ANTHROPIC
from router.providers.cli import CLI
from router.providers.gemini.provider import GEMINI
from router.providers.ollama.provider import OLLAMA
from router.providers.openai import OPENAI

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_KIND = "openai_compat"  # the one kind named outside the registry, as a default


def spec(kind: str, url: str = "http://h:1") -> BackendSpec:
    return BackendSpec(name="b", url=url, kind=kind, models=("m",))


def test_every_kind_maps_to_exactly_one_provider():
    """KINDS is the union of the providers' kinds, and no two providers share one."""
    claimed = [kind for provider in PROVIDERS for kind in provider.kinds]
    assert len(claimed) == len(set(claimed))
    assert KINDS == frozenset(claimed) == frozenset(BY_KIND)
    for provider in PROVIDERS:
        for kind in provider.kinds:
            assert provider_for(kind) is provider
            assert path_of(kind) == provider.path


@pytest.mark.parametrize("provider", PROVIDERS, ids=lambda p: type(p).__name__)
def test_each_provider_declares_kinds_path_dispatch_probe_and_listing(provider):
    assert isinstance(provider.kinds, frozenset) and provider.kinds
    assert all(isinstance(kind, str) and kind for kind in provider.kinds)
    assert provider.path in ("passthrough", "normalized")
    assert inspect.iscoroutinefunction(provider.start)
    assert list(inspect.signature(provider.start).parameters) == ["rt", "spec", "env", "model"]
    assert list(inspect.signature(provider.finish).parameters) == ["ex", "env"]
    assert list(inspect.signature(provider.relay).parameters) == ["ex", "env", "done"]
    kind = sorted(provider.kinds)[0]
    url = provider.probe_url(spec(kind), "/v1/models")
    # Only a command kind (no URL) is never probed.
    assert isinstance(url, str) or (url is None and getattr(provider, "runs_command", False))
    assert provider.listed_models({}) in (None, [])


def test_the_providers_and_their_paths():
    # OpenAI-compatible backends choose how they serve /v1/responses (`responses:`).
    assert PROVIDERS[0].inner is OPENAI and PROVIDERS[1] is OLLAMA  # type: ignore[attr-defined]
    assert RESPONSES_KINDS == OPENAI.kinds and PROVIDERS[0].kinds == OPENAI.kinds
    # The chat-only providers serve /v1/responses through the bridge.
    assert [p.inner for p in PROVIDERS[2:]] == [ANTHROPIC, GEMINI, CLI]  # type: ignore[attr-defined]
    assert {p.path for p in (OLLAMA, ANTHROPIC, GEMINI, CLI)} == {"normalized"} and OPENAI.path == "passthrough"
    assert OLLAMA.kinds == frozenset({"ollama"})
    assert ANTHROPIC.kinds == frozenset({"anthropic"})
    assert GEMINI.kinds == frozenset({"gemini"})
    assert CLI.kinds == frozenset({"cli"})


def test_cli_is_the_one_command_kind_and_never_probed():
    """A `cli` backend is a command: YAML only (COMMAND_KINDS), no probe, no listing."""
    assert COMMAND_KINDS == frozenset({"cli"}) and COMMAND_KINDS <= KINDS
    assert probe_url(spec("cli", "cli://b"), "/v1/models") is None
    assert CLI.probe_headers(spec("cli", "cli://b")) == {}
    assert listed_models("cli", b'{"data": [{"id": "m"}]}') is None


def test_the_default_kind_is_a_passthrough_kind():
    assert BackendSpec(name="b", url="http://h").kind == DEFAULT_KIND
    assert BackendConfig(name="b", url="http://h", models=["m"]).kind == DEFAULT_KIND
    assert provider_for(DEFAULT_KIND) is PROVIDERS[0] and PROVIDERS[0].inner is OPENAI  # type: ignore[attr-defined]


def test_a_kind_no_provider_claims_is_treated_as_openai_compatible():
    """Config never lets one in; a hand-edited DB row keeps today's meaning."""
    assert provider_for("not-a-kind") is PROVIDERS[0]
    assert path_of("not-a-kind") == "passthrough"


# -- probes --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "url", "path", "expected"),
    [
        ("vllm", "http://h:1", "/v1/models", "http://h:1/v1/models"),
        ("openai_compat", "http://h:1/v1", "/v1/models", "http://h:1/v1/models"),
        ("sglang", "http://h:1/", "/health", "http://h:1/health"),
        ("openai_api", "https://api.example/v1", "/health", "https://api.example/v1/health"),
        ("ollama", "http://h:11434", "/v1/models", "http://h:11434/api/tags"),
        ("ollama", "http://h:11434/", "/health", "http://h:11434/api/tags"),
    ],
)
def test_probe_url_is_the_providers(kind, url, path, expected):
    """OpenAI-compatible kinds probe health.path (no doubled /v1); Ollama probes
    /api/tags whatever health.path says."""
    assert probe_url(spec(kind, url), path) == expected


def test_listed_models_parse_each_providers_listing():
    v1 = orjson.dumps({"object": "list", "data": [{"id": "a"}, {"id": 3}, "x", {"id": "b"}]})
    tags = orjson.dumps({"models": [{"name": "llama3.2:latest"}, {"model": "qwen3"}, 7, {"name": ""}]})
    assert listed_models("vllm", v1) == ["a", "b"]
    assert listed_models("ollama", tags) == ["llama3.2:latest", "qwen3"]
    assert listed_models("ollama", v1) == []
    assert listed_models("vllm", tags) is None
    assert listed_models("vllm", b"not json") is None
    assert listed_models("ollama", b"[1, 2]") is None


# -- the registry is the only place kinds are listed --------------------------------


def test_core_has_no_kind_tables_and_imports_no_provider():
    for module in (router.core.backend, router.core.health):
        assert not [name for name in vars(module) if "KIND" in name.upper()], module.__name__
    for path in (ROOT / "router" / "core").glob("*.py"):
        tree = ast.parse(path.read_text())
        imported = [
            node.module or ""
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        ] + [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        assert not [m for m in imported if "providers" in m], path


def _kind_literals(path: Path) -> list[tuple[int, str]]:
    kinds = KINDS | {"cli"}
    tree = ast.parse(path.read_text())
    # A front door's name in an observation ({"frontend": "anthropic"}) is not a kind.
    labels = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "frontend"
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds
        and id(node) not in labels
    ]


def test_no_module_outside_the_registry_names_a_kind():
    """Apart from the default kind, no router or dashboard module compares or
    lists kind strings: they ask the registry. (Fakes and migrations excluded.)"""
    found = {}
    for package in ("router", "dashboard"):
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT)
            # router/disaggregation names prefill/decode protocols ("vllm",
            # "sglang"): protocol names that happen to be kinds' too.
            if rel.parts[:2] in (("router", "providers"), ("router", "demo"), ("router", "migrations"),
                                 ("router", "disaggregation")):
                continue
            named = [hit for hit in _kind_literals(path) if hit[1] != DEFAULT_KIND]
            if named:
                found[str(rel)] = named
    assert found == {}

"""The operator YAML: strict keys with their path, ${ENV} interpolation."""

import pytest

from router.config_schema import ConfigError, parse


def test_defaults_and_minimal_backend():
    cfg, _raw = parse("backends:\n  - {name: a, url: 'http://h:1/', models: [m]}\n")
    b = cfg.backends[0]
    assert (b.url, b.kind, b.weight, b.priority, b.capacity) == ("http://h:1", "openai_compat", 100, 0, None)
    assert cfg.selection_strategy == "weighted_round_robin"
    assert cfg.api_keys.mode == "open"
    assert (cfg.prefix_hash.load_factor, cfg.prefix_hash.session_header) == (1.25, "x-session-id")
    assert b.responses == "auto"


def test_prefix_hash_section():
    cfg, _raw = parse("selection_strategy: prefix_hash\nprefix_hash: {load_factor: 2, session_header: X-Conversation}\n")
    assert (cfg.prefix_hash.load_factor, cfg.prefix_hash.session_header) == (2.0, "x-conversation")
    cfg, _raw = parse("prefix_hash: {session_header: ''}\n")
    assert cfg.prefix_hash.session_header == ""


@pytest.mark.parametrize(
    "text,needle",
    [
        ("backends:\n  - {name: a, url: 'http://h', models: [m], wieght: 3}\n", "backends[0].wieght: unknown key"),
        ("selection_stratgy: x\n", "selection_stratgy: unknown key"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], weight: 0}\n", "backends[0].weight"),
        ("backends:\n  - {name: a, url: 'ftp://h', models: [m]}\n", "backends[0].url"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], kind: vlm}\n", "unknown kind 'vlm'"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m]}\n  - {name: a, url: 'http://h', models: [m]}\n", "duplicate backend name"),
        ("selection_strategy: fastest\n", "selection_strategy"),
        ("api_keys: {mode: closed}\n", "api_keys.mode"),
        ("prefix_hash: {load_factor: 0.8}\n", "prefix_hash.load_factor"),
        ("prefix_hash: {session_header: 'x session'}\n", "prefix_hash.session_header"),
        ("prefix_hash: {sesion_header: x}\n", "prefix_hash.sesion_header: unknown key"),
        ("server: {trusted_proxies: [not-an-ip]}\n", "server.trusted_proxies"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], responses: maybe}\n", "backends[0].responses"),
        (
            "backends:\n  - {name: a, url: 'http://h', models: [m], kind: anthropic, responses: native}\n",
            "responses: only an OpenAI-compatible backend",
        ),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], quota: {}}\n", "set rps, tpm or both"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], quota: {tpm: 9, burst: 3}}\n", "burst: only with rps"),
        ("backends:\n  - {name: a, url: 'http://h', models: [m], quota: {rps: 0}}\n", "backends[0].quota.rps"),
        ("rate_limits: {bypass: {cidrs: [10.0.0.300/8]}}\n", "rate_limits.bypass.cidrs"),
        ("rate_limits: {global: {burst: 3}}\n", "rate_limits.global.rps"),
        ("rate_limits: {scope: planet}\n", "rate_limits.scope"),
        ("- just a list\n", "top level must be a mapping"),
        ("backends: [\n", "not valid YAML"),
    ],
)
def test_errors_name_the_key(text, needle):
    with pytest.raises(ConfigError) as err:
        parse(text, source="router.yaml")
    assert needle in str(err.value)
    assert str(err.value).startswith("router.yaml")


def test_env_interpolation_and_missing_variable(monkeypatch):
    monkeypatch.setenv("UPSTREAM_KEY", "sk-from-env")
    cfg, raw = parse("backends:\n  - {name: a, url: 'http://h', models: [m], api_key: '${UPSTREAM_KEY}'}\n")
    assert cfg.backends[0].api_key == "sk-from-env"
    assert raw["backends"][0]["api_key"] == "${UPSTREAM_KEY}"  # the raw doc keeps the template
    monkeypatch.delenv("UPSTREAM_KEY")
    with pytest.raises(ConfigError) as err:
        parse("backends:\n  - {name: a, url: 'http://h', models: [m], api_key: '${UPSTREAM_KEY}'}\n", source="f.yaml")
    assert "backends[0].api_key: environment variable UPSTREAM_KEY is not set" in str(err.value)


def test_manage_check_reports_an_invalid_config(tmp_path):
    import os
    import subprocess
    import sys

    bad = tmp_path / "router.yaml"
    bad.write_text("backends:\n  - {name: a, url: 'http://h', models: [m], wieght: 2}\n")
    env = {**os.environ, "ROUTER_CONFIG": str(bad), "ROUTER_VAR_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "router.E002" in out.stderr and "backends[0].wieght: unknown key" in out.stderr


def test_a_cooldown_past_the_backoff_cap_compiles():
    """health.cooldown above the breaker's 120 s backoff cap is accepted and
    kept (it used to pass the config and fail the snapshot, so the router
    never became ready)."""
    from router.selectors import _document_fields

    cfg, _ = parse("health: {cooldown: 300}\n")
    policy = _document_fields(cfg)["health"]
    assert (policy.cooldown_s, policy.max_cooldown_s) == (300, 300)
    cfg, _ = parse("health: {cooldown: 10}\n")
    assert _document_fields(cfg)["health"].max_cooldown_s == 120

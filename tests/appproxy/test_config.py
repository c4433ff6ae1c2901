"""The `appproxy` YAML section (seed §7): keys, durations, secrets, errors."""

from __future__ import annotations

import pytest

from appproxy.config import parse_duration
from appproxy.legacy import config as appproxy_config
from appproxy.legacy.config import AppProxySettings, parse_section
from router.config_schema import ConfigError, parse
from router.core.secret import Secret
from router.services import config_sync

SECRET = "s3cr3t-" + "x" * 30
BASE = {
    "enabled": True,
    "coordinator_url": "http://coordinator:10200/",
    "api_secret": SECRET,
    "jwt_secret": "jwt-" + SECRET,
    "redis_url": "redis://valkey:6379/4",
    "authority": "continuum-router-1",
    "hostname": "router.example.com",
    "frontend_mode": "wildcard",
    "wildcard_domain": ".models.example.com",
    "aggregation_hosts": [],
    "wildcard_traffic_port": 443,
    "tls_advertised": True,
    "heartbeat_period": "10s",
    "reconcile_interval": "15s",
    "events_enabled": True,
}


def test_seed_example_parses():
    """Every key of the seed's §7 example is accepted, with its meaning."""
    s = parse_section(BASE)
    assert isinstance(s, AppProxySettings)
    assert s.coordinator_url == "http://coordinator:10200"
    assert s.heartbeat_period == 10.0 and s.reconcile_interval == 15.0
    assert s.wildcard_domain == ".models.example.com" and s.apex == "models.example.com"
    assert s.ack_format("args") == "args" and s.ack_format("payload") == "payload"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("10s", 10.0), ("500ms", 0.5), ("1m", 60.0), ("2h", 7200.0), (3, 3.0), (0.25, 0.25), ("1.5s", 1.5), ("7", 7.0)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["0s", "-1s", "ten seconds", "", True, None, [], float("inf"), 0])
def test_bad_durations(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_secrets_never_print():
    s = parse_section(BASE)
    assert isinstance(s.api_secret, Secret) and s.api_secret.reveal() == SECRET
    for text in (repr(s), str(s), str(s.public()), s.model_dump_json()):
        assert SECRET not in text


def test_unknown_key_is_named_with_its_path():
    with pytest.raises(ValueError) as err:
        parse_section({**BASE, "heartbeat_perid": "10s"})
    assert "appproxy.heartbeat_perid: unknown key" in str(err.value)


def test_router_loader_rejects_a_bad_section_and_names_file_and_key():
    text = "appproxy:\n  enabled: true\n  wildcard_domian: .x.test\n"
    with pytest.raises(ConfigError) as err:
        parse(text, source="router.yaml")
    message = str(err.value)
    assert message.startswith("router.yaml: appproxy:")
    assert "wildcard_domian: unknown key" in message


def test_errors_never_echo_values():
    with pytest.raises(ValueError) as err:
        parse_section({**BASE, "api_secret": [SECRET], "heartbeat_period": SECRET})
    assert SECRET not in str(err.value)
    assert "appproxy.api_secret" in str(err.value) and "appproxy.heartbeat_period" in str(err.value)


def test_required_keys_when_enabled():
    with pytest.raises(ValueError) as err:
        parse_section({"enabled": True, "authority": "a"})
    for key in ("coordinator_url", "api_secret", "jwt_secret", "hostname", "wildcard_domain"):
        assert key in str(err.value)
    assert parse_section({"enabled": False}).enabled is False  # a disabled stub is fine
    assert parse_section(None) is None


def test_port_mode_is_refused():
    with pytest.raises(ValueError, match="only 'wildcard'"):
        parse_section({**BASE, "frontend_mode": "port"})


@pytest.mark.parametrize(
    ("given", "domain"),
    [(".Models.Example.com", ".models.example.com"), ("*.models.example.com", ".models.example.com"),
     ("models.example.com.", ".models.example.com")],
)  # fmt: skip
def test_wildcard_domain_is_normalised(given, domain):
    assert parse_section({**BASE, "wildcard_domain": given}).wildcard_domain == domain


def test_aggregation_hosts_lowercased_without_ports():
    s = parse_section({**BASE, "aggregation_hosts": ["LLM.Example.com:443", "api.example.com"]})
    assert s.aggregation_hosts == ("llm.example.com", "api.example.com")


def test_event_format_pin_and_registration_port(monkeypatch):
    s = parse_section({**BASE, "event_format": "args", "api_port": 8080})
    assert s.ack_format("payload") == "args"
    assert s.registration_port() == 8080
    monkeypatch.setenv("ROUTER_PORT", "8000")
    assert parse_section(BASE).registration_port() == 8000
    monkeypatch.delenv("ROUTER_PORT")
    assert parse_section(BASE).registration_port() == 443
    with pytest.raises(ValueError):
        parse_section({**BASE, "event_format": "json"})


def test_env_interpolation_of_secrets(monkeypatch):
    monkeypatch.setenv("APX_TEST_SECRET", SECRET)
    text = (
        "appproxy:\n  enabled: true\n  coordinator_url: http://c:1\n  api_secret: ${APX_TEST_SECRET}\n"
        "  jwt_secret: ${APX_TEST_SECRET}\n  authority: a\n  hostname: h\n  wildcard_domain: .m.test\n"
    )
    cfg, raw = parse(text)
    assert raw["appproxy"]["api_secret"] == "${APX_TEST_SECRET}"  # the stored document keeps the template
    assert parse_section(cfg.appproxy).api_secret.reveal() == SECRET
    monkeypatch.delenv("APX_TEST_SECRET")
    with pytest.raises(ConfigError, match="APX_TEST_SECRET"):
        parse(text)


def test_load_settings_reads_the_applied_document_not_the_file(db, tmp_path, settings, monkeypatch):
    """Readers use what the writer applied: an unapplied edit is not seen."""
    monkeypatch.setattr(appproxy_config, "_cache", {"key": None, "value": None})
    path = tmp_path / "router.yaml"
    settings.ROUTER_CONFIG = str(path)
    path.write_text("appproxy: {enabled: false, authority: first}\n")
    assert appproxy_config.load_settings() is None  # nothing applied yet
    config_sync(path)
    assert appproxy_config.load_settings().authority == "first"
    path.write_text("appproxy: {enabled: false, authority: second}\n")
    assert appproxy_config.load_settings().authority == "first"
    config_sync(path)
    assert appproxy_config.load_settings().authority == "second"

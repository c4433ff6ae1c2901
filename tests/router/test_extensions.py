"""The data plane's extension points (router.extensions): what keys and
appproxy plug in from their AppConfig.ready(), and what the router does when
nothing is plugged in."""

from __future__ import annotations

import pytest

from appproxy.legacy.config import validate_section
from appproxy.legacy.selectors import compile_ingress
from appproxy.legacy.status import readiness, worker_status
from appproxy.router_mode import status as router_status
from appproxy.router_mode.config import validate_router_section
from keys.gate import KeyGate, gate_for
from router import extensions
from router import runtime as runtime_module
from router.config_schema import ConfigError, parse
from router.core.snapshot import Snapshot


def test_the_installed_apps_register_their_parts():
    """keys brings the gate and the keyring; appproxy its two sections (legacy
    and ROUTER), ingress, the ROUTER parts, readiness and status."""
    assert extensions.gate_factory() is gate_for
    # INSTALLED_APPS order: appproxy before keys.
    assert list(extensions.snapshot_parts()) == ["ingress", "api_keys_mode", "listed", "worker", "keyring"]
    parts = extensions.snapshot_parts()
    assert parts["ingress"].compile is compile_ingress
    assert parts["api_keys_mode"].compile is router_status.compile_mode
    # What each part is updated from (router.revision change-log topics).
    assert {name: part.topics for name, part in parts.items()} == {
        "ingress": {"document", "circuit", "worker"},
        "api_keys_mode": {"document"},
        "listed": {"document", "publication"},
        "worker": {"document", "worker"},
        "keyring": {"key"},
    }
    assert parts["keyring"].update is not None and parts["ingress"].update is None
    assert extensions.section_validator("appproxy") is validate_section
    assert extensions.section_validator("appproxy_router") is validate_router_section
    assert list(extensions.readiness_checks()) == [readiness, router_status.readiness]
    assert dict(extensions.status_sections()) == {
        "appproxy": worker_status,
        "appproxy_router": router_status.router_status,
    }


def test_a_snapshot_part_must_name_a_snapshot_field():
    with pytest.raises(ValueError, match="no field 'keyrings'"):
        extensions.register_snapshot_part("keyrings", lambda document: None)
    assert "keyrings" not in extensions.snapshot_parts()


def test_the_registered_validator_checks_its_section_with_the_key_path():
    with pytest.raises(ConfigError, match=r"appproxy: .*heartbeat_perid: unknown key"):
        parse("appproxy: {heartbeat_perid: 5}\n")


def test_a_section_without_a_validator_is_kept_raw(monkeypatch):
    monkeypatch.setattr(extensions, "_section_validators", {})
    model, _ = parse("appproxy: {heartbeat_perid: 5}\n")
    assert model.appproxy == {"heartbeat_perid": 5}


def test_without_a_gate_factory_the_runtime_is_open(monkeypatch):
    monkeypatch.setattr(extensions, "_gate_factory", None)
    rt = runtime_module.Runtime()
    rt.install(Snapshot(revision=1, backends={}, by_model={}, api_keys_mode="blocking"))
    assert rt.gate is None


def test_the_runtime_builds_the_gate_of_each_snapshot_from_the_one_it_replaces():
    rt = runtime_module.Runtime()
    rt.install(Snapshot(revision=1, backends={}, by_model={}, api_keys_mode="blocking"))
    first = rt.gate
    assert isinstance(first, KeyGate) and first.blocking
    rt.install(Snapshot(revision=2, backends={}, by_model={}))
    assert isinstance(rt.gate, KeyGate) and not rt.gate.blocking
    assert rt.gate.limiter is first.limiter  # the windows survive the reload

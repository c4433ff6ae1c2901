"""ROUTER wire: the router-config snapshot, the router events and their ack,
the appproxy_router section (seed §9.10-9.11, reference/router-mode.md §1)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import msgpack
import pytest

from appproxy.envelope import decode
from appproxy.router_mode.config import parse_router_section
from appproxy.router_mode.events import decode_router, encode_router_ack
from appproxy.router_mode.wire import parse_expiry, parse_snapshot, revision_text, router_registration
from router.config_schema import ConfigError, parse

HASH = "ab" * 32
AUTH = "continuum-router-1"


def test_seed_snapshot_parses():
    snap = parse_snapshot(
        {
            "revision": "42",
            "models": [
                {
                    "model": "llama-4-chat",
                    "aliases": ["llama-4"],
                    "mappings": [{"endpoint_id": "3333", "ratio": 0.7}, {"endpoint_id": "4444", "ratio": 0.3}],
                    "control_mode": "manual",
                }
            ],
            "api_keys": [
                {
                    "key_id": "key-abc",
                    "token_hash": HASH.upper(),
                    "allowed_models": ["llama-4-chat"],
                    "expires_at": "2026-12-31T23:59:59Z",
                    "rate_limit": 600,
                    "allowed_client_ips": ["10.0.0.0/8"],
                }
            ],
        }
    )
    assert snap.revision == "42" and not snap.errors
    (pub,) = snap.publications
    assert pub.names == ("llama-4-chat", "llama-4") and [m.ratio for m in pub.mappings] == [0.7, 0.3]
    (key,) = snap.keys
    assert key.token_hash == HASH and key.rate_limit == 600 and key.allowed_client_ips == ("10.0.0.0/8",)
    assert key.expiry() == (datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), True)
    assert HASH not in repr(key) and HASH not in str(snap.keys)


def test_alias_spellings_and_numeric_revision():
    """router-mode.md §1.2's alias-form example, verbatim."""
    snap = parse_snapshot(
        {
            "revision": 43,
            "publications": [
                {"model": "m1", "mappings": [{"endpoint-id": "3333"}], "control-mode": "strategy-managed"}
            ],
            "api-keys": [
                {"key-id": "k1", "token-hash": HASH, "allowed-models": [], "expires-at": None, "rate-limit": None}
            ],
            "something_new": {"x": 1},
        }
    )
    assert snap.revision == "43"
    (pub,) = snap.publications
    assert pub.control_mode == "strategy-managed" and pub.mappings[0].ratio == 1.0 and pub.aliases == ()
    (key,) = snap.keys
    assert key.key_id == "k1" and key.allowed_models == () and key.rate_limit is None


def test_models_wins_over_publications_and_name_aliases():
    snap = parse_snapshot({"revision": "1", "models": [{"model_name": "a"}], "publications": [{"name": "b"}]})
    assert [p.model for p in snap.publications] == ["a"]


def test_one_bad_entry_never_hides_the_rest():
    snap = parse_snapshot(
        {
            "revision": "7",
            "models": [{"model": "ok"}, {"aliases": ["no-name"]}, {"model": "bad", "mappings": [{"ratio": "x"}]}],
            "api_keys": [
                {"key_id": "good", "token_hash": HASH},
                {"key_id": "short", "token_hash": "abc"},
                {"key_id": "plain", "token": "sk-secret-plaintext"},
            ],
        }
    )
    assert [p.model for p in snap.publications] == ["ok"] and snap.skipped_models == {"bad"}
    assert [k.key_id for k in snap.keys] == ["good"] and snap.skipped_keys == {"short", "plain"}
    assert "sk-secret-plaintext" not in " ".join(snap.errors) and "plaintext token" in " ".join(snap.errors)


@pytest.mark.parametrize("raw", [[], "x", None])
def test_a_snapshot_that_is_not_an_object_is_refused(raw):
    with pytest.raises(ValueError):
        parse_snapshot(raw)


@pytest.mark.parametrize(
    ("value", "expected", "ok"),
    [
        (None, None, True),
        ("2026-12-31T23:59:59Z", datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), True),
        ("2026-12-31T23:59:59.5+09:00", datetime(2026, 12, 31, 14, 59, 59, 500000, tzinfo=UTC), True),
        ("2026-12-31T23:59:59", datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC), True),  # naive = UTC
        ("next tuesday", None, False),
        ({"at": 1}, None, False),
    ],
)
def test_expiry_parsing(value, expected, ok):
    assert parse_expiry(value) == (expected, ok)


def test_revision_is_opaque():
    assert revision_text(42) == "42" and revision_text("r-9") == "r-9" and revision_text(3.0) == "3"
    assert revision_text(None) is None and revision_text(True) is None


def test_router_registration_body_is_the_seeds():
    body = router_registration(
        authority=AUTH,
        hostname="router.example.com",
        api_port=8080,
        traffic_port=443,
        node_id="n-1",
        tls_advertised=True,
    )
    assert body == {
        "authority": AUTH,
        "frontend_mode": "router",
        "protocol": "http",
        "hostname": "router.example.com",
        "tls_listen": False,
        "tls_advertised": True,
        "api_port": 8080,
        "traffic_port": 443,
        "node_id": "n-1",
        "accepted_traffics": ["inference"],
        "filtered_apps_only": False,
        "app_filters": [],
        "port_range": None,
        "wildcard_domain": None,
        "wildcard_traffic_port": None,
        "traefik_last_used_marker_path": None,
    }
    assert (
        router_registration(authority=AUTH, hostname="h", api_port=8080, traffic_port=None, node_id="n")["traffic_port"]
        == 8080
    )


# -- events: the reference's encoded examples ---------------------------------


def _message(name: str, args_b64: str) -> str:
    return json.dumps(
        {
            "name": name,
            "source": "appproxy-coordinator",
            "args": args_b64,
            "metadata": '{"request_id":null,"user":null,"triggered_user":null}',
        }
    )


def test_key_updated_args_example():
    ev = decode_router(
        decode(_message("appproxy_router_key_updated_event", "krJjb250aW51dW0tcm91dGVyLTGna2V5LWFiYw=="))
    )
    assert (ev.authority, ev.ident, ev.kind, ev.fmt) == (AUTH, "key-abc", "key", "args")


def test_model_removed_args_example():
    ev = decode_router(
        decode(_message("appproxy_router_model_removed_event", "krJjb250aW51dW0tcm91dGVyLTGsbGxhbWEtNC1jaGF0"))
    )
    assert (ev.authority, ev.ident, ev.kind) == (AUTH, "llama-4-chat", "model")


def test_model_updated_args_example():
    b64 = (
        "krJjb250aW51dW0tcm91dGVyLTHZlnsibW9kZWwiOiJsbGFtYS00LWNoYXQiLCJhbGlhc2VzIjpbImxsYW1hLTQiXSwibWFwcGluZ3Mi"
        "Olt7ImVuZHBvaW50X2lkIjoiMzMzMzMzMzMtMzMzMy00MzMzLTgzMzMtMzMzMzMzMzMzMzMzIiwicmF0aW8iOjAuN31dLCJjb250cm9s"
        "X21vZGUiOiJtYW51YWwifQ=="
    )
    ev = decode_router(decode(_message("appproxy_router_model_updated_event", b64)))
    assert ev.publication is not None and ev.publication.names == ("llama-4-chat", "llama-4")
    assert ev.publication.mappings[0].endpoint_id == "33333333-3333-4333-8333-333333333333"
    assert ev.ack_id == "llama-4-chat"


def test_payload_format_events():
    model = {"model": "m", "aliases": ["a"], "mappings": [], "control_mode": "manual"}
    for body, name in [
        ({"target_worker_authority": AUTH, "model": model}, "appproxy_router_model_updated_event"),
        ({"target_worker_authority": AUTH, "model": json.dumps(model)}, "appproxy_router_model_updated_event"),
        ({"target_worker_authority": AUTH, "model_name": "m"}, "appproxy_router_model_removed_event"),
        ({"target_worker_authority": AUTH, "key_id": "k"}, "appproxy_router_key_removed_event"),
    ]:
        ev = decode_router(decode(json.dumps({"name": name, "source": "x", "payload": json.dumps(body)})))
        assert ev.authority == AUTH and ev.fmt == "payload" and ev.ack_id in ("m", "k")


@pytest.mark.parametrize(
    "payload",
    [{"model_name": "m"}, {"target_worker_authority": AUTH}, {"target_worker_authority": AUTH, "model_name": ""}],
)
def test_malformed_router_events_raise(payload):
    from appproxy.envelope import EnvelopeError

    msg = json.dumps({"name": "appproxy_router_model_removed_event", "payload": json.dumps(payload)})
    with pytest.raises(EnvelopeError):
        decode_router(decode(msg))


def test_ack_args_matches_the_reference_example():
    data = json.loads(encode_router_ack(AUTH, "b3f1c0de-0000-4000-8000-000000000001", "key", "key-abc", "args"))
    assert data["name"] == "appproxy_worker_router_config_applied_event" and data["source"] == "appproxy-worker"
    assert data["args"] == (
        "lLJjb250aW51dW0tcm91dGVyLTHZJGIzZjFjMGRlLTAwMDAtNDAwMC04MDAwLTAwMDAwMDAwMDAwMaNrZXmna2V5LWFiYw=="
    )
    assert msgpack.unpackb(base64.b64decode(data["args"])) == [
        AUTH,
        "b3f1c0de-0000-4000-8000-000000000001",
        "key",
        "key-abc",
    ]


def test_ack_payload():
    data = json.loads(encode_router_ack(AUTH, "n-1", "model", "m", "payload"))
    assert json.loads(data["payload"]) == {
        "target_worker_authority": AUTH,
        "node_id": "n-1",
        "kind": "model",
        "id": "m",
    }
    assert "traceparent" in json.loads(data["metadata"])


# -- the appproxy_router section ----------------------------------------------

SECTION = {
    "enabled": True,
    "coordinator_url": "http://coordinator:10200/",
    "api_secret": "s" * 40,
    "authority": AUTH,
    "hostname": "router.example.com",
}


def test_section_defaults_and_secret():
    s = parse_router_section({**SECTION, "traffic_port": 0, "api_port": 8080})
    assert s.coordinator_url == "http://coordinator:10200" and s.advertised_traffic_port() == 8080
    assert s.heartbeat_period == 10 and s.reconcile_interval == 15 and s.events_enabled
    assert "s" * 40 not in repr(s) and "s" * 40 not in str(s.public())


@pytest.mark.parametrize("key", ["wildcard_domain", "jwt_secret", "frontend_mode", "reconcile_intervall"])
def test_unknown_keys_are_hard_errors_naming_the_key(key):
    with pytest.raises(ValueError, match=f"{key}: unknown key"):
        parse_router_section({**SECTION, key: "x"})


def test_enabled_needs_its_required_keys():
    with pytest.raises(ValueError, match="coordinator_url"):
        parse_router_section({"enabled": True, "api_secret": "x", "authority": "a", "hostname": "h"})


def test_both_modes_enabled_is_refused_at_load():
    text = json.dumps(
        {
            "appproxy": {
                **{k: v for k, v in SECTION.items() if k != "hostname"},
                "hostname": "worker.example.com",
                "jwt_secret": "j" * 40,
                "wildcard_domain": ".models.example.com",
            },
            "appproxy_router": {**SECTION},
        }
    )
    with pytest.raises(ConfigError, match="both true"):
        parse(text)


def test_env_interpolation_for_the_secret(monkeypatch):
    monkeypatch.setenv("ROUTER_TEST_SECRET", "from-env-" + "x" * 30)
    cfg, _raw = parse(json.dumps({"appproxy_router": {**SECTION, "api_secret": "${ROUTER_TEST_SECRET}"}}))
    s = parse_router_section(cfg.appproxy_router)
    assert s.api_secret.reveal().startswith("from-env-")

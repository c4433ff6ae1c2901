"""Coordinator wire models: aliases, unknown fields, the exact echo, the PUT body."""

from __future__ import annotations

import uuid

import pytest
from pydantic import ValidationError

from appproxy.wire import (
    Circuit,
    RouteInfo,
    WorkerInfo,
    WorkerRegistration,
    parse_circuits,
)

CID = "6a1f3c2e-8d4b-4f0a-9b7e-2c5d1e0f3a4b"
WID = "0b9e8d7c-6f5a-4e3d-8c2b-1a0f9e8d7c6b"
EID = "11111111-2222-4333-8444-555555555555"
RID = "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"
SID = "99999999-8888-4777-8666-555555555555"


def circuit_dict(**over: object) -> dict:
    base: dict = {
        "id": CID,
        "app": "llama",
        "protocol": "http",
        "worker": WID,
        "app_mode": "inference",
        "frontend_mode": "wildcard",
        "envs": {},
        "arguments": None,
        "open_to_public": False,
        "allowed_client_ips": None,
        "port": None,
        "subdomain": "llama",
        "user_id": None,
        "endpoint_id": EID,
        "runtime_variant": "vllm",
        "route_info": [
            {
                "route_id": RID,
                "session_id": SID,
                "session_name": None,
                "kernel_host": "10.0.0.5",
                "kernel_port": 8000,
                "protocol": "http",
                "traffic_ratio": 1.0,
            }
        ],
        "session_ids": [],
        "created_at": "2026-08-10T01:02:03.456789Z",
        "updated_at": "2026-08-10T01:02:03.456789Z",
    }
    base.update(over)
    return base


def test_route_info_accepts_kebab_case_and_emits_snake_case() -> None:
    """Kebab-case input keys are accepted; output is snake_case."""
    route = RouteInfo.model_validate(
        {
            "route-id": RID,
            "session-id": SID,
            "session-name": "s1",
            "kernel-host": "10.0.0.5",
            "kernel-port": 8000,
            "protocol": "http",
        }
    )
    assert str(route.route_id) == RID
    assert route.session_name == "s1"
    assert route.kernel_port == 8000
    dumped = route.model_dump(mode="json")
    assert set(dumped) == {
        "route_id",
        "session_id",
        "session_name",
        "kernel_host",
        "kernel_port",
        "protocol",
        "traffic_ratio",
        "replica_group_id",  # refined BEP-1053, None without a group
    }


def test_route_info_accepts_snake_case_defaults_ratio_and_ignores_old_fields() -> None:
    """traffic_ratio defaults to 1.0; ≤26.4.3 health fields and unknown keys are dropped."""
    route = RouteInfo.model_validate(
        {
            "session_id": SID,
            "kernel_host": None,
            "kernel_port": 9000,
            "protocol": "http",
            "health_status": "healthy",
            "last_health_check": 1.5,
            "consecutive_failures": 0,
            "brand_new_field": {"x": 1},
        }
    )
    assert route.traffic_ratio == 1.0
    assert route.route_id is None
    assert route.host == "localhost"
    assert route.key == SID
    assert "health_status" not in route.model_dump()


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_route_info_rejects_out_of_range_ports(port: int) -> None:
    with pytest.raises(ValidationError):
        RouteInfo.model_validate({"session_id": SID, "kernel_host": "h", "kernel_port": port})


def test_circuit_keeps_the_original_object_for_the_ack() -> None:
    """raw is the complete object as received, unknown fields included."""
    data = circuit_dict(future_field={"nested": [1, 2]})
    circuit = Circuit.model_validate(data)
    assert circuit.raw == data
    assert circuit.raw is not data
    raw = circuit.raw
    raw["app"] = "mutated"
    assert circuit.raw["app"] == "llama"  # a copy each time
    data["app"] = "mutated-source"
    assert circuit.raw["app"] == "llama"  # decoupled from the input too


def test_circuit_fields_and_helpers() -> None:
    circuit = Circuit.model_validate(circuit_dict())
    assert str(circuit.id) == CID
    assert circuit.is_inference
    assert circuit.model_key == EID
    assert circuit.route_info[0].kernel_port == 8000
    assert circuit.runtime_variant == "vllm"


def test_circuit_is_lenient_about_fields_the_worker_does_not_read() -> None:
    """Only id is required; the model key falls back to the circuit id."""
    circuit = Circuit.model_validate({"id": CID})
    assert circuit.route_info == ()
    assert circuit.model_key == CID
    assert circuit.raw == {"id": CID}


def test_circuit_rejects_a_bad_id() -> None:
    with pytest.raises(ValidationError):
        Circuit.model_validate(circuit_dict(id="not-a-uuid"))


def test_with_routes_replaces_routes_and_the_raw_copy() -> None:
    circuit = Circuit.model_validate(circuit_dict(extra_key=1))
    route = RouteInfo(session_id=uuid.UUID(SID), kernel_host="h2", kernel_port=1234)
    updated = circuit.with_routes([route])
    assert updated.route_info == (route,)
    assert updated.raw["route_info"][0]["kernel_host"] == "h2"
    assert updated.raw["extra_key"] == 1
    assert circuit.route_info[0].kernel_host == "10.0.0.5"  # original untouched


def test_parse_circuits_isolates_bad_elements() -> None:
    """One malformed circuit never hides the others."""
    good, errors = parse_circuits(
        [
            circuit_dict(),
            {"id": "bad"},
            "not-an-object",
            circuit_dict(id=str(uuid.uuid4())),
        ]
    )
    assert len(good) == 2
    assert len(errors) == 2
    assert "circuit[1]" in errors[0]


def test_a_parse_keeps_its_own_copy_unless_the_items_are_given_away() -> None:
    """By default a circuit's raw is a copy: the caller may change its items
    after. An owned parse (a pull's freshly decoded answer) keeps the item."""
    item = circuit_dict(extra_key={"nested": [1, 2]})
    (copied,), _ = parse_circuits([item])
    item["extra_key"]["nested"].append(3)
    item["app"] = "changed"
    assert copied.raw["extra_key"] == {"nested": [1, 2]}
    assert copied.raw["app"] != "changed"

    fresh = circuit_dict(extra_key={"nested": [1, 2]})
    (owned,), _ = parse_circuits([fresh], owned=True)
    assert owned.raw == fresh
    assert owned.raw is not fresh  # what a caller reads is still its own copy
    assert owned.raw_to_store() is fresh
    # every other parse of the process still copies
    (again,), _ = parse_circuits([fresh])
    assert again.raw_to_store() is not fresh


def test_worker_registration_wildcard_body_matches_reference() -> None:
    reg = WorkerRegistration.wildcard(
        authority="router-1",
        hostname="router.example.com",
        api_port=8080,
        wildcard_domain="models.example.com",
        wildcard_traffic_port=443,
        tls_advertised=True,
    )
    assert reg.to_body() == {
        "authority": "router-1",
        "frontend_mode": "wildcard",
        "protocol": "http",
        "hostname": "router.example.com",
        "tls_listen": False,
        "tls_advertised": True,
        "api_port": 8080,
        "port_range": None,
        "wildcard_domain": ".models.example.com",
        "wildcard_traffic_port": 443,
        "filtered_apps_only": False,
        "traefik_last_used_marker_path": None,
        "accepted_traffics": ["inference"],
        "app_filters": [],
    }


def test_worker_registration_from_settings_mapping_and_object() -> None:
    settings = {
        "authority": "a1",
        "hostname": "h",
        "wildcard_domain": ".apps.test",
        "wildcard_traffic_port": 8000,
        "tls_advertised": False,
    }
    body = WorkerRegistration.from_settings(settings).to_body()
    assert body["api_port"] == 8000
    assert body["wildcard_domain"] == ".apps.test"

    class Cfg:
        authority = "a2"
        hostname = "h2"
        wildcard_domain = ".x.test"
        wildcard_traffic_port = None
        tls_listen = True

    body = WorkerRegistration.from_settings(Cfg(), api_port=9001).to_body()
    assert body["authority"] == "a2"
    assert body["api_port"] == 9001
    assert body["tls_listen"] is True


def test_worker_registration_requires_a_wildcard_domain() -> None:
    with pytest.raises(ValidationError):
        WorkerRegistration(authority="a", hostname="h", api_port=1)
    with pytest.raises(ValidationError):
        WorkerRegistration.from_settings({"authority": "a", "hostname": "h"})


def test_worker_info_reads_id_and_slots_and_ignores_the_rest() -> None:
    info = WorkerInfo.model_validate(
        {
            "id": WID,
            "authority": "a",
            "nodes": 2,
            "available_slots": -1,
            "slots": [
                {
                    "frontend_mode": "wildcard",
                    "in_use": True,
                    "port": None,
                    "subdomain": "llama",
                    "circuit_id": CID,
                    "surprise": 1,
                }
            ],
            "status": "ALIVE",
            "whatever": [1],
        }
    )
    assert str(info.id) == WID
    assert info.nodes == 2
    assert info.slots[0].subdomain == "llama"

"""Pure reconcile: circuits → backends, the plan, the ingress table."""

from __future__ import annotations

import ipaddress
import math

import pytest

from appproxy.backends import Plan, plan
from appproxy.legacy.plan import (
    IngressEntry,
    desired_backends,
    ingress_table,
    weight_from_ratio,
)
from appproxy.wire import Circuit
from router.core.backend import BackendSpec

from .test_wire import CID, EID, RID, SID, circuit_dict

MODELS = {EID: "llama-3-8b"}


def route(**over: object) -> dict:
    base: dict = {
        "route_id": RID,
        "session_id": SID,
        "kernel_host": "10.0.0.5",
        "kernel_port": 8000,
        "protocol": "http",
        "traffic_ratio": 1.0,
    }
    base.update(over)
    return base


def circuit(**over: object) -> Circuit:
    return Circuit.model_validate(circuit_dict(**over))


def test_one_backend_per_route_with_the_reference_shape() -> None:
    backends = desired_backends([circuit()], MODELS)
    name = f"appproxy-{CID}-r{RID}"
    assert backends == {
        name: BackendSpec(
            name=name,
            url="http://10.0.0.5:8000",
            kind="vllm",
            models=("llama-3-8b",),
            weight=100,
            source="appproxy",
        )
    }


def test_route_without_route_id_is_named_by_session_and_null_host_is_localhost() -> None:
    backends = desired_backends([circuit(route_info=[route(route_id=None, kernel_host=None)])], MODELS)
    [spec] = backends.values()
    assert spec.name == f"appproxy-{CID}-r{SID}"
    assert spec.url == "http://localhost:8000"


def test_ipv6_kernel_host_is_bracketed() -> None:
    [spec] = desired_backends([circuit(route_info=[route(kernel_host="fd00::5")])], MODELS).values()
    assert spec.url == "http://[fd00::5]:8000"


@pytest.mark.parametrize(
    ("variant", "kind"),
    [
        ("vllm", "vllm"),
        ("custom", "openai_compat"),
        (None, "openai_compat"),
        ("sglang", "openai_compat"),
    ],
)
def test_kind_is_vllm_only_for_the_vllm_runtime_variant(variant: str | None, kind: str) -> None:
    [spec] = desired_backends([circuit(runtime_variant=variant)], MODELS).values()
    assert spec.kind == kind


@pytest.mark.parametrize(
    ("ratio", "weight"),
    [
        (1.0, 100),
        (0.5, 50),
        (0.25, 25),
        (2.0, 200),
        (0.001, 1),
        (0.004, 1),
        (10.0, 1000),
        (1e300, 1000),
        (math.inf, 1000),
        (0.0, None),
        (-1.0, None),
        (-math.inf, None),
        (math.nan, None),
    ],
)
def test_weight_from_ratio(ratio: float, weight: int | None) -> None:
    assert weight_from_ratio(ratio) == weight


def test_routes_with_non_positive_ratio_are_skipped() -> None:
    c = circuit(
        route_info=[
            route(route_id="00000000-0000-4000-8000-000000000001", traffic_ratio=0.0),
            route(route_id="00000000-0000-4000-8000-000000000002", traffic_ratio=-2),
            route(route_id="00000000-0000-4000-8000-000000000003", traffic_ratio=0.3),
        ]
    )
    backends = desired_backends([c], MODELS)
    assert [s.weight for s in backends.values()] == [30]


def test_unknown_model_yields_no_backends_unless_a_default_is_given() -> None:
    assert desired_backends([circuit()], {}) == {}
    [spec] = desired_backends([circuit()], {}, default_model="fallback").values()
    assert spec.models == ("fallback",)


def test_model_key_falls_back_to_the_circuit_id() -> None:
    [spec] = desired_backends([circuit(endpoint_id=None)], {CID: "m"}).values()
    assert spec.models == ("m",)


def test_interactive_circuits_are_skipped() -> None:
    assert desired_backends([circuit(app_mode="interactive")], MODELS) == {}


def test_output_is_sorted_by_name() -> None:
    c = circuit(
        route_info=[
            route(route_id="ffffffff-0000-4000-8000-000000000000"),
            route(route_id="00000000-0000-4000-8000-000000000000"),
        ]
    )
    names = list(desired_backends([c], MODELS))
    assert names == sorted(names)


def spec(name: str, source: str = "appproxy", **over: object) -> BackendSpec:
    return BackendSpec(name=name, url="http://h:1", source=source, **over)  # type: ignore[arg-type]


def test_plan_adds_updates_and_removes_only_appproxy_rows() -> None:
    desired = {
        "appproxy-new": spec("appproxy-new"),
        "appproxy-same": spec("appproxy-same"),
        "appproxy-changed": spec("appproxy-changed", weight=50),
    }
    actual = {
        "appproxy-same": spec("appproxy-same"),
        "appproxy-changed": spec("appproxy-changed", weight=100),
        "appproxy-gone": spec("appproxy-gone"),
        "vllm-a": spec("vllm-a", source="config"),
        "admin-b": spec("admin-b", source="admin"),
    }
    result = plan(desired, actual)
    assert result == Plan(
        add=(desired["appproxy-new"],),
        update=(desired["appproxy-changed"],),
        remove=("appproxy-gone",),
    )
    assert result  # non-empty plans are truthy


def test_plan_never_touches_another_namespace_even_on_a_name_clash() -> None:
    """A desired name owned by config/admin is a conflict, not an update."""
    desired = {"appproxy-x": spec("appproxy-x")}
    actual = {"appproxy-x": spec("appproxy-x", source="config")}
    result = plan(desired, actual)
    assert result.add == () and result.update == () and result.remove == ()
    assert result.conflicts == ("appproxy-x",)
    assert result.is_empty


def test_plan_is_empty_when_converged() -> None:
    backends = desired_backends([circuit()], MODELS)
    result = plan(backends, dict(backends))
    assert result.is_empty
    assert not result


def test_plan_removes_everything_when_no_circuits_remain() -> None:
    actual = desired_backends([circuit()], MODELS)
    assert plan({}, actual).remove == tuple(actual)


def test_plan_rejects_desired_rows_from_another_namespace() -> None:
    with pytest.raises(ValueError):
        plan({"vllm-a": spec("vllm-a", source="config")}, {})
    with pytest.raises(ValueError):
        plan({"appproxy-a": spec("appproxy-b")}, {})


def test_ingress_table() -> None:
    private = circuit(subdomain="Llama", allowed_client_ips="10.0.0.0/8, bad, 192.168.1.1")
    empty = circuit(
        id="00000000-0000-4000-8000-000000000009",
        subdomain="empty",
        endpoint_id=None,
        open_to_public=True,
        route_info=[route(traffic_ratio=0)],
    )
    no_subdomain = circuit(id="00000000-0000-4000-8000-00000000000a", subdomain=None)
    table = ingress_table([private, empty, no_subdomain], MODELS)
    assert set(table) == {"llama", "empty"}
    assert table["llama"] == IngressEntry(
        circuit_id=CID,
        model="llama-3-8b",
        open_to_public=False,
        allowed_ips=(
            ipaddress.ip_network("10.0.0.0/8"),
            ipaddress.ip_network("192.168.1.1/32"),
        ),
        has_routes=True,
        endpoint_id=EID,
    )
    entry = table["empty"]
    assert entry.model is None
    assert entry.open_to_public is True
    assert entry.allowed_ips == ()
    assert entry.has_routes is False

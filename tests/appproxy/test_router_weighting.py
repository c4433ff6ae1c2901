"""The ROUTER plan's two weighting rules (``appproxy_router.weighting``) and
the refined BEP-1053 replica-group wire fields: pure, no Django."""

from __future__ import annotations

import uuid

import pytest

from appproxy.router_mode.config import parse_router_section
from appproxy.router_mode.plan import FLAT, HIERARCHICAL, desired, index, reindexed
from appproxy.router_mode.wire import Publication
from appproxy.wire import Circuit

EP_A = "33333333-3333-4333-8333-333333333333"
EP_B = "44444444-4444-4444-8444-444444444444"


def route(port: int, ratio: object = 1.0, group: str | None = None) -> dict:
    out = {
        "route_id": str(uuid.uuid4()),
        "session_id": str(uuid.uuid4()),
        "kernel_host": "10.0.0.1",
        "kernel_port": port,
        "traffic_ratio": ratio,
    }
    if group is not None:
        out["replica_group_id"] = group
    return out


def circuit(endpoint: str, *routes: dict, groups: list | None = None) -> Circuit:
    raw = {"id": str(uuid.uuid4()), "endpoint_id": endpoint, "route_info": list(routes)}
    if groups is not None:
        raw["replica_groups"] = groups
    return Circuit.model_validate(raw)


def pub(model: str, *mappings: tuple[str, object]) -> Publication:
    return Publication.model_validate(
        {"model": model, "mappings": [{"endpoint_id": e, "ratio": r} for e, r in mappings]}
    )


def weights(circuits, pubs, rule) -> dict[int, int]:
    plan = desired(circuits, pubs, rule)
    return {int(s.url.rsplit(":", 1)[1]): s.weight for s in plan.backends.values()}


def shares(w: dict[int, int]) -> dict[int, float]:
    total = sum(w.values())
    return {port: weight / total for port, weight in w.items()}


def test_flat_is_the_default_and_hierarchical_keeps_the_endpoint_split():
    """A 0.7 with one replica, B 0.3 with three: flat gives A 70/160; hierarchical 70 %."""
    a = circuit(EP_A, route(8001))
    b = circuit(EP_B, route(8002), route(8003), route(8004))
    p = [pub("m", (EP_A, 0.7), (EP_B, 0.3))]
    assert weights([a, b], p, FLAT) == {8001: 70, 8002: 30, 8003: 30, 8004: 30}
    assert desired([a, b], p) == desired([a, b], p, FLAT)
    h = weights([a, b], p, HIERARCHICAL)
    assert h == {8001: 700, 8002: 100, 8003: 100, 8004: 100}
    assert shares(h)[8001] == pytest.approx(0.7)


def test_groups_split_an_endpoint_by_traffic_weight_then_traffic_ratio():
    """Blue 75 (two replicas, 1.0 and 0.5), green 25 (one): 50/25/25 % of the endpoint."""
    c = circuit(
        EP_A,
        route(8001, 1.0, "blue"),
        route(8002, 0.5, "blue"),
        route(8003, 1.0, "green"),
        groups=[{"id": "blue", "traffic_weight": 75, "lifecycle": "active"}, {"id": "green", "traffic_weight": 25}],
    )
    assert weights([c], [pub("m", (EP_A, 1.0))], HIERARCHICAL) == {8001: 500, 8002: 250, 8003: 250}
    # The flat rule ignores the groups.
    assert weights([c], [pub("m", (EP_A, 1.0))], FLAT) == {8001: 100, 8002: 50, 8003: 100}


def test_an_empty_group_forfeits_its_share_to_its_siblings():
    """Green has no live replica (none, or drained): blue takes the whole endpoint share."""
    groups = [{"id": "blue", "traffic_weight": 50}, {"id": "green", "traffic_weight": 50}]
    a = circuit(EP_A, route(8001, 1.0, "blue"), route(8002, 0.0, "green"), groups=groups)
    b = circuit(EP_B, route(8003))
    w = weights([a, b], [pub("m", (EP_A, 0.5), (EP_B, 0.5))], HIERARCHICAL)
    assert w == {8001: 500, 8003: 500}  # 8002 drained; A keeps its half


def test_routes_without_a_known_group_share_the_implicit_group_of_weight_100():
    c = circuit(
        EP_A,
        route(8001, 1.0, "canary"),
        route(8002, 1.0),
        route(8003, 1.0, "no-such-group"),
        groups=[{"id": "canary", "traffic_weight": 100}],
    )
    assert weights([c], [pub("m", (EP_A, 1.0))], HIERARCHICAL) == {8001: 500, 8002: 250, 8003: 250}


@pytest.mark.parametrize("bad", [0, -5, float("nan"), float("inf")])
def test_a_group_weight_that_is_zero_or_not_finite_drains_the_group(bad):
    c = circuit(
        EP_A,
        route(8001, 1.0, "a"),
        route(8002, 1.0, "b"),
        groups=[{"id": "a", "traffic_weight": bad}, {"id": "b", "traffic_weight": 10}],
    )
    assert weights([c], [pub("m", (EP_A, 1.0))], HIERARCHICAL) == {8002: 1000}


def test_tiny_shares_clamp_up_to_one_and_zero_ratio_endpoints_drain():
    many = circuit(EP_A, *(route(9000 + i) for i in range(2500)))
    w = weights([many, circuit(EP_B, route(8001))], [pub("m", (EP_A, 1.0), (EP_B, 0.0))], HIERARCHICAL)
    assert set(w.values()) == {1} and 8001 not in w


def test_a_shared_endpoint_takes_its_largest_normalised_share():
    a, b = circuit(EP_A, route(8001)), circuit(EP_B, route(8002))
    w = weights([a, b], [pub("m1", (EP_A, 1.0), (EP_B, 3.0)), pub("m2", (EP_A, 1.0))], HIERARCHICAL)
    assert w == {8001: 1000, 8002: 750}


def test_a_patched_index_keeps_the_shares_of_a_fresh_one():
    before = {"m1": pub("m1", (EP_A, 1.0), (EP_B, 1.0)), "m2": pub("m2", (EP_B, 2.0))}
    after = {"m1": pub("m1", (EP_A, 1.0), (EP_B, 3.0)), "m2": before["m2"], "m3": pub("m3", (EP_A, 1.0))}
    idx = index(before.values())
    patched = reindexed(idx, [before["m1"]], after, {"m1", "m3"})
    assert patched == index(after.values())
    assert patched.share_of == {EP_A: 1.0, EP_B: 1.0}


def test_replica_group_wire_fields_are_tolerant():
    """Unusable group entries are dropped, never the circuit; ids compare case-insensitively."""
    c = circuit(
        EP_A,
        route(8001, 1.0, "Blue"),
        groups=[
            {"id": "BLUE", "traffic_weight": None},
            {"traffic_weight": 5},
            "junk",
            {"id": "blue", "traffic_weight": 1},
        ],
    )
    assert [(g.id, g.traffic_weight) for g in c.replica_groups] == [("blue", 100.0)]
    assert c.route_info[0].replica_group_id == "blue"
    assert circuit(EP_A, route(8001), groups="nope").replica_groups == ()  # type: ignore[arg-type]
    kebab = Circuit.model_validate(
        {
            "id": str(uuid.uuid4()),
            "replica-groups": [{"id": "g", "traffic-weight": 7}],
            "route_info": [{**route(8001), "replica-group-id": "g"}],
        }
    )
    assert kebab.replica_groups[0].id == "g" and kebab.route_info[0].replica_group_id == "g"


def test_the_weighting_option_defaults_to_flat_and_rejects_other_values():
    base = {"enabled": False}
    assert parse_router_section(base).weighting == "flat"
    assert parse_router_section({**base, "weighting": "hierarchical"}).weighting == "hierarchical"
    with pytest.raises(Exception, match="weighting"):
        parse_router_section({**base, "weighting": "nested"})

"""The ROUTER reconcile plan (seed §9.6) and the edge cases of
reference/router-mode.md §1.9: pure, no Django."""

from __future__ import annotations

import json
import math
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appproxy.router_mode.plan import composed_weight, desired, round_half_up, sanitize, summarize
from appproxy.router_mode.wire import Publication
from appproxy.wire import Circuit

EP_A = "33333333-3333-4333-8333-333333333333"
EP_B = "44444444-4444-4444-8444-444444444444"


def circuit(endpoint: str | None, *routes: dict, variant: str | None = None, mode: str = "inference") -> Circuit:
    return Circuit.model_validate(
        {
            "id": str(uuid.uuid4()),
            "app_mode": mode,
            "endpoint_id": endpoint,
            "runtime_variant": variant,
            "route_info": list(routes),
        }
    )


def route(port: int, ratio: object = 1.0, *, host: str | None = "10.0.0.1", route_id: str | None = "auto") -> dict:
    return {
        "route_id": str(uuid.uuid4()) if route_id == "auto" else route_id,
        "session_id": str(uuid.uuid4()),
        "kernel_host": host,
        "kernel_port": port,
        "traffic_ratio": ratio,
    }


def pub(model: str, *mappings: tuple[str, object], aliases: tuple[str, ...] = ()) -> Publication:
    return Publication.model_validate(
        {"model": model, "aliases": list(aliases), "mappings": [{"endpoint_id": e, "ratio": r} for e, r in mappings]}
    )


def weights(plan) -> dict[int, int]:
    return {int(spec.url.rsplit(":", 1)[1]): spec.weight for spec in plan.backends.values()}


def test_the_acceptance_example():
    """llama-4-chat (alias llama-4): A ratio 0.7 with replicas 1.0 and 0.5, B ratio 0.3 with one."""
    a = circuit(EP_A, route(8001, 1.0), route(8002, 0.5), variant="vllm")
    b = circuit(EP_B, route(8003, 1.0))
    plan = desired([a, b], [pub("llama-4-chat", (EP_A, 0.7), (EP_B, 0.3), aliases=("llama-4",))])
    assert weights(plan) == {8001: 70, 8002: 35, 8003: 30}
    for spec in plan.backends.values():
        assert spec.models == ("llama-4-chat", "llama-4") and spec.source == "appproxy"
    kinds = {int(s.url.rsplit(":", 1)[1]): s.kind for s in plan.backends.values()}
    assert kinds == {8001: "vllm", 8002: "vllm", 8003: "openai_compat"}
    assert plan.published == ("llama-4", "llama-4-chat")
    assert plan.pending_circuits == () and plan.pending_publications == ()


def test_names_use_route_id_else_index_and_localhost_for_null_host():
    rid = str(uuid.uuid4())
    c = circuit(EP_A, route(9001, route_id=rid), route(9002, host=None, route_id=None))
    plan = desired([c], [pub("m", (EP_A, 1.0))])
    names = sorted(plan.backends)
    assert names == sorted([f"appproxy-{c.id}-r{rid}", f"appproxy-{c.id}-r1"])
    assert plan.backends[f"appproxy-{c.id}-r1"].url == "http://localhost:9002"


@pytest.mark.parametrize("order", ["circuit-first", "publication-first"])
def test_joins_are_order_independent(order):
    c = circuit(EP_A, route(8001))
    p = pub("m", (EP_A, 1.0))
    only_circuit = desired([c], [])
    only_pub = desired([], [p])
    assert only_circuit.backends == {} and only_circuit.pending_circuits == (str(c.id),)
    assert only_pub.backends == {} and only_pub.pending_publications == ("m",) and only_pub.published == ("m",)
    both = desired([c], [p]) if order == "circuit-first" else desired(reversed([c]), reversed([p]))
    assert len(both.backends) == 1 and both.pending_circuits == () and both.pending_publications == ()


def test_shared_endpoint_takes_the_max_ratio_and_every_name():
    c = circuit(EP_A, route(8001))
    plan = desired([c], [pub("big", (EP_A, 0.2)), pub("small", (EP_A, 0.9), aliases=("s",))])
    (spec,) = plan.backends.values()
    assert spec.weight == 90 and set(spec.models) == {"big", "small", "s"}


def test_the_same_endpoint_twice_in_one_publication_takes_the_max():
    c = circuit(EP_A, route(8001))
    (spec,) = desired([c], [pub("m", (EP_A, 0.1), (EP_A, 0.6))]).backends.values()
    assert spec.weight == 60


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), float("-inf")])
def test_bad_or_zero_endpoint_ratios_drain(bad):
    c = circuit(EP_A, route(8001))
    plan = desired([c], [pub("m", (EP_A, bad))])
    assert plan.backends == {} and len(plan.drained) == 1
    assert plan.published == ("m",)  # still listed: resolves like "all replicas down"


def test_1e400_parses_as_inf_and_drains():
    """Python's json turns 1e400 into inf; sanitise must not make it a magnet."""
    text = '{"model": "m", "mappings": [{"endpoint_id": "EP", "ratio": 1e400}]}'.replace("EP", EP_A)
    raw = json.loads(text)
    assert math.isinf(raw["mappings"][0]["ratio"])
    plan = desired([circuit(EP_A, route(8001))], [Publication.model_validate(raw)])
    assert plan.backends == {}


def test_a_string_ratio_rejects_the_entry():
    with pytest.raises(ValueError):
        Publication.model_validate({"model": "m", "mappings": [{"endpoint_id": EP_A, "ratio": "0.5"}]})


def test_missing_ratio_is_one():
    p = Publication.model_validate({"model": "m", "mappings": [{"endpoint-id": EP_A}]})
    (spec,) = desired([circuit(EP_A, route(8001))], [p]).backends.values()
    assert spec.weight == 100


@pytest.mark.parametrize(
    ("endpoint", "traffic", "weight"),
    [
        (0.004, 1.0, 1),  # tiny but not zero: clamped up, not drained
        (15, 1.0, 1000),  # saturates
        (1.0, 0.0, None),  # traffic_ratio 0 drains one replica
        (0.025, 1.0, 3),  # 2.5 rounds half up (Python's round would give 2)
        (0.015, 1.0, 2),  # 1.5 → 2
        (1.0, float("nan"), None),
        (1.0, -0.5, None),
    ],
)
def test_composed_weight(endpoint, traffic, weight):
    assert composed_weight(endpoint, traffic) == weight


def test_traffic_ratio_zero_drains_only_that_replica():
    c = circuit(EP_A, route(8001, 0.0), route(8002, 1.0))
    plan = desired([c], [pub("m", (EP_A, 1.0))])
    assert weights(plan) == {8002: 100} and len(plan.drained) == 1


def test_empty_publication_is_listed_with_no_backend():
    plan = desired([circuit(EP_A, route(8001))], [pub("empty"), pub("m", (EP_A, 1.0))])
    assert "empty" in plan.published and "empty" in plan.pending_publications
    assert all("empty" not in s.models for s in plan.backends.values())


def test_non_inference_and_endpointless_circuits_are_ignored():
    plan = desired(
        [circuit(EP_A, route(8001), mode="interactive"), circuit(None, route(8002))], [pub("m", (EP_A, 1.0))]
    )
    assert plan.backends == {} and plan.pending_circuits == ()


def test_unknown_wire_fields_are_ignored():
    raw = {
        "id": str(uuid.uuid4()),
        "endpoint_id": EP_A,
        "replica_groups": [{"id": "g", "traffic_weight": 100}],
        "route_info": [{**route(8001), "kernel_id": "k-1", "replica_group_id": "g"}],
    }
    (spec,) = desired([Circuit.model_validate(raw)], [pub("m", (EP_A, 1.0))]).backends.values()
    assert spec.weight == 100


@given(st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_round_half_up_matches_floor_plus_half(x):
    assert round_half_up(x) == math.floor(x + 0.5)


@given(st.one_of(st.floats(), st.integers(), st.none(), st.text(max_size=3), st.booleans()))
def test_sanitize_is_finite_and_non_negative(value):
    out = sanitize(value)
    assert math.isfinite(out) and out >= 0


@given(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True),
)
def test_composed_weight_is_in_range_or_drained(a, b):
    w = composed_weight(a, b)
    composed = sanitize(a) * sanitize(b)
    if composed == 0:
        assert w is None
    else:
        assert w is not None and 1 <= w <= 1000


_ratios = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=32), st.sampled_from([0.0, 0.004, 0.5, 1.0, 15.0])
)


@st.composite
def _world(draw):
    endpoints = [str(uuid.UUID(int=i + 1)) for i in range(draw(st.integers(1, 4)))]
    circuits = []
    for index in range(draw(st.integers(0, 4))):
        routes = [
            {
                "route_id": str(uuid.UUID(int=1000 + 10 * index + r)),
                "session_id": str(uuid.UUID(int=5000 + 10 * index + r)),
                "kernel_host": "10.0.0.1",
                "kernel_port": 8000 + 10 * index + r,
                "traffic_ratio": draw(_ratios),
            }
            for r in range(draw(st.integers(0, 3)))
        ]
        circuits.append(
            Circuit.model_validate(
                {
                    "id": str(uuid.UUID(int=9000 + index)),
                    "endpoint_id": draw(st.sampled_from(endpoints)),
                    "route_info": routes,
                }
            )
        )
    pubs = []
    for index in range(draw(st.integers(0, 3))):
        mappings = [(e, draw(_ratios)) for e in draw(st.lists(st.sampled_from(endpoints), max_size=3))]
        pubs.append(pub(f"model-{index}", *mappings, aliases=(f"alias-{index}",)))
    return circuits, pubs


@given(_world(), st.randoms())
def test_the_plan_is_order_independent_and_complete(world, rnd):
    circuits, pubs = world
    plan = desired(circuits, pubs)
    shuffled_c, shuffled_p = list(circuits), list(pubs)
    rnd.shuffle(shuffled_c)
    rnd.shuffle(shuffled_p)
    again = desired(shuffled_c, shuffled_p)
    assert again.backends.keys() == plan.backends.keys()
    for name, spec in plan.backends.items():
        assert {k: v for k, v in vars_of(spec).items() if k != "models"} == {
            k: v for k, v in vars_of(again.backends[name]).items() if k != "models"
        }
        assert set(spec.models) == set(again.backends[name].models)
        assert 1 <= spec.weight <= 1000
        # every backend carries every name and alias of every publication mapping its endpoint
        endpoint = next(str(c.endpoint_id) for c in circuits if name.startswith(f"appproxy-{c.id}-"))
        expected = {n for p in pubs if any(m.endpoint_id == endpoint for m in p.mappings) for n in p.names}
        assert set(spec.models) == expected
    assert set(plan.published) == {n for p in pubs for n in p.names}


@given(_world(), st.lists(st.sampled_from(["chat", None, "ep"]), max_size=3), st.randoms())
def test_the_summary_from_stored_columns_says_what_the_plan_says(world, extra, rnd):
    """/status counts pending and drained from the mirror's columns
    (summarize): the same answer as the plan of the parsed circuits."""
    circuits, pubs = world
    for i, kind in enumerate(extra):  # not inference, or with no endpoint: ignored by both
        ep = str(uuid.UUID(int=1)) if kind != "ep" else None
        circuits.append(
            Circuit.model_validate(
                {
                    "id": str(uuid.UUID(int=7000 + i)),
                    "app_mode": "interactive" if kind == "chat" else "inference",
                    "endpoint_id": ep,
                    "route_info": [route(7000 + i)],
                }
            )
        )
    plan = desired(circuits, pubs)
    stored_pubs = [(p.model, p.to_json()["mappings"]) for p in pubs]
    columns = [(i, str(c.id), str(c.endpoint_id or ""), c.app_mode) for i, c in enumerate(circuits)]
    routes = [(i, r.traffic_ratio) for i, c in enumerate(circuits) for r in c.route_info]
    for rows in (stored_pubs, columns, routes):
        rnd.shuffle(rows)
    summary = summarize(stored_pubs, columns, routes)
    assert summary.pending_circuits == plan.pending_circuits
    assert summary.pending_publications == plan.pending_publications
    assert summary.drained == len(plan.drained)


def vars_of(spec) -> dict:
    return {f: getattr(spec, f) for f in ("name", "url", "kind", "weight", "source")}


_EPS = [str(uuid.UUID(int=i + 1)) for i in range(5)]
# A change: publication `model-<n>` is removed (None) or written with these
# mappings and aliases (aliases may name another publication's alias).
_CHANGE = st.tuples(
    st.integers(0, 6),
    st.one_of(
        st.none(),
        st.tuples(
            st.lists(st.tuples(st.sampled_from(_EPS), _ratios), max_size=3),
            st.lists(st.sampled_from(["a", "b", "model-1"]), max_size=2),
        ),
    ),
)


@given(st.lists(st.lists(_CHANGE, min_size=1, max_size=3), min_size=1, max_size=30), _world())
def test_a_patched_index_equals_a_fresh_one_after_every_change(steps, world):
    """The endpoint index kept up to date by `reindexed` (as the events
    process does, one change set at a time) equals one built from scratch
    over the publications of now, and so plans the same backends."""
    from appproxy.router_mode.plan import desired_backends, index, reindexed

    circuits, _ = world
    now: dict[str, Publication] = {}
    idx = index(())
    for step in steps:
        before = dict(now)
        for n, change in step:
            name = f"model-{n}"
            if change is None:
                now.pop(name, None)
            else:
                mappings, aliases = change
                now[name] = pub(name, *mappings, aliases=tuple(aliases))
        changed = {f"model-{n}" for n, _ in step}
        idx = reindexed(idx, [before[m] for m in changed if m in before], dict(sorted(now.items())), changed)
        assert idx == index(now.values())
        assert desired_backends(circuits, idx) == desired(circuits, now.values()).backends

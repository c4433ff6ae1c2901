"""`current_plan` (the ROUTER section of /status, the dashboard) folds the
mirrored circuits into the plan one at a time (issue 13).

It used to load every Circuit row and parse all of them before planning: at
5,000 circuits that peaked at ~80 MB of Python objects in a web process on
every /status read, and the process's RSS kept it (bench/rss.py). The peak is
measured with tracemalloc against what holding every parsed circuit costs,
not against a byte count, so the test does not depend on the platform."""

from __future__ import annotations

import gc
import tracemalloc
import uuid

import pytest

from appproxy import router_services
from appproxy.models import Circuit
from appproxy.router_plan import desired
from appproxy.router_wire import Publication as WirePublication
from appproxy.services import apply_locked, reconcile_lock, stored_circuit
from appproxy.wire import Circuit as WireCircuit
from tests.appproxy.test_services import circuit

pytestmark = pytest.mark.django_db

AUTHORITY = "w-plan-memory"
CIRCUITS = 1500  # three of current_plan's chunks


def _route(i: int) -> dict:
    return {
        "route_id": str(uuid.uuid4()),
        "session_id": str(uuid.uuid4()),
        "kernel_host": "127.0.0.1",
        "kernel_port": 9000 + i % 1000,
        "protocol": "http",
        "traffic_ratio": 1.0,
    }


def _traced(fn):
    """(fn's result, the peak of what it allocated, in bytes)."""
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        return result, tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def test_current_plan_parses_one_circuit_at_a_time():
    raws = [circuit(*(_route(4 * c + r) for r in range(4)), endpoint_id=str(uuid.uuid4())) for c in range(CIRCUITS)]
    with reconcile_lock(AUTHORITY):
        apply_locked(
            [WireCircuit.model_validate(r) for r in raws],
            {},
            source="test",
            authority=AUTHORITY,
            full=True,
            desire=router_services.router_circuit_desire(AUTHORITY),
        )
    mapped = [{"endpoint_id": r["endpoint_id"], "ratio": 1.0} for r in raws[: CIRCUITS // 2]]
    router_services.apply_publication(
        AUTHORITY, WirePublication.model_validate({"model": "m", "aliases": [], "mappings": mapped})
    )
    del raws

    every, held = _traced(lambda: [stored_circuit(row) for row in Circuit.objects.all()])
    plan, peak = _traced(lambda: router_services.current_plan(AUTHORITY))

    # The same plan as from every circuit at once...
    assert plan == desired(every, router_services.publications(AUTHORITY))
    assert len(plan.backends) == 4 * (CIRCUITS // 2) and len(plan.pending_circuits) == CIRCUITS - CIRCUITS // 2
    # ...without ever holding them all (before the fix: more than `held`).
    assert peak < held / 3, (peak, held)

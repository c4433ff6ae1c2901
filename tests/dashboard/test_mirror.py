"""The AppProxy sections: workers, circuits + routes, events with ack latency.

The row builders take plain objects, so they are tested whether or not the
appproxy models are installed; the DB-backed tests run once the appproxy
tables exist (they skip on a build without them).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pytest
from django.db import connection
from django.template.loader import render_to_string

from dashboard import mirror
from dashboard.sections import SECTIONS

T0 = datetime(2025, 3, 1, 12, 0, 0, tzinfo=UTC)


def _render(name: str, data) -> str:
    return render_to_string(SECTIONS[name].template, {"data": data, "section": SECTIONS[name]})


def test_event_rows_carry_apply_and_ack_latency():
    event = SimpleNamespace(
        name="appproxy_worker_circuit_created",
        fmt="legacy",
        authority="worker-a",
        circuit_ids=["c1", "c2"],
        received_at=T0,
        applied_at=T0 + timedelta(milliseconds=40),
        acked_at=T0 + timedelta(milliseconds=250),
        ok=True,
        detail="",
    )
    row = mirror.event_row(event)
    assert row["apply_ms"] == 40.0 and row["ack_ms"] == 250.0
    assert row["received_at"] == "2025-03-01T12:00:00Z" and row["circuit_ids"] == ["c1", "c2"]
    html = _render("events", [row])
    assert "250.0 ms" in html and "40.0 ms" in html and "2 circuits" in html


def test_an_unacked_event_says_so():
    row = mirror.event_row(SimpleNamespace(name="route_updated", received_at=T0, ok=None))
    assert row["ack_ms"] is None and row["ok"] is None
    html = _render("events", [row])
    assert "not acked" in html and "pending" in html


def test_circuit_rows_list_routes_and_access():
    circuit = SimpleNamespace(
        circuit_id="c-1",
        subdomain="llama",
        app="vllm",
        model="llama-3",
        endpoint_id="e-1",
        open_to_public=False,
        allowed_client_ips="10.0.0.0/8, 192.168.1.5",
        runtime_variant="vllm",
        raw={"secret_stuff": "never-shown-raw"},
        updated_at=T0,
    )
    routes = [
        SimpleNamespace(
            route_id="r-1",
            session_id="s-1",
            kernel_host="10.0.0.7",
            kernel_port=8000,
            traffic_ratio=0.5,
            backend_name="appproxy-c-1-rr-1",
        ),
        SimpleNamespace(
            route_id="r-2", session_id="s-2", kernel_host="", kernel_port=8001, traffic_ratio=0.0, backend_name=""
        ),
    ]
    row = mirror.circuit_row(circuit, routes)
    assert row["allowed_client_ips"] == ["10.0.0.0/8", "192.168.1.5"]
    assert [r["route_id"] for r in row["routes"]] == ["r-1", "r-2"]
    assert "raw" not in row
    html = _render("circuits", [row])
    assert "10.0.0.7:8000" in html and "localhost:8001" in html and "private (JWT)" in html
    assert "appproxy-c-1-rr-1" in html and "no backend" in html and "never-shown-raw" not in html


def test_worker_rows_show_heartbeat_age_and_failures():
    worker = SimpleNamespace(
        authority="worker-a",
        worker_id="w-1",
        node_id="n-1",
        status="ALIVE",
        registered_at=T0,
        last_heartbeat_at=T0 + timedelta(seconds=50),
        last_pull_at=T0 + timedelta(seconds=30),
        first_pull_applied=True,
        circuits=3,
        failures=2,
        retry_at=T0 + timedelta(seconds=70),
        last_error="ConnectError",
    )
    row = mirror.worker_row(worker, now=T0 + timedelta(seconds=62), events_alive=True)
    assert row["heartbeat_age_s"] == 12.0 and row["first_pull_applied"] is True
    html = _render("workers", [row])
    assert "12s ago" in html and "subscribed" in html and "2 in a row" in html and "ConnectError" in html


def test_missing_sections_render_nothing_and_empty_ones_say_so():
    for name in ("workers", "circuits", "events"):
        assert _render(name, None).strip() == ""
    assert "Not registered" in _render("workers", [])
    assert "No circuits" in _render("circuits", [])
    assert "No events" in _render("events", [])


# -- with the real appproxy tables ----------------------------------------------
def _tables_exist(*names: str) -> bool:
    classes = [mirror.model(n) for n in names]
    if any(c is None for c in classes):
        return False
    existing = set(connection.introspection.table_names())
    return all(c._meta.db_table in existing for c in classes)


@pytest.mark.django_db
def test_circuits_and_events_pages_read_the_mirror(staff):
    # appproxy is in INSTALLED_APPS and migrated: these tables always exist here.
    assert _tables_exist("Circuit", "Route", "EventRecord", "WorkerState")
    Circuit, Route = mirror.model("Circuit"), mirror.model("Route")
    EventRecord, WorkerState = mirror.model("EventRecord"), mirror.model("WorkerState")
    circuit = Circuit.objects.create(circuit_id="c-1", subdomain="llama", model="llama-3", open_to_public=True)
    Route.objects.create(
        circuit=circuit,
        route_id="r-1",
        kernel_host="10.0.0.7",
        kernel_port=8000,
        traffic_ratio=1.0,
        backend_name="appproxy-c-1-r1",
    )
    EventRecord.objects.create(
        name="circuit_created", received_at=T0, acked_at=T0 + timedelta(milliseconds=75), ok=True
    )
    WorkerState.objects.create(authority="worker-a", worker_id="w-1", status="ALIVE", last_heartbeat_at=T0)

    page = staff.get("/dashboard/circuits/").content.decode()
    assert "llama-3" in page and "10.0.0.7:8000" in page and "appproxy-c-1-r1" in page
    events = staff.get("/dashboard/events/").content.decode()
    assert "circuit_created" in events and "75.0 ms" in events
    overview = staff.get("/dashboard/")
    assert overview.context["sections"]["workers"]["data"][0]["worker_id"] == "w-1"
    # No AppProxy mode is on here: the pages answer at their URL (above) but
    # stay out of the nav (dashboard.modes; test_pages covers a mode on).
    nav = [item["slug"] for item in overview.context["nav"]]
    assert "circuits" not in nav and "events" not in nav

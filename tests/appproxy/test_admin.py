"""The Django admin shows the mirror read-only (OPS-2)."""

from __future__ import annotations

import uuid

import pytest
from django.utils import timezone

from appproxy.models import Circuit, EventRecord, Route, WorkerState

pytestmark = pytest.mark.django_db


@pytest.fixture
def mirrored():
    circuit = Circuit.objects.create(
        circuit_id=str(uuid.uuid4()), subdomain="ep-admin", model="llama-admin", raw={"id": "x"}
    )
    Route.objects.create(circuit=circuit, kernel_host="10.0.0.9", kernel_port=8123, backend_name="appproxy-x-r1")
    WorkerState.objects.create(authority="w-admin", worker_id=str(uuid.uuid4()))
    EventRecord.objects.create(name="appproxy_circuit_created_event", received_at=timezone.now(), ok=True)
    return circuit


def test_circuits_and_routes_are_listed(admin_client, mirrored):
    listing = admin_client.get("/admin/appproxy/circuit/")
    assert listing.status_code == 200 and b"ep-admin" in listing.content and b"llama-admin" in listing.content
    detail = admin_client.get(f"/admin/appproxy/circuit/{mirrored.pk}/change/")
    assert detail.status_code == 200 and b"10.0.0.9" in detail.content and b"8123" in detail.content
    assert b'name="_save"' not in detail.content
    for path in ("workerstate", "eventrecord", "route"):
        assert admin_client.get(f"/admin/appproxy/{path}/").status_code == 200


def test_nothing_can_be_changed(admin_client, mirrored):
    assert admin_client.get("/admin/appproxy/circuit/add/").status_code == 403
    response = admin_client.post(f"/admin/appproxy/circuit/{mirrored.pk}/change/", {"subdomain": "hacked"})
    assert response.status_code == 403
    assert admin_client.post(f"/admin/appproxy/circuit/{mirrored.pk}/delete/", {"post": "yes"}).status_code == 403
    mirrored.refresh_from_db()
    assert mirrored.subdomain == "ep-admin"

"""/status answers a staff session; a signed-in non-staff user gets 403 and an
anonymous one 401, with nothing of the routing state (issue 12 #12)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User

pytestmark = pytest.mark.django_db


def test_staff_session_reads_status(staff, mirror, live_runtime):
    live_runtime()
    resp = staff.get("/status")
    assert resp.status_code == 200
    assert {b["name"] for b in resp.json()["backends"]} >= {"vllm-a", "cloud-c"}


def test_non_staff_and_anonymous_are_refused(client, mirror, live_runtime):
    live_runtime()
    anonymous = client.get("/status")
    assert anonymous.status_code == 401
    assert "vllm-a" not in anonymous.content.decode()
    client.force_login(User.objects.create_user("visitor", "v@example.com", None))
    signed_in = client.get("/status")
    assert signed_in.status_code == 403
    assert "vllm-a" not in signed_in.content.decode()


def test_status_token_setting(client, mirror, live_runtime, settings):
    live_runtime()
    settings.ROUTER_STATUS_TOKEN = "tok-123"
    assert client.get("/status", HTTP_AUTHORIZATION="Bearer tok-123").status_code == 200
    assert client.get("/status", HTTP_AUTHORIZATION="Bearer tok-12").status_code == 401

"""`/api/v1/keys` over HTTP (Django test client, real DB): the lifecycle goes
through keys.services, the secret is in one answer only, coordinator keys are
read-only, and every change leaves an audit entry without a secret."""

from __future__ import annotations

import csv
import hashlib
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from adminapi.models import AuditEntry
from keys.models import ApiKey, KeySource, KeyUsage
from keys.selectors import compile_keyring
from router.revision import current_revision

from .conftest import assert_error

pytestmark = pytest.mark.django_db


def _create(api, **body):
    r = api("POST", "/keys", {"name": "ci", **body})
    assert r.status_code == 201, r.content
    return r.json()


def test_create_returns_the_secret_once_and_the_key_serves(api):
    before = current_revision()
    made = _create(api, owner="team-a", allowed_models=["m"], rate_limit=60, allowed_client_ips=["10.0.0.0/8"])
    secret, key = made["secret"], made["key"]
    assert secret.startswith("sk-") and key["hint"].endswith(secret[-4:])
    assert key | {"id": 0, "created_at": ""} == key | {
        "id": 0, "created_at": "", "record_id": f"operator:{key['id']}", "name": "ci", "owner": "team-a",
        "source": "operator", "allowed_models": ["m"], "rate_limit": 60, "allowed_client_ips": ["10.0.0.0/8"],
        "expires_at": None, "enabled": True, "revoked_at": None, "state": "active", "read_only": False,
    }  # fmt: skip
    assert current_revision() == before + 1
    assert compile_keyring().lookup(secret).name == "ci"
    for answer in (api("GET", f"/keys/{key['id']}"), api("GET", "/keys")):
        assert secret not in answer.content.decode()
        assert hashlib.sha256(secret.encode()).hexdigest() not in answer.content.decode()


def test_create_refuses_bad_settings_naming_the_field(api):
    assert_error(api("POST", "/keys", {"name": "x", "allowed_client_ips": ["10.0.0.300"]}), 400, "invalid_request")
    err = assert_error(api("POST", "/keys", {"name": "x", "allowed_client_ips": ["nope"]}), 400, "invalid_request")
    assert err["param"] == "allowed_client_ips"
    past = (datetime.now(UTC) - timedelta(days=1)).isoformat()
    assert assert_error(api("POST", "/keys", {"name": "x", "expires_at": past}), 400, "invalid_request")["param"] == (
        "expires_at"
    )
    assert not ApiKey.objects.exists()


def test_list_filters_and_pages(api):
    for i in range(5):
        _create(api, name=f"k{i}", owner="a" if i % 2 else "b")
    ApiKey.objects.create(source=KeySource.COORDINATOR, key_id="c1", name="coord", key_hash="0" * 64)
    everything = api("GET", "/keys").json()
    assert everything["total"] == 6
    first = api("GET", "/keys?limit=2&offset=0").json()
    second = api("GET", "/keys?limit=2&offset=2").json()
    assert first["total"] == 6 and len(first["data"]) == 2 and len(second["data"]) == 2
    assert {k["id"] for k in first["data"]}.isdisjoint(k["id"] for k in second["data"])
    assert [k["name"] for k in api("GET", "/keys?name=k3").json()["data"]] == ["k3"]
    assert {k["name"] for k in api("GET", "/keys?owner=a").json()["data"]} == {"k1", "k3"}
    coord = api("GET", "/keys?source=coordinator").json()["data"]
    assert [(k["name"], k["read_only"], k["hint"]) for k in coord] == [("coord", True, "id:c1")]
    assert_error(api("GET", "/keys?limit=501"), 400, "invalid_request")


def test_coordinator_keys_are_read_only(api):
    row = ApiKey.objects.create(source=KeySource.COORDINATOR, key_id="c1", name="coord", key_hash="1" * 64)
    assert api("GET", f"/keys/{row.pk}").json()["source"] == "coordinator"
    for method, path, body in (
        ("PATCH", f"/keys/{row.pk}", {"enabled": False}),
        ("POST", f"/keys/{row.pk}/rotate", None),
        ("DELETE", f"/keys/{row.pk}", None),
    ):
        assert_error(api(method, path, body), 403, "read_only_resource")
    row.refresh_from_db()
    assert row.disabled_at is None and row.revoked_at is None


def test_patch_changes_only_what_it_names(api):
    made = _create(api, allowed_models=["m"], rate_limit=5)
    kid, secret = made["key"]["id"], made["secret"]
    r = api("PATCH", f"/keys/{kid}", {"allowed_client_ips": ["192.168.0.0/16"], "rate_limit": None})
    assert r.status_code == 200, r.content
    assert r.json()["allowed_models"] == ["m"] and r.json()["rate_limit"] is None
    assert r.json()["allowed_client_ips"] == ["192.168.0.0/16"]
    assert compile_keyring().lookup(secret).rate_limit is None
    assert_error(api("PATCH", f"/keys/{kid}", {"allowed_client_ips": ["x"]}), 400, "invalid_request")
    assert_error(api("PATCH", f"/keys/{kid}", {"name": None}), 400, "invalid_request")
    assert_error(api("PATCH", "/keys/999999", {"owner": "x"}), 404, "not_found")


def test_disable_and_enable_through_patch(api):
    made = _create(api)
    kid, secret = made["key"]["id"], made["secret"]
    off = api("PATCH", f"/keys/{kid}", {"enabled": False}).json()
    assert off["enabled"] is False and off["state"] == "disabled"
    assert compile_keyring().lookup(secret) is None
    on = api("PATCH", f"/keys/{kid}", {"enabled": True}).json()
    assert on["state"] == "active" and compile_keyring().lookup(secret) is not None


def test_rotate_stops_the_old_secret_at_once_or_after_a_grace(api):
    made = _create(api, allowed_models=["m"])
    kid, old = made["key"]["id"], made["secret"]
    r = api("POST", f"/keys/{kid}/rotate")
    assert r.status_code == 201, r.content
    new = r.json()
    assert new["secret"] != old and new["key"]["allowed_models"] == ["m"] and new["previous"]["state"] == "revoked"
    ring = compile_keyring()
    assert ring.lookup(old) is None and ring.lookup(new["secret"]) is not None
    assert_error(api("POST", f"/keys/{kid}/rotate"), 409, "conflict")

    graced = _create(api, name="graced")
    r = api("POST", f"/keys/{graced['key']['id']}/rotate?grace_seconds=600").json()
    assert r["previous"]["state"] == "active"
    ends = datetime.fromisoformat(r["previous"]["expires_at"])
    assert timedelta(seconds=590) < ends - timezone.now() <= timedelta(seconds=600)
    assert compile_keyring().lookup(graced["secret"]) is not None


def test_delete_removes_the_key(api):
    made = _create(api)
    kid = made["key"]["id"]
    assert api("DELETE", f"/keys/{kid}").status_code == 204
    assert compile_keyring().lookup(made["secret"]) is None
    assert_error(api("GET", f"/keys/{kid}"), 404, "not_found")
    assert_error(api("DELETE", f"/keys/{kid}"), 404, "not_found")


def test_usage_as_json_and_csv(api):
    kid = _create(api)["key"]["id"]
    now = timezone.now().replace(minute=0, second=0, microsecond=0)
    for hours_ago, n in ((1, 3), (2, 4), (30, 100)):
        KeyUsage.objects.create(key_ref=f"operator:{kid}", hour=now - timedelta(hours=hours_ago), name="ci",
                                source="operator", requests=n, prompt_tokens=n * 10)
    hourly = api("GET", f"/keys/{kid}/usage").json()
    assert sorted(r["requests"] for r in hourly["rows"]) == [3, 4]  # the last 24 hours by default
    frm = (now - timedelta(hours=48)).isoformat().replace("+00:00", "Z")
    total = api("GET", f"/keys/{kid}/usage?granularity=total&from={frm}").json()
    assert [(r["requests"], r["prompt_tokens"]) for r in total["rows"]] == [(107, 1070)]
    r = api("GET", f"/keys/{kid}/usage?granularity=day&from={frm}", HTTP_ACCEPT="text/csv")
    assert r["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(r.content.decode())))
    assert rows[0][0] == "hour_utc" and sum(int(row[4]) for row in rows[1:]) == 107
    assert_error(api("GET", f"/keys/{kid}/usage?from={now.isoformat().replace('+00:00', 'Z')}&to={frm}"), 400,
                 "invalid_request")  # fmt: skip


def test_every_change_is_audited_without_a_secret(api):
    made = _create(api)
    kid = made["key"]["id"]
    api("PATCH", f"/keys/{kid}", {"owner": "x"})
    rotated = api("POST", f"/keys/{kid}/rotate").json()
    api("DELETE", f"/keys/{rotated['key']['id']}")
    entries = api("GET", "/audit?action=key.").json()["data"]
    assert [e["action"] for e in entries] == ["key.delete", "key.rotate", "key.update", "key.create"]
    assert all(e["actor"] == "token:ops" for e in entries)
    update = entries[2]
    assert update["before"] and update["after"] and update["before"] != update["after"]
    stored = " ".join(str(row) for row in AuditEntry.objects.values())
    for secret in (made["secret"], rotated["secret"]):
        assert secret not in stored and secret[-8:] not in stored

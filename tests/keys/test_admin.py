"""Admin: plaintext shown once on create/rotate, never the hash; coordinator
rows read-only."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.models import ADDITION, LogEntry
from django.contrib.auth.models import User

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.services import key_create
from router.revision import current_revision

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.keys.urls")]

URL = "/admin/keys/apikey/"
KEY_RE = re.compile(r"sk-[A-Za-z0-9_-]{43}")


@pytest.fixture
def staff(client):
    user = User.objects.create_superuser("admin", "a@example.com", "pw")
    client.force_login(user)
    return client


def test_add_shows_the_plaintext_once_and_stores_only_the_hash(staff):
    before = current_revision()
    resp = staff.post(
        URL + "add/",
        {
            "name": "web",
            "owner": "ops",
            "allowed_models": "a\nb",
            "allowed_client_ips": "10.0.0.0/8",
            "rate_limit": "10",
            "expires_at_0": "",
            "expires_at_1": "",
        },
        follow=True,
    )
    assert resp.status_code == 200
    page = resp.content.decode()
    found = KEY_RE.findall(page)
    assert len(set(found)) == 1
    key = ApiKey.objects.get()
    assert hash_key(found[0]) == key.key_hash
    assert key.allowed_models == ["a", "b"] and key.allowed_client_ips == ["10.0.0.0/8"]
    assert key.key_hash not in page
    assert current_revision() > before
    # Shown once: the next page has no key.
    again = staff.get(URL).content.decode()
    assert not KEY_RE.search(again) and key.key_hash not in again
    change = staff.get(f"{URL}{key.pk}/change/").content.decode()
    assert (
        not KEY_RE.search(change) and key.key_hash not in change and key.hint in change
    )


def test_add_rejects_bad_ips(staff):
    resp = staff.post(URL + "add/", {"name": "x", "allowed_client_ips": "10.0.0.0/99"})
    assert (
        resp.status_code == 200 and "not an IP address or CIDR" in resp.content.decode()
    )
    assert not ApiKey.objects.exists()


def test_change_keeps_the_secret_and_bumps(staff):
    key, plain = key_create(name="x")
    before = current_revision()
    resp = staff.post(
        f"{URL}{key.pk}/change/",
        {
            "name": "y",
            "owner": "",
            "allowed_models": "m",
            "allowed_client_ips": "",
            "rate_limit": "",
            "expires_at_0": "",
            "expires_at_1": "",
        },
    )
    assert resp.status_code == 302
    key.refresh_from_db()
    assert (
        key.name == "y"
        and key.allowed_models == ["m"]
        and key.key_hash == hash_key(plain)
    )
    assert current_revision() > before


def test_revoke_and_rotate_actions(staff):
    a, _a_plain = key_create(name="a")
    b, b_plain = key_create(name="b")
    resp = staff.post(
        URL, {"action": "revoke_keys", "_selected_action": [a.pk]}, follow=True
    )
    assert "Revoked 1 key" in resp.content.decode()
    resp = staff.post(
        URL, {"action": "rotate_keys", "_selected_action": [b.pk]}, follow=True
    )
    page = resp.content.decode()
    new_plain = KEY_RE.findall(page)
    assert len(set(new_plain)) == 1 and new_plain[0] != b_plain
    new = ApiKey.objects.get(key_hash=hash_key(new_plain[0]))
    assert new.name == "b" and new.revoked_at is None
    b.refresh_from_db()
    a.refresh_from_db()
    assert a.revoked_at and b.revoked_at
    for k in (a, b, new):
        assert k.key_hash not in page


def test_coordinator_rows_are_read_only(staff):
    row = ApiKey.objects.create(
        source=KeySource.COORDINATOR, key_id="coord-1", name="coord-1", key_hash=hash_key("tok")
    )
    page = staff.get(f"{URL}{row.pk}/change/").content.decode()
    assert "coord-1" in page and hash_key("tok") not in page
    assert 'name="_save"' not in page
    resp = staff.post(
        f"{URL}{row.pk}/change/",
        {"name": "hijack", "allowed_models": "", "allowed_client_ips": ""},
    )
    assert resp.status_code == 403
    assert staff.post(f"{URL}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    staff.post(URL, {"action": "revoke_keys", "_selected_action": [row.pk]})
    row.refresh_from_db()
    assert row.name == "coord-1" and row.revoked_at is None


def test_list_hides_the_hash(staff):
    key, _ = key_create(name="listed", allowed_models=["m1"])
    page = staff.get(URL).content.decode()
    assert "listed" in page and "m1" in page and key.hint in page
    assert key.key_hash not in page


def test_add_logs_and_redirects_to_the_created_row(staff):
    """The admin carries on with the created key: its log entry and redirect name the row."""
    form = {"name": "logged", "allowed_models": "", "allowed_client_ips": ""}
    resp = staff.post(URL + "add/", {**form, "_continue": "1"})
    key = ApiKey.objects.get()
    assert resp.status_code == 302 and resp["Location"] == f"{URL}{key.pk}/change/"
    entry = LogEntry.objects.get()
    assert (entry.action_flag, entry.object_id, entry.object_repr) == (ADDITION, str(key.pk), str(key))
    resp = staff.post(URL + "add/", {**form, "name": "second"})
    assert resp.status_code == 302 and resp["Location"] == URL
    second = ApiKey.objects.get(name="second")
    assert LogEntry.objects.filter(object_id=str(second.pk), object_repr=str(second)).count() == 1

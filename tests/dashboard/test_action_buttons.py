"""The buttons the Keys and Backends pages render for the admin API: only
operator keys that are not revoked get key actions (a coordinator key is
read-only), a disabled key offers Enable, and each page carries the CSRF
token its script sends with a change."""

from __future__ import annotations

import re

import pytest

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.services import key_create, key_revoke, key_set_enabled

pytestmark = pytest.mark.django_db


def row_html(html: str, name: str) -> str:
    rows = [chunk.split("</tr>")[0] for chunk in html.split("<tr data-key-ref=")[1:]]
    found = [row for row in rows if re.search(r"<strong><a [^>]*>(<[^>]*>)*" + re.escape(name) + "<", row)]
    assert len(found) == 1, f"{len(found)} rows for {name}"
    return found[0]


def test_key_buttons_follow_the_key_s_source_and_state(staff):
    active, _ = key_create(name="k-active")
    disabled, _ = key_create(name="k-disabled")
    key_set_enabled(disabled, False)
    revoked, _ = key_create(name="k-revoked")
    key_revoke(revoked)
    ApiKey.objects.create(source=KeySource.COORDINATOR, key_id="org/c-1", name="k-coord", key_hash=hash_key("tok-c"))

    html = staff.get("/dashboard/live.json?sections=keys").json()["sections"]["keys"]["html"]

    actions = re.findall(r'data-key-action="(\w+)"', row_html(html, "k-active"))
    assert actions == ["disable", "rotate", "delete"]
    assert f'data-key-id="{active.pk}"' in row_html(html, "k-active")
    disabled_row = row_html(html, "k-disabled")
    assert re.findall(r'data-key-action="(\w+)"', disabled_row) == ["enable", "rotate", "delete"]
    assert ">disabled</span>" in disabled_row
    assert "data-key-action" not in row_html(html, "k-revoked")
    assert "data-key-action" not in row_html(html, "k-coord")


def test_pages_with_actions_carry_the_csrf_token_and_the_api_script(staff):
    for path in ("/dashboard/keys/", "/dashboard/config/", "/dashboard/audit/", "/dashboard/backends/"):
        html = staff.get(path).content.decode()
        token = re.search(r'<meta name="csrf-token" content="([^"]+)">', html)
        assert token and len(token.group(1)) >= 32, path
        assert "dashboard/api.js" in html, path

"""Secrets never reach an operator page (RTR-7, KEY-2): not the key plaintext,
not its SHA-256, not a backend's upstream key (literal or interpolated), not
a literal secret in the YAML document."""

from __future__ import annotations

import pytest

from dashboard import mirror as dashboard_mirror
from keys.keyring import hash_key
from router.models import Backend

from .conftest import COORD_SECRET, ENV_SECRET, JWT_SECRET, PAGES, UPSTREAM_SECRET

pytestmark = pytest.mark.django_db


def _admin_pages(mirror) -> list[str]:
    by_name = {b.name: b.pk for b in Backend.objects.all()}
    key = mirror["key"]
    return [
        "/admin/",
        "/admin/router/backend/",
        "/admin/router/backend/add/",
        *[f"/admin/router/backend/{pk}/change/" for pk in by_name.values()],
        f"/admin/router/backend/{by_name['cloud-c']}/delete/",
        "/admin/router/routingrevision/",
        "/admin/router/routingrevision/1/change/",
        "/admin/router/configdocument/",
        "/admin/router/configdocument/1/change/",
        "/admin/keys/apikey/",
        f"/admin/keys/apikey/{key.pk}/change/",
    ]


RAW_SECRET = "raw-SECRET-in-a-coordinator-payload"


def test_no_page_shows_a_secret(superuser, mirror, observations, live_runtime):
    observations({"model": "chat", "provider": "cloud-c", "status": 200, "key": "team-a"})
    circuit_model = dashboard_mirror.model("Circuit")
    if circuit_model is not None:
        circuit_model.objects.create(circuit_id="c-9", subdomain="s", model="chat", raw={"token": RAW_SECRET})
    key = mirror["key"]
    secrets = {
        "key plaintext": mirror["plaintext"],
        "key hash": key.key_hash,
        "revoked key hash": mirror["revoked"].key_hash,
        "upstream key": UPSTREAM_SECRET,
        "interpolated upstream key": ENV_SECRET,
        "yaml literal secret": JWT_SECRET,
        "interpolated coordinator token": COORD_SECRET,
        "coordinator raw payload": RAW_SECRET,
    }
    assert hash_key(mirror["plaintext"]) == key.key_hash
    checked = []
    for served_by in ("db", "live"):
        if served_by == "live":
            live_runtime()  # the snapshot holds the resolved secrets in memory
        for url in [*PAGES, "/dashboard/live.json", *_admin_pages(mirror)]:
            resp = superuser.get(url)
            assert resp.status_code == 200, url
            body = resp.content.decode()
            for what, secret in secrets.items():
                assert secret not in body, f"{what} appears on {url}"
            checked.append(url)
    assert len(checked) > 20


def test_the_config_document_masks_literal_secrets_but_names_variables(superuser, mirror):
    page = superuser.get("/admin/router/configdocument/1/change/").content.decode()
    assert JWT_SECRET not in page
    assert "***" in page and "${COORD_TOKEN}" in page and "least_latency" in page


def test_the_key_hint_is_shown_where_the_key_is(superuser, mirror):
    hint = mirror["key"].hint
    assert hint in superuser.get("/dashboard/keys/").content.decode()
    assert hint in superuser.get("/admin/keys/apikey/").content.decode()

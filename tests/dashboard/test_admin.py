"""Django admin for backends and the routing mirror (OPS-2): admin rows are
editable and every write bumps the revision; config/appproxy rows are
view-only; the upstream api key is write-only."""

from __future__ import annotations

import pytest

from router.admin import redacted
from router.models import Backend, Source
from router.revision import current_revision

from .conftest import UPSTREAM_SECRET

pytestmark = pytest.mark.django_db

URL = "/admin/router/backend/"


def _form(**overrides) -> dict:
    data = {
        "name": "edge-1",
        "url": "http://10.1.0.1:8000/",
        "kind": "vllm",
        "models": "chat\nchat-alias, chat",
        "served_model": "",
        "weight": "250",
        "capacity": "16",
        "priority": "0",
        "api_key": "",
        "connect_timeout": "5.0",
        "read_timeout": "600.0",
    }
    data.update(overrides)
    return data


def test_adding_a_backend_creates_an_admin_row_and_bumps_the_revision(superuser):
    before = current_revision()
    resp = superuser.post(URL + "add/", _form(api_key=UPSTREAM_SECRET), follow=True)
    assert resp.status_code == 200
    assert UPSTREAM_SECRET not in resp.content.decode()
    row = Backend.objects.get(name="edge-1")
    assert row.source == Source.ADMIN
    assert row.url == "http://10.1.0.1:8000"
    assert row.models == ["chat", "chat-alias"]
    assert (row.weight, row.capacity, row.kind) == (250, 16, "vllm")
    assert row.api_key == UPSTREAM_SECRET
    assert current_revision() == before + 1


def test_the_add_form_cannot_claim_another_source(superuser):
    superuser.post(URL + "add/", _form(source="config"))
    assert Backend.objects.get(name="edge-1").source == Source.ADMIN


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("url", "10.1.0.1:8000", "http:// or https://"),
        ("models", " , ", "at least one model"),
        ("weight", "0", "between 1 and 1000"),
        ("weight", "1001", "between 1 and 1000"),
        ("capacity", "0", "at least 1"),
        ("kind", "carrier-pigeon", "Select a valid choice"),
        ("api_key", "${DASH_TEST_SURELY_UNSET}", "DASH_TEST_SURELY_UNSET is not set"),
    ],
)
def test_invalid_backends_are_rejected_without_a_write(superuser, field, value, message):
    before = current_revision()
    resp = superuser.post(URL + "add/", _form(**{field: value}))
    assert resp.status_code == 200
    assert message in resp.content.decode()
    assert not Backend.objects.exists()
    assert current_revision() == before


def test_a_name_owned_by_the_config_file_cannot_be_taken(superuser, mirror):
    resp = superuser.post(URL + "add/", _form(name="vllm-a"))
    assert resp.status_code == 200 and "already exists" in resp.content.decode()
    assert Backend.objects.get(name="vllm-a").source == Source.CONFIG


def test_editing_keeps_the_key_when_left_blank_and_bumps_the_revision(superuser, mirror):
    row = Backend.objects.get(name="cloud-c")
    page = superuser.get(f"{URL}{row.pk}/change/").content.decode()
    assert UPSTREAM_SECRET not in page
    assert 'type="password"' in page and "A key is stored" in page
    before = current_revision()
    resp = superuser.post(
        f"{URL}{row.pk}/change/", _form(name="cloud-c", url="https://api.example.com", kind="openai_api", weight="7")
    )
    assert resp.status_code == 302
    row.refresh_from_db()
    assert row.weight == 7 and row.api_key == UPSTREAM_SECRET and row.source == Source.ADMIN
    assert current_revision() == before + 1


def test_editing_can_replace_or_remove_the_key(superuser, mirror):
    row = Backend.objects.get(name="cloud-c")
    change = f"{URL}{row.pk}/change/"
    base = {"name": "cloud-c", "url": "https://api.example.com", "kind": "openai_api"}
    superuser.post(change, _form(**base, api_key="${DASH_TEST_UPSTREAM}"))
    row.refresh_from_db()
    assert row.api_key == "${DASH_TEST_UPSTREAM}"
    superuser.post(change, _form(**base, clear_api_key="on"))
    row.refresh_from_db()
    assert row.api_key == ""


def test_deleting_an_admin_backend_bumps_the_revision(superuser, mirror):
    row = Backend.objects.get(name="cloud-c")
    before = current_revision()
    resp = superuser.post(f"{URL}{row.pk}/delete/", {"post": "yes"})
    assert resp.status_code == 302
    assert not Backend.objects.filter(name="cloud-c").exists()
    assert current_revision() == before + 1


@pytest.mark.parametrize(
    ("name", "owner"), [("vllm-a", "YAML config file"), ("appproxy-c1-r1", "AppProxy coordinator")]
)
def test_config_and_appproxy_rows_are_view_only_and_say_why(superuser, mirror, name, owner):
    row = Backend.objects.get(name=name)
    before = (current_revision(), row.weight, row.url)
    page = superuser.get(f"{URL}{row.pk}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    assert owner in html
    assert 'name="_save"' not in html and 'name="url"' not in html and 'name="api_key"' not in html
    if name == "vllm-a":
        assert "/etc/router/router.yaml" in html and "${DASH_TEST_UPSTREAM}" not in html

    assert superuser.post(f"{URL}{row.pk}/change/", _form(name=name, weight="1")).status_code == 403
    assert superuser.post(f"{URL}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert (current_revision(), row.weight, row.url) == before


def test_bulk_delete_never_removes_rows_of_other_sources(superuser, mirror):
    ids = [str(pk) for pk in Backend.objects.values_list("pk", flat=True)]
    resp = superuser.post(URL, {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    # Django's delete_selected refuses outright when any selected row may not be deleted.
    assert resp.status_code == 403
    assert set(Backend.objects.values_list("name", flat=True)) >= {"vllm-a", "ollama-b", "appproxy-c1-r1"}


def test_bulk_delete_of_admin_rows_bumps_once(superuser, mirror):
    second = Backend.objects.create(name="cloud-d", source=Source.ADMIN, url="https://b.example.com", models=["x"])
    ids = [str(second.pk), str(Backend.objects.get(name="cloud-c").pk)]
    before = current_revision()
    resp = superuser.post(URL, {"action": "delete_selected", "_selected_action": ids, "post": "yes"})
    assert resp.status_code == 302
    assert not Backend.objects.filter(source=Source.ADMIN).exists()
    assert current_revision() == before + 1


def test_the_changelist_shows_whether_a_key_is_set_never_the_key(superuser, mirror):
    page = superuser.get(URL).content.decode()
    assert "upstream key" in page.lower()
    assert UPSTREAM_SECRET not in page and "${DASH_TEST_UPSTREAM}" not in page


@pytest.mark.parametrize("model", ["routingrevision", "configdocument"])
def test_revision_and_config_document_are_read_only(superuser, mirror, model):
    base = f"/admin/router/{model}/"
    assert superuser.get(base).status_code == 200
    assert superuser.get(base + "1/change/").status_code == 200
    assert superuser.get(base + "add/").status_code == 403
    assert superuser.post(base + "1/change/", {}).status_code == 403
    assert superuser.post(base + "1/delete/", {"post": "yes"}).status_code == 403


def test_redaction_masks_secret_looking_keys_at_any_depth():
    doc = {
        "appproxy": {"jwt_secret": "s1", "auth_token": "${TOKEN}", "api_port": 8080},
        "list": [{"password": "p"}, {"name": "ok"}],
        "backends_api_key": "",
    }
    assert redacted(doc) == {
        "appproxy": {"jwt_secret": "***", "auth_token": "${TOKEN}", "api_port": 8080},
        "list": [{"password": "***"}, {"name": "ok"}],
        "backends_api_key": "",
    }

"""A secret in a backend URL is neither stored nor shown (issue 12 #9).

`url: http://user:${VAR}@host` keeps its template in the DB (as `api_key`
does) and is resolved only when the snapshot is compiled; every page that
shows a URL — dashboard, live.json, admin, /status — and every repr masks the
userinfo.
"""

from __future__ import annotations

import hashlib
import logging

import pytest

from router.models import Backend, ConfigDocument, Source
from router.selectors import compile_snapshot
from router.services import config_sync

from .conftest import PAGES

pytestmark = pytest.mark.django_db

URL_SECRET = "url-PASSWORD-SECRET-42"
USER = "urluser"
TEMPLATE = f"http://{USER}:${{URL_SECRET_VAR}}@127.0.0.1:9/v1"
LITERAL = "adm-LITERAL-PASSWORD-7"


@pytest.fixture
def url_backend(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("URL_SECRET_VAR", URL_SECRET)
    path = tmp_path / "router.yaml"
    path.write_text(f"backends:\n  - {{name: creds, url: '{TEMPLATE}', models: [m]}}\n")
    caplog.set_level(logging.DEBUG)
    assert config_sync(path)
    Backend.objects.create(
        name="adm-creds", source=Source.ADMIN, url=f"http://adm:{LITERAL}@10.0.0.3:8000", models=["m"]
    )
    return path


def test_the_db_keeps_the_template_and_the_snapshot_resolves_it(url_backend, caplog):
    row = Backend.objects.get(name="creds")
    assert row.url == TEMPLATE.rstrip("/")
    spec = compile_snapshot().backends["creds"]
    assert spec.url == f"http://{USER}:{URL_SECRET}@127.0.0.1:9/v1"
    for shown in (repr(spec), str(spec), repr(row), caplog.text):
        assert URL_SECRET not in shown and LITERAL not in shown


def test_no_page_shows_the_url_userinfo(superuser, url_backend, live_runtime):
    pks = dict(Backend.objects.values_list("name", "pk"))
    pages = [
        *PAGES,
        "/dashboard/live.json",
        "/status",
        "/admin/router/backend/",
        *[f"/admin/router/backend/{pk}/change/" for pk in pks.values()],
    ]
    for served_by in ("db", "live"):
        if served_by == "live":
            live_runtime()  # the live snapshot holds the resolved URL
        for url in pages:
            resp = superuser.get(url)
            assert resp.status_code == 200, url
            body = resp.content.decode()
            for secret in (URL_SECRET, LITERAL, USER, "adm:"):
                assert secret not in body, f"{secret} on {url} ({served_by})"
    backends = superuser.get("/dashboard/backends/").content.decode()
    assert "http://***@127.0.0.1:9/v1" in backends and "http://***@10.0.0.3:8000" in backends
    assert "http://***@127.0.0.1:9/v1" in superuser.get("/dashboard/live.json").content.decode()


def test_an_admin_edit_that_keeps_the_masked_userinfo_keeps_the_password(superuser, url_backend):
    row = Backend.objects.get(name="adm-creds")
    form = {
        "name": row.name,
        "url": "http://***@10.0.0.4:8000",  # as shown, with a new host
        "kind": row.kind,
        "models": "m",
        "served_model": "",
        "weight": "100",
        "capacity": "",
        "priority": "0",
        "api_key": "",
        "connect_timeout": "5.0",
        "read_timeout": "600.0",
        "_save": "Save",
    }
    resp = superuser.post(f"/admin/router/backend/{row.pk}/change/", form)
    assert resp.status_code == 302, resp.content.decode()[:2000]
    row.refresh_from_db()
    assert row.url == f"http://adm:{LITERAL}@10.0.0.4:8000"


def test_a_mirror_written_before_templates_is_rewritten_once(tmp_path, monkeypatch):
    """A DB synced by an older node (same file digest, URL stored resolved)
    re-applies the file once, which replaces the resolved URL by its template."""
    monkeypatch.setenv("URL_SECRET_VAR", URL_SECRET)
    path = tmp_path / "router.yaml"
    path.write_bytes(f"backends:\n  - {{name: creds, url: '{TEMPLATE}', models: [m]}}\n".encode())
    ConfigDocument.objects.create(pk=1, path=str(path), digest=hashlib.sha256(path.read_bytes()).hexdigest())
    Backend.objects.create(name="creds", source=Source.CONFIG, url=f"http://{USER}:{URL_SECRET}@127.0.0.1:9/v1")
    assert config_sync(path) is True
    assert Backend.objects.get(name="creds").url == TEMPLATE
    assert config_sync(path) is False

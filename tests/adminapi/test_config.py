"""`/api/v1/config` (Django test client, real DB, real Redis, a real YAML
file): the document masked, writes that go through the file and the one
apply path, dry runs that change nothing, If-Match, versions, diffs,
rollback and the version cap."""

from __future__ import annotations

import pytest
import yaml

from adminapi.models import AuditEntry
from router.models import Backend, ConfigVersion, Source
from router.revision import current_revision
from router.services import config_sync

from .conftest import BASE, assert_error

pytestmark = pytest.mark.django_db

def _yaml(api, path="/config", **headers):
    return api("GET", path, HTTP_ACCEPT="application/yaml", **headers)


def test_get_masks_secrets_in_json_and_yaml(api, config_file):
    r = api("GET", "/config")
    assert r.status_code == 200 and r["ETag"] == '"1"'
    body = r.json()
    assert body["version"] == 1 and body["path"] == str(config_file)
    a, b = body["document"]["backends"]
    assert a["api_key"] == "***" and a["url"] == "http://***@127.0.0.1:9/v1"
    assert b["api_key"] == "${B_KEY}"
    as_yaml = _yaml(api)
    assert as_yaml["Content-Type"].startswith("application/yaml") and as_yaml["ETag"] == '"1"'
    assert yaml.safe_load(as_yaml.content)["backends"][0]["api_key"] == "***"
    for answer in (r, as_yaml):
        assert b"hunter2" not in answer.content and b"sk-literal-secret" not in answer.content
        assert b"sk-from-env" not in answer.content


def test_the_yaml_answer_keeps_the_files_comments_and_a_put_of_it_keeps_them_and_the_secrets(api, config_file):
    """GET as YAML → edit → PUT (what the dashboard's editor does): the file
    keeps its comments and layout, and every masked secret its value."""
    shown = _yaml(api).content.decode()
    assert shown.startswith("# the team's router\n") and "api_key: '***'" in shown
    assert "{name: b, url: 'http://127.0.0.1:9', models: [m1], api_key: '${B_KEY}'}" in shown
    edited = shown.replace("models: [m1]\n", "models: [m1, m2]  # m2 for the trial\n", 1)
    r = api("PUT", "/config", edited, HTTP_IF_MATCH='"1"')
    assert r.status_code == 200, r.content
    written = config_file.read_text()
    assert written == BASE.replace("models: [m1]\n", "models: [m1, m2]  # m2 for the trial\n", 1).replace(
        "api_key: sk-literal-secret", "api_key: 'sk-literal-secret'").replace(
        "url: http://user:hunter2@127.0.0.1:9/v1", "url: 'http://user:hunter2@127.0.0.1:9/v1'")
    assert Backend.objects.get(name="a", source=Source.CONFIG).models == ["m1", "m2"]


def test_a_put_writes_the_file_and_applies_it_as_a_new_version(api, config_file):
    before = current_revision()
    text = BASE.replace("models: [m1]\n    api_key", "models: [m1, m2]\n    api_key")
    r = api("PUT", "/config", text, HTTP_IF_MATCH='"1"')
    assert r.status_code == 200, r.content
    assert r.json()["version"] == 2 and r.json()["changed"] is True and "+  - m2" in r.json()["diff"]
    assert config_file.read_text() == text  # as written, comments and all
    assert Backend.objects.get(name="a", source=Source.CONFIG).models == ["m1", "m2"]
    assert current_revision() > before
    v = ConfigVersion.objects.get(number=2)
    assert (v.source, v.actor) == ("api", "token:ops")
    entry = AuditEntry.objects.get(action="config.put")
    assert entry.detail == {"from_version": 1, "to_version": 2} and entry.after == v.digest
    assert not config_sync(config_file)  # the file watch finds these bytes applied: no second version
    assert ConfigVersion.objects.count() == 2


def test_a_dry_run_reports_every_error_with_its_path_and_changes_nothing(api, config_file):
    before = (current_revision(), ConfigVersion.objects.count(), config_file.read_bytes())
    bad = BASE.replace("health: {enabled: false}", "health: {enabled: false, intervall: 3}\nretry: {attempts: -1}")
    r = api("PUT", "/config?dry_run=true", bad)
    err = assert_error(r, 400, "invalid_config")
    paths = {e["path"] for e in err["errors"]}
    assert "health.intervall" in paths and any(p and p.startswith("retry") for p in paths), err
    assert (current_revision(), ConfigVersion.objects.count(), config_file.read_bytes()) == before
    good = api("PUT", "/config?dry_run=true", BASE.replace("m1]", "m9]", 1))
    assert good.status_code == 200 and good.json()["dry_run"] is True and good.json()["changed"] is True
    assert (current_revision(), ConfigVersion.objects.count(), config_file.read_bytes()) == before
    assert not AuditEntry.objects.exists()


def test_an_invalid_write_is_refused_and_the_file_is_untouched(api, config_file):
    r = api("PUT", "/config", "backends: [{name: a}]\n")
    err = assert_error(r, 400, "invalid_config")
    assert err["param"].startswith("backends[0]")
    assert config_file.read_text() == BASE and ConfigVersion.objects.count() == 1
    assert_error(api("PUT", "/config", "a: [\n"), 400, "invalid_config")
    assert_error(api("PUT", "/config", b"x", content_type="text/plain"), 400, "invalid_request")


def test_a_stale_if_match_is_409_with_the_current_version(api, config_file):
    assert api("PUT", "/config", BASE + "stream_usage: false\n", HTTP_IF_MATCH='"1"').status_code == 200
    r = api("PUT", "/config", BASE + "stream_usage: true\n", HTTP_IF_MATCH='"1"')
    err = assert_error(r, 409, "version_conflict")
    assert err["current_version"] == 2
    assert "stream_usage: false" in config_file.read_text()
    stale_patch = api("PATCH", "/config", {"stream_usage": True}, HTTP_IF_MATCH='"1"')
    assert assert_error(stale_patch, 409, "version_conflict")["current_version"] == 2
    assert_error(api("PUT", "/config", BASE, HTTP_IF_MATCH="nope"), 400, "invalid_request")


def test_a_masked_document_sent_back_keeps_its_secrets(api, config_file):
    doc = api("GET", "/config").json()["document"]
    doc["backends"][0]["models"] = ["m1", "m3"]
    r = api("PUT", "/config", doc)
    assert r.status_code == 200, r.content
    written = yaml.safe_load(config_file.read_text())
    assert written["backends"][0]["api_key"] == "sk-literal-secret"
    assert written["backends"][0]["url"] == "http://user:hunter2@127.0.0.1:9/v1"
    assert written["backends"][1]["api_key"] == "${B_KEY}"
    assert written["backends"][0]["models"] == ["m1", "m3"]


def test_patch_is_a_json_merge_patch(api, config_file):
    r = api("PATCH", "/config", {"health": None, "retry": {"max_attempts": 2}})
    assert r.status_code == 200, r.content
    written = yaml.safe_load(config_file.read_text())
    assert "health" not in written and written["retry"] == {"max_attempts": 2}
    assert written["backends"][0]["api_key"] == "sk-literal-secret"
    assert_error(api("PATCH", "/config", {"retry": {"max_attempts": "many"}}), 400, "invalid_config")


def test_versions_diff_and_rollback(api, config_file):
    api("PATCH", "/config", {"backends": [{"name": "c", "url": "http://127.0.0.1:9", "models": ["m2"]}]})
    assert set(Backend.objects.filter(source=Source.CONFIG).values_list("name", flat=True)) == {"c"}
    listing = api("GET", "/config/versions").json()
    assert [(v["number"], v["source"], v["current"]) for v in listing["data"]] == [(2, "api", True), (1, "file", False)]
    one = api("GET", "/config/versions/1").json()
    assert one["document"]["backends"][0]["api_key"] == "***"
    diff = api("GET", "/config/versions/1/diff/2").json()["diff"]
    assert "-- name: a\n" in diff and "+- name: c\n" in diff and diff.startswith("--- version 1\n+++ version 2\n")
    assert "hunter2" not in diff and "sk-literal-secret" not in diff
    dry = api("POST", "/config/versions/1/rollback?dry_run=true")
    assert dry.status_code == 200 and ConfigVersion.objects.count() == 2
    r = api("POST", "/config/versions/1/rollback", HTTP_IF_MATCH='"2"')
    assert r.status_code == 200, r.content
    assert r.json()["version"] == 3
    v3 = ConfigVersion.objects.get(number=3)
    assert v3.text == BASE and v3.note == "rollback to version 1" and config_file.read_text() == BASE
    assert set(Backend.objects.filter(source=Source.CONFIG).values_list("name", flat=True)) == {"a", "b"}
    assert AuditEntry.objects.filter(action="config.rollback").count() == 1
    assert_error(api("GET", "/config/versions/99"), 404, "not_found")


def test_a_hand_edit_of_the_file_is_a_version_from_the_file(api, config_file):
    config_file.write_text(BASE + "stream_usage: false\n")
    assert config_sync(config_file, incremental=True)  # what the tasks process's file watch runs
    top = api("GET", "/config/versions").json()["data"][0]
    assert (top["number"], top["source"], top["actor"]) == (2, "file", "")


def test_only_the_newest_versions_are_kept(api, config_file, settings):
    settings.ROUTER_CONFIG_VERSIONS = 3
    for i in range(5):
        assert api("PATCH", "/config", {"retry": {"max_attempts": i + 1}}).status_code == 200
    assert list(ConfigVersion.objects.values_list("number", flat=True)) == [6, 5, 4]
    assert api("GET", "/config").json()["version"] == 6


def test_an_unchanged_text_is_not_a_new_version(api, config_file):
    r = api("PUT", "/config", BASE)
    assert r.status_code == 200 and r.json() | {"diff": ""} == {"dry_run": False, "changed": False, "version": 1,
                                                                 "diff": ""}  # fmt: skip
    assert ConfigVersion.objects.count() == 1 and not AuditEntry.objects.exists()


def test_read_only_tokens_cannot_write_the_config(ro_api, config_file):
    assert ro_api("GET", "/config").status_code == 200
    assert_error(ro_api("PUT", "/config", BASE), 403, "read_only_token")
    assert_error(ro_api("POST", "/config/versions/1/rollback"), 403, "read_only_token")


def test_the_demo_config_is_not_written(api, settings):
    settings.ROUTER_CONFIG = ""
    settings.BASE_DIR = "/nonexistent-dir-for-test"
    assert_error(api("PUT", "/config", "backends: []\n"), 409, "config_not_writable")


def test_backends_before_a_ready_snapshot_come_from_the_mirror_with_secrets_masked(api, config_file):
    listing = api("GET", "/backends?source=config").json()
    assert [b["name"] for b in listing["data"]] == ["a", "b"] and listing["total"] == 2
    assert listing["data"][0]["url"] == "http://***@127.0.0.1:9/v1"
    assert b"hunter2" not in api("GET", "/backends").content
    paged = api("GET", "/backends?limit=1&offset=1").json()
    assert [b["name"] for b in paged["data"]] == ["b"] and paged["total"] == 2


def test_a_staff_session_s_write_is_a_dashboard_version(config_file):
    """The dashboard's pages call this API with the staff session: their
    versions say so (source dashboard, actor user:<name>)."""
    from django.contrib.auth.models import User
    from django.http import HttpRequest
    from django.middleware.csrf import get_token
    from django.test import Client

    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_user("op", password="pw", is_staff=True))
    token = get_token(HttpRequest())
    client.cookies["csrftoken"] = token
    text = BASE.replace("models: [m1]\n    api_key", "models: [m1, m3]\n    api_key")
    r = client.put(
        "/api/v1/config", text, content_type="application/yaml", HTTP_IF_MATCH='"1"', HTTP_X_CSRFTOKEN=token
    )
    assert r.status_code == 200, r.content
    v = ConfigVersion.objects.get(number=2)
    assert (v.source, v.actor) == ("dashboard", "user:op")

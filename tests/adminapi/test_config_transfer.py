"""`/api/v1/config/export` and `/import` (Django test client, real DB, real
Redis, a real YAML file): the export masks every secret and carries keys as
metadata only; an import is a PUT of the export's document (a new version,
dry run, If-Match, audit), masked values standing for the current ones."""

from __future__ import annotations

import orjson
import pytest

from adminapi.models import AuditEntry
from keys.models import ApiKey
from keys.services import key_create, key_revoke
from router.models import Backend, ConfigVersion
from router.revision import current_revision

from .conftest import assert_error

pytestmark = pytest.mark.django_db

SECRETS = (b"hunter2", b"sk-literal-secret", b"sk-from-env")


def test_the_export_masks_secrets_and_carries_key_metadata_only(api, config_file):
    kept, plaintext = key_create(name="team-a", allowed_models=["m1"])
    gone, gone_plaintext = key_create(name="retired")
    key_revoke(gone)
    Backend.objects.filter(name="b").update(drained=True)
    r = api("GET", "/config/export")
    assert r.status_code == 200, r.content
    body = r.json()
    assert body["format"] == "llm-router-export/1" and body["config"]["version"] == 1
    a, b = body["config"]["document"]["backends"]
    assert a["api_key"] == "***" and a["url"] == "http://***@127.0.0.1:9/v1" and b["api_key"] == "${B_KEY}"
    assert [(k["name"], k["allowed_models"], k["hint"]) for k in body["keys"]] == [
        ("team-a", ["m1"], kept.display_hint)]
    assert body["drained"] == ["b"]
    for secret in (*SECRETS, plaintext.encode(), gone_plaintext.encode(), kept.key_hash.encode()):
        assert secret not in r.content
    assert api("GET", "/config/export?keys=false").json()["keys"] is None


def test_an_export_imported_back_is_a_new_version_with_its_secrets(api, config_file):
    key_create(name="team-a")  # listed in the export; an import reports it, never applies it
    export = api("GET", "/config/export").json()
    export["config"]["document"]["backends"][0]["models"] = ["m1", "m2"]
    before = (current_revision(), config_file.read_bytes())
    dry = api("POST", "/config/import?dry_run=true", export)
    assert dry.status_code == 200, dry.content
    assert dry.json()["dry_run"] is True and dry.json()["changed"] is True and "+  - m2" in dry.json()["diff"]
    assert (current_revision(), config_file.read_bytes()) == before and ConfigVersion.objects.count() == 1
    r = api("POST", "/config/import", export, HTTP_IF_MATCH='"1"')
    assert r.status_code == 200, r.content
    assert r.json()["version"] == 2 and r.json()["ignored"] == ["keys"]
    text = config_file.read_text()
    assert "hunter2" in text and "sk-literal-secret" in text and "${B_KEY}" in text  # the masks stood for them
    assert Backend.objects.get(name="a").models == ["m1", "m2"]
    v = ConfigVersion.objects.get(number=2)
    assert (v.source, v.actor, v.note) == ("api", "token:ops", "import")
    entry = AuditEntry.objects.get(action="config.import")
    assert entry.detail == {"from_version": 1, "to_version": 2, "note": "import"}
    assert api("POST", "/config/import", export).json()["changed"] is False  # the same again: no version
    assert ConfigVersion.objects.count() == 2 and ApiKey.objects.count() == 1


def test_import_refusals(api, ro_api, config_file):
    export = api("GET", "/config/export").json()
    foreign = orjson.loads(orjson.dumps(export))
    foreign["config"]["document"]["backends"].append(
        {"name": "c", "url": "http://127.0.0.1:9", "models": ["m1"], "api_key": "***"})
    err = assert_error(api("POST", "/config/import", foreign), 400, "invalid_config")
    assert err["param"] == "backends[2].api_key"
    assert_error(api("POST", "/config/import", {**export, "format": "other/2"}), 400, "invalid_request")
    assert_error(api("POST", "/config/import", {"config": {"version": 1}}), 400, "invalid_request")
    assert_error(api("POST", "/config/import", {"keys": []}), 400, "invalid_request")
    assert_error(api("POST", "/config/import", b"backends: []", content_type="application/yaml"), 400,
                 "invalid_request")
    bad = orjson.loads(orjson.dumps(export))
    bad["config"]["document"]["retry"] = {"max_attempts": -1}
    assert_error(api("POST", "/config/import", bad), 400, "invalid_config")
    api("PATCH", "/config", {"stream_usage": False})
    assert assert_error(api("POST", "/config/import", export, HTTP_IF_MATCH='"1"'), 409,
                        "version_conflict")["current_version"] == 2
    assert_error(ro_api("POST", "/config/import", export), 403, "read_only_token")
    assert ro_api("GET", "/config/export").status_code == 200
    assert ConfigVersion.objects.count() == 2 and not AuditEntry.objects.filter(action="config.import").exists()

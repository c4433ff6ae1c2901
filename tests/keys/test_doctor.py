"""`manage.py doctor`, the keys check: in blocking mode a usable key must exist."""

from __future__ import annotations

import io
import uuid

import orjson
import pytest
from django.core.management import call_command

from keys.services import key_create, key_revoke

pytestmark = pytest.mark.django_db


@pytest.fixture
def config(settings, tmp_path):
    settings.ROUTER_REDIS_PREFIX = f"test:doctor:{uuid.uuid4().hex}:"
    settings.ROUTER_CONFIG = str(tmp_path / "router.yaml")
    return tmp_path / "router.yaml"


def keys_check() -> dict:
    out = io.StringIO()
    try:
        call_command("doctor", "--json", "--no-probe", stdout=out)
    except SystemExit:
        pass
    return next(c for c in orjson.loads(out.getvalue())["checks"] if c["name"] == "keys")


def test_open_mode_is_ok(config):
    config.write_text("backends: []\n")
    assert keys_check()["status"] == "OK"


def test_blocking_mode_needs_a_usable_key(config):
    """No key, or only a revoked one: WARN naming createapikey; an active key: OK."""
    config.write_text("backends: []\napi_keys: {mode: blocking}\n")
    check = keys_check()
    assert check["status"] == "WARN" and "createapikey" in check["fix"]

    key, _plain = key_create(name="gone")
    key_revoke(key)
    assert keys_check()["status"] == "WARN"

    key_create(name="team-a")
    assert keys_check() == {"name": "keys", "status": "OK", "found": "blocking mode, 1 usable key(s)", "fix": ""}

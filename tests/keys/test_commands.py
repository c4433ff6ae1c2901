"""createapikey / revokeapikey / listapikeys: the key only once, last line."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.services import key_create

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue() + err.getvalue()


def _coordinator_row(key_id: str, token: str) -> ApiKey:
    return ApiKey.objects.create(
        source=KeySource.COORDINATOR, key_id=key_id, name=key_id, key_hash=hash_key(token)
    )


def test_createapikey_prints_the_key_as_the_last_line_only():
    out = run(
        "createapikey",
        "--name",
        "ci",
        "--owner",
        "team",
        "--models",
        "a,b",
        "--rate-limit",
        "60",
        "--expires",
        "2099-01-01T00:00:00Z",
        "--ips",
        "10.0.0.0/8,::1",
    )
    lines = out.rstrip("\n").splitlines()
    plain = lines[-1]
    key = ApiKey.objects.get()
    assert plain.startswith("sk-") and hash_key(plain) == key.key_hash
    body = "\n".join(lines[:-1])
    assert plain not in body and plain[3:20] not in body
    assert key.key_hash not in out
    for shown in ("ci", "team", "a, b", "60/min", "2099-01-01", "10.0.0.0/8", key.hint):
        assert shown in body
    assert key.allowed_models == ["a", "b"] and key.rate_limit == 60
    assert key.allowed_client_ips == ["10.0.0.0/8", "::1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--ips", "10.0.0.0/40"], "not an IP address or CIDR"),
        (["--expires", "next tuesday"], "ISO 8601"),
        (["--expires", "2001-01-01"], "in the past"),
        (["--rate-limit", "0"], "rate-limit"),
    ],
)
def test_createapikey_errors_are_clear(args, message):
    with pytest.raises(CommandError, match=message):
        run("createapikey", "--name", "x", *args)
    assert not ApiKey.objects.exists()


def test_revokeapikey_by_name_and_by_hint():
    _a, _ = key_create(name="a")
    b, _ = key_create(name="b")
    assert "Revoked" in run("revokeapikey", "--name", "a")
    assert "Revoked" in run("revokeapikey", "--hint", b.hint)
    assert ApiKey.objects.filter(revoked_at__isnull=True).count() == 0
    with pytest.raises(CommandError, match="no active operator key"):
        run("revokeapikey", "--name", "a")


def test_revokeapikey_refuses_ambiguous_names_and_coordinator_keys():
    key_create(name="dup")
    key_create(name="dup")
    with pytest.raises(CommandError, match="--hint"):
        run("revokeapikey", "--name", "dup")
    _coordinator_row("coord", "t")
    with pytest.raises(CommandError, match="no active operator key"):
        run("revokeapikey", "--name", "coord")


def test_listapikeys_is_masked():
    key, plain = key_create(name="listed", allowed_models=["m"])
    _coordinator_row("coord-1", "tok")
    out = run("listapikeys")
    assert "listed" in out and key.hint in out and "coord-1" in out
    assert plain not in out and key.key_hash not in out and hash_key("tok") not in out

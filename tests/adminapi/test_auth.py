"""Who may call the admin API: admin tokens (read-write, read-only, revoked),
staff sessions with CSRF, and the one error shape for every refusal."""

from __future__ import annotations

import hashlib
import io

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.http import HttpRequest
from django.middleware.csrf import get_token
from django.test import Client

from adminapi.errors import CATALOGUE
from adminapi.models import AdminToken
from adminapi.tokens import authenticate, token_create, token_revoke
from keys.models import ApiKey

from .conftest import Api, assert_error

pytestmark = pytest.mark.django_db


def test_no_token_is_401_json_with_a_bearer_challenge():
    r = Api()("GET", "/keys")
    err = assert_error(r, 401, "invalid_admin_token")
    assert err["type"] == "authentication_error"
    assert r["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("header", ["Bearer adm-wrong", "Bearer ", "Basic dXNlcjpwdw==", "Bearer sk-notadmin"])
def test_a_wrong_token_is_401(header):
    assert_error(Client().get("/api/v1/keys", HTTP_AUTHORIZATION=header), 401, "invalid_admin_token")


def test_a_revoked_token_is_401_at_once():
    token, plaintext = token_create(name="gone")
    assert Api(plaintext)("GET", "/keys").status_code == 200
    assert token_revoke(token) and not token_revoke(token)
    assert_error(Api(plaintext)("GET", "/keys"), 401, "invalid_admin_token")


def test_a_read_only_token_reads_but_is_403_on_every_mutation(ro_api):
    assert ro_api("GET", "/keys").status_code == 200
    assert_error(ro_api("POST", "/keys", {"name": "x"}), 403, "read_only_token")
    assert_error(ro_api("DELETE", "/keys/1"), 403, "read_only_token")
    assert_error(ro_api("PATCH", "/keys/1", {"enabled": False}), 403, "read_only_token")
    assert not ApiKey.objects.exists()


def test_tokens_are_stored_as_sha256_only():
    token, plaintext = token_create(name="ci")
    row = AdminToken.objects.filter(pk=token.pk).values().first()
    assert row["token_hash"] == hashlib.sha256(plaintext.encode()).hexdigest()
    assert plaintext not in " ".join(str(v) for v in row.values())
    assert plaintext not in repr(token) and plaintext[-4:] in token.hint
    assert authenticate(plaintext).pk == token.pk
    assert authenticate(plaintext + "x") is None


def test_createadmintoken_prints_the_token_once_as_the_last_line():
    out = io.StringIO()
    call_command("createadmintoken", "--name", "ci", "--read-only", stdout=out)
    lines = out.getvalue().strip().splitlines()
    plaintext = lines[-1]
    assert plaintext.startswith("adm-") and sum(plaintext in line for line in lines) == 1
    token = authenticate(plaintext)
    assert token is not None and token.read_only and token.name == "ci"
    listing = io.StringIO()
    call_command("listadmintokens", stdout=listing)
    assert "ci" in listing.getvalue() and token.hint in listing.getvalue()
    assert plaintext not in listing.getvalue() and token.token_hash not in listing.getvalue()
    call_command("revokeadmintoken", "--name", "ci", stdout=io.StringIO())
    assert authenticate(plaintext) is None


def _staff(is_staff: bool = True) -> Client:
    user = User.objects.create_user("op" if is_staff else "visitor", password="pw", is_staff=is_staff)
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client


def test_a_staff_session_reads_and_changes_only_with_the_csrf_token():
    client = _staff()
    assert client.get("/api/v1/keys").status_code == 200
    refused = client.post("/api/v1/keys", {"name": "x"}, content_type="application/json")
    assert_error(refused, 403, "csrf_failed")
    secret = get_token(HttpRequest())  # what a dashboard page hands the browser: a cookie and the token
    client.cookies["csrftoken"] = secret
    assert_error(
        client.post("/api/v1/keys", {"name": "x"}, content_type="application/json", HTTP_X_CSRFTOKEN="wrong" * 7),
        403, "csrf_failed",
    )  # fmt: skip
    made = client.post("/api/v1/keys", {"name": "x"}, content_type="application/json", HTTP_X_CSRFTOKEN=secret)
    assert made.status_code == 201, made.content
    from adminapi.models import AuditEntry

    assert AuditEntry.objects.get(action="key.create").actor == "user:op"


def test_a_session_that_is_not_staff_is_403():
    assert_error(_staff(is_staff=False).get("/api/v1/keys"), 403, "not_staff")


def test_the_schema_and_docs_are_for_staff_and_tokens_only(api):
    assert_error(Client().get("/api/v1/openapi.json"), 401, "invalid_admin_token")
    assert_error(Client().get("/api/v1/docs"), 401, "invalid_admin_token")
    schema = api("GET", "/openapi.json").json()
    assert "/api/v1/keys" in schema["paths"] and "/api/v1/keys/{key_id}/rotate" in schema["paths"]
    assert schema["components"]["securitySchemes"]["AdminAuth"]["scheme"] == "bearer"
    assert _staff().get("/api/v1/docs").status_code == 200


def test_unknown_paths_and_methods_answer_in_the_error_shape(api):
    assert_error(api("GET", "/nope"), 404, "not_found")
    assert_error(api("GET", "/"), 404, "not_found")
    r = api("PUT", "/keys", {})
    assert_error(r, 405, "method_not_allowed")
    assert "POST" in r["Allow"]


def test_a_body_that_fails_validation_is_400_naming_each_field(api):
    err = assert_error(api("POST", "/keys", {"name": "x", "rate_limit": 0, "bogus": 1}), 400, "invalid_request")
    assert err["param"] == "rate_limit"
    assert {e["param"] for e in err["errors"]} == {"rate_limit", "bogus"}


@pytest.mark.parametrize("cls", CATALOGUE, ids=lambda c: c.__name__)
def test_every_catalogued_error_renders_its_status_type_and_code(cls):
    r = cls(param="p").response()
    body = __import__("json").loads(r.content)["error"]
    assert r.status_code == cls.status
    assert body == {"message": cls.message, "type": cls.type, "param": "p", "code": cls.code}
    assert 400 <= cls.status <= 599 and cls.message

"""Per-circuit bearer tokens: HS256 with jwt_secret, exp, id == circuit id."""

from __future__ import annotations

import base64
import time
from datetime import UTC, datetime, timedelta

import jwt
import orjson
import pytest

from appproxy.legacy.jwtauth import verify_circuit_token
from router.core.errors import InvalidToken
from router.core.secret import Secret

SECRET = "jwt-secret-for-tests-" + "0123456789abcdef" * 3
OTHER_SECRET = "another-secret-" + "0123456789abcdef" * 4
CIRCUIT = "6a1f3c2e-8d4b-4f0a-9b7e-2c5d1e0f3a4b"


def token(
    *,
    secret: str = SECRET,
    algorithm: str = "HS256",
    exp: float | None = 3600,
    **claims: object,
) -> str:
    payload: dict = {"id": CIRCUIT, "user": "u-1", "app_url": "http://x/"}
    if exp is not None:
        payload["exp"] = int(time.time() + exp)
    payload.update(claims)
    return jwt.encode(payload, secret, algorithm=algorithm)


def b64(obj: object) -> str:
    return base64.urlsafe_b64encode(orjson.dumps(obj)).rstrip(b"=").decode()


def verify(header: str | None, **kw: object) -> dict:
    kw.setdefault("circuit_id", CIRCUIT)
    kw.setdefault("secret", SECRET)
    return verify_circuit_token(header, **kw)  # type: ignore[arg-type]


def fails(header: str | None, code: str, **kw: object) -> InvalidToken:
    with pytest.raises(InvalidToken) as info:
        verify(header, **kw)
    assert info.value.status == 401
    assert info.value.message.startswith(code), info.value.message
    return info.value


@pytest.mark.parametrize("scheme", ["Bearer", "BackendAI"])
def test_a_valid_token_passes_and_returns_its_claims(scheme: str) -> None:
    claims = verify(f"{scheme} {token()}")
    assert claims["id"] == CIRCUIT
    assert claims["user"] == "u-1"


def test_secret_object_and_uuid_circuit_id_are_accepted() -> None:
    import uuid

    verify(f"Bearer {token()}", secret=Secret(SECRET), circuit_id=uuid.UUID(CIRCUIT))


@pytest.mark.parametrize("header", [None, ""])
def test_missing_header_is_e20006(header: str | None) -> None:
    fails(header, "E20006")


@pytest.mark.parametrize(
    "header",
    ["bearer {t}", "Basic {t}", "{t}", "Token {t}", "Bearer", "Bearer   "],
)
def test_bad_scheme_is_e20007(header: str) -> None:
    fails(header.format(t=token()), "E20007")


def test_expired_token_is_e20008() -> None:
    fails(f"Bearer {token(exp=-10)}", "E20008")


def test_token_without_exp_is_rejected() -> None:
    fails(f"Bearer {token(exp=None)}", "E20008")


def test_wrong_secret_is_e20008() -> None:
    fails(f"Bearer {token(secret=OTHER_SECRET)}", "E20008")


def test_alg_none_is_rejected() -> None:
    unsigned = f"{b64({'alg': 'none', 'typ': 'JWT'})}.{b64({'id': CIRCUIT, 'exp': int(time.time()) + 600})}."
    fails(f"Bearer {unsigned}", "E20008")


@pytest.mark.parametrize("alg", ["HS384", "HS512"])
def test_other_hmac_algorithms_are_rejected(alg: str) -> None:
    fails(f"Bearer {token(algorithm=alg)}", "E20008")


def test_tampered_payload_is_rejected() -> None:
    head, _, sig = token().split(".")
    forged = b64({"id": CIRCUIT, "exp": int(time.time()) + 10**6, "admin": True})
    fails(f"Bearer {head}.{forged}.{sig}", "E20008")


def test_garbage_token_is_rejected() -> None:
    fails("Bearer not.a.jwt", "E20008")


def test_wrong_circuit_id_is_e20009() -> None:
    fails(f"Bearer {token(id='00000000-0000-4000-8000-000000000000')}", "E20009")
    fails(f"Bearer {token(id=None)}", "E20009")


def test_token_for_another_circuit_does_not_open_this_one() -> None:
    fails(f"Bearer {token()}", "E20009", circuit_id="00000000-0000-4000-8000-000000000001")


def test_not_yet_valid_token_is_rejected() -> None:
    fails(f"Bearer {token(nbf=int(time.time()) + 600)}", "E20008")


def test_non_numeric_exp_is_rejected() -> None:
    bad = jwt.encode({"id": CIRCUIT, "exp": "soon"}, SECRET)
    fails(f"Bearer {bad}", "E20008")


def test_the_clock_is_injectable() -> None:
    t = token(exp=60)
    verify(f"Bearer {t}")
    fails(f"Bearer {t}", "E20008", now=time.time() + 3600)
    fails(f"Bearer {t}", "E20008", now=datetime.now(UTC) + timedelta(hours=1))
    verify(f"Bearer {t}", now=time.time() + 3600, leeway=3600)


def test_empty_secret_fails_closed() -> None:
    forged = jwt.encode({"id": CIRCUIT, "exp": int(time.time()) + 60}, "x" * 32)
    fails(f"Bearer {forged}", "E20008", secret="")


def test_messages_never_contain_the_token_or_secret() -> None:
    t = token(secret=OTHER_SECRET)
    err = fails(f"Bearer {t}", "E20008")
    text = str(err) + repr(err) + err.to_body().decode()
    assert t not in text
    assert SECRET not in text

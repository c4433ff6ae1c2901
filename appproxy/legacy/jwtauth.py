"""Per-circuit bearer tokens for private inference circuits (reference §5.2).

Invariants:
- The token comes only from the ``Authorization`` header, scheme ``Bearer`` or
  ``BackendAI`` (case-sensitive, as the stock worker).
- The signature is always verified, HS256 only, with ``jwt_secret`` (never the
  api_secret): ``alg: none``, HS384/HS512 and asymmetric algorithms are
  rejected. No code path reads claims from an unverified token.
- ``exp`` is required and checked (the coordinator always mints one; a token
  without it would never expire). ``nbf``/``iat`` in the future are rejected.
- The ``id`` claim must equal the circuit id exactly.
- Every failure is ``router.core.errors.InvalidToken`` (401); the message
  starts with the AppProxy code (E20006 no header, E20007 bad scheme, E20008
  invalid token, E20009 id mismatch) and never contains the token or secret.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any
from uuid import UUID

import jwt

from router.core.errors import InvalidToken
from router.core.secret import Secret

__all__ = [
    "ALGORITHM",
    "E_BAD_SCHEME",
    "E_ID_MISMATCH",
    "E_INVALID",
    "E_NO_HEADER",
    "SCHEMES",
    "verify_circuit_token",
]

ALGORITHM = "HS256"
SCHEMES = ("Bearer", "BackendAI")

E_NO_HEADER = "E20006"
E_BAD_SCHEME = "E20007"
E_INVALID = "E20008"
E_ID_MISMATCH = "E20009"


def _fail(code: str, text: str) -> InvalidToken:
    return InvalidToken(f"{code}: {text}")


def _number(payload: dict[str, Any], claim: str) -> float | None:
    value = payload.get(claim)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(E_INVALID, f"Invalid token: the '{claim}' claim must be a number.")
    return float(value)


def _now(now: float | datetime | None) -> float:
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        return now.timestamp()
    return float(now)


def verify_circuit_token(
    authorization_header: str | None,
    *,
    circuit_id: str | UUID,
    secret: str | Secret,
    now: float | datetime | None = None,
    leeway: float = 0.0,
) -> dict[str, Any]:
    """Verify the header for ``circuit_id``; return the verified claims.

    Raises ``InvalidToken`` on any failure. ``now`` (epoch seconds or an aware
    datetime) is injectable for tests.
    """
    if not authorization_header:
        raise _fail(E_NO_HEADER, "Authorization header is missing.")
    scheme, _, token = authorization_header.strip().partition(" ")
    token = token.strip()
    if scheme not in SCHEMES or not token:
        raise _fail(E_BAD_SCHEME, "Unsupported authorization scheme; use 'Bearer <token>'.")
    key = secret.reveal() if isinstance(secret, Secret) else secret
    if not key:
        # Fail closed: an empty key would let anyone mint tokens.
        raise _fail(E_INVALID, "Invalid token.")
    try:
        payload = jwt.decode(
            token,
            key,
            algorithms=[ALGORITHM],
            # Time claims are checked below against the injectable clock;
            # the signature and every other default check stay on.
            options={"verify_exp": False, "verify_nbf": False, "verify_iat": False},
        )
    except jwt.PyJWTError as exc:
        raise _fail(E_INVALID, f"Invalid token ({type(exc).__name__}).") from None

    current = _now(now)
    exp = _number(payload, "exp")
    if exp is None:
        raise _fail(E_INVALID, "Invalid token: the 'exp' claim is required.")
    if exp <= current - leeway:
        raise _fail(E_INVALID, "Invalid token: the token has expired.")
    nbf = _number(payload, "nbf")
    if nbf is not None and nbf > current + leeway:
        raise _fail(E_INVALID, "Invalid token: the token is not yet valid.")
    iat = _number(payload, "iat")
    if iat is not None and iat > current + leeway:
        raise _fail(E_INVALID, "Invalid token: the token was issued in the future.")

    claimed = payload.get("id")
    if not isinstance(claimed, str) or claimed != str(circuit_id):
        raise _fail(E_ID_MISMATCH, "The token was not issued for this endpoint.")
    return payload

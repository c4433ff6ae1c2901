"""Who calls the admin API: a bearer admin token, or a staff session.

- `Authorization: Bearer adm-…` — a token from `manage.py createadmintoken`;
  a read-only token may only read (GET, HEAD).
- A staff session (the dashboard's own calls): a change needs Django's CSRF
  token, as a form post would.

A request with neither, or with a wrong or revoked token, is 401; no
fallback to the session once a bearer token was presented. The outcome is
an `Actor`, attached to the request for the views and the audit log.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.http import HttpRequest
from ninja.security import HttpBearer
from ninja.utils import check_csrf

from . import tokens
from .errors import CsrfFailed, NotStaff, ReadOnlyToken, Unauthenticated

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@dataclass(frozen=True, slots=True)
class Actor:
    name: str  # token:<name> | user:<username>
    read_only: bool = False


def _bearer(request: HttpRequest) -> str | None:
    header = request.headers.get("Authorization")
    if header is None:
        return None
    scheme, _, value = header.partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def identify(request: HttpRequest) -> Actor:
    """The caller, or an AdminApiError (401 / 403)."""
    presented = _bearer(request)
    if presented is not None:
        token = tokens.authenticate(presented) if presented else None
        if token is None:
            raise Unauthenticated("The admin token is missing, wrong or revoked.")
        actor = Actor(f"token:{token.name}", token.read_only)
        if actor.read_only and request.method not in SAFE_METHODS:
            raise ReadOnlyToken()
        return actor
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        raise Unauthenticated()
    if not (user.is_active and user.is_staff):
        raise NotStaff()
    if request.method not in SAFE_METHODS and check_csrf(request) is not None:
        raise CsrfFailed()
    return Actor(f"user:{user.get_username()}")


class AdminAuth(HttpBearer):
    """The ninja auth of every operation: the Actor, or a raise. A bearer
    scheme in the OpenAPI schema; a staff session is accepted as well."""

    def __call__(self, request: HttpRequest) -> Actor:
        return identify(request)

    def authenticate(self, request: HttpRequest, token: str) -> Actor:
        return identify(request)


def actor_of(request: HttpRequest) -> Actor:
    return request.auth  # type: ignore[attr-defined,no-any-return]

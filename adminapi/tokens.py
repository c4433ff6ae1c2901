"""Admin tokens: issue, authenticate, list, revoke (services and selectors).

A token is `adm-` + 43 url-safe characters (256 bits). The DB holds its
SHA-256 digest and a masked hint; a presented token is looked up by its
digest (which an attacker cannot steer byte by byte) and the match is then
confirmed with `hmac.compare_digest`, so no comparison leaks by its time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from .models import AdminToken

log = logging.getLogger(__name__)

PREFIX = "adm-"
# last_used_at is written at most this often per token: a script polling the
# API must not make every read a DB write.
_TOUCH_EVERY = timedelta(seconds=60)


def _digest(plaintext: str) -> str:
    return hashlib.sha256(plaintext.encode()).hexdigest()


def _hint(plaintext: str) -> str:
    return f"{PREFIX}…{plaintext[-4:]}"


def token_create(*, name: str, read_only: bool = False) -> tuple[AdminToken, str]:
    """Issue a token. Returns the row and the plaintext (shown once)."""
    name = (name or "").strip()
    if not name or len(name) > 200:
        raise ValueError("name: a token needs a name of at most 200 characters")
    plaintext = PREFIX + secrets.token_urlsafe(32)
    token = AdminToken.objects.create(
        name=name, token_hash=_digest(plaintext), hint=_hint(plaintext), read_only=read_only
    )
    log.info("admin token created", extra={"token": token.pk, "token_name": name, "hint": token.hint})
    return token, plaintext


def token_revoke(token: AdminToken) -> bool:
    """Revoke (idempotent); the next request with it is refused."""
    with transaction.atomic():
        done = AdminToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    if done:
        log.info("admin token revoked", extra={"token": token.pk, "hint": token.hint})
    return bool(done)


def authenticate(presented: str) -> AdminToken | None:
    """The live token `presented` names, or None."""
    if not presented.startswith(PREFIX):
        return None
    digest = _digest(presented)
    token = AdminToken.objects.filter(token_hash=digest, revoked_at__isnull=True).first()
    if token is None or not hmac.compare_digest(token.token_hash, digest):
        return None
    now = timezone.now()
    if token.last_used_at is None or now - token.last_used_at > _TOUCH_EVERY:
        AdminToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def token_list(*, include_revoked: bool = False):
    qs = AdminToken.objects.order_by("name", "-created_at")
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)

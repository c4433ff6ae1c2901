"""Writes to the key table (HackSoft style: services write, selectors read).

Every write happens in one transaction together with `bump_revision`, so each
web process recompiles its keyring within a second of the commit (KEY-2).

Operator services (`key_create`, `key_update`, `key_set_enabled`,
`key_revoke`, `key_rotate`, `key_delete`) only accept operator rows; coordinator rows are never written
here (KEY-3): keys.coordinator writes those, for the ROUTER worker. Plaintext keys are returned once and never stored, logged or
put in a revision reason.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from router.revision import bump_revision, touch

from .fields import (
    EDITABLE,
    clean_allowed_models,
    clean_client_ips,
    clean_expires_at,
    clean_fields,
    clean_rate_limit,
)
from .keyring import hash_key as _hash_key
from .keyring import mask_key
from .models import ApiKey, KeySource
from .selectors import TOPIC, record_id

__all__ = [
    "clean_allowed_models",
    "clean_client_ips",
    "clean_expires_at",
    "clean_rate_limit",
    "key_create",
    "key_delete",
    "key_revoke",
    "key_rotate",
    "key_set_enabled",
    "key_update",
    "new_plaintext",
]

log = logging.getLogger(__name__)

KEY_PREFIX = "sk-"


def new_plaintext() -> str:
    """`sk-` + 43 url-safe characters from `secrets` (256 bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def _require_operator(key: ApiKey) -> None:
    if key.source != KeySource.OPERATOR:
        raise ValueError("coordinator keys are managed by the AppProxy coordinator")


# -- operator keys -----------------------------------------------------------
def _insert(fields: dict[str, Any]) -> tuple[ApiKey, str]:
    plaintext = new_plaintext()
    key = ApiKey.objects.create(
        source=KeySource.OPERATOR,
        key_hash=_hash_key(plaintext),
        hint=mask_key(plaintext),
        **fields,
    )
    touch(TOPIC, record_id(key))
    return key, plaintext


def key_create(
    *,
    name: str,
    owner: str = "",
    allowed_models: Iterable[str] = (),
    expires_at: datetime | None = None,
    rate_limit: int | None = None,
    allowed_client_ips: Iterable[str] = (),
) -> tuple[ApiKey, str]:
    """Issue an operator key. Returns the row and the plaintext (shown once)."""
    fields = clean_fields(
        {
            "name": name,
            "owner": owner,
            "allowed_models": allowed_models,
            "expires_at": expires_at,
            "rate_limit": rate_limit,
            "allowed_client_ips": allowed_client_ips,
        }
    )
    with transaction.atomic():
        key, plaintext = _insert(fields)
        bump_revision(f"keys: created {key.name} {key.hint}")
    log.info(
        "api key created", extra={"key": key.pk, "key_name": key.name, "hint": key.hint}
    )
    return key, plaintext


def key_update(key: ApiKey, **changes: Any) -> ApiKey:
    """Change an operator key's settings (never its secret)."""
    _require_operator(key)
    cleaned = clean_fields(changes)
    with transaction.atomic():
        for name, value in cleaned.items():
            setattr(key, name, value)
        key.save(update_fields=list(cleaned) or None)
        touch(TOPIC, record_id(key))
        bump_revision(f"keys: updated {key.name} {key.hint}")
    return key


def key_set_enabled(key: ApiKey, enabled: bool) -> ApiKey:
    """Disable an operator key (out of every keyring: 401 invalid_api_key) or
    enable it again; idempotent, and unlike a revocation reversible."""
    _require_operator(key)
    with transaction.atomic():
        current = ApiKey.objects.select_for_update().get(pk=key.pk)
        if current.revoked_at is not None and enabled:
            raise ValueError("this key is revoked; create a new key instead")
        if (current.disabled_at is None) == enabled:
            key.disabled_at = current.disabled_at
            return key
        key.disabled_at = None if enabled else timezone.now()
        ApiKey.objects.filter(pk=key.pk).update(disabled_at=key.disabled_at)
        touch(TOPIC, record_id(key))
        bump_revision(f"keys: {'enabled' if enabled else 'disabled'} {key.name} {key.hint}")
    log.info("api key %s", "enabled" if enabled else "disabled", extra={"key": key.pk, "hint": key.hint})
    return key


def _mark_revoked(key: ApiKey) -> bool:
    now = timezone.now()
    done = ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(
        revoked_at=now
    )
    if done:
        key.revoked_at = now
        touch(TOPIC, record_id(key))
    return bool(done)


def key_revoke(key: ApiKey) -> ApiKey:
    """Revoke an operator key (idempotent); every process drops it within 1 s."""
    _require_operator(key)
    with transaction.atomic():
        if _mark_revoked(key):
            bump_revision(f"keys: revoked {key.name} {key.hint}")
            log.info("api key revoked", extra={"key": key.pk, "hint": key.hint})
    return key


def key_rotate(key: ApiKey, *, grace: timedelta | None = None) -> tuple[ApiKey, str]:
    """Issue a second key with the same settings, then revoke the first, or
    with a ``grace`` let the first expire that much later (an earlier expiry
    it already had stays): clients switch over meanwhile, and the gate then
    answers 401 expired_api_key."""
    _require_operator(key)
    if grace is not None and grace.total_seconds() < 0:
        raise ValueError("grace: expected zero or more seconds")
    with transaction.atomic():
        current = ApiKey.objects.select_for_update().get(pk=key.pk)
        if current.revoked_at is not None:
            raise ValueError("this key is revoked; create a new key instead")
        fields = {name: getattr(current, name) for name in EDITABLE}
        new, plaintext = _insert(fields)
        if grace:
            ends = timezone.now() + grace
            if current.expires_at is None or current.expires_at > ends:
                ApiKey.objects.filter(pk=key.pk).update(expires_at=ends)
                key.expires_at = ends
                touch(TOPIC, record_id(key))
        else:
            _mark_revoked(key)
        bump_revision(f"keys: rotated {key.name} {key.hint} -> {new.hint}")
    log.info(
        "api key rotated", extra={"key": key.pk, "new_key": new.pk, "hint": new.hint}
    )
    return new, plaintext


def key_delete(key: ApiKey) -> None:
    _require_operator(key)
    with transaction.atomic():
        ApiKey.objects.filter(pk=key.pk).delete()
        touch(TOPIC, record_id(key))
        bump_revision(f"keys: deleted {key.name} {key.hint}")

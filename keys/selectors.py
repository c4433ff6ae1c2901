"""Reads of the key table: compile the immutable Keyring (off the hot path).

Called when a web process rebuilds its routing snapshot. Revoked keys are
left out (they become "unknown" → 401); expired keys stay in so the gate can
answer 401 expired_api_key instead of invalid_api_key.
"""

from __future__ import annotations

from .keyring import KeyRecord, Keyring, make_record
from .models import ApiKey


def record_for(row: ApiKey) -> KeyRecord:
    ident = row.key_id if row.source == "coordinator" else str(row.pk)
    return make_record(
        id=f"{row.source}:{ident}",
        name=row.name,
        source=row.source,
        key_hash=row.key_hash,
        allowed_models=row.allowed_models or (),
        expires_at=row.expires_at.timestamp() if row.expires_at else None,
        rate_limit=row.rate_limit,
        allowed_client_ips=row.allowed_client_ips or (),
        hint=row.display_hint,
        owner=row.owner,
    )


def compile_keyring() -> Keyring:
    rows = ApiKey.objects.filter(revoked_at__isnull=True).only(
        "id",
        "name",
        "owner",
        "source",
        "key_id",
        "key_hash",
        "hint",
        "allowed_models",
        "expires_at",
        "rate_limit",
        "allowed_client_ips",
    )
    return Keyring(record_for(row) for row in rows)


def key_list(*, include_revoked: bool = True):
    """Operator-facing listing (render masked fields only)."""
    qs = ApiKey.objects.order_by("source", "name", "-created_at")
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)

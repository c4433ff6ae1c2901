"""Reads of the key table: compile the immutable Keyring (off the hot path).

Called when a web process rebuilds its routing snapshot. Revoked keys are
left out (they become "unknown" → 401); expired keys stay in so the gate can
answer 401 expired_api_key instead of invalid_api_key.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast

from .keyring import KeyRecord, Keyring, make_record
from .models import ApiKey

TOPIC = "key"  # change-log topic (router.revision.touch); names are KeyRecord ids

_FIELDS = (
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


def coordinator_record_id(key_id: str) -> str:
    return f"coordinator:{key_id}"


def record_id(row: Any) -> str:
    """The id of a key's record (and its change-log name); `row` an ApiKey or
    a named row of _FIELDS."""
    return coordinator_record_id(row.key_id) if row.source == "coordinator" else f"{row.source}:{row.id}"


def record_for(row: Any) -> KeyRecord:
    """The record of a named row of _key_rows."""
    return make_record(
        id=record_id(row),
        name=row.name,
        source=row.source,
        key_hash=row.key_hash,
        allowed_models=_list(row.models_json),
        expires_at=row.expires_at.timestamp() if row.expires_at else None,
        rate_limit=row.rate_limit,
        allowed_client_ips=_list(row.ips_json),
        hint=row.hint or (f"id:{row.key_id}" if row.key_id else ""),  # ApiKey.display_hint
        owner=row.owner,
    )


_PLAIN = tuple(f for f in _FIELDS if f not in ("allowed_models", "allowed_client_ips"))


def _key_rows(qs: QuerySet) -> QuerySet:
    """Named rows of _FIELDS, the two JSON lists as their text (models_json,
    ips_json): nearly every key has both empty, and the JSON field's decoder
    per value was half of a 100,000-key compile."""
    return qs.annotate(
        models_json=Cast("allowed_models", TextField()), ips_json=Cast("allowed_client_ips", TextField())
    ).values_list(*_PLAIN, "models_json", "ips_json", named=True)


def _list(text: str | None) -> Any:
    if not text or text == "[]":
        return ()
    return orjson.loads(text) or ()


def compile_keyring() -> Keyring:
    # Named rows, not model instances: a third of the cost at 100,000 keys.
    rows = _key_rows(ApiKey.objects.filter(revoked_at__isnull=True))
    return Keyring(record_for(row) for row in rows.iterator(chunk_size=5000))


def update_keyring(prev: Keyring, changes: Mapping[str, frozenset[str]], _document: Any = None) -> Keyring:
    """`prev` with the keys the change log names read again (snapshot part update)."""
    ids = changes.get(TOPIC, frozenset())
    pks = [int(i.split(":", 1)[1]) for i in ids if i.startswith("operator:") and i.split(":", 1)[1].isdigit()]
    key_ids = [i.split(":", 1)[1] for i in ids if i.startswith("coordinator:")]
    rows = _key_rows(
        ApiKey.objects.filter(
            Q(source="operator", pk__in=pks) | Q(source="coordinator", key_id__in=key_ids), revoked_at__isnull=True
        )
    )
    return prev.replaced(ids, (record_for(row) for row in rows))


def key_list(*, include_revoked: bool = True):
    """Operator-facing listing (render masked fields only)."""
    qs = ApiKey.objects.order_by("source", "name", "-created_at")
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)

"""Reads of the key table: compile the immutable Keyring (off the hot path).

Called when a web process rebuilds its routing snapshot. Revoked and
disabled keys are left out (they become "unknown" → 401); expired keys stay in so the gate can
answer 401 expired_api_key instead of invalid_api_key.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import orjson
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast

from router import gcwork
from router.sqlread import InRead

from .keyring import SOURCE_COORDINATOR, SOURCE_OPERATOR, KeyRecord, Keyring, make_record
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


_PLAIN = tuple(f for f in _FIELDS if f not in ("allowed_models", "allowed_client_ips"))


def _key_rows(qs: QuerySet) -> QuerySet:
    """Rows of _FIELDS (as _records reads them), the two JSON lists as their
    text: nearly every key has both empty, and the JSON field's decoder per
    value was half of a 100,000-key compile. In no order: the model's
    ordering sorted 100,000 rows for nothing."""
    return qs.annotate(
        models_json=Cast("allowed_models", TextField()), ips_json=Cast("allowed_client_ips", TextField())
    ).values_list(*_PLAIN, "models_json", "ips_json").order_by()


def _empty(text: str | None) -> bool:
    return not text or text == "[]"


def _list(text: str | None) -> Any:
    return () if text is None or _empty(text) else (orjson.loads(text) or ())


def compile_keyring() -> Keyring:
    """The whole keyring. The cyclic collector stays off meanwhile
    (router.gcwork): the persistent maps' build allocates nodes by the
    thousand while 100,000 records are alive, and the collections that set
    off walked them all, again and again: 1.5-2 s for 100,000 keys with it,
    0.5 s without (records and maps hold no cycles)."""
    rows = _key_rows(ApiKey.objects.filter(revoked_at__isnull=True, disabled_at__isnull=True))
    with gcwork.paused():
        return Keyring(_records(rows.iterator(chunk_size=5000)))


def _records(rows: Iterable[tuple]) -> Iterator[KeyRecord]:
    """The records of _key_rows' rows. The common key (no model list, no IP
    list, no limit) is built straight from the row, without make_record's
    per-field work: 2.1 → 1.0 s CPU for 100,000 keys (with the unsorted
    rows and the tuple records)."""
    plain = KeyRecord.__new__
    empty: frozenset[str] = frozenset()
    for row in rows:
        pk, name, owner, source, key_id, key_hash, hint, expires_at, rate_limit, models_json, ips_json = row
        ident = f"coordinator:{key_id}" if source == "coordinator" else f"{source}:{pk}"
        if not hint:
            hint = f"id:{key_id}" if key_id else ""  # ApiKey.display_hint
        if (rate_limit is None or rate_limit <= 0) and _empty(models_json) and _empty(ips_json):
            expires = expires_at.timestamp() if expires_at else None
            yield plain(KeyRecord, ident, name, source, key_hash.lower(), empty, expires, None, (), hint, owner)
        else:
            yield make_record(
                id=ident,
                name=name,
                source=source,
                key_hash=key_hash,
                allowed_models=_list(models_json),
                expires_at=expires_at.timestamp() if expires_at else None,
                rate_limit=rate_limit,
                allowed_client_ips=_list(ips_json),
                hint=hint,
                owner=owner,
            )


def _record(row: Any) -> KeyRecord:
    """The record of one named row of _CHANGED (its JSON lists decoded)."""
    return make_record(
        id=record_id(row),
        name=row.name,
        source=row.source,
        key_hash=row.key_hash,
        allowed_models=row.allowed_models or (),
        expires_at=row.expires_at.timestamp() if row.expires_at else None,
        rate_limit=row.rate_limit,
        allowed_client_ips=row.allowed_client_ips or (),
        hint=row.hint or (f"id:{row.key_id}" if row.key_id else ""),  # ApiKey.display_hint
        owner=row.owner,
    )


# The keys a change names, read in every web process's refresh as plain SQL
# built once (router/sqlread.py): the ORM's compiling of this query was
# ~0.5 ms of the interpreter per key revocation. The fixed source lets SQLite
# use the partial unique index on coordinator key ids.
_CHANGED = InRead(ApiKey, (*_FIELDS, "revoked_at", "disabled_at"), "id", equal={"source": SOURCE_OPERATOR})
_CHANGED_BY_KEY_ID = InRead(
    ApiKey, (*_FIELDS, "revoked_at", "disabled_at"), "key_id", equal={"source": SOURCE_COORDINATOR}
)


def update_keyring(prev: Keyring, changes: Mapping[str, frozenset[str]], _document: Any = None) -> Keyring:
    """`prev` with the keys the change log names read again (snapshot part update)."""
    ids = changes.get(TOPIC, frozenset())
    pks = [int(i.split(":", 1)[1]) for i in ids if i.startswith("operator:") and i.split(":", 1)[1].isdigit()]
    key_ids = [i.split(":", 1)[1] for i in ids if i.startswith("coordinator:")]
    rows = itertools.chain(_CHANGED(pks), _CHANGED_BY_KEY_ID(key_ids))
    return prev.replaced(ids, [_record(row) for row in rows if row.revoked_at is None and row.disabled_at is None])


def key_list(*, include_revoked: bool = True):
    """Operator-facing listing (render masked fields only)."""
    qs = ApiKey.objects.order_by("source", "name", "-created_at")
    return qs if include_revoked else qs.filter(revoked_at__isnull=True)

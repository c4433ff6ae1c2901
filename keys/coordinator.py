"""Writes of coordinator-owned keys (KEY-3): the ROUTER worker's key mirror.

The AppProxy ROUTER worker (appproxy.router_mode.services) hands this module the
key records it pulled or was told about; they land in the same ``ApiKey``
table as operator keys (``source=coordinator``, keyed by ``key_id``), so
one gate and one keyring serve both.

Invariants:
- Only ``source=coordinator`` rows are ever created, changed or deleted
  here; a pull never touches an operator key. A coordinator hash equal to an
  operator key's hash is refused (logged by key_id), never merged.
- Only the SHA-256 hex digest and a masked hint are stored; nothing here
  logs a hash.
- An ``expires_at`` the worker could not parse arrives as ``expiry_ok=False``
  and is stored as already expired (fail closed: the key answers 401).
- The caller owns the transaction and the revision bump (it applies keys in
  the same transaction as publications and backends); every function
  returns whether anything changed.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from router.bulk import insert_rows
from router.revision import touch

from .models import ApiKey, KeySource
from .selectors import TOPIC, coordinator_record_id

__all__ = ["CoordinatorKey", "coordinator_key_count", "remove_coordinator_key", "sync_coordinator_keys"]

log = logging.getLogger(__name__)

EXPIRED = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class CoordinatorKey:
    key_id: str
    key_hash: str  # sha256 hex, lower case
    allowed_models: tuple[str, ...] = ()
    expires_at: datetime | None = None
    expiry_ok: bool = True
    rate_limit: int | None = None
    allowed_client_ips: tuple[str, ...] = ()
    hint: str = ""

    def __repr__(self) -> str:
        return f"<CoordinatorKey {self.key_id!r}>"

    def fields(self) -> dict[str, Any]:
        return {
            "name": self.key_id[:200],
            "key_hash": self.key_hash,
            "hint": (self.hint or f"id:{self.key_id}")[:32],
            "allowed_models": list(self.allowed_models),
            "expires_at": self.expires_at if self.expiry_ok else EXPIRED,
            "rate_limit": self.rate_limit,
            "allowed_client_ips": list(self.allowed_client_ips),
        }


def _same(row: ApiKey, fields: dict[str, Any]) -> bool:
    return all(getattr(row, name) == value for name, value in fields.items()) and row.revoked_at is None


def sync_coordinator_keys(keys: Iterable[CoordinatorKey], *, full: bool, keep: Collection[str] = ()) -> bool:
    """Upsert ``keys``; with ``full`` every other coordinator key is deleted
    except the ids in ``keep`` (entries the worker could not parse)."""
    incoming = {k.key_id: k for k in keys}
    rows = {row.key_id: row for row in ApiKey.objects.filter(source=KeySource.COORDINATOR)}
    changed = False
    if full:
        gone = [kid for kid in rows if kid not in incoming and kid not in keep]
        if gone:
            ApiKey.objects.filter(source=KeySource.COORDINATOR, key_id__in=gone).delete()
            touch(TOPIC, *(coordinator_record_id(kid) for kid in gone))
            changed = True
    taken = dict(
        ApiKey.objects.filter(key_hash__in=[k.key_hash for k in incoming.values()]).values_list("key_hash", "key_id")
    )
    created: list[dict[str, Any]] = []  # plain rows in one executemany: a first pull brings thousands
    for key_id, key in incoming.items():
        fields = key.fields()
        owner = taken.get(key.key_hash)
        if owner is not None and owner != key_id:
            log.warning("keys: coordinator key %s shares its hash with another key; not applied", key_id)
            continue
        row = rows.get(key_id)
        if row is None:
            created.append({"source": str(KeySource.COORDINATOR), "key_id": key_id, **fields})
            touch(TOPIC, coordinator_record_id(key_id))
            changed = True
        elif not _same(row, fields):
            ApiKey.objects.filter(pk=row.pk).update(revoked_at=None, **fields)
            touch(TOPIC, coordinator_record_id(key_id))
            changed = True
        if not key.expiry_ok:
            log.warning("keys: coordinator key %s has an unreadable expires_at; it is refused", key_id)
    # bulk_create compiled each value of each row (~0.3 s of a first pull at
    # 2,000 keys); router.bulk writes the same rows
    insert_rows(ApiKey, created)
    return changed


def remove_coordinator_key(key_id: str) -> bool:
    deleted, _ = ApiKey.objects.filter(source=KeySource.COORDINATOR, key_id=key_id).delete()
    if deleted:
        touch(TOPIC, coordinator_record_id(key_id))
    return bool(deleted)


def clear_coordinator_keys() -> bool:
    rows = ApiKey.objects.filter(source=KeySource.COORDINATOR)
    touch(TOPIC, *(coordinator_record_id(kid) for kid in rows.values_list("key_id", flat=True)))
    deleted, _ = rows.delete()
    return bool(deleted)


def coordinator_key_count() -> int:
    return ApiKey.objects.filter(source=KeySource.COORDINATOR).count()

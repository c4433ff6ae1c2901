"""The coordinator's key set mirrored into the key table (seed §9.8–9.10).

`coordinator_keys_apply` is a full-state, idempotent apply of the
router-config snapshot's `api_keys`; `coordinator_key_remove` applies the
id-only removal event at once. Both only ever touch `source=coordinator`
rows, keyed by `key_id`, and never operator keys (KEY-3). Entries carry token
hashes only; a hash is never logged.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import transaction

from router.revision import bump_revision

from .fields import clean_expires_at, clean_names
from .models import ApiKey, KeySource

log = logging.getLogger(__name__)

_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class CoordinatorKey:
    """One entry of the router-config snapshot's `api_keys` (seed §9.10)."""

    key_id: str
    token_hash: str = field(repr=False)
    allowed_models: tuple[str, ...] = ()
    expires_at: datetime | None = None
    rate_limit: int | None = None
    allowed_client_ips: tuple[str, ...] = ()

    @classmethod
    def from_wire(cls, data: Any) -> CoordinatorKey:
        """From a mapping (snake or kebab case) or an object with attributes.
        Unknown fields are ignored; ValueError names the bad field."""
        if isinstance(data, CoordinatorKey):
            return data

        def get(name: str) -> Any:
            if isinstance(data, Mapping):
                if name in data:
                    return data[name]
                return data.get(name.replace("_", "-"))
            return getattr(data, name, None)

        key_id = get("key_id")
        if key_id is None or str(key_id).strip() == "":
            raise ValueError("key_id: missing")
        key_id = str(key_id).strip()
        token_hash = str(get("token_hash") or "").strip().lower()
        if not _HEX64.match(token_hash):
            raise ValueError(f"token_hash of key {key_id!r}: not a SHA-256 hex digest")
        ips = get("allowed_client_ips")
        if isinstance(ips, str):
            ips = ips.split(",")
        rate = get("rate_limit")
        try:
            rate = int(rate) if rate is not None else None
        except (TypeError, ValueError):
            raise ValueError(f"rate_limit of key {key_id!r}: not a number") from None
        return cls(
            key_id=key_id,
            token_hash=token_hash,
            allowed_models=tuple(
                clean_names(get("allowed_models") or (), "allowed_models")
            ),
            expires_at=_parse_expiry(get("expires_at"), key_id),
            rate_limit=rate if rate and rate > 0 else None,
            allowed_client_ips=tuple(
                str(i).strip() for i in ips or () if str(i).strip()
            ),
        )


def _parse_expiry(value: Any, key_id: str) -> datetime | None:
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return clean_expires_at(value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), tz=UTC)
    try:
        return clean_expires_at(datetime.fromisoformat(str(value).strip()))
    except ValueError:
        raise ValueError(
            f"expires_at of key {key_id!r}: not an ISO 8601 time"
        ) from None


@dataclass(frozen=True, slots=True)
class ApplyResult:
    created: int = 0
    updated: int = 0
    deleted: int = 0
    skipped: tuple[str, ...] = ()  # key_ids (or positions) not applied

    @property
    def changed(self) -> bool:
        return bool(self.created or self.updated or self.deleted)


def _coordinator_fields(ck: CoordinatorKey) -> dict[str, Any]:
    return {
        "name": ck.key_id[:200],
        "key_hash": ck.token_hash,
        "allowed_models": list(ck.allowed_models),
        "expires_at": ck.expires_at,
        "rate_limit": ck.rate_limit,
        "allowed_client_ips": list(ck.allowed_client_ips),
    }


def coordinator_keys_apply(entries: Iterable[Any]) -> ApplyResult:
    """Make the coordinator rows equal `entries` (the full desired key set).

    Idempotent: an unchanged set writes nothing and bumps nothing. Invalid
    entries are skipped with a warning (never logging a hash); an entry whose
    hash belongs to an operator key is skipped, never merged.
    """
    desired: dict[str, CoordinatorKey] = {}
    skipped: list[str] = []
    for i, raw in enumerate(entries):
        try:
            ck = CoordinatorKey.from_wire(raw)
        except (ValueError, TypeError) as exc:
            log.warning("coordinator key #%d ignored: %s", i, exc)
            skipped.append(f"#{i}")
            continue
        desired[ck.key_id] = ck  # last writer wins

    created = updated = deleted = 0
    with transaction.atomic():
        existing = {
            row.key_id: row
            for row in ApiKey.objects.select_for_update().filter(
                source=KeySource.COORDINATOR
            )
        }
        foreign = set(
            ApiKey.objects.exclude(source=KeySource.COORDINATOR)
            .filter(key_hash__in=[ck.token_hash for ck in desired.values()])
            .values_list("key_hash", flat=True)
        )
        seen_hashes: set[str] = set()
        to_create: list[CoordinatorKey] = []
        drop: list[int] = []
        for key_id, row in existing.items():
            if key_id not in desired:
                drop.append(row.pk)
        for key_id, ck in desired.items():
            if ck.token_hash in foreign or ck.token_hash in seen_hashes:
                log.warning(
                    "coordinator key %r ignored: its token is already in use", key_id
                )
                skipped.append(key_id)
                if key_id in existing:
                    drop.append(existing[key_id].pk)
                continue
            seen_hashes.add(ck.token_hash)
            row = existing.get(key_id)
            fields = _coordinator_fields(ck)
            if row is None:
                to_create.append(ck)
            elif row.key_hash != ck.token_hash:
                # Delete-then-insert, so hashes moving between rows never
                # collide on the unique index mid-apply.
                drop.append(row.pk)
                to_create.append(ck)
                updated += 1
            elif any(getattr(row, k) != v for k, v in fields.items()):
                for k, v in fields.items():
                    setattr(row, k, v)
                row.save()
                updated += 1
        if drop:
            ApiKey.objects.filter(pk__in=drop, source=KeySource.COORDINATOR).delete()
            deleted = len(drop) - sum(1 for ck in to_create if ck.key_id in existing)
        for ck in to_create:
            ApiKey.objects.create(
                source=KeySource.COORDINATOR,
                key_id=ck.key_id,
                **_coordinator_fields(ck),
            )
        created = sum(1 for ck in to_create if ck.key_id not in existing)
        result = ApplyResult(created, updated, deleted, tuple(skipped))
        if result.changed:
            bump_revision(f"coordinator keys: +{created} ~{updated} -{deleted}")
    if result.changed:
        log.info(
            "coordinator keys applied",
            extra={
                "keys_created": created,
                "keys_updated": updated,
                "keys_deleted": deleted,
            },
        )
    return result


def coordinator_key_remove(key_id: str) -> bool:
    """Drop one coordinator key at once (the id-only removal event)."""
    with transaction.atomic():
        n, _ = ApiKey.objects.filter(
            source=KeySource.COORDINATOR, key_id=key_id
        ).delete()
        if n:
            bump_revision(f"coordinator keys: removed {key_id}")
    return bool(n)

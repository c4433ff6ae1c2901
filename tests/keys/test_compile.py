"""compile_keyring builds the common key straight from its row: every kind of
row must give the record make_record gives for the same stored fields."""

from __future__ import annotations

import hashlib
import itertools
from datetime import UTC, datetime

import pytest

from keys.keyring import make_record
from keys.models import ApiKey, KeySource
from keys.selectors import compile_keyring, record_id, update_keyring

pytestmark = pytest.mark.django_db


def reference(row: ApiKey):
    """The record as make_record builds it from the model's own fields."""
    return make_record(
        id=record_id(row),
        name=row.name,
        source=row.source,
        key_hash=row.key_hash,
        allowed_models=row.allowed_models or (),
        expires_at=row.expires_at.timestamp() if row.expires_at else None,
        rate_limit=row.rate_limit,
        allowed_client_ips=row.allowed_client_ips or (),
        hint=row.hint or (f"id:{row.key_id}" if row.key_id else ""),
        owner=row.owner,
    )


def test_every_kind_of_row_compiles_to_make_records_record():
    kinds = itertools.product(
        (None, 0, 5),  # rate_limit
        ([], ["m1", "m2"]),  # allowed_models
        ([], ["10.0.0.0/8"], ["not-an-ip"]),  # allowed_client_ips
        (None, datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)),  # expires_at
        (KeySource.OPERATOR, KeySource.COORDINATOR),
        ("", "sk-…a1b2"),  # hint
    )
    for i, (limit, models, ips, expires, source, hint) in enumerate(kinds):
        digest = hashlib.sha256(f"k{i}".encode()).hexdigest()
        ApiKey.objects.create(
            name=f"k{i}",
            owner=f"team-{i % 3}",
            source=source,
            key_id=f"kid-{i}" if source == KeySource.COORDINATOR else "",
            key_hash=digest.upper() if i % 2 else digest,  # a digest stored in capitals still matches
            hint=hint,
            rate_limit=limit,
            allowed_models=models,
            allowed_client_ips=ips,
            expires_at=expires,
        )
    ring = compile_keyring()
    rows = list(ApiKey.objects.all())
    assert len(ring) == len(rows) == 144
    for row in rows:
        assert ring[row.key_hash.lower()] == reference(row), row.name
    # the change path reads rows the same way
    again = update_keyring(ring, {"key": frozenset(record_id(r) for r in rows[:10])})
    for row in rows[:10]:
        assert again[row.key_hash.lower()] == reference(row)


def test_a_record_cannot_be_changed():
    ApiKey.objects.create(name="k", source=KeySource.OPERATOR, key_hash="a" * 64)
    record = compile_keyring()["a" * 64]
    with pytest.raises(AttributeError):
        record.name = "other"  # type: ignore[misc]

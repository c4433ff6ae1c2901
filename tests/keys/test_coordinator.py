"""Coordinator-owned keys (KEY-3): what the ROUTER worker writes through
keys.coordinator, against the real key table and the compiled keyring."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from keys.coordinator import CoordinatorKey, remove_coordinator_key, sync_coordinator_keys
from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.selectors import compile_keyring
from keys.services import key_create

pytestmark = pytest.mark.django_db


def ck(key_id: str, plain: str, **kw) -> CoordinatorKey:
    return CoordinatorKey(key_id=key_id, key_hash=hash_key(plain), **kw)


def test_a_full_sync_never_touches_operator_keys():
    operator, plain = key_create(name="ops")
    assert sync_coordinator_keys([ck("c1", "sk-c1"), ck("c2", "sk-c2")], full=True)
    assert sync_coordinator_keys([ck("c2", "sk-c2")], full=True)  # c1 gone
    assert sync_coordinator_keys([], full=True)  # every coordinator key gone
    assert ApiKey.objects.filter(pk=operator.pk).exists()
    assert set(ApiKey.objects.values_list("source", flat=True)) == {KeySource.OPERATOR}
    assert compile_keyring().lookup(plain) is not None


def test_idempotent_and_fields_follow_the_coordinator():
    expires = datetime.now(UTC) + timedelta(days=1)
    key = ck(
        "c1", "sk-c1", allowed_models=("m",), rate_limit=60, allowed_client_ips=("10.0.0.0/8",), expires_at=expires
    )
    assert sync_coordinator_keys([key], full=True)
    assert not sync_coordinator_keys([key], full=True)  # nothing changed, nothing written
    record = compile_keyring().lookup("sk-c1")
    assert record.id == "coordinator:c1" and record.allowed_models == {"m"} and record.rate_limit == 60
    assert sync_coordinator_keys([ck("c1", "sk-c1")], full=True)  # restrictions lifted
    assert compile_keyring().lookup("sk-c1").allowed_models == frozenset()


def test_an_unreadable_expiry_fails_closed():
    sync_coordinator_keys([ck("c1", "sk-c1", expiry_ok=False)], full=True)
    record = compile_keyring().lookup("sk-c1")
    assert record.expires_at is not None and record.expires_at < datetime.now(UTC).timestamp()


def test_a_hash_owned_by_an_operator_key_is_refused():
    _, plain = key_create(name="ops")
    assert not sync_coordinator_keys([ck("c1", plain)], full=True)
    assert compile_keyring().lookup(plain).source == KeySource.OPERATOR


def test_skipped_entries_are_kept_and_removal_is_by_id():
    sync_coordinator_keys([ck("c1", "sk-c1"), ck("c2", "sk-c2")], full=True)
    sync_coordinator_keys([ck("c2", "sk-c2")], full=True, keep={"c1"})  # c1 did not parse this time
    assert compile_keyring().lookup("sk-c1") is not None
    assert remove_coordinator_key("c1") and not remove_coordinator_key("c1")
    assert compile_keyring().lookup("sk-c1") is None


def test_no_hash_in_reprs():
    key = ck("c1", "sk-c1")
    assert hash_key("sk-c1") not in repr(key)
    sync_coordinator_keys([key], full=True)
    row = ApiKey.objects.get(key_id="c1")
    assert row.key_hash not in repr(row) and row.key_hash not in str(row)

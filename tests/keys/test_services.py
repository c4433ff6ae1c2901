"""Key writes: create/revoke/rotate, revision bumps; coordinator rows stay untouched."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.selectors import compile_keyring, update_keyring
from keys.services import (
    key_create,
    key_delete,
    key_revoke,
    key_rotate,
    key_set_enabled,
    key_update,
)
from router.revision import current_revision

pytestmark = pytest.mark.django_db


def h(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- create ----------------------------------------------------------------
def test_create_returns_plaintext_once_and_stores_only_hash_and_hint():
    before = current_revision()
    key, plain = key_create(name="ci", owner="team-a", allowed_models=["a", " b ", "a"])
    assert plain.startswith("sk-") and len(plain) >= 3 + 43  # ≥ 256 bits
    row = ApiKey.objects.get(pk=key.pk)
    assert row.key_hash == hash_key(plain)
    assert row.hint == f"sk-…{plain[-4:]}"
    assert row.allowed_models == ["a", "b"]
    assert row.source == KeySource.OPERATOR and row.key_id == ""
    stored = " ".join(
        str(v) for v in ApiKey.objects.filter(pk=key.pk).values().first().values()
    )
    assert plain not in stored
    assert current_revision() == before + 1


def test_create_issues_distinct_keys():
    plains = {key_create(name=f"k{i}")[1] for i in range(20)}
    assert len(plains) == 20


@pytest.mark.parametrize(
    "bad", ["10.0.0.300", "10.0.0.0/33", "not-an-ip", "2001:db8::/129"]
)
def test_create_rejects_bad_ips_with_a_clear_message(bad):
    with pytest.raises(
        ValueError, match=r"allowed_client_ips.*not an IP address or CIDR"
    ):
        key_create(name="x", allowed_client_ips=["10.0.0.1", bad])
    assert not ApiKey.objects.exists()


def test_create_accepts_v4_v6_and_cidrs():
    key, _ = key_create(
        name="x", allowed_client_ips=["10.0.0.1", "10.0.0.0/8", "2001:db8::/32"]
    )
    assert key.allowed_client_ips == ["10.0.0.1", "10.0.0.0/8", "2001:db8::/32"]


@pytest.mark.parametrize(
    ("field", "value"),
    [("rate_limit", 0), ("rate_limit", -1), ("name", "  "), ("expires_at", "2026")],
)
def test_create_rejects_bad_fields(field, value):
    kwargs = {"name": "x", field: value}
    with pytest.raises((ValueError, TypeError), match=field):
        key_create(**kwargs)


def test_naive_expiry_is_utc():
    key, _ = key_create(name="x", expires_at=datetime(2030, 1, 1))
    assert key.expires_at == datetime(2030, 1, 1, tzinfo=UTC)


# -- repr ------------------------------------------------------------------
def test_repr_and_str_never_contain_hash_or_plaintext():
    key, plain = key_create(name="ci")
    for text in (
        repr(key),
        str(key),
        repr(compile_keyring()),
        repr(compile_keyring()[key.key_hash]),
    ):
        assert key.key_hash not in text and plain not in text


# -- revoke / rotate / update ------------------------------------------------
def test_revoke_drops_the_key_from_the_keyring_and_bumps():
    key, plain = key_create(name="ci")
    assert compile_keyring().lookup(plain)
    before = current_revision()
    key_revoke(key)
    assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
    assert compile_keyring().lookup(plain) is None
    assert current_revision() == before + 1
    key_revoke(key)  # idempotent, no second bump
    assert current_revision() == before + 1


def test_rotate_issues_a_twin_and_revokes_the_first():
    expires = datetime.now(UTC) + timedelta(days=3)
    old, old_plain = key_create(
        name="ci",
        owner="o",
        allowed_models=["m"],
        expires_at=expires,
        rate_limit=7,
        allowed_client_ips=["10.0.0.0/8"],
    )
    before = current_revision()
    new, new_plain = key_rotate(old)
    assert new.pk != old.pk and new_plain != old_plain
    for f in (
        "name",
        "owner",
        "allowed_models",
        "expires_at",
        "rate_limit",
        "allowed_client_ips",
    ):
        assert getattr(new, f) == getattr(old, f)
    ring = compile_keyring()
    assert ring.lookup(old_plain) is None and ring.lookup(new_plain).name == "ci"
    assert current_revision() > before
    with pytest.raises(ValueError, match="revoked"):
        key_rotate(old)


def test_rotate_with_grace_lets_the_first_expire_later_not_at_once():
    old, old_plain = key_create(name="ci")
    _new, new_plain = key_rotate(old, grace=timedelta(minutes=5))
    ring = compile_keyring()
    first = ring.lookup(old_plain)
    assert first is not None and ring.lookup(new_plain) is not None
    row = ApiKey.objects.get(pk=old.pk)
    assert row.revoked_at is None
    assert timedelta(minutes=4) < row.expires_at - datetime.now(UTC) <= timedelta(minutes=5)
    assert first.expires_at == row.expires_at.timestamp()


def test_rotate_grace_never_extends_an_earlier_expiry():
    soon = datetime.now(UTC) + timedelta(seconds=30)
    old, _ = key_create(name="ci", expires_at=soon)
    key_rotate(old, grace=timedelta(hours=1))
    assert ApiKey.objects.get(pk=old.pk).expires_at == soon


def test_disable_takes_the_key_out_of_the_keyring_until_enabled():
    key, plain = key_create(name="ci")
    ring = compile_keyring()
    before = current_revision()
    key_set_enabled(key, False)
    assert current_revision() == before + 1
    assert compile_keyring().lookup(plain) is None
    changed = update_keyring(ring, {"key": frozenset({f"operator:{key.pk}"})})
    assert changed.lookup(plain) is None
    key_set_enabled(key, False)  # idempotent: no second bump
    assert current_revision() == before + 1
    key_set_enabled(key, True)
    assert compile_keyring().lookup(plain) is not None
    assert update_keyring(changed, {"key": frozenset({f"operator:{key.pk}"})}).lookup(plain) is not None


def test_a_revoked_key_cannot_be_enabled():
    key, _ = key_create(name="ci")
    key_revoke(key)
    with pytest.raises(ValueError, match="revoked"):
        key_set_enabled(key, True)


def test_update_changes_settings_not_the_secret():
    key, plain = key_create(name="ci")
    key_update(key, allowed_models="a,b", rate_limit=5)
    rec = compile_keyring().lookup(plain)
    assert rec.allowed_models == {"a", "b"} and rec.rate_limit == 5
    with pytest.raises(ValueError, match="key_hash"):
        key_update(key, key_hash="0" * 64)


def test_expired_keys_stay_in_the_keyring_as_expired():
    _key, plain = key_create(name="x", expires_at=datetime(2020, 1, 1, tzinfo=UTC))
    rec = compile_keyring().lookup(plain)
    assert rec.expires_at == datetime(2020, 1, 1, tzinfo=UTC).timestamp()


def test_delete_bumps():
    key, _plain = key_create(name="x")
    before = current_revision()
    key_delete(key)
    assert current_revision() == before + 1 and not ApiKey.objects.exists()


# -- coordinator rows ----------------------------------------------------------
def coordinator_row(key_id: str, token: str, **fields) -> ApiKey:
    return ApiKey.objects.create(
        source=KeySource.COORDINATOR, key_id=key_id, name=key_id, key_hash=h(token), **fields
    )


def test_coordinator_rows_compile_into_the_keyring_by_key_id():
    _op, op_plain = key_create(name="operator-key")
    coordinator_row(
        "key-a",
        "tok-a",
        allowed_models=["m"],
        rate_limit=600,
        expires_at=datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC),
        allowed_client_ips=["10.0.0.0/8"],
    )
    ring = compile_keyring()
    a = ring.lookup("tok-a")
    assert (
        a.id == "coordinator:key-a"
        and a.source == "coordinator"
        and a.rate_limit == 600
        and a.allowed_models == {"m"}
    )
    assert a.expires_at == datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert ring.lookup(op_plain).source == "operator"


def test_operator_services_refuse_coordinator_rows():
    row = coordinator_row("a", "t1")
    for fn in (key_revoke, key_rotate, key_delete):
        with pytest.raises(ValueError, match="coordinator"):
            fn(row)
    with pytest.raises(ValueError, match="coordinator"):
        key_set_enabled(row, False)


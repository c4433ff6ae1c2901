"""Key writes: create/revoke/rotate, the coordinator apply, revision bumps."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta

import pytest

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.selectors import compile_keyring
from keys.services import (
    CoordinatorKey,
    coordinator_key_remove,
    coordinator_keys_apply,
    key_create,
    key_delete,
    key_revoke,
    key_rotate,
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


# -- coordinator -------------------------------------------------------------
def wire(key_id, token, **kw):
    return {"key_id": key_id, "token_hash": h(token), **kw}


def test_coordinator_apply_creates_updates_and_deletes_only_its_rows():
    op, op_plain = key_create(name="operator-key")
    r = coordinator_keys_apply(
        [
            wire(
                "key-a",
                "tok-a",
                allowed_models=["m"],
                rate_limit=600,
                expires_at="2026-12-31T23:59:59Z",
                allowed_client_ips=["10.0.0.0/8"],
            ),
            {"key-id": "key-b", "token-hash": h("tok-b").upper(), "unknown-field": 1},
        ]
    )
    assert (r.created, r.updated, r.deleted) == (2, 0, 0)
    ring = compile_keyring()
    a = ring.lookup("tok-a")
    assert (
        a.id == "coordinator:key-a"
        and a.rate_limit == 600
        and a.allowed_models == {"m"}
    )
    assert a.expires_at == datetime(2026, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp()
    assert ring.lookup("tok-b").source == "coordinator"

    # A pull that lists only key-a (changed) deletes key-b, never the operator key.
    r = coordinator_keys_apply([wire("key-a", "tok-a", allowed_models=["m", "n"])])
    assert (r.created, r.updated, r.deleted) == (0, 1, 1)
    r = coordinator_keys_apply([])
    assert r.deleted == 1
    assert list(ApiKey.objects.values_list("pk", flat=True)) == [op.pk]
    assert compile_keyring().lookup(op_plain)


def test_coordinator_apply_is_idempotent_and_bumps_only_on_change():
    entries = [wire("key-a", "tok-a", rate_limit=5)]
    coordinator_keys_apply(entries)
    before = current_revision()
    r = coordinator_keys_apply(entries)
    assert not r.changed and current_revision() == before


def test_coordinator_token_rotation_and_hash_swap():
    coordinator_keys_apply([wire("a", "t1"), wire("b", "t2")])
    r = coordinator_keys_apply([wire("a", "t2"), wire("b", "t1")])  # swapped
    assert r.updated == 2
    ring = compile_keyring()
    assert (
        ring.lookup("t1").id == "coordinator:b"
        and ring.lookup("t2").id == "coordinator:a"
    )


def test_coordinator_cannot_claim_an_operator_token():
    _op, op_plain = key_create(name="mine", allowed_models=["x"])
    r = coordinator_keys_apply([{"key_id": "evil", "token_hash": hash_key(op_plain)}])
    assert r.skipped == ("evil",) and not r.changed
    assert compile_keyring().lookup(op_plain).source == "operator"


def test_coordinator_bad_entries_are_skipped_and_never_logged(caplog):
    r = coordinator_keys_apply(
        [
            {"token_hash": h("x")},
            {"key_id": "short", "token_hash": "abc"},
            {"key_id": "date", "token_hash": h("d"), "expires_at": "soon"},
            wire("ok", "tok"),
        ]
    )
    assert r.created == 1 and len(r.skipped) == 3
    assert h("x") not in caplog.text and h("d") not in caplog.text


def test_coordinator_remove_by_id():
    coordinator_keys_apply([wire("a", "t1")])
    op, _ = key_create(name="a")
    assert coordinator_key_remove("a") is True
    assert coordinator_key_remove("a") is False
    assert list(ApiKey.objects.all()) == [op]


def test_operator_services_refuse_coordinator_rows():
    coordinator_keys_apply([wire("a", "t1")])
    row = ApiKey.objects.get(key_id="a")
    for fn in (key_revoke, key_rotate, key_delete):
        with pytest.raises(ValueError, match="coordinator"):
            fn(row)


def test_coordinator_key_repr_hides_the_hash():
    ck = CoordinatorKey.from_wire(wire("a", "t1"))
    assert h("t1") not in repr(ck)

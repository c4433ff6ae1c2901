"""The keys a change names, read as plain SQL in every web process's refresh
(keys/selectors.py over router/sqlread.py): the records must be the ones a
from-scratch compile makes. tests/router/test_bulk_postgres.py runs this file
on a real PostgreSQL too (jsonb)."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.utils import timezone

from keys.keyring import hash_key
from keys.models import ApiKey, KeySource
from keys.selectors import _CHANGED, _CHANGED_BY_KEY_ID, compile_keyring, record_id, update_keyring
from keys.selectors import TOPIC as KEY_TOPIC
from router.sqlread import InRead

pytestmark = pytest.mark.django_db


def _operator(name: str, **fields) -> ApiKey:
    return ApiKey.objects.create(source=KeySource.OPERATOR, name=name, key_hash=hash_key(f"sk-{name}"), **fields)


def _coordinator(key_id: str, **fields) -> ApiKey:
    return ApiKey.objects.create(
        source=KeySource.COORDINATOR, key_id=key_id, name=key_id, key_hash=hash_key(f"tok-{key_id}"), **fields
    )


def test_changed_keys_are_the_records_a_compile_makes():
    keys = [
        _operator("plain"),
        _operator(
            "full",
            owner="tëam 'a'",
            allowed_models=["m-1", "ünï", "a'quote"],
            expires_at=timezone.now() + dt.timedelta(days=3),
            rate_limit=60,
            allowed_client_ips=["10.0.0.0/8", "bogus", "::1"],
            hint="sk-…abcd",
        ),
        _operator("revoked", revoked_at=timezone.now()),
        _coordinator("c-1", allowed_models=["m"]),
        _coordinator("c-2", rate_limit=0),
        _coordinator("c-gone", revoked_at=timezone.now()),
    ]
    ids = frozenset(record_id(k) for k in keys) | {"operator:999999", "coordinator:absent", "operator:x"}
    ring = update_keyring(compile_keyring().replaced(ids, []), {KEY_TOPIC: ids})
    assert dict(ring.items()) == dict(compile_keyring().items())
    assert {r.name for r in ring.values()} == {"plain", "full", "c-1", "c-2"}
    full = ring[hash_key("sk-full")]
    assert full.allowed_models == frozenset({"m-1", "ünï", "a'quote"}) and full.rate_limit == 60
    assert full.ip_restricted and len(full.networks) == 2 and full.bucket
    assert ring[hash_key("tok-c-1")].hint == "id:c-1"


def test_more_keys_than_one_statement_takes_and_each_source_its_own():
    n = InRead.PER_READ + 7
    ApiKey.objects.bulk_create(
        ApiKey(source=KeySource.OPERATOR, name=f"k{i}", key_hash=hash_key(f"sk-{i}")) for i in range(n)
    )
    _coordinator("7")  # a coordinator key id that is also an operator pk: not read as one
    pks = list(ApiKey.objects.filter(source=KeySource.OPERATOR).values_list("pk", flat=True))
    got = {r.id for r in _CHANGED([*pks, 10**9])}
    assert got == set(pks)
    assert [r.key_id for r in _CHANGED_BY_KEY_ID(["7", "8"])] == ["7"]
    assert list(_CHANGED([])) == [] and list(_CHANGED_BY_KEY_ID([])) == []


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's planner; PostgreSQL plans by statistics")
def test_sqlite_reads_a_coordinator_key_through_the_partial_unique_index():
    """Without the fixed source the partial index (WHERE source =
    'coordinator') cannot serve the read, and SQLite scans every key."""
    head, _ = _CHANGED_BY_KEY_ID._statement()
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + head + "(%s)", ["coordinator", "k"])
        plan = " ".join(str(row[-1]) for row in cursor.fetchall())
    assert "keys_apikey_coordinator_key_id_unique" in plan, plan

"""The reads a refresh makes in every web process, written as plain SQL
(router/revision.py, router/selectors.py): they must give what the ORM gives.
tests/router/test_bulk_postgres.py runs this file on a real PostgreSQL too
(jsonb, BIGINT)."""

from __future__ import annotations

import pytest
from django.db import transaction

from router import revision
from router.models import Backend, RoutingChange, RoutingRevision, Source
from router.revision import ALL, BACKEND, bump_revision, changes_since, current_revision, touch
from router.selectors import _FIELDS, _rows, _rows_named
from router.sqlread import InRead

pytestmark = pytest.mark.django_db


def _make(name: str, **fields) -> None:
    Backend.objects.create(name=name, source=Source.ADMIN, url="http://127.0.0.1:9/v1", **fields)


def test_named_rows_are_what_the_orm_reads():
    _make("plain", models=["m"])
    _make(
        "full",
        models=["m-1", "ünï", "a'quote"],
        kind="vllm",
        served_model="served",
        weight=7,
        capacity=3,
        priority=-2,
        api_key="${SOME_KEY}",
        connect_timeout=1.5,
        read_timeout=30.25,
        extra={"headers": {"x-a": "1"}, "discover_models": True, "discovered": ["d1", "d2"], "n": None},
    )
    _make("empty-extra", models=[], extra={})
    names = ["full", "plain", "empty-extra", "absent"]
    got = sorted(_rows_named(names))
    want = sorted(_rows(Backend.objects.filter(name__in=names)))
    assert [tuple(r) for r in got] == [tuple(r) for r in want]
    assert len(got) == 3 and got[1]._fields == _FIELDS
    full = next(r for r in got if r.name == "full")
    assert full.models == ["m-1", "ünï", "a'quote"] and full.extra["discovered"] == ["d1", "d2"]
    assert full.capacity == 3 and full.read_timeout == 30.25 and full.connect_timeout == 1.5


def test_more_names_than_one_statement_takes():
    n = InRead.PER_READ * 2 + 5
    Backend.objects.bulk_create(
        Backend(name=f"b{i}", source=Source.ADMIN, url="http://h", models=[f"m{i}"]) for i in range(n)
    )
    names = [f"b{i}" for i in range(n)] + ["nope"]
    got = {r.name: r.models for r in _rows_named(names)}
    assert got == {f"b{i}": [f"m{i}"] for i in range(n)}
    assert list(_rows_named([])) == []


def test_revision_and_change_log_reads():
    start = current_revision()
    with transaction.atomic():
        touch(BACKEND, "a", "b")
        first = bump_revision("two names")
    with transaction.atomic():
        touch(BACKEND, "c")
        touch("key", "k1")
        second = bump_revision("two topics")
    assert (first, second) == (start + 1, start + 2)
    assert RoutingRevision.objects.get(pk=1).revision == current_revision() == second
    assert changes_since(start, second) == {BACKEND: {"a", "b", "c"}, "key": {"k1"}}
    assert changes_since(first, second) == {BACKEND: {"c"}, "key": {"k1"}}
    assert changes_since(second, second) == {}
    # a revision missing from the log (pruned): the log cannot say
    RoutingChange.objects.filter(revision=first).delete()
    assert changes_since(start, second) is None
    # a bump that named nothing: compile from scratch
    with transaction.atomic():
        third = bump_revision("unnamed")
    assert changes_since(second, third) is None


def test_a_topic_changed_whole_and_more_rows_than_the_log_may_return(monkeypatch):
    start = current_revision()
    with transaction.atomic():
        touch(BACKEND, *(f"n{i}" for i in range(revision.MAX_NAMES + 1)))
        whole = bump_revision("a first pull")
    assert changes_since(start, whole) is None
    assert changes_since(start, whole, whole=True) == {BACKEND: {ALL}}
    monkeypatch.setattr(revision, "MAX_ROWS", 2)
    revision._statements.cache_clear()  # the LIMIT is part of the statement
    try:
        with transaction.atomic():
            touch(BACKEND, "x", "y", "z")
            many = bump_revision("three rows")
        assert changes_since(whole, many) is None
    finally:
        monkeypatch.undo()
        revision._statements.cache_clear()
    assert changes_since(whole, many) == {BACKEND: {"x", "y", "z"}}

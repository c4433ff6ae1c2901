"""router.bulk.insert_rows writes what the ORM would: every value given,
every other column its field's default (JSON and dates through the field,
so PostgreSQL's jsonb takes them too: tests/appproxy/test_router_ha.py runs
first pulls on a real PostgreSQL)."""

from __future__ import annotations

import pytest
from django.db import transaction
from django.forms.models import model_to_dict

from appproxy.models import Circuit, Route
from router.bulk import BATCH, insert_rows
from router.models import Backend, Source

pytestmark = pytest.mark.django_db


def _fields(row, *skip: str) -> dict:
    return {k: v for k, v in model_to_dict(row).items() if k not in ("id", *skip)}


def test_rows_equal_what_the_orm_writes():
    given = {
        "source": Source.APPPROXY,
        "url": "http://127.0.0.1:9/v1",
        "kind": "vllm",
        "models": ["m-1", "alias"],
        "weight": 7,
    }
    with transaction.atomic():
        assert insert_rows(Backend, [{"name": "bulk", **given}]) == 1
    orm = Backend.objects.create(name="orm", **given)
    bulk = Backend.objects.get(name="bulk")
    assert _fields(bulk, "name") == _fields(orm, "name")
    assert bulk.models == ["m-1", "alias"] and bulk.extra == {} and bulk.updated_at is not None


def test_a_foreign_key_by_its_column_and_more_rows_than_one_batch():
    circuit = Circuit.objects.create(circuit_id="c" * 36, raw={"id": "c"})
    n = BATCH * 2 + 3
    with transaction.atomic():
        written = insert_rows(
            Route, ({"circuit_id": circuit.pk, "kernel_port": 9000 + i, "route_id": f"r{i}"} for i in range(n))
        )
    assert written == n == circuit.routes.count()
    first = circuit.routes.get(route_id="r0")
    assert (first.kernel_port, first.protocol, first.traffic_ratio, first.backend_name) == (9000, "http", 1.0, "")


def test_a_column_without_a_default_must_be_given():
    circuit = Circuit.objects.create(circuit_id="d" * 36)
    with pytest.raises(ValueError, match="kernel_port"), transaction.atomic():
        insert_rows(Route, [{"circuit_id": circuit.pk}])
    assert not Route.objects.exists()


def test_prepared_values_kept_between_rows_never_mix_rows_up():
    """One `now` for every row and repeated lists of names are prepared once;
    every row still gets its own values (a list seen before, one that only
    looks alike, one with a non-string, a dict, and the field defaults)."""
    from django.utils import timezone

    now = timezone.now()
    lists = [["a"], ["a", "b"], ["a"], ["b", "a"], ["a", 1], ["a", 1], [], ["a"], ["a,b"], ["a", "b"]]
    with transaction.atomic():
        insert_rows(
            Backend,
            (
                {"name": f"b{i}", "source": Source.APPPROXY, "url": "http://x", "models": models,
                 "updated_at": now, **({"extra": {"i": i}} if i % 3 == 0 else {})}
                for i, models in enumerate(lists)
            ),
        )
    rows = {b.name: b for b in Backend.objects.all()}
    for i, models in enumerate(lists):
        row = rows[f"b{i}"]
        assert row.models == models, row.name
        assert row.extra == ({"i": i} if i % 3 == 0 else {})
        assert row.updated_at == now



AWKWARD = ["tab\there", "line\nbreak", "back\\slash", "\\N", "", "naïve ☃", "quote ' and \"", "cr\rlf", "comma,semi;"]


def test_values_that_need_escaping_survive_many_batches():
    """More rows than one batch: on PostgreSQL they go in as one COPY, whose
    text format escapes tabs, newlines, backslashes and a literal ``\\N``;
    None stays NULL and JSON keeps the same characters."""
    n = BATCH * 2 + 5
    with transaction.atomic():
        written = insert_rows(
            Backend,
            (
                {"name": f"esc-{i}", "source": Source.APPPROXY, "url": AWKWARD[i % len(AWKWARD)],
                 "api_key": AWKWARD[(i + 1) % len(AWKWARD)], "models": [AWKWARD[i % len(AWKWARD)], f"m{i}"],
                 "capacity": None if i % 2 else i, "connect_timeout": i / 8,
                 "extra": {"k": AWKWARD[(i + 2) % len(AWKWARD)], "n": [i, None, True]}}
                for i in range(n)
            ),
        )  # fmt: skip
    assert written == n == Backend.objects.count()
    for b in Backend.objects.all():
        i = int(b.name.removeprefix("esc-"))
        assert b.url == AWKWARD[i % len(AWKWARD)]
        assert b.api_key == AWKWARD[(i + 1) % len(AWKWARD)]
        assert b.models == [AWKWARD[i % len(AWKWARD)], f"m{i}"]
        assert b.capacity == (None if i % 2 else i)
        assert b.connect_timeout == i / 8
        assert b.extra == {"k": AWKWARD[(i + 2) % len(AWKWARD)], "n": [i, None, True]}
        assert (b.kind, b.weight, b.served_model) == ("openai_compat", 100, "")


@pytest.mark.parametrize("n", [3, BATCH * 2 + 1])
def test_a_rejected_row_is_a_django_error_and_writes_nothing(n):
    """A duplicate name, in one statement or in a COPY of many batches, is
    Django's IntegrityError (what callers catch), and the transaction holds
    none of the rows."""
    from django.db import IntegrityError

    rows = [{"name": f"dup-{i}", "source": Source.APPPROXY, "url": "http://x"} for i in range(n)]
    rows.append({"name": "dup-1", "source": Source.APPPROXY, "url": "http://y"})
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(Backend, rows)
    assert not Backend.objects.exists()
    with transaction.atomic():  # the connection is usable again
        assert insert_rows(Backend, rows[:-1]) == n
    assert Backend.objects.count() == n


def test_a_bad_row_after_many_batches_writes_nothing():
    """A row the caller got wrong, found once a COPY is under way, ends it:
    the error is the caller's, and no row of the call is kept."""
    circuit = Circuit.objects.create(circuit_id="e" * 36)
    rows = [{"circuit_id": circuit.pk, "kernel_port": 9000 + i, "route_id": f"r{i}"} for i in range(BATCH * 2)]
    rows.append({"circuit_id": circuit.pk})
    with pytest.raises(ValueError, match="kernel_port"), transaction.atomic():
        insert_rows(Route, rows)
    assert not Route.objects.exists()
    with transaction.atomic():
        assert insert_rows(Route, rows[:3]) == 3

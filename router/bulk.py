"""Many rows in one `executemany` (SQLite), or on PostgreSQL in one
multi-row INSERT (up to one batch) or one `COPY … FROM STDIN` (more): a first
pull at cluster size writes 20,000 backends and 20,000 routes in one
transaction.

`QuerySet.bulk_create` compiles every value of every row through the field
machinery (placeholder, pre_save, get_db_prep_save, the SQL of each row's
tuple): ~90 µs a row for a `Backend`, about two thirds of a first pull's
apply at 5,000 circuits. Here the statement is built once and each row is a
plain list of parameters; only the fields whose Python value is not already
what the driver takes (JSON, dates) go through `get_db_prep_save`. Rows get
no primary key back, nothing is sent as a signal (bulk_create sends none
either), and every column the caller leaves out takes its field's default. A value's
prepared form is reused for the next rows while it is the same object (or
an equal list of names), so the caller must not change a value it passed
while the rows are written.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from django.db import connection, models
from django.utils import timezone

# Field types whose Python values the drivers (sqlite3, psycopg) take as they are.
_PLAIN = (
    models.CharField,
    models.TextField,
    models.IntegerField,
    models.FloatField,
    models.BooleanField,
    models.ForeignKey,
)

BATCH = 1000  # rows per executemany: one statement's parameters stay modest
_MAX_PARAMS = 30_000  # per multi-row statement (PostgreSQL allows 65,535)
_REQUIRED = object()  # a field with no default that a row must give


def insert_rows(model: type[models.Model], rows: Iterable[Mapping[str, Any]]) -> int:
    """INSERT `rows` ({field attname: value}) into `model`'s table; the caller
    is in the transaction that should hold them. Returns the rows written."""
    fields = [f for f in model._meta.concrete_fields if not f.primary_key]
    now = timezone.now()
    defaults: list[Any] = []
    for f in fields:
        if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False):
            defaults.append(now)
        elif f.has_default() or f.null:
            defaults.append(f.get_default())
        else:
            defaults.append(_REQUIRED)
    prep = [None if isinstance(f, _PLAIN) else f for f in fields]
    ready = [
        d if d is _REQUIRED or p is None or d is None else p.get_db_prep_save(d, connection)
        for p, d in zip(prep, defaults, strict=True)
    ]
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    columns = ", ".join(quote(f.column) for f in fields)
    one = "(" + ", ".join(["%s"] * len(fields)) + ")"
    insert = f"INSERT INTO {table} ({columns}) VALUES "
    # PostgreSQL: psycopg's executemany sends one INSERT per row (pipelined,
    # but each parsed, bound and executed on its own: a first pull's 45,000
    # rows were ~1.5 s of the server's CPU). Up to one batch of rows goes in
    # as one multi-row INSERT; more go in as one COPY: Django's client-side
    # cursor re-parses a statement's text at every call (a regex over
    # thousands of placeholders, past psycopg's cache of short queries) and
    # quotes each value into it, two thirds of a first pull's writes, where
    # COPY sends the rows as they are, formatted in C. SQLite runs in this
    # process, where executemany is already one prepared statement.
    postgres = connection.vendor == "postgresql"
    per = max(1, min(BATCH, _MAX_PARAMS // len(fields))) if postgres else BATCH
    copy: Any = None  # psycopg's Copy, once there were more rows than one batch
    # A prepared value is kept for the next rows: a value that is the same
    # object as the last one (one `now` for every row), and a list of names
    # seen before (a backend's models: 2,000 lists over 20,000 rows). Each
    # get_db_prep_save is a JSON encoder or a date adapter built per call.
    last: list[Any] = [_REQUIRED] * len(fields)
    last_ready: list[Any] = [None] * len(fields)
    lists: dict[tuple[int, tuple[str, ...]], Any] = {}
    written = 0
    batch: list[list[Any]] = []
    with connection.cursor() as cursor, contextlib.ExitStack() as copying:
        for row in rows:
            params = []
            for i, (f, p) in enumerate(zip(fields, prep, strict=True)):
                value = row.get(f.attname, _REQUIRED)
                if value is _REQUIRED:
                    if ready[i] is _REQUIRED:
                        raise ValueError(f"insert_rows: {model.__name__}.{f.attname} has no default")
                    params.append(ready[i])
                elif p is None or value is None:
                    params.append(value)
                elif value is last[i]:
                    params.append(last_ready[i])
                else:
                    key = _names_key(i, value)
                    prepared = lists.get(key) if key is not None else None
                    if prepared is None:
                        prepared = p.get_db_prep_save(value, connection)
                        if key is not None and len(lists) < _LISTS_KEPT:
                            lists[key] = prepared
                    last[i], last_ready[i] = value, prepared
                    params.append(prepared)
            batch.append(params)
            if not postgres:
                if len(batch) >= BATCH:
                    cursor.executemany(insert + one, batch)
                    written += len(batch)
                    batch = []
            elif copy is not None or len(batch) > per:
                if copy is None:
                    connection.validate_no_broken_transaction()
                    copying.enter_context(connection.wrap_database_errors)  # psycopg's errors as Django's
                    copy = copying.enter_context(cursor.copy(f"COPY {table} ({columns}) FROM STDIN"))
                for params in batch:
                    copy.write_row(params)
                written += len(batch)
                batch = []
        if batch:
            if not postgres:
                cursor.executemany(insert + one, batch)
            elif copy is not None:
                for params in batch:
                    copy.write_row(params)
            else:
                cursor.execute(
                    insert + ", ".join([one] * len(batch)),
                    [v for params in batch for v in params],
                )
            written += len(batch)
    return written


_LISTS_KEPT = 10_000  # lists of names kept prepared in one call


def _names_key(i: int, value: Any) -> tuple[int, tuple[str, ...]] | None:
    """The memo key of a list of strings (None: anything else)."""
    if type(value) is list and all(type(v) is str for v in value):
        return (i, tuple(value))
    return None

"""Many rows in one `executemany` (a first pull at cluster size: 20,000
backends and 20,000 routes in one transaction).

`QuerySet.bulk_create` compiles every value of every row through the field
machinery (placeholder, pre_save, get_db_prep_save, the SQL of each row's
tuple): ~90 µs a row for a `Backend`, about two thirds of a first pull's
apply at 5,000 circuits. Here the statement is built once and each row is a
plain list of parameters; only the fields whose Python value is not already
what the driver takes (JSON, dates) go through `get_db_prep_save`. Rows get
no primary key back, nothing is sent as a signal (bulk_create sends none
either), and every column the caller leaves out takes its field's default.
"""

from __future__ import annotations

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
    quote = connection.ops.quote_name
    sql = "INSERT INTO {} ({}) VALUES ({})".format(
        quote(model._meta.db_table), ", ".join(quote(f.column) for f in fields), ", ".join(["%s"] * len(fields))
    )
    written = 0
    batch: list[list[Any]] = []
    with connection.cursor() as cursor:
        for row in rows:
            params = []
            for f, p, default in zip(fields, prep, defaults, strict=True):
                value = row.get(f.attname, default)
                if value is _REQUIRED:
                    raise ValueError(f"insert_rows: {model.__name__}.{f.attname} has no default")
                params.append(value if p is None or value is None else p.get_db_prep_save(value, connection))
            batch.append(params)
            if len(batch) >= BATCH:
                cursor.executemany(sql, batch)
                written += len(batch)
                batch = []
        if batch:
            cursor.executemany(sql, batch)
            written += len(batch)
    return written


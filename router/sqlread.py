"""Small reads a refresh makes in every web process, as plain SQL built once.

A change's refresh reads a few rows by name or id in every web process, and
Django compiling such a query (~0.3 ms of the interpreter each) was most of
what the refresh cost at cluster size. `InRead` builds the statement once
from the model's `_meta` and passes every value through the converters the
ORM itself would apply, so JSON comes back decoded on SQLite and on
PostgreSQL's jsonb alike (tests/router/test_mirror_reads.py,
tests/keys/test_changed_reads.py).
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Collection, Iterator, Mapping
from typing import Any

from django.db import connection

__all__ = ["InRead"]


class InRead:
    """``SELECT fields FROM <model> WHERE [col = %s AND …] where IN (…)``.

    `equal` holds fixed conditions (column = value), which let a partial
    index serve the read (``WHERE source = 'coordinator'``). Calling it with
    values yields one `Row` (a namedtuple of `fields`) per row found,
    PER_READ values per statement, in no order."""

    PER_READ = 1000  # placeholders per statement, well under every backend's limit

    def __init__(self, model: Any, fields: tuple[str, ...], where: str, equal: Mapping[str, Any] | None = None) -> None:
        self.model, self.fields, self.where = model, fields, where
        self.equal = dict(equal or {})
        self._fixed = list(self.equal.values())
        self.Row = namedtuple(f"{model.__name__}Row", fields)  # type: ignore[misc]
        self._built: dict[str, tuple[str, tuple[tuple[Any, tuple[Any, ...]], ...]]] = {}

    def _statement(self) -> tuple[str, tuple[tuple[Any, tuple[Any, ...]], ...]]:
        built = self._built.get(connection.vendor)
        if built is None:
            q, meta = connection.ops.quote_name, self.model._meta
            fields = [meta.get_field(name) for name in self.fields]
            columns = []
            for f in fields:
                col = f.get_col(meta.db_table)
                columns.append((col, tuple(connection.ops.get_db_converters(col) + col.get_db_converters(connection))))
            fixed = "".join(f"{q(meta.get_field(name).column)} = %s AND " for name in self.equal)
            head = (f"SELECT {', '.join(q(f.column) for f in fields)} FROM {q(meta.db_table)} "
                    f"WHERE {fixed}{q(meta.get_field(self.where).column)} IN ")
            built = self._built[connection.vendor] = (head, tuple(columns))
        return built

    def __call__(self, values: Collection[Any]) -> Iterator[Any]:
        if not values:
            return
        head, columns = self._statement()
        wanted, row, fixed = list(values), self.Row, self._fixed
        with connection.cursor() as cursor:
            for i in range(0, len(wanted), self.PER_READ):
                chunk = wanted[i : i + self.PER_READ]
                cursor.execute(head + "(" + ", ".join(["%s"] * len(chunk)) + ")", fixed + chunk)
                for raw in cursor.fetchall():
                    converted = []
                    for value, (col, converters) in zip(raw, columns, strict=True):
                        for convert in converters:
                            value = convert(value, col, connection)
                        converted.append(value)
                    yield row(*converted)

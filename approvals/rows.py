"""Rows of a hand-written SELECT back into model instances, as the ORM would build them.

The ORM is the rule; plain SQL is kept only for the few statements whose ORM
twin measured as a real share of a push (docs/benchmarks.md, "Hand-written SQL
and the ORM"): the key check that every API call makes reads its rows here. The
rows become real model instances, with the backend's converters applied as the
ORM would (SQLite's datetimes and booleans, say), so callers see no difference.
"""

from __future__ import annotations

from functools import cache

from django.db import connections
from django.db.models import Model


class Columns:
    """One model's concrete columns, as a SELECT list under a table alias, and back to an instance."""

    def __init__(self, model: type[Model], alias: str, using: str):
        self.model = model
        self.using = using
        connection = connections[using]
        quote = connection.ops.quote_name
        fields = model._meta.concrete_fields
        self.attnames = [field.attname for field in fields]
        self.sql = ", ".join(f"{alias}.{quote(field.column)}" for field in fields)
        self._converters = []
        for index, field in enumerate(fields):
            column = field.get_col(model._meta.db_table)
            found = connection.ops.get_db_converters(column) + column.get_db_converters(connection)
            if found:
                self._converters.append((index, found, column))

    def __len__(self) -> int:
        return len(self.attnames)

    def instance(self, values) -> Model:
        values = list(values)
        connection = connections[self.using]
        for index, converters, column in self._converters:
            for convert in converters:
                values[index] = convert(values[index], column, connection)
        return self.model.from_db(self.using, self.attnames, values)


@cache
def columns(model: type[Model], alias: str, using: str = "default") -> Columns:
    return Columns(model, alias, using)

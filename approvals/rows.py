"""Plain SQL for the few statements every request runs: model instances in, model instances out.

Compiling an ORM query costs several times more CPU than running it
(docs/benchmarks.md, pushes), so the reads that every API call makes (the key
check) are written once as SQL. The rows still become real model instances,
with the backend's converters applied as the ORM would (SQLite's datetimes and
booleans, say), so callers see no difference. ``insert`` is the write the same way.
"""

from __future__ import annotations

from functools import cache

from django.db import connections, transaction
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


def insert(instance: Model) -> None:
    """``instance.save(force_insert=True)`` as one plain ``INSERT``, for a model whose key is set.

    Each value is prepared by its field as the ORM's insert does (``pre_save``,
    then ``get_db_prep_save``: JSON as the backend's JSON, datetimes as its
    datetimes). No ``pre_save``/``post_save`` signals are sent: use it only for
    models nobody listens to (the push's ``Action``). The instance is then saved,
    as ``save()`` would leave it.
    """
    model = type(instance)
    if model._meta.auto_field is not None:
        raise TypeError(f"{model.__name__} has an auto-incremented key: save() it instead")
    connection = transaction.get_connection()
    quote = connection.ops.quote_name
    fields = model._meta.concrete_fields
    values = [
        field.get_db_prep_save(field.pre_save(instance, True), connection) for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(model._meta.db_table)}"
            f" ({', '.join(quote(field.column) for field in fields)})"
            f" VALUES ({', '.join(['%s'] * len(fields))})",
            values,
        )
    instance._state.adding = False
    instance._state.db = connection.alias

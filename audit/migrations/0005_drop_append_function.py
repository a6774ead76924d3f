"""PostgreSQL: the chain is appended in Python on both databases (``audit.chain``, issue 41).

Drops ``impri_audit_append`` (migration 0004); the append-only triggers (``audit.guards``)
stay. Events it appended verify as before: it hashed exactly as Python does.
"""

from importlib import import_module

from django.db import migrations

# The function as 0004 installed it: put back if this migration is reversed.
_0004 = import_module("audit.migrations.0004_append_function")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0004.DROP, params=None)


def restore(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(_0004.CREATE, params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0004_append_function"),
    ]

    operations = [migrations.RunPython(drop, restore, elidable=False)]

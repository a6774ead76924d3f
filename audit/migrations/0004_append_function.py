"""PostgreSQL: the function that appends to the chain under the head's lock (``audit.chain``).

On SQLite this migration does nothing: the append runs in Python there.
"""

from django.db import migrations

from audit import chain


def install(apps, schema_editor):
    chain.install(schema_editor)


def uninstall(apps, schema_editor):
    chain.uninstall(schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0003_trail_hashing_and_guards"),
    ]

    operations = [migrations.RunPython(install, uninstall)]

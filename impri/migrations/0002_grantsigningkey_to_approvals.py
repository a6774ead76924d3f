"""``GrantSigningKey`` is ``approvals``' now (approvals migration 0013): drop it from this app's
state. The table and its rows stay where they are, under the same name."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("impri", "0001_initial"),
        ("approvals", "0013_grantsigningkey_from_impri"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="GrantSigningKey")],
            database_operations=[],
        ),
    ]

"""``SsoIdentity`` leaves ``approvals``' state; ``identity`` 0001 holds it, same table and rows."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0014_issued_grants_key_last_signed"),
        ("identity", "0001_ssoidentity_from_approvals"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SsoIdentity")],
            database_operations=[],
        ),
    ]

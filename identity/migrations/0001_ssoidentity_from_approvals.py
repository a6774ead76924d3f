"""``SsoIdentity`` moves from ``approvals`` to ``identity`` in Django's state only.

The table (``approvals_ssoidentity``, made by approvals 0008) keeps its name, its rows and
its constraint: the model names it in ``db_table``. ``approvals`` 0015 removes the model
from its own state after this one adds it here. The content type follows the model, so
permissions granted on it and admin history still point at it.
"""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def move_content_type(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if (
        not content_types.objects.using(db)
        .filter(app_label="identity", model="ssoidentity")
        .exists()
    ):
        content_types.objects.using(db).filter(app_label="approvals", model="ssoidentity").update(
            app_label="identity"
        )


def move_content_type_back(apps, schema_editor):
    content_types = apps.get_model("contenttypes", "ContentType")
    db = schema_editor.connection.alias
    if (
        not content_types.objects.using(db)
        .filter(app_label="approvals", model="ssoidentity")
        .exists()
    ):
        content_types.objects.using(db).filter(app_label="identity", model="ssoidentity").update(
            app_label="approvals"
        )


class Migration(migrations.Migration):
    initial = True

    dependencies = [
        ("approvals", "0014_issued_grants_key_last_signed"),
        ("contenttypes", "0002_remove_content_type_name"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SsoIdentity",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("issuer", models.CharField(max_length=500)),
                        ("subject", models.CharField(max_length=255)),
                        ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                        ("last_login_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="sso_identities",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "SSO identity",
                        "verbose_name_plural": "SSO identities",
                        "db_table": "approvals_ssoidentity",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("issuer", "subject"), name="sso_identity_unique"
                            )
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(move_content_type, move_content_type_back, elidable=True),
    ]

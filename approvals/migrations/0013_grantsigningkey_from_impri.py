"""``GrantSigningKey`` becomes a model of ``approvals`` (it was the project's, ``impri``).

Only Django's picture of the models changes: the table stays
``impri_grantsigningkey`` with its rows (the model names it in ``db_table``),
so nothing is copied and no key is lost. ``impri``'s migration 0002 drops the
model from the project's state once this has run.
"""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0012_action_money"),
        ("impri", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="GrantSigningKey",
                    fields=[
                        (
                            "kid",
                            models.CharField(
                                help_text="RFC 7638 thumbprint.",
                                max_length=64,
                                primary_key=True,
                                serialize=False,
                            ),
                        ),
                        ("jwk", models.JSONField(help_text="The public key as a JWK (Ed25519).")),
                        (
                            "source",
                            models.CharField(
                                blank=True,
                                help_text="Where the process that published it read it.",
                                max_length=300,
                            ),
                        ),
                        ("published_at", models.DateTimeField(default=django.utils.timezone.now)),
                        (
                            "last_published_at",
                            models.DateTimeField(default=django.utils.timezone.now),
                        ),
                        (
                            "superseded_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="Rotated out: no longer signs, still verifies.",
                                null=True,
                            ),
                        ),
                        (
                            "retired_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="Removed from the JWKS (impri grantkey retire).",
                                null=True,
                            ),
                        ),
                    ],
                    options={
                        "verbose_name": "grant signing key",
                        "ordering": ["published_at", "kid"],
                        "db_table": "impri_grantsigningkey",
                    },
                ),
            ],
            database_operations=[],
        ),
    ]

"""A tool policy's ``money`` tells "not declared" (null) from "moves no money" ([]).

Until now an absent ``money:`` was stored as ``[]`` and read as not declared; ``[]``
now declares that a tool moves no money, so the rows stored before are made null:
they stay undeclared (held to the strictest guard), as they were read until now.
"""

from django.db import migrations, models


def undeclared(apps, schema_editor):
    ToolPolicy = apps.get_model("gateway", "ToolPolicy")
    for policy in ToolPolicy.objects.only("pk", "money"):
        if policy.money == []:
            ToolPolicy.objects.filter(pk=policy.pk).update(money=None)


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0002_pinned_tools"),
    ]

    operations = [
        migrations.AlterField(
            model_name="toolpolicy",
            name="money",
            field=models.JSONField(
                blank=True,
                default=None,
                help_text='the amounts the call moves: [{"amount": "amount_cents", "currency": "currency"}]; [] if it moves none; empty: not declared (held to the strictest guard)',
                null=True,
            ),
        ),
        migrations.RunPython(undeclared, migrations.RunPython.noop),
    ]

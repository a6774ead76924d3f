"""Actions record where their money is, and the amount every guard holds.

Existing actions are filled in as a push now would: ``payment.refund`` and
``payment.charge`` get their default declaration (``payload.amount_cents`` in
``payload.currency``); every other kind stays undeclared and its amount is
what the detector finds. The columns are derived data: reversing drops them.
"""

from django.db import migrations, models

DEFAULT_MONEY = [{"amount": "payload.amount_cents", "currency": "payload.currency"}]
DEFAULT_KINDS = ("payment.refund", "payment.charge")


def fill(apps, schema_editor):
    from rules.money import MoneySpec, amounts, largest

    Action = apps.get_model("approvals", "Action")
    changed = []
    for action in Action.objects.only("id", "kind", "payload").iterator(chunk_size=500):
        declared = action.kind in DEFAULT_KINDS
        specs = [MoneySpec.from_dict(m) for m in DEFAULT_MONEY] if declared else None
        top = largest(amounts({"payload": action.payload}, specs))
        action.money = DEFAULT_MONEY if declared else None
        action.amount_minor = top.minor if top is not None else None
        action.amount_currency = top.currency if top is not None and top.minor is not None else ""
        changed.append(action)
        if len(changed) >= 500:
            Action.objects.bulk_update(changed, ["money", "amount_minor", "amount_currency"])
            changed = []
    if changed:
        Action.objects.bulk_update(changed, ["money", "amount_minor", "amount_currency"])


class Migration(migrations.Migration):
    dependencies = [
        ("approvals", "0011_action_superseded_once"),
    ]

    operations = [
        migrations.AddField(
            model_name="action",
            name="amount_currency",
            field=models.CharField(blank=True, max_length=3),
        ),
        migrations.AddField(
            model_name="action",
            name="amount_minor",
            field=models.BigIntegerField(blank=True, db_index=True, null=True),
        ),
        migrations.AddField(
            model_name="action",
            name="money",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
    ]

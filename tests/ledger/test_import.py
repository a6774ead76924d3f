"""``impri ledger import``: Stripe's dashboard export and the generic CSV."""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from ledger.models import Movement

from .helpers import approved_refund, executed

pytestmark = pytest.mark.django_db

STRIPE = """id,Amount,Currency,Created (UTC),Charge ID,Status,impri_action_id (metadata)
re_csv1,84.00,usd,2026-12-01 10:00:00,ch_1,succeeded,{action}
re_csv2,12.50,usd,2026-12-01 11:00:00,ch_2,succeeded,
"""

GENERIC = """id,kind,amount_minor,currency,occurred_at,reference,action_id
adyen-1,refund,8400,EUR,2026-12-01T10:00:00+00:00,,
adyen-2,charge,1000,JPY,1796550000,psp-2,
"""


def _run(tmp_path, text: str, fmt: str) -> str:
    path = tmp_path / "export.csv"
    path.write_text(text)
    out = io.StringIO()
    call_command("ledger", "import", str(path), "--format", fmt, stdout=out)
    return out.getvalue()


def test_stripe_csv(tmp_path, agent, lead):
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    summary = _run(tmp_path, STRIPE.format(action=action.pk), "stripe-csv")
    assert "2 rows: 2 recorded, 0 already recorded" in summary
    assert "matched 1" in summary and "unapproved 1" in summary
    first = Movement.objects.get(external_id="re_csv1")
    assert (first.source, first.amount_minor, first.state) == ("stripe", 8400, "matched")
    assert Movement.objects.get(external_id="re_csv2").amount_minor == 1250
    again = _run(tmp_path, STRIPE.format(action=action.pk), "stripe-csv")
    assert "0 recorded, 2 already recorded" in again
    assert Movement.objects.count() == 2


def test_generic_csv(tmp_path, db):
    summary = _run(tmp_path, GENERIC, "generic-csv")
    assert "2 rows: 2 recorded" in summary
    assert Movement.objects.get(external_id="adyen-2").currency == "JPY"


def test_a_bad_row_records_nothing_and_names_line_and_column(tmp_path, db):
    bad = GENERIC.replace("8400,EUR", "84.00,EUR")
    with pytest.raises(CommandError, match="line 2: amount_minor"):
        _run(tmp_path, bad, "generic-csv")
    assert not Movement.objects.exists()

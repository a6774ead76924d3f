"""Time passes: an executed action with no movement after IMPRI_LEDGER_SETTLE_H is unsettled."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from ledger import services as ledger
from ledger.models import Settlement
from ledger.tasks import sweep_unsettled

from .helpers import approved_refund, deliver, event, executed, refund_obj

pytestmark = pytest.mark.django_db


def test_unsettled_after_the_settle_window(agent, lead, settings):
    settings.IMPRI_LEDGER_SETTLE_H = 24
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    now = timezone.now()
    with time_machine.travel(now + timedelta(hours=23), tick=False):
        sweep_unsettled()
        assert not Settlement.objects.filter(action=action, state="unsettled").exists()
    with time_machine.travel(now + timedelta(hours=25), tick=False):
        assert sweep_unsettled()["unsettled"] == 1
        assert Settlement.objects.get(action=action).state == "unsettled"
        assert sweep_unsettled()["unsettled"] == 0  # once
        # The refund shows up late: the later movement changes the state.
        meta = {"impri_action_id": action.pk}
        deliver(event("refund.created", refund_obj("re_late", 8400, metadata=meta)))
        assert Settlement.objects.get(action=action).state == "matched"


def test_unsettled_can_be_explained_and_stays_so(agent, lead, settings):
    from django.contrib.auth.models import Permission

    lead.user.user_permissions.add(Permission.objects.get(codename="reconcile"))
    action = approved_refund(agent.agent, lead.user)
    executed(action, agent.agent)
    with time_machine.travel(timezone.now() + timedelta(hours=30), tick=False):
        sweep_unsettled()
        from django.contrib.auth.models import User

        ledger.explain(
            User.objects.get(pk=lead.user.pk), reason="paid by bank transfer", action_id=action.pk
        )
        sweep_unsettled()
        assert Settlement.objects.get(action=action).state == "explained"

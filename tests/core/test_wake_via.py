"""``impri_wakes_total{via=...}``: each decision that wakes a wait is counted by how it came."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings
from django.utils import timezone

from approvals import services
from approvals.models import Action, ActionStatus
from plumbing import metrics
from tests.core.test_await import start_waiter
from tests.factories import make_action
from tests.project.test_metrics import TOKEN, samples, scrape

pytestmark = pytest.mark.django_db(transaction=True)


def wakes() -> dict[str, float]:
    return {
        via: metrics.registry.get_sample_value("impri_wakes_total", {"via": via})
        for via in ("push", "reread")
    }


def approve_unannounced(action_id: str) -> None:
    """Approve the row as a process the channel layer doesn't reach would: no message goes out."""
    Action.objects.filter(pk=action_id).update(
        status=ActionStatus.APPROVED, decided_at=timezone.now()
    )


def test_both_series_are_on_metrics_before_any_wake(settings):
    settings.IMPRI_METRICS_TOKEN = TOKEN
    got = samples(scrape())
    assert ("impri_wakes_total", (("via", "push"),)) in got
    assert ("impri_wakes_total", (("via", "reread"),)) in got


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_wake_by_a_channel_message_counts_as_push(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    before = wakes()
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    # The re-read comes every 30 s: an answer within 5 s was woken by the message.
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"
    assert wakes() == {"push": before["push"] + 1, "reread": before["reread"]}


@override_settings(IMPRI_AWAIT_REREAD_S=0.2)
async def test_a_wake_by_the_hubs_reread_counts_as_reread(agent):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    before = wakes()
    await sync_to_async(approve_unannounced)(action.pk)
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"
    assert wakes() == {"push": before["push"], "reread": before["reread"] + 1}


async def test_a_decision_seen_by_the_first_read_is_no_wake(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    before = wakes()
    result = await services.await_decision(action.pk, agent=agent.agent, timeout_s=5)
    assert result.status == "approved"
    assert wakes() == before

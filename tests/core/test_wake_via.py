"""``impri_wakes_total{via=...}``: each decision that wakes a wait is counted by how it came."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings
from django.utils import timezone

from approvals import events, services
from approvals.models import Action, ActionStatus
from plumbing import metrics
from tests.core.test_await import start_waiter
from tests.factories import make_action
from tests.project.test_metrics import TOKEN, samples, scrape
from waiting import hub as waiting

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
    result = await services.await_decision(
        action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=5
    )
    assert result.status == "approved"
    assert wakes() == before


@override_settings(IMPRI_AWAIT_REREAD_S=0.5)
async def test_a_wake_lost_on_the_layer_is_caught_by_the_reread_within_its_bound(agent, rita):
    """A real decision, its message sent on the real layer, and nobody hears it.

    The hub's channel is taken out of the action's group behind the hub's back
    (``group_discard``, the layer's public API), so the message the decision publishes
    reaches no one, as one lost in Redis would. The waiting agent, on the long-poll's
    consumer, still gets the decision: from the bounded re-read, within its interval and
    grace (a liveness bound of 10 s on a loaded machine; at 0.5 s a re-read it is ~1 s).
    """
    from impri.asgi import application
    from tests.agents.test_longpoll import answer, decision_path, start
    from tests.waits import until_parked

    action = await sync_to_async(make_action)(agent.agent)
    communicator = await start(application, decision_path(action), "timeout_s=60", agent.key)
    await until_parked(action.pk)
    hub = waiting.hub()
    await hub.layer.group_discard(events.action_group(action.pk), hub.channel)
    before = wakes()
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    status, _, body = await answer(communicator, timeout=10)
    assert (status, body["status"]) == (200, "approved")
    assert wakes() == {"push": before["push"], "reread": before["reread"] + 1}

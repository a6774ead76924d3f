"""await_decision: woken through the channel layer, correct without it."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from approvals import services
from tests.factories import make_action
from tests.waits import parked, until
from waiting import hub as waiting

pytestmark = pytest.mark.django_db(transaction=True)

DEAD_REDIS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": ["redis://127.0.0.1:1"]},
    },
    "waiting": {
        "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
        "CONFIG": {"hosts": ["redis://127.0.0.1:1"]},
    },
}


async def start_waiter(action, agent, timeout_s=20.0, **kw) -> asyncio.Task:
    task = asyncio.create_task(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent, timeout_s=timeout_s, **kw
        )
    )
    # Blocked in the hub (joined, first read done): a decision from now on must wake it.
    await until(lambda: parked(action.pk) or task.done())
    assert not task.done(), task.result()
    return task


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_waiter_wakes_when_a_reviewer_approves(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    await sync_to_async(services.decide)(
        action.pk, by=rita.user, verdict="approve", edits={"payload.amount_cents": 5000}
    )
    # The re-read interval is 30 s: returning within 5 s means the message woke it.
    result = await asyncio.wait_for(waiter, 5)
    assert result.status == "approved"
    assert result.payload["amount_cents"] == 5000


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_waiter_wakes_when_the_agent_cancels_elsewhere(agent):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    await sync_to_async(services.cancel_action)(action.pk, agent=agent.agent, reason="duplicate")
    assert (await asyncio.wait_for(waiter, 5)).status == "cancelled"


async def test_a_decision_before_the_wait_returns_at_once(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="reject", note="no")
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=60
        ),
        5,
    )
    assert result.status == "rejected"


async def test_the_wait_ends_pending_at_its_timeout(agent):
    action = await sync_to_async(make_action)(agent.agent)
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
        ),
        5,
    )
    assert result.status == "pending"


@override_settings(IMPRI_MAX_AWAIT_S=0.3)
async def test_the_timeout_is_capped_by_max_await(agent):
    action = await sync_to_async(make_action)(agent.agent)
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=3600
        ),
        5,
    )
    assert result.status == "pending"


async def test_progress_is_reported_while_waiting(agent):
    action = await sync_to_async(make_action)(agent.agent)
    ticks: list[float] = []

    async def on_progress(elapsed: float) -> None:
        ticks.append(elapsed)

    await services.await_decision(
        watch=waiting.hub().watch,
        action_id=action.pk,
        agent=agent.agent,
        timeout_s=0.5,
        on_progress=on_progress,
        progress_every_s=0.1,
    )
    assert len(ticks) >= 2
    assert ticks == sorted(ticks)


@override_settings(CHANNEL_LAYERS=DEAD_REDIS, IMPRI_AWAIT_REREAD_S=0.2)
async def test_without_a_channel_layer_the_waiter_still_sees_the_decision(agent, rita):
    hub = waiting.hub()
    async with hub.watch("act_probe"):
        assert not hub.layer_ok  # the layer really is unreachable
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    # The decision commits even though it cannot be published.
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"


async def test_a_cancelled_wait_leaves_the_action_pending(agent):
    action = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(action, agent.agent)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await sync_to_async(action.refresh_from_db)()
    assert action.status == "pending"

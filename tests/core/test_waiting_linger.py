"""A channel-layer group outlives its last waiter for a while: an agent's next call is free.

Agents' waits time out together and are sent again in bursts; a group left and joined
again for every re-poll queued thousands of layer calls ahead of the wake-up messages
(docs/benchmarks.md, "Wake tail under load").
"""

from __future__ import annotations

import asyncio
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import override_settings

from approvals import services
from tests.agents.test_mcp_unit import group_members
from tests.core.test_await import start_waiter
from tests.factories import make_action
from waiting import hub as waiting

pytestmark = pytest.mark.django_db(transaction=True)


def count_calls(monkeypatch, layer, name: str) -> list:
    """Record each call of the layer's ``name`` (channels' layer, not ours), still making it."""
    calls: list = []
    original = getattr(layer, name)

    async def counted(*args):
        calls.append(args)
        return await original(*args)

    monkeypatch.setattr(layer, name, counted)
    return calls


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_wait_sent_again_after_its_timeout_rejoins_nothing_and_is_woken(
    agent, rita, monkeypatch
):
    action = await sync_to_async(make_action)(agent.agent)
    first = await services.await_decision(
        action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
    )
    assert first.status == "pending"
    assert await sync_to_async(group_members)(action.pk) == 1  # still joined
    hub = waiting.hub()
    adds = count_calls(monkeypatch, hub.layer, "group_add")
    waiter = await start_waiter(action, agent.agent)  # the agent asks again
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"  # by the message
    assert adds == []


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_timed_out_wait_answers_without_waiting_for_the_layer(agent, monkeypatch):
    action = await sync_to_async(make_action)(agent.agent)
    hub = waiting.hub()
    gate = asyncio.Event()
    discard = hub.layer.group_discard

    async def stuck_discard(group, channel):
        await gate.wait()  # a layer call stuck in a queue behind a burst
        await discard(group, channel)

    monkeypatch.setattr(hub.layer, "group_discard", stuck_discard)
    started = time.monotonic()
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
        ),
        5,
    )
    assert result.status == "pending"
    assert time.monotonic() - started < 2
    gate.set()


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_lingering_group_is_left_by_the_sweep_and_joined_again_when_asked(agent, rita):
    action = await sync_to_async(make_action)(agent.agent)
    await services.await_decision(
        action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
    )
    hub = waiting.hub()
    assert hub._leave_idle(older_than_s=waiting.LINGER_S) == []  # too young to leave
    await asyncio.gather(*hub._leave_idle(older_than_s=0))
    assert await sync_to_async(group_members)(action.pk) == 0
    assert action.pk not in hub._joined
    waiter = await start_waiter(action, agent.agent)  # joins again
    assert await sync_to_async(group_members)(action.pk) == 1
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_join_during_the_sweeps_leave_lands_after_it(agent, rita, monkeypatch):
    """A group the sweep is leaving, asked for again: the group_add waits for the discard."""
    action = await sync_to_async(make_action)(agent.agent)
    await services.await_decision(
        action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
    )
    hub = waiting.hub()
    gate = asyncio.Event()
    discard = hub.layer.group_discard

    async def slow_discard(group, channel):
        await gate.wait()
        await discard(group, channel)

    monkeypatch.setattr(hub.layer, "group_discard", slow_discard)
    leaving = hub._leave_idle(older_than_s=0)
    waiter = asyncio.create_task(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=20
        )
    )
    await asyncio.sleep(0.05)  # the new wait is queued behind the leave
    gate.set()
    await asyncio.gather(*leaving)
    await asyncio.wait_for(asyncio.shield(hub._joins[action.pk]), 5)
    assert await sync_to_async(group_members)(action.pk) == 1
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_leave_that_times_out_leaves_the_next_waits_woken_by_message(
    agent, rita, monkeypatch
):
    """A group_discard past its timeout (a burst of leaves under load) is housekeeping
    undone, not the layer away: the next wait still joins its group and is woken by the
    message, not by the re-read (30 s here, so only a message answers within 5 s)."""
    action = await sync_to_async(make_action)(agent.agent)
    await services.await_decision(
        action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=0.2
    )
    hub = waiting.hub()

    async def timed_out(group, channel):
        raise TimeoutError

    monkeypatch.setattr(hub.layer, "group_discard", timed_out)
    await asyncio.gather(*hub._leave_idle(older_than_s=0))
    assert hub.layer_ok
    other = await sync_to_async(make_action)(agent.agent)
    waiter = await start_waiter(other, agent.agent)
    assert await sync_to_async(group_members)(other.pk) == 1
    await sync_to_async(services.decide)(other.pk, by=rita.user, verdict="approve")
    assert (await asyncio.wait_for(waiter, 5)).status == "approved"

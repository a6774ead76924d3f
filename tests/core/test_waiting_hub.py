"""The waiter hub: waits that cost no thread, one re-read for all."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

from approvals import services
from approvals.models import Action
from audit import log as audit
from audit.models import AuditEvent
from plumbing.database import database_sync_to_async
from tests.factories import make_action
from tests.waits import until_parked
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


async def test_many_waiters_hold_no_thread_each_and_all_wake(agent, rita):
    actions = [await sync_to_async(make_action)(agent.agent) for _ in range(120)]
    threads_before = threading.active_count()
    waits = [
        asyncio.create_task(
            services.await_decision(
                a.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=30
            )
        )
        for a in actions
    ]
    # Every waiter has done its one read and idles in the hub.
    await until_parked(count=len(actions), timeout=30)
    # 120 open waits; their reads ran on asgiref's one shared thread, none holds one.
    assert threading.active_count() - threads_before <= 2
    for action in actions:
        await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    done = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert {a.status for a in done} == {"approved"}
    assert waiting.waiting() == 0


def test_the_safety_net_reads_every_watched_action_in_one_query(agent, rita):
    actions = [make_action(agent.agent) for _ in range(40)]
    services.decide(actions[3].pk, by=rita.user, verdict="reject", note="no")
    services.cancel_action(actions[7].pk, agent=agent.agent)
    with CaptureQueriesContext(connection) as queries:
        settled = waiting.settled_among([a.pk for a in actions] + ["act_gone"])
    assert len(queries) == 1
    # Decided, cancelled, and one that no longer exists: none of them is pending.
    assert set(settled) == {actions[3].pk, actions[7].pk, "act_gone"}


@override_settings(CHANNEL_LAYERS=DEAD_REDIS, IMPRI_AWAIT_REREAD_S=0.2)
async def test_with_the_layer_down_the_batched_reread_wakes_every_waiter(agent, rita):
    actions = [await sync_to_async(make_action)(agent.agent) for _ in range(5)]
    waits = [
        asyncio.create_task(
            services.await_decision(
                a.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=30
            )
        )
        for a in actions
    ]
    await until_parked(count=len(actions))
    hub = waiting.hub()
    assert not hub.layer_ok
    for action in actions:
        await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    done = await asyncio.wait_for(asyncio.gather(*waits), 10)
    assert {a.status for a in done} == {"approved"}
    assert hub.rereads >= 1


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_closing_the_hub_answers_open_waits_with_pending_at_once(agent):
    action = await sync_to_async(make_action)(agent.agent)
    wait = asyncio.create_task(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=60
        )
    )
    await until_parked(action.pk)
    started = time.monotonic()
    waiting.hub().close()
    result = await asyncio.wait_for(wait, 5)
    assert result.status == "pending"
    assert time.monotonic() - started < 2


@override_settings(IMPRI_AWAIT_REREAD_S=30)
async def test_a_wait_past_the_expiry_answers_expired_without_a_sweep(agent):
    action = await sync_to_async(make_action)(agent.agent, expires_in_s=1)
    result = await asyncio.wait_for(
        services.await_decision(
            action.pk, watch=waiting.hub().watch, agent=agent.agent, timeout_s=20
        ),
        10,
    )
    assert result.effective_status == "expired"


async def test_database_calls_from_async_code_give_their_connection_back(agent):
    action_id = (await sync_to_async(make_action)(agent.agent)).pk

    def read_and_report():
        Action.objects.get(pk=action_id)
        return connection.connection is not None

    assert await database_sync_to_async(read_and_report)() is True

    def still_open() -> bool:
        return connection.connection is not None and connection.vendor != "sqlite"

    # The next call starts with no PostgreSQL connection held (given back to the pool).
    assert not any([await database_sync_to_async(still_open)() for _ in range(4)])


def test_a_transactions_events_are_appended_together_at_its_end(agent):
    from django.db import transaction

    before = AuditEvent.objects.count()
    with transaction.atomic(), audit.batch():
        first = audit.record("test.one", actor_type="system", actor_id="t")
        second = audit.record("test.two", actor_type="system", actor_id="t")
        assert AuditEvent.objects.count() == before  # queued, not yet written
    assert (first.seq, second.seq) == (before + 1, before + 2)
    assert second.prev_hash == first.hash
    assert audit.verify().ok


def test_a_block_that_fails_appends_nothing(agent):
    from django.db import transaction

    before = AuditEvent.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic(), audit.batch():
        audit.record("test.lost", actor_type="system", actor_id="t")
        raise RuntimeError("boom")
    assert AuditEvent.objects.count() == before
    assert audit.verify().ok


async def test_an_api_call_needs_nothing_from_the_shared_sync_thread(agent):
    """Django's handler gives each request a thread of its own (its ``ThreadSensitiveContext``,
    signals included): a busy shared sync thread (the long-poll's, the hub's) delays no API call."""
    from asgiref.sync import SyncToAsync
    from asgiref.testing import ApplicationCommunicator

    from impri.asgi import application

    release = threading.Event()
    busy = SyncToAsync.single_thread_executor.submit(release.wait, 30)
    try:
        call = ApplicationCommunicator(
            application,
            {
                "type": "http",
                "http_version": "1.1",
                "method": "GET",
                "path": "/api/v1/actions",
                "raw_path": b"/api/v1/actions",
                "query_string": b"",
                "root_path": "",
                "scheme": "http",
                "headers": [(b"authorization", f"Bearer {agent.key}".encode())],
                "client": ("127.0.0.1", 50000),
                "server": ("127.0.0.1", 8000),
            },
        )
        await call.send_input({"type": "http.request", "body": b""})
        start = await call.receive_output(10)
        body = await call.receive_output(10)
        assert start["status"] == 200, body
        assert b'"items"' in body["body"]
        assert not busy.done()  # answered while the shared thread was still held
    finally:
        release.set()
    assert busy.result() is True


async def test_a_wait_cancelled_while_its_group_is_joined_leaves_the_group_after(monkeypatch):
    """The leave waits for an in-flight join: a cancel during group_add leaves no membership."""
    from tests.agents.test_mcp_unit import group_members
    from tests.waits import until

    hub = waiting.hub()
    assert hub.layer is not None
    action_id = f"act_joinrace{time.time_ns()}"  # Redis keeps groups across test runs
    gate = asyncio.Event()
    group_add = hub.layer.group_add

    async def slow_group_add(group, channel):
        await gate.wait()  # the join is in flight until the test lets it finish
        await group_add(group, channel)

    monkeypatch.setattr(hub.layer, "group_add", slow_group_add)

    async def wait_there():
        async with hub.watch(action_id):
            await asyncio.sleep(60)

    waiter = asyncio.create_task(wait_there())
    await until(lambda: action_id in hub._joins)
    join = hub._joins[action_id]
    waiter.cancel()
    await asyncio.sleep(0.05)  # the cancelled waiter reaches its leave
    gate.set()
    await join
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.wait_for(waiter, 5)
    assert await sync_to_async(group_members)(action_id) == 0
    assert action_id not in hub._joined and action_id not in hub.watches


@override_settings(IMPRI_AWAIT_REREAD_S=0.2)
async def test_while_the_groups_are_joined_again_the_reread_goes_on_answering(
    agent, rita, monkeypatch
):
    """Coming back from a layer failure joins every watched group again, which took 20 s at
    2,000 waits; the re-read, the waits' only news meanwhile, runs beside it, not after it."""
    from tests.waits import until

    hub = waiting.hub()
    assert hub.layer is not None
    monkeypatch.setattr(waiting, "LAYER_CALL_TIMEOUT_S", 60.0)
    gate = asyncio.Event()
    group_add = hub.layer.group_add

    async def slow_group_add(group, channel):
        if group != waiting.PROBE_GROUP:
            await gate.wait()  # the rejoin's joins hang until the test lets them through
        await group_add(group, channel)

    monkeypatch.setattr(hub.layer, "group_add", slow_group_add)
    hub._start()
    hub._layer_failed("receive", TimeoutError())  # as a Redis gone away does
    action = await sync_to_async(make_action)(agent.agent)
    wait = asyncio.create_task(
        services.await_decision(action.pk, watch=hub.watch, agent=agent.agent, timeout_s=30)
    )
    await until_parked(action.pk)
    # Its join skipped the away layer: no message reaches it, only the re-read can.
    await sync_to_async(services.decide)(action.pk, by=rita.user, verdict="approve")
    try:
        done = await asyncio.wait_for(wait, 10)
    finally:
        gate.set()
    assert done.status == "approved"
    assert not hub.layer_ok  # the rejoin was still held: the re-read answered
    await until(lambda: hub.layer_ok, timeout=10)  # and the layer is back once the joins land

"""compat.channels_redis: the waiter hub reads every message queued for it in one call."""

from __future__ import annotations

import time

import pytest
from channels.layers import get_channel_layer
from channels_redis.core import RedisChannelLayer

from compat import channels_redis as compat_redis


async def test_the_hub_reads_every_message_queued_for_it_at_once():
    layer = compat_redis.own_instance(get_channel_layer())
    shared = get_channel_layer()
    channel = await layer.new_channel()
    group = f"impri.test.batch{time.time_ns()}"  # Redis keeps groups across test runs
    await layer.group_add(group, channel)
    try:
        for n in range(3):
            await shared.group_send(group, {"type": "action.update", "n": n})
        got = await compat_redis.receive_many(layer, channel)
    finally:
        await layer.group_discard(group, channel)
    if isinstance(shared, RedisChannelLayer):
        # Its own instance (a Redis key nobody else reads), one round trip for all three.
        assert layer is not shared
        assert [m["n"] for m in got] == [0, 1, 2]
    else:
        # The in-memory layer keeps its groups in the instance: the hub shares it.
        assert layer is shared
        assert [m["n"] for m in got] == [0]


async def test_under_redis_a_read_with_nothing_queued_comes_back_empty(monkeypatch):
    layer = compat_redis.own_instance(get_channel_layer())
    if not isinstance(layer, RedisChannelLayer):
        pytest.skip("the in-memory layer's receive blocks until a message comes")
    monkeypatch.setattr(compat_redis, "RECEIVE_BLOCK_S", 0.1)
    channel = await layer.new_channel()
    assert await compat_redis.receive_many(layer, channel) == []

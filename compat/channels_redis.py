"""channels_redis's private layout Impri reads: where a process's channel keeps its messages.

channels_redis's ``receive`` takes one message per four Redis round trips made one
after the other (its at-least-once bookkeeping: a cleanup script, the blocking pop, a
backup entry, and that entry's removal before the next read), and each round trip
waits for a turn of the event loop. Under a burst of requests (agents' waits timing
out and sent again together) every turn is slow: the waiter hub
(``approvals.services.waiting``) then read fewer messages a second than reviewers
decided, the messages queued up in Redis, and the safety-net re-read woke their
waiters seconds late (docs/benchmarks.md, "Wake tail under load"; 14 % of the wakes
at 50 decisions a second on a loaded machine, none with this module).

The hub's messages are hints (a lost one costs at most a re-read), so it reads its
channel's sorted set itself: every message queued there in one ``ZPOPMIN``, or, when
there is none, one blocking ``BZPOPMIN`` for the next. This relies on channels_redis's
layout: every channel ``"<prefix>!<name>"`` of one layer instance is stored in the one
sorted set ``layer.prefix + "<prefix>!"`` on the shard ``consistent_hash("<prefix>!")``,
the message (msgpack, with ``__asgi_channel__`` naming the channel) as the member
(``_map_channel_keys_to_connection``, ``receive_single``, ``deserialize``). Since a
process's websocket consumers keep their channels in the shared instance's set, the
hub reads one of an instance of its own (:func:`own_instance`): channels_redis names
each instance's set by a random prefix. Groups live in Redis, the same from either
instance. Bought: no re-read wakes at 20 or 50 decisions a second while 1,600 waits
were sent again (the numbers are in docs/benchmarks.md).

Re-read ``channels_redis/core.py`` (``receive_single``, ``_brpop_with_clean``,
``_map_channel_keys_to_connection``, ``deserialize``) and ``channels/layers.py``
(``non_local_name``, ``ChannelLayerManager.make_backend``) before moving
``WRITTEN_FOR`` (``tests/project/test_compat.py``).
"""

from __future__ import annotations

from channels import DEFAULT_CHANNEL_LAYER
from channels.layers import BaseChannelLayer, channel_layers
from channels_redis.core import RedisChannelLayer

WRITTEN_FOR = {"channels-redis": "4.3", "channels": "4.3"}
UPSTREAM = {
    "channels_redis.core:RedisChannelLayer.receive_single": "5a498bb3a2545bf1",
    "channels_redis.core:RedisChannelLayer._map_channel_keys_to_connection": "789f9193b4536625",
    "channels_redis.core:RedisChannelLayer.deserialize": "efb14181c02c1adf",
    "channels.layers:BaseChannelLayer.non_local_name": "1c760aa27cf174c5",
    "channels.layers:ChannelLayerManager.make_backend": "ded9fb9253fa5a66",
}

# Messages taken in one round trip, and how long one read blocks when there are none
# (below the Redis client's 15 s socket timeout, see impri/settings.py).
RECEIVE_BATCH = 500
RECEIVE_BLOCK_S = 5.0


def own_instance(layer: BaseChannelLayer | None) -> BaseChannelLayer | None:
    """A Redis layer of its own (same settings) for a reader of many messages at a time;
    any other layer as it is (the in-memory layer keeps its groups in the instance)."""
    if not isinstance(layer, RedisChannelLayer):
        return layer
    return channel_layers.make_backend(DEFAULT_CHANNEL_LAYER)


async def receive_many(layer: BaseChannelLayer, channel: str) -> list[dict]:
    """The messages waiting on ``channel``: every one queued, or the next to come.

    Under Redis, none when ``RECEIVE_BLOCK_S`` passes without one; at most once each
    (a message popped by a read that is then cancelled is lost: hints only).
    """
    if not isinstance(layer, RedisChannelLayer):
        return [await layer.receive(channel)]
    shared = layer.non_local_name(channel)
    key = layer.prefix + shared
    connection = layer.connection(layer.consistent_hash(shared))
    popped = await connection.zpopmin(key, RECEIVE_BATCH)
    if not popped:
        found = await connection.bzpopmin(key, timeout=RECEIVE_BLOCK_S)
        popped = [found[1:]] if found else []
    return [layer.deserialize(member) for member, _score in popped]

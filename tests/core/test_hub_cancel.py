"""The waiter hub's loops end when cancelled, even when a layer turns the cancel into an error.

A redis read cancelled mid-reply can come back as a connection error instead of
CancelledError; the receive loop catches layer errors to retry, so it would
outlive its cancel (seen as a test loop's teardown hanging, each retry waiting out
the 15 s socket timeout). The layer here is channels' own in-memory layer, made to
answer a cancel that way.
"""

from __future__ import annotations

import asyncio

import pytest
from channels.layers import InMemoryChannelLayer

from waiting.hub import WaiterHub


class CancelTurnedIntoAnError(InMemoryChannelLayer):
    async def receive(self, channel):
        try:
            return await super().receive(channel)
        except asyncio.CancelledError:
            raise ConnectionError("Timeout reading from 127.0.0.1:6379") from None


@pytest.mark.asyncio
async def test_the_receive_loop_ends_when_cancelled_whatever_the_layer_raises():
    hub = WaiterHub(asyncio.get_running_loop())
    hub.layer = CancelTurnedIntoAnError()
    hub._start()
    await asyncio.sleep(0.1)  # the loop is in the layer's receive
    receive = next(t for t in hub._tasks if t.get_name() == "impri-hub-receive")
    receive.cancel()
    done, _ = await asyncio.wait({receive}, timeout=3)
    assert done, "the receive loop outlived its cancel"
    assert receive.cancelled()
    for task in hub._tasks:
        task.cancel()
    await asyncio.gather(*hub._tasks, return_exceptions=True)

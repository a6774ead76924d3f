"""compat.daphne.InputQueue: what daphne's protocols and an ASGI application need of a queue."""

from __future__ import annotations

import asyncio

import pytest

from compat.daphne import InputQueue


async def test_messages_come_out_in_order_whether_put_before_or_during_a_get():
    queue = InputQueue()
    queue.put_nowait({"n": 1})
    queue.put_nowait({"n": 2})
    assert await queue.get() == {"n": 1}
    assert await queue.get() == {"n": 2}
    getter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.put_nowait({"n": 3})
    assert await asyncio.wait_for(getter, 1) == {"n": 3}


async def test_a_getter_cancelled_after_its_message_arrived_gives_it_back():
    queue = InputQueue()
    getter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    queue.put_nowait({"type": "http.disconnect"})  # handed over, the getter not yet run
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    assert await asyncio.wait_for(queue.get(), 1) == {"type": "http.disconnect"}


async def test_a_getter_cancelled_while_waiting_loses_nothing_later():
    queue = InputQueue()
    getter = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    getter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await getter
    queue.put_nowait("after")
    assert await asyncio.wait_for(queue.get(), 1) == "after"


async def test_it_is_always_true_and_takes_one_getter_at_a_time():
    queue = InputQueue()
    assert queue  # daphne tests `if self.application_queue:` before a disconnect
    first = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one getter"):
        await queue.get()
    first.cancel()


async def test_a_message_given_back_goes_to_the_getter_parked_since():
    queue = InputQueue()
    first = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    queue.put_nowait({"type": "http.disconnect"})  # handed to the first getter, not yet run
    first.cancel()
    # A second reader parks before the first one runs (stepped by hand: a task's first
    # step would be scheduled after the first getter's wake-up).
    second = queue.get()
    parked = second.send(None)
    assert isinstance(parked, asyncio.Future) and not parked.done()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert parked.done()  # the message went to the parked reader, not back in the queue
    with pytest.raises(StopIteration) as done:
        second.send(None)
    assert done.value.value == {"type": "http.disconnect"}

"""ConversationBus: waits wake on a notification, time out, and all end at once on close."""

from __future__ import annotations

import asyncio

import pytest

from bot.errors import ShuttingDown
from bot.runtime.bus import ConversationBus


async def parked(bus: ConversationBus, count: int) -> None:
    """Let the waiting tasks run until `count` of them are parked on the bus."""
    while bus.waiting() < count:
        await asyncio.sleep(0)


async def test_a_notification_wakes_the_waiters_of_that_conversation_and_of_any() -> None:
    bus = ConversationBus()
    mine, any_, other = (asyncio.create_task(w) for w in (bus.wait("c1", 30), bus.wait_any(30), bus.wait("c2", 0.05)))
    await parked(bus, 3)
    bus.notify("c1")
    assert await mine is True
    assert await any_ is True
    assert await other is False, "a waiter of another conversation woke on c1's notification"
    assert bus.waiting() == 0


async def test_close_answers_every_parked_wait_at_once_and_refuses_new_ones() -> None:
    bus = ConversationBus()
    waits = [asyncio.create_task(w) for w in (bus.wait("c1", 30), bus.wait("c1", 30), bus.wait_any(30))]
    await parked(bus, 3)
    bus.close()
    async with asyncio.timeout(1):  # each wait had 30 s left
        results = await asyncio.gather(*waits, return_exceptions=True)
    assert [type(r) for r in results] == [ShuttingDown] * 3
    assert bus.waiting() == 0
    with pytest.raises(ShuttingDown):
        await bus.wait("c2", 30)
    with pytest.raises(ShuttingDown):
        await bus.wait_any(30)


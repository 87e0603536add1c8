"""bot/runtime/locks.py: one lock per key, gone when nobody holds or waits for it."""

from __future__ import annotations

import asyncio
import gc
import weakref

from bot.runtime.locks import KeyedLocks


async def test_one_key_is_one_lock_and_other_keys_do_not_wait() -> None:
    locks = KeyedLocks()
    async with locks["conversation-a"]:
        assert locks["conversation-a"].locked()
        assert not locks["conversation-b"].locked()


async def test_holders_of_one_key_take_turns_in_arrival_order() -> None:
    locks = KeyedLocks()
    order: list[str] = []
    gate = asyncio.Event()

    async def work(name: str) -> None:
        async with locks["chat"]:
            order.append(f"{name} in")
            await gate.wait()
            order.append(f"{name} out")

    tasks = [asyncio.create_task(work(n)) for n in ("first", "second")]
    while not order:
        await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "first out", "second in", "second out"]


async def test_a_lock_nobody_holds_is_forgotten() -> None:
    locks = KeyedLocks()
    async with locks["c1"]:
        pass
    forgotten = weakref.ref(locks["c1"])
    gc.collect()
    assert forgotten() is None  # the table of locks did not keep it alive
    held = locks["c2"]
    async with held:
        gc.collect()
        assert locks["c2"] is held  # while someone holds it, the same key is the same lock

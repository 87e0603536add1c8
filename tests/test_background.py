"""bot/runtime/background.py: tasks the server owns, waited for or cancelled at shutdown."""

from __future__ import annotations

import asyncio

from bot.runtime.background import Background


async def test_settle_waits_for_tasks_and_the_tasks_they_spawn() -> None:
    background = Background()
    done: list[str] = []

    async def child() -> None:
        await asyncio.sleep(0)
        done.append("child")

    async def parent() -> None:
        await asyncio.sleep(0)
        background.spawn(child(), name="child")
        done.append("parent")

    background.spawn(parent(), name="parent")
    assert background.pending == 1
    await background.settle()
    assert done == ["parent", "child"]
    assert background.pending == 0


async def test_a_failing_task_is_dropped_and_does_not_stop_settle() -> None:
    background = Background()

    async def boom() -> None:
        raise RuntimeError("boom")

    async def fine() -> str:
        return "ok"

    failing = background.spawn(boom(), name="boom")
    working = background.spawn(fine(), name="fine")
    await background.settle()
    assert isinstance(failing.exception(), RuntimeError)
    assert working.result() == "ok"
    assert background.pending == 0


async def test_close_cancels_what_outlives_the_grace_period() -> None:
    background = Background()
    forever = background.spawn(asyncio.Event().wait(), name="forever")
    quick = background.spawn(asyncio.sleep(0), name="quick")
    await background.close(grace=0.01)
    assert forever.cancelled()
    assert quick.done()
    assert not quick.cancelled()
    assert background.pending == 0

"""Background tasks the server owns, so none is garbage-collected mid-flight or forgotten
at shutdown, and tests (and the demo) can wait until all follow-up work is done."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from bot.runtime import effects

log = structlog.get_logger(__name__)


class Background:
    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        # Started without the spawning request's effect mark: follow-up work is not its effect.
        task = asyncio.create_task(coro, name=name, context=effects.detached())
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background_task_failed", task=task.get_name(), exc_info=task.exception())

    @property
    def pending(self) -> int:
        return len(self._tasks)

    async def settle(self) -> None:
        """Wait until no task is left, including tasks spawned by the tasks waited for."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self, grace: float = 5.0) -> None:
        """Let running work finish for up to `grace` seconds, then cancel what is left (a
        task cancelled mid-transaction only rolls back, but finishing is kinder)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=grace)
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self._tasks.clear()

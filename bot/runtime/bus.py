"""In-process wake-ups for pages and clients waiting on a conversation.

The database stays the source of truth: a waiter that wakes re-reads it, and waiters also
wake on a timeout, so a message written by another server instance shows up within one
poll interval even though this bus only spans one process.

Writers do not call `notify` themselves: the `Changed` signals a transaction recorded are
published once it commits (`bot/runtime/signals.py`), so nobody is woken for a rolled-back
write, and each conversation once per transaction.

On shutdown the bus is closed: every wait, parked or new, ends at once with `ShuttingDown`.
The server waits for open requests before it stops, and a long-poll parked for 25 s would
otherwise hold the shutdown until the server gives up and cancels it mid-request.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from bot.errors import ShuttingDown


class ConversationBus:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._any: set[asyncio.Event] = set()
        self._closed = False

    def notify(self, conversation_id: str) -> None:
        for event in (*self._waiters.get(conversation_id, ()), *self._any):
            event.set()

    def waiting(self) -> int:
        """How many waits are parked right now (a metric; shutdown answers them all)."""
        return len(self._parked())

    def close(self) -> None:
        """End every wait now and refuse new ones: the server is stopping."""
        self._closed = True
        for event in self._parked():
            event.set()

    def _parked(self) -> list[asyncio.Event]:
        return [*(event for waiters in self._waiters.values() for event in waiters), *self._any]

    async def wait_any(self, timeout: float) -> bool:
        """Wait for a notification on any conversation (the inbox list: a handoff may start
        in a conversation it does not show yet); False on timeout, ShuttingDown once closed."""
        return await self._wait_in(self._any, timeout)

    async def wait(self, conversation_id: str, timeout: float) -> bool:
        """Wait for a notification on this conversation; False on timeout, ShuttingDown once closed."""
        try:
            return await self._wait_in(self._waiters[conversation_id], timeout)
        finally:
            if conversation_id in self._waiters and not self._waiters[conversation_id]:
                del self._waiters[conversation_id]  # the last waiter of this conversation left

    async def _wait_in(self, waiters: set[asyncio.Event], timeout: float) -> bool:
        """Wait, as one of `waiters`, until notified, closed or `timeout` seconds pass."""
        if self._closed:
            raise ShuttingDown()
        event = asyncio.Event()
        waiters.add(event)
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            return False
        finally:
            waiters.discard(event)
        if self._closed:
            raise ShuttingDown()
        return True

"""In-process wake-ups for pages and clients waiting on a conversation.

The database stays the source of truth: a waiter that wakes re-reads it, and waiters also
wake on a timeout, so a message written by another server instance shows up within one
poll interval even though this bus only spans one process.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict


class ConversationBus:
    def __init__(self) -> None:
        self._waiters: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._any: set[asyncio.Event] = set()

    def notify(self, conversation_id: str) -> None:
        for event in (*self._waiters.get(conversation_id, ()), *self._any):
            event.set()

    async def wait_any(self, timeout: float) -> bool:
        """Wait for a notification on any conversation (the inbox list: a handoff may start
        in a conversation it does not show yet); False on timeout."""
        return await _wait_in(self._any, timeout)

    async def wait(self, conversation_id: str, timeout: float) -> bool:
        """Wait for a notification on this conversation; False on timeout."""
        try:
            return await _wait_in(self._waiters[conversation_id], timeout)
        finally:
            if conversation_id in self._waiters and not self._waiters[conversation_id]:
                del self._waiters[conversation_id]  # the last waiter of this conversation left


async def _wait_in(waiters: set[asyncio.Event], timeout: float) -> bool:
    """Wait, as one of `waiters`, until notified or `timeout` seconds pass."""
    event = asyncio.Event()
    waiters.add(event)
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
        return True
    except TimeoutError:
        return False
    finally:
        waiters.discard(event)

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
        event = asyncio.Event()
        self._any.add(event)
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            self._any.discard(event)

    async def wait(self, conversation_id: str, timeout: float) -> bool:
        """Wait for a notification on this conversation; False on timeout."""
        event = asyncio.Event()
        self._waiters[conversation_id].add(event)
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
            return True
        except TimeoutError:
            return False
        finally:
            waiters = self._waiters.get(conversation_id)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[conversation_id]

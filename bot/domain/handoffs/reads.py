"""What the pages, the inbound flow and the tools ask of handoffs without changing them:
who is on the line, which handoff a thread belongs to, whom a route notified.

Each answer is one read session of its own, outside any transaction; "joined" is decided by
what happened (a person's reply is stored), never assumed at dispatch.
"""

from __future__ import annotations

from collections.abc import Collection

from sqlalchemy import select
from sqlmodel import col

from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import UNKNOWN_WAIT, HandoffContext
from bot.domain.handoffs.outcomes import OnTheLine
from bot.domain.ladder import InThread
from bot.store.models import HandoffRecipient, HandoffSession, Message
from bot.store.vocabulary import HandoffState
from channels.base import DirectLine


class Reads:
    """The service's questions about handoffs as stored now."""

    def __init__(self, ctx: HandoffContext) -> None:
        self.ctx = ctx

    async def on_the_line(self, conversation_id: str) -> OnTheLine | None:
        """Who is on the line in the conversation's active handoff, if it has one. "Joined"
        is decided by what happened (a person's reply is stored), never assumed at dispatch."""
        async with self.ctx.db.read() as session:
            handoff = await rows.open_handoff(session, conversation_id)
            if handoff is None or handoff.state != HandoffState.ACTIVE:
                return None
            first_reply = (await session.scalars(
                select(Message)
                .where(col(Message.conversation_id) == conversation_id, col(Message.handoff_session_id) == handoff.id,
                       col(Message.role) == "human")
                .order_by(col(Message.id)).limit(1)
            )).first()
        waited = handoff.estimated_response or UNKNOWN_WAIT
        if first_reply is None:
            return OnTheLine(joined=False, name=self.ctx.public_name(handoff), estimated_response=waited)
        return OnTheLine(joined=True, name=first_reply.author or self.ctx.public_name(handoff), estimated_response=waited)

    async def by_thread(self, channel_id: int, thread_key: str) -> HandoffSession | None:
        """The active session a recipient's reply in this thread belongs to."""
        found = await self.in_thread(channel_id, thread_key)
        return found.handoff if found is not None else None

    async def in_thread(self, channel_id: int, thread_key: str) -> InThread | None:
        """The active session a recipient's thread belongs to and, on a route, which of its
        recipients the thread is. A handoff straight to a channel is found by its own row, as
        before routes; only a miss (or a routed row) looks at the recipients."""
        async with self.ctx.db.read() as session:
            handoff = await rows.active_in_thread(session, channel_id, thread_key)
            if handoff is not None and handoff.route_id is None:
                return InThread(handoff, None)
            return await recipients.active_in_thread(session, channel_id, thread_key)

    async def recipient_on(self, sid: str, channel_id: int) -> HandoffRecipient | None:
        async with self.ctx.db.read() as session:
            return await recipients.on_channel(session, sid, channel_id)

    async def direct_lines(self, channel_id: int) -> list[DirectLine]:
        """What a channel sent to people directly and is still theirs: its adapter reads them
        on start, so its people's lines survive a restart (`ChannelContext.open_lines`)."""
        async with self.ctx.db.read() as session:
            found = await recipients.open_direct(session, channel_id)
        return [DirectLine(handoff.id, handoff.short_code, dict(recipient.thread)) for recipient, handoff in found]

    async def recipients_of(self, sid: str) -> list[HandoffRecipient]:
        """Every channel a handoff on a route notified, in order (none for one straight to a channel)."""
        async with self.ctx.db.read() as session:
            return await recipients.of_handoff(session, sid)

    async def recipients_of_many(self, sids: Collection[str]) -> dict[str, list[HandoffRecipient]]:
        """`recipients_of` for several handoffs, in one read (a listing's)."""
        async with self.ctx.db.read() as session:
            return await recipients.of_handoffs(session, sids)

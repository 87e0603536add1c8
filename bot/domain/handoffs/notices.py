"""What the desk says on a handoff's behalf, and where it goes.

To the subscriber: the desk's own word (who was asked, who took it, that the assistant is
back), from templates the owner can reword, so no agent has to remember to say it. To the
people: a subscriber's message relayed, or a notice (claimed, taken, released, a reminder, a
fresh form link), queued in the outbox on the handoff's *lines*: its one line, or, on a route
nobody has claimed, every recipient reached, each on a lane of its own so a slow channel never
holds up another's messages. Everything is queued in the caller's transaction: it is sent
only if the change it speaks of commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from bot.config import format_duration
from bot.domain import conversations
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import UNKNOWN_WAIT, HandoffContext
from bot.store.models import Conversation, HandoffRecipient, HandoffSession, Message
from bot.store.vocabulary import RecipientState, Role
from channels.base import Notice, NoticeAbout, Relay

Line = tuple[int, dict[str, Any], int | str | None]
"""Where a handoff's message goes: the channel, the thread there, and its lane (bot/delivery/outbox.py)."""


def line_of(recipient: HandoffRecipient) -> Line:
    """A route's recipient's own line: the thread its dispatch landed in, on its channel's
    lane (a person reached directly has their own: their lane key)."""
    return (recipient.channel_id, recipient.thread, recipient.channel_id if recipient.person_id is None else recipient.lane_key)


class Notices:
    """The desk's voice on a handoff: to its subscriber, and on its lines."""

    def __init__(self, ctx: HandoffContext) -> None:
        self.ctx = ctx

    async def tell_subscriber(
        self, session: AsyncSession, handoff: HandoffSession, template: str, now: datetime, **extra: Any,
    ) -> None:
        """The desk's own word to the subscriber (who was asked, that the assistant is back),
        from a template the owner can reword, so no agent has to remember to say it."""
        text = self.ctx.renderer.render(
            template, public_name=self.ctx.public_name(handoff), label=handoff.channel_label,
            idle_timeout=format_duration(self.ctx.idle_timeout),
            estimated_response=handoff.estimated_response or UNKNOWN_WAIT, **extra,
        ).strip()
        if text:
            await conversations.add_message(
                session, handoff.conversation_id, role=Role.AGENT, text=text, now=now, handoff_session_id=handoff.id,
            )

    async def queue_relay(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, message: Message, now: datetime
    ) -> None:
        """Queue a subscriber's message to the handoff's line; on a route nobody has claimed
        yet, to every channel reached (each channel's messages in order on their own lane)."""
        author = conversation.subscriber_name or "Subscriber"
        text = self.ctx.renderer.render("messages/relay.txt", author=author, text=message.text, short_code=handoff.short_code)
        for channel_id, thread, lane in await self.lines(session, handoff):
            outbound = Relay(handoff_id=handoff.id, text=text, author=author, body=message.text, thread=thread, lane=lane)
            await self.ctx.outbox.queue(session, channel_id=channel_id, outbound=outbound, now=now, message_id=message.id)

    async def lines(self, session: AsyncSession, handoff: HandoffSession) -> list[Line]:
        """Where the handoff's messages go, as (channel, thread, lane): its one line, or, on a
        route nobody has claimed, every recipient reached (none once someone took it from a
        page, the inbox, where they read the conversation itself). On a route each channel has a lane
        of its own (a slow channel never holds up another's messages)."""
        if handoff.route_id is None:
            return [(handoff.channel_id, handoff.thread, None)]
        if handoff.claimed_at is not None:
            if handoff.claimed_recipient_id is None:  # taken where no dispatch went (the inbox page): no thread of it
                return []
            return [(handoff.channel_id, handoff.thread, handoff.channel_id)]
        reached = await recipients.of_handoff(session, handoff.id, state=RecipientState.NOTIFIED)
        return [line_of(r) for r in reached] or [(handoff.channel_id, handoff.thread, handoff.channel_id)]

    async def notify(
        self, session: AsyncSession, handoff: HandoffSession, about: NoticeAbout, text: str, now: datetime,
        *, to: Sequence[Line] | None = None,
    ) -> None:
        """A notice to the handoff's lines (or to `to`)."""
        for channel_id, thread, lane in to if to is not None else await self.lines(session, handoff):
            await self.ctx.outbox.queue(
                session, channel_id=channel_id, now=now,
                outbound=Notice(handoff_id=handoff.id, text=text, thread=thread, about=about, lane=lane),
            )

"""`/link CODE` from a channel: the sender's provider identity becomes the code's person's.

A person signed in to the inbox takes a one-time code ("Link a channel") and sends it from
the channel: whoever can write from that provider account holds it. Two ways in:

- written in a handoff's thread (any channel that delivers recipients' replies: threads,
  replies, e-mail replies, a shared staff line), it reaches the core as a `RecipientText`; the inbound flow hands it here
  before anything else, so it never reaches the subscriber, never claims and never releases;
  the answer is a notice ("linking") on the line it came from, when that thread still has
  an active handoff (otherwise the link is made and nobody can be told);
- written to the bot outside any handoff (a private chat or direct message, a top-level
  message where the adapter says so), the adapter sends a `LinkRequest` carrying where to
  answer, and the answer is an `Answer` there.

Either way the answer is queued in the outbox in the transaction that uses up the code
(bot/domain/people/linking.py), so it is sent exactly when the link is made. The identity is
the provider's user id under the channel's configured kind (an e-mail reply's sender
address under "email").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from bot.delivery.outbox import Outbox
from bot.domain.handoffs import Handoffs
from bot.domain.people import LinkCodes, LinkOutcome, Redeemed
from bot.domain.rendering import Renderer
from bot.flow.shared_lines import SharedLines
from bot.runtime.clock import Clock
from bot.store.db import Database
from channels.base import Answer, LinkRequest, Notice, Outbound, RecipientText

TEMPLATE = "messages/link_answer.txt"
# What the inbound event records: the outcome, for the owner's eyes (bot/flow/inbound.py)
RESULTS = {
    LinkOutcome.LINKED: "linked",
    LinkOutcome.UNKNOWN: "not linked: the code is unknown, used or expired",
    LinkOutcome.TAKEN: "not linked: this identity is already someone else's",
}

Say = Callable[[AsyncSession, str], Awaitable[None]]
"""Queues the desk's answer (its text) where the `/link` came from, in the caller's transaction."""


class ChannelLinking:
    def __init__(self, *, db: Database, clock: Clock, codes: LinkCodes, handoffs: Handoffs, lines: SharedLines,
                 outbox: Outbox, renderer: Renderer, kind_of: Callable[[int], str],
                 shared_line: Callable[[int], bool]) -> None:
        self.db, self.clock, self.codes, self.handoffs, self.lines = db, clock, codes, handoffs, lines
        self.outbox, self.renderer = outbox, renderer
        self._kind_of = kind_of  # channel id -> the channel's kind: the identity's kind
        self._shared_line = shared_line

    async def in_thread(self, channel_id: int, message: RecipientText, code: str) -> str:
        """`/link CODE` written in a thread: answered on the handoff line it came from."""
        notice = await self._notice_in(channel_id, message.thread_key)
        say = self._queue(channel_id, notice) if notice is not None else None
        result = await self._redeem(channel_id, code, message.user_id, message.author, say)
        return result if say is not None else f"{result} (no active handoff in this thread to answer in)"

    async def in_chat(self, channel_id: int, request: LinkRequest) -> str:
        """`/link CODE` written to the bot outside any handoff: answered where it was written."""
        return await self._redeem(channel_id, request.code, request.user_id, request.author,
                                  self._queue(channel_id, lambda text: Answer(text=text, to=request.reply_to)))

    async def _redeem(self, channel_id: int, code: str, user_id: str | None, author: str | None, say: Say | None) -> str:
        kind = self._kind_of(channel_id)
        if not user_id:  # an anonymous group admin, the inbox's own door: there is no identity to link
            if say is not None:
                async with self.db.transaction(effect=True) as session:
                    await say(session, self._text(kind, "anonymous"))
            return "not linked: this message does not say who sent it"

        async def answer(session: AsyncSession, redeemed: Redeemed) -> None:
            if say is not None:
                await say(session, self._text(kind, redeemed.outcome, redeemed.person.name if redeemed.person else None))

        who = " ".join((author or "").split())[:100] or "someone"
        redeemed = await self.codes.redeem(code, kind=kind, value=user_id, actor=f"{who} (channel:{channel_id})",
                                           answer=answer)
        if redeemed.person is not None:
            return f"{RESULTS[redeemed.outcome]} to {redeemed.person.id}"
        return RESULTS[redeemed.outcome]

    def _text(self, kind: str, outcome: str, name: str | None = None) -> str:
        return self.renderer.render(TEMPLATE, outcome=outcome, kind=kind, person=name).strip()

    def _queue(self, channel_id: int, outbound: Callable[[str], Outbound]) -> Say:
        async def say(session: AsyncSession, text: str) -> None:
            await self.outbox.queue(session, channel_id=channel_id, now=self.clock.now(), outbound=outbound(text))
        return say

    async def _notice_in(self, channel_id: int, thread_key: str) -> Callable[[str], Notice] | None:
        """How to answer in a thread: a notice on the line of its active handoff (on a shared
        line, the focused one's), or None when the thread has none."""
        handoff_id: str
        thread: dict[str, Any]
        lane: int | None = None
        if self._shared_line(channel_id):
            focused = await self.lines.focused(channel_id, thread_key)
            if focused is None:
                return None
            handoff_id, thread = focused.id, focused.thread
        else:
            found = await self.handoffs.in_thread(channel_id, thread_key)
            if found is None:
                return None
            handoff_id, thread = found.handoff.id, found.handoff.thread
            if found.recipient is not None:  # on a route: this recipient's own thread, on its channel's lane
                thread, lane = found.recipient.thread, found.recipient.channel_id
        return lambda text: Notice(handoff_id=handoff_id, text=text, thread=thread, about="linking", lane=lane)

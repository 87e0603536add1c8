"""Relaying, both ways: a subscriber's message to the people on the handoff's lines, a
person's reply (or their `/release`) back to the subscriber.

Every relayed message runs one conditional UPDATE on the row (`bump`): it pushes the idle
deadline out and doubles as the activity check, so a message racing a release is either
part of the handoff or refused, never relayed into a released one. While the dispatch is in
flight a subscriber's message is held (stored with the handoff's id) and relayed by the
activation; the UPDATE orders it against that activation, so it is never missed.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, case, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain.handoffs.context import HandoffContext, handoff_in, seconds_to_person
from bot.domain.handoffs.inputs import parse_release_command
from bot.domain.handoffs.notices import Notices
from bot.domain.handoffs.outcomes import NotActive, ReleaseResult
from bot.domain.handoffs.release import Releases
from bot.errors import found
from bot.store import audit, prepared
from bot.store.db import execute_dml
from bot.store.models import Conversation, HandoffSession, Message
from bot.store.vocabulary import HandoffState, ReleaseReason, Role

# Prepared once: every relayed message, both ways, runs it (bot/store/prepared.py)
_BUMP = prepared.Prepared(
    update(HandoffSession.__table__)  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models
    .where(col(HandoffSession.id) == bindparam("sid"), col(HandoffSession.state) == HandoffState.ACTIVE)
    # While a route's ladder deadline runs the idle timer does not: it starts at the claim.
    .values(last_activity_at=bindparam("now"), idle_deadline=case(
        (col(HandoffSession.escalate_at).is_(None), bindparam("deadline", type_=rows.HANDOFFS.c.idle_deadline.type)),
        else_=col(HandoffSession.idle_deadline),
    ))
)


class Relaying:
    """Messages between the subscriber and the person on a handoff."""

    def __init__(self, ctx: HandoffContext, notices: Notices, releases: Releases) -> None:
        self.ctx, self.notices, self.releases = ctx, notices, releases

    async def bump(self, session: AsyncSession, sid: str, now: datetime) -> bool:
        """Push the idle deadline out; False when the session is not active (any more).

        This UPDATE doubles as the activity check, so a message racing a release is either
        part of the session or refused — never relayed into a released one. An ORM copy of
        the row loaded earlier in the session keeps its old deadline."""
        params = {"sid": sid, "now": now, "deadline": now + self.ctx.idle_timeout}
        return await prepared.execute(session, _BUMP, params) == 1

    async def route_subscriber_message(
        self, session: AsyncSession, conversation: Conversation, text: str, now: datetime
    ) -> tuple[Message, HandoffSession] | None:
        """Store a subscriber message meant for a person, in the caller's transaction, and
        queue its relay. Returns None when no handoff is open: the message is the agent's.

        While the dispatch is still in flight the message is held (stored with the handoff's
        id) and relayed the moment the channel confirms; the conditional UPDATE on the
        session row orders it against the activation, so it is never missed."""
        handoff = await rows.open_handoff(session, conversation.id)
        if handoff is None:
            return None
        if handoff.state == HandoffState.DISPATCHING:
            held = await execute_dml(
                session,
                update(HandoffSession)
                .where(col(HandoffSession.id) == handoff.id, col(HandoffSession.state) == HandoffState.DISPATCHING)
                .values(last_activity_at=now)
            )
            if held.rowcount == 1:
                message = await conversations.add_message(
                    session, conversation.id, role=Role.SUBSCRIBER, text=text, now=now, handoff_session_id=handoff.id
                )
                return message, handoff
            handoff = await rows.open_handoff(session, conversation.id)  # it was activated (or failed) meanwhile
            if handoff is None or handoff.state != HandoffState.ACTIVE:
                return None
        if not await self.bump(session, handoff.id, now):
            return None
        message = await conversations.add_message(
            session, conversation.id, role=Role.SUBSCRIBER, text=text, now=now, handoff_session_id=handoff.id
        )
        await self.notices.queue_relay(session, handoff, conversation, message, now)
        return message, handoff

    async def recipient_message(self, sid: str, text: str, *, author: str, via: str,
                                person_id: str | None = None) -> Message | ReleaseResult:
        """A recipient wrote into the handoff: relay it to the subscriber, or release on
        `/release`. `person_id`: the person of the directory who wrote (`author` is then their
        name, what the subscriber sees), kept on the message and in the audit trail."""
        author = " ".join(author.split())[:200] or "recipient"
        command = parse_release_command(text)
        if command is not None:
            outcome, note = command
            return await self.releases.release(sid, reason=ReleaseReason.RELEASE_TOKEN, actor=author, outcome=outcome,
                                               note=note, person_id=person_id)
        now = self.ctx.clock.now()
        async with self.ctx.db.transaction(effect=True) as session:
            if not await self.bump(session, sid, now):
                handoff = found(await session.get(HandoffSession, sid), "handoff session", sid)
                raise NotActive(f"handoff {sid} is {handoff.state}; the message was not relayed", state=handoff.state)
            handoff = await handoff_in(session, sid)
            first_reply = await self._first_reply(session, handoff, now, person_id)
            message = await conversations.add_message(
                session, handoff.conversation_id, role=Role.HUMAN, text=text, now=now, author=author, person_id=person_id,
                handoff_session_id=sid,
            )
            await audit.note(
                session, "relayed_to_subscriber", at=now, actor=author, person_id=person_id, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, message_id=message.id, via=via,
            )
        self.ctx.metrics.relayed.labels("to_subscriber").inc()
        if first_reply:
            self.ctx.observe_time_to_human(handoff, handoff.channel_kind, now)
        return message

    @staticmethod
    async def _first_reply(session: AsyncSession, handoff: HandoffSession, now: datetime, person_id: str | None) -> bool:
        """Whether this is the first person's reply to a handoff straight to a channel (the
        moment a person was reached; on a route the claim is), marked on the row once. The
        column comes with the row the caller read, so later replies cost no statement."""
        if handoff.route_id is not None or handoff.first_human_reply_at is not None:
            return False
        marked = await execute_dml(
            session, update(HandoffSession)
            .where(col(HandoffSession.id) == handoff.id, col(HandoffSession.first_human_reply_at).is_(None))
            .values(first_human_reply_at=now, time_to_person_seconds=seconds_to_person(handoff, now),
                    handled_by=person_id or "")
        )
        return marked.rowcount == 1

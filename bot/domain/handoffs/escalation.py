"""The ladder at work: a route's handoff nobody claims moves on, step by step.

Each step waits `claim_within` for a claim (`escalate_at` on the row, armed by the timers
from an `EscalationDue` signal); past it, the next open step is notified (the one before
reminded when it says so, and a channel a later step names again reminded rather than
dispatched twice), and past the last step the handoff is released as `unclaimed`. Moving on
is a compare-and-set on the step and the deadline, so a second instance or a double fire does
nothing. A step whose every dispatch failed does not wait: the outbox's settle hook
(`dispatch_settled`, in the transaction that records how the dispatch ended) sets its
deadline to now.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import Ladder
from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import HandoffContext, handoff_in
from bot.domain.handoffs.dispatch import Dispatches, Sending
from bot.domain.handoffs.notices import Notices, line_of
from bot.domain.handoffs.outcomes import EscalationDue
from bot.domain.handoffs.release import Releases
from bot.domain.ladder import StepPlan
from bot.domain.offers import Offer
from bot.errors import found
from bot.runtime.signals import Changed, record
from bot.store import audit
from bot.store.db import execute_dml
from bot.store.models import Conversation, HandoffRecipient, HandoffSession, Message, OutboxItem
from bot.store.vocabulary import HandoffState, OfferResult, RecipientState, ReleaseReason
from channels.base import Receipt


class Escalation:
    """A route's ladder: how its dispatches settled, and moving on when nobody claims."""

    def __init__(self, ctx: HandoffContext, notices: Notices, dispatch: Dispatches, releases: Releases) -> None:
        self.ctx, self.notices, self.dispatch, self.releases = ctx, notices, dispatch, releases

    async def dispatch_settled(
        self, session: AsyncSession, item: OutboxItem, receipt: Receipt | None, error: str | None, now: datetime,
    ) -> None:
        """The outbox recorded how a route's dispatch ended, in this transaction: where it
        landed, or that it failed. A person whose contact method failed is tried on their next
        one (queued here, sent once this commits); an offer whose every dispatch has failed
        moves the ladder on at once (its deadline is set to now), instead of waiting out
        `claim_within`. While the request still waits (dispatching), it does both itself."""
        if receipt is not None:
            reached = await recipients.notified_from(session, item.id or 0, receipt, now)
            if reached is not None:
                await audit.note(
                    session, "recipient_notified", at=now, actor="dispatcher", handoff_session_id=reached.handoff_session_id,
                    channel_id=reached.channel_id, step=reached.step, channel_message_id=receipt.message_id,
                    person_id=reached.person_id, contact=reached.channel_kind if reached.person_id else None,
                )
            return
        lost = await recipients.failed_at(session, item.id or 0, error or "failed", now)
        if lost is None:
            return
        await audit.note(
            session, "recipient_failed", at=now, actor="dispatcher", handoff_session_id=lost.handoff_session_id,
            channel_id=lost.channel_id, step=lost.step, hint=error, person_id=lost.person_id,
        )
        self.ctx.metrics.fallbacks.labels(lost.channel_kind).inc()
        if lost.person_id is not None and await self._next_method_after(session, lost, now):
            return
        if await recipients.step_has_hope(session, lost.handoff_session_id, lost.step, lost.turn):
            return
        moved = await execute_dml(
            session,
            update(HandoffSession).where(
                col(HandoffSession.id) == lost.handoff_session_id, col(HandoffSession.state) == HandoffState.ACTIVE,
                col(HandoffSession.claimed_at).is_(None), col(HandoffSession.step) == lost.step,
                func.coalesce(col(HandoffSession.turn), 0) == lost.turn,
            ).values(escalate_at=now, offer_until=now)
        )
        if moved.rowcount == 1:
            record(session.info, EscalationDue(lost.handoff_session_id, now))

    async def _next_method_after(self, session: AsyncSession, lost: HandoffRecipient, now: datetime) -> bool:
        """A person's contact method failed on an active, unclaimed handoff: their next one,
        queued. Whether there was one."""
        handoff = await handoff_in(session, lost.handoff_session_id)
        if handoff.state != HandoffState.ACTIVE or handoff.claimed_at is not None:
            return False
        plan = self._plan_of(handoff, lost.step, lost.turn)
        if plan is None:
            return False
        conversation, history = await self._context(session, handoff)
        offered = await recipients.of_handoff(session, handoff.id)
        queued = await self.dispatch.next_methods(session, handoff, conversation, history, plan, offered, now, inline=False)
        if not queued:
            if not any(r.person_id == lost.person_id and r.state != RecipientState.FAILED
                       for r in offered if r.step == lost.step and r.turn == lost.turn):
                self.ctx.metrics.offers.labels("failed").inc()  # every method of theirs failed
            return False
        if plan.step.contact_after is not None:  # the new method's own contact_after is a wake-up too
            await self._rearm(session, handoff, handoff.offer_until)
        return True

    def _plan_of(self, handoff: HandoffSession, step: int, turn: int) -> StepPlan | None:
        ladder = self.ctx.ladders.get(handoff.route_id) if handoff.route_id is not None else None
        if ladder is None or step >= len(ladder.steps):
            return None
        return StepPlan(step, ladder.steps[step], (), turn=turn)

    async def _context(self, session: AsyncSession, handoff: HandoffSession) -> tuple[Conversation, list[Message]]:
        conversation = found(await rows.conversation(session, handoff.conversation_id), "conversation", handoff.conversation_id)
        history = await conversations.recent_messages(session, conversation.id, self.ctx.settings.transcript_messages)
        return conversation, history

    async def escalate_if_due(self, sid: str) -> HandoffSession | None:
        """A route's ladder woke for a handoff nobody has claimed: a person's next contact
        method is due (`contact_after`), and/or the offer's time (`claim_within`) is over —
        then its step's next turn (one person at a time), else the next open step (reminding
        the last one first when it says so), else, past the last, the handoff is released as
        `unclaimed`. Each move is a compare-and-set on the step, the turn and the deadline, so
        a second instance or a double fire does nothing. Returns the handoff as it is after it."""
        now = self.ctx.clock.now()
        handoff = await self.ctx.get(sid)
        due = handoff.escalate_at
        if (handoff.state != HandoffState.ACTIVE or handoff.route_id is None or handoff.claimed_at is not None
                or due is None or due > now or handoff.step is None):
            return handoff
        ladder = self.ctx.ladders.get(handoff.route_id)
        sending: list[Sending] = []
        over = handoff.offer_until is None or handoff.offer_until <= now
        async with self.ctx.db.transaction() as session:
            await self._contacts_due(session, handoff, now)
            following = None
            if over and ladder is not None:
                offered = await recipients.of_handoff(session, sid)
                following = (await self.ctx.steps.next_turn(session, ladder, handoff.step, (handoff.turn or 0) + 1, now, offered)
                             or await self.ctx.steps.plan(session, ladder, handoff.step + 1, now, offered))
            if following is not None and ladder is not None:
                moved = await self._move(session, handoff, ladder, following, now)
                if moved is None:
                    return await handoff_in(session, sid)
                handoff, sending = moved
            elif not over:
                await self._rearm(session, handoff, handoff.offer_until)
        if over and following is None:
            result = await self.releases.release(sid, reason=ReleaseReason.UNCLAIMED, actor="ladder", unclaimed_cutoff=now)
            if result.released:
                self.ctx.metrics.unclaimed.labels(str(handoff.route_id)).inc()
            return result.session
        for each in sending:
            self.ctx.background.spawn(self.dispatch.deliver(each.item, self.ctx.settings.dispatch_timeout), name=f"dispatch:{each.item.id}")
        return await self.ctx.get(sid)

    async def _contacts_due(self, session: AsyncSession, handoff: HandoffSession, now: datetime) -> None:
        """Each open offer whose person has not claimed after the step's `contact_after`: their
        next contact method too, queued (once: a compare-and-set on the due time)."""
        due = await recipients.contacts_due(session, handoff.id, now)
        if not due:
            return
        conversation, history = await self._context(session, handoff)
        offered = await recipients.of_handoff(session, handoff.id)
        for recipient in due:
            reach, plan = self.ctx.reach, self._plan_of(handoff, recipient.step, recipient.turn)
            if reach is None or plan is None or not await recipients.take_contact_due(session, recipient):
                continue
            method = await reach.next_method(session, recipient, offered)
            if method is None:
                continue
            offer = Offer(recipient.person_id or "", "", recipient.target or "", method)
            await self.dispatch.offer(session, handoff, conversation, history, offer, plan, now, inline=False)
            await audit.note(
                session, "contact_next_method", at=now, actor="ladder", handoff_session_id=handoff.id,
                person_id=recipient.person_id, conversation_id=handoff.conversation_id, why="contact_after",
                contact=method.kind, contact_index=method.position,
            )
            offered = await recipients.of_handoff(session, handoff.id)

    async def _move(
        self, session: AsyncSession, handoff: HandoffSession, ladder: Ladder, plan: StepPlan, now: datetime,
    ) -> tuple[HandoffSession, list[Sending]] | None:
        """Nobody claimed the offer in time: the next turn or step, notified (compare-and-set;
        None when another instance or fire moved it first)."""
        sid, from_step, from_turn = handoff.id, handoff.step or 0, handoff.turn or 0
        offer_until = now + plan.step.claim_within
        moved = (await session.execute(
            update(rows.HANDOFFS).where(
                rows.HANDOFFS.c.id == sid, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                rows.HANDOFFS.c.claimed_at.is_(None), rows.HANDOFFS.c.step == from_step,
                func.coalesce(rows.HANDOFFS.c.turn, 0) == from_turn, rows.HANDOFFS.c.escalate_at <= now,
            ).values(step=plan.index, turn=plan.turn, offer_until=offer_until, escalate_at=offer_until)
            .returning(*rows.HANDOFFS.columns)
        )).first()
        moved_handoff = rows.handoff_of(moved)
        if moved_handoff is None:
            return None
        self.ctx.metrics.offers_ended(await recipients.end_offers(session, sid, OfferResult.MISSED, now, step=from_step, turn=from_turn))
        new_step = plan.index != from_step
        if new_step:  # reminded: the step before, when it asks, and whoever this step names again
            again = {a.id for a in plan.adapters}
            reminded = [
                r for r in await recipients.of_handoff(session, sid, state=RecipientState.NOTIFIED)
                if (r.person_id is None and r.channel_id in again) or (ladder.steps[from_step].remind and r.step == from_step)
            ]
            if reminded:
                text = self.ctx.renderer.render("messages/reminder.txt", short_code=moved_handoff.short_code).strip()
                await self.notices.notify(session, moved_handoff, "reminder", text, now, to=[line_of(r) for r in reminded])
        conversation, history = await self._context(session, moved_handoff)
        sending = await self.dispatch.notify_step(session, moved_handoff, conversation, history, plan, now)
        await self.notices.tell_subscriber(session, moved_handoff, "messages/subscriber_handoff_escalated.txt", now)
        await audit.note(
            session, "handoff_escalated", at=now, actor="ladder", handoff_session_id=sid,
            conversation_id=moved_handoff.conversation_id, from_step=from_step, to_step=plan.index, from_turn=from_turn,
            to_turn=plan.turn, why="nobody_claimed", notify=[s.recipient.channel_id for s in sending],
            offered=[s.recipient.person_id for s in sending if s.recipient.person_id] or None,
            escalate_at=offer_until.isoformat(),
        )
        await self._rearm(session, moved_handoff, offer_until)
        record(session.info, Changed(moved_handoff.conversation_id))
        self.ctx.metrics.escalations.labels(str(ladder.id), "nobody_claimed" if new_step else "next_person").inc()
        return moved_handoff, sending

    async def _rearm(self, session: AsyncSession, handoff: HandoffSession, offer_until: datetime | None) -> None:
        """The ladder's next wake-up: the offer's end, or sooner a person's next contact method."""
        wake = await recipients.next_wake(session, handoff.id, offer_until)
        await session.execute(
            update(rows.HANDOFFS).where(rows.HANDOFFS.c.id == handoff.id, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                                        rows.HANDOFFS.c.claimed_at.is_(None)).values(escalate_at=wake)
        )
        if wake is not None:
            record(session.info, EscalationDue(handoff.id, wake))

    async def escalations_due(self, horizon: datetime, limit: int = 5000) -> list[tuple[str, datetime]]:
        """Unclaimed handoffs on a route whose ladder deadline falls before `horizon`, soonest first."""
        async with self.ctx.db.read() as session:
            query = (
                select(col(HandoffSession.id), col(HandoffSession.escalate_at))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.escalate_at) <= horizon)
                .order_by(col(HandoffSession.escalate_at)).limit(limit)
            )
            return [(sid, at) for sid, at in (await session.execute(query)).all() if at is not None]

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

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import HandoffContext, handoff_in
from bot.domain.handoffs.dispatch import Dispatches
from bot.domain.handoffs.notices import Notices, line_of
from bot.domain.handoffs.outcomes import EscalationDue
from bot.domain.handoffs.release import Releases
from bot.errors import found
from bot.runtime.signals import Changed, record
from bot.store import audit
from bot.store.db import execute_dml
from bot.store.models import HandoffSession, OutboxItem
from bot.store.vocabulary import HandoffState, RecipientState, ReleaseReason
from channels.base import Receipt


class Escalation:
    """A route's ladder: how its dispatches settled, and moving on when nobody claims."""

    def __init__(self, ctx: HandoffContext, notices: Notices, dispatch: Dispatches, releases: Releases) -> None:
        self.ctx, self.notices, self.dispatch, self.releases = ctx, notices, dispatch, releases

    async def dispatch_settled(
        self, session: AsyncSession, item: OutboxItem, receipt: Receipt | None, error: str | None, now: datetime,
    ) -> None:
        """The outbox recorded how a route's dispatch ended, in this transaction: where it
        landed, or that it failed. A step whose every channel has failed moves the ladder on
        at once (its deadline is set to now), instead of waiting out `claim_within`."""
        if receipt is not None:
            reached = await recipients.notified_from(session, item.id or 0, receipt, now)
            if reached is not None:
                await audit.note(
                    session, "recipient_notified", at=now, actor="dispatcher", handoff_session_id=reached.handoff_session_id,
                    channel_id=reached.channel_id, step=reached.step, channel_message_id=receipt.message_id,
                )
            return
        lost = await recipients.failed_at(session, item.id or 0, error or "failed", now)
        if lost is None:
            return
        await audit.note(
            session, "recipient_failed", at=now, actor="dispatcher", handoff_session_id=lost.handoff_session_id,
            channel_id=lost.channel_id, step=lost.step, hint=error,
        )
        self.ctx.metrics.fallbacks.labels(lost.channel_kind).inc()
        if await recipients.step_has_hope(session, lost.handoff_session_id, lost.step):
            return
        moved = await execute_dml(
            session,
            update(HandoffSession).where(
                col(HandoffSession.id) == lost.handoff_session_id, col(HandoffSession.state) == HandoffState.ACTIVE,
                col(HandoffSession.claimed_at).is_(None), col(HandoffSession.step) == lost.step,
            ).values(escalate_at=now)
        )
        if moved.rowcount == 1:
            record(session.info, EscalationDue(lost.handoff_session_id, now))

    async def escalate_if_due(self, sid: str) -> HandoffSession | None:
        """A route's ladder deadline passed with nobody claiming: notify the next open step
        (reminding the last one first when it says so), or, past the last, release the
        handoff as `unclaimed`. Compare-and-set on the step and the deadline, so a second
        instance or a double fire does nothing. Returns the handoff as it is after it."""
        now = self.ctx.clock.now()
        handoff = await self.ctx.get(sid)
        due = handoff.escalate_at
        if (handoff.state != HandoffState.ACTIVE or handoff.route_id is None or handoff.claimed_at is not None
                or due is None or due > now or handoff.step is None):
            return handoff
        ladder = self.ctx.ladders.get(handoff.route_id)
        plan = self.ctx.steps.next_open(ladder, handoff.step + 1, now) if ladder is not None else None
        if plan is None:
            result = await self.releases.release(sid, reason=ReleaseReason.UNCLAIMED, actor="ladder", unclaimed_cutoff=now)
            if result.released:
                self.ctx.metrics.unclaimed.labels(str(handoff.route_id)).inc()
            return result.session
        assert ladder is not None
        from_step = handoff.step
        async with self.ctx.db.transaction() as session:
            moved = (await session.execute(
                update(rows.HANDOFFS).where(
                    rows.HANDOFFS.c.id == sid, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                    rows.HANDOFFS.c.claimed_at.is_(None), rows.HANDOFFS.c.step == from_step,
                    rows.HANDOFFS.c.escalate_at <= now,
                ).values(step=plan.index, escalate_at=now + plan.step.claim_within).returning(*rows.HANDOFFS.columns)
            )).first()
            handoff = rows.handoff_of(moved) or await handoff_in(session, sid)
            if moved is None:
                return handoff
            # Reminded: the step before, when it asks for it, and whoever this step names again
            # (a channel is dispatched once per handoff; a later step naming it reminds it).
            again = {a.id for a in plan.adapters}
            reminded = [
                r for r in await recipients.of_handoff(session, sid, state=RecipientState.NOTIFIED)
                if r.channel_id in again or (ladder.steps[from_step].remind and r.step == from_step)
            ]
            if reminded:
                text = self.ctx.renderer.render("messages/reminder.txt", short_code=handoff.short_code).strip()
                await self.notices.notify(session, handoff, "reminder", text, now, to=[line_of(r) for r in reminded])
            conversation = found(await rows.conversation(session, handoff.conversation_id), "conversation", handoff.conversation_id)
            history = await conversations.recent_messages(session, conversation.id, self.ctx.settings.transcript_messages)
            sending = await self.dispatch.notify_step(session, handoff, conversation, history, plan, now)
            await self.notices.tell_subscriber(session, handoff, "messages/subscriber_handoff_escalated.txt", now)
            await audit.note(
                session, "handoff_escalated", at=now, actor="ladder", handoff_session_id=sid,
                conversation_id=handoff.conversation_id, from_step=from_step, to_step=plan.index, why="nobody_claimed", notify=[s.recipient.channel_id for s in sending],
                escalate_at=handoff.escalate_at.isoformat() if handoff.escalate_at else None,
            )
            record(session.info, Changed(handoff.conversation_id))
            if handoff.escalate_at is not None:
                record(session.info, EscalationDue(sid, handoff.escalate_at))
        self.ctx.metrics.escalations.labels(str(ladder.id), "nobody_claimed").inc()
        for each in sending:
            self.ctx.background.spawn(self.dispatch.deliver(each.item, self.ctx.settings.dispatch_timeout), name=f"dispatch:{each.item.id}")
        return handoff

    async def escalations_due(self, horizon: datetime, limit: int = 5000) -> list[tuple[str, datetime]]:
        """Unclaimed handoffs on a route whose ladder deadline falls before `horizon`, soonest first."""
        async with self.ctx.db.read() as session:
            query = (
                select(col(HandoffSession.id), col(HandoffSession.escalate_at))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.escalate_at) <= horizon)
                .order_by(col(HandoffSession.escalate_at)).limit(limit)
            )
            return [(sid, at) for sid, at in (await session.execute(query)).all() if at is not None]

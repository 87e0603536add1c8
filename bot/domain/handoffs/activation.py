"""Leaving `dispatching`: activated from the dispatch's receipt, or failed; and the sweep that
settles what a stopped process left in between.

Nothing holds a transaction open across the send: the dispatch is stored, committed and
delivered (the outbox records the receipt on its item), and only then is the handoff
activated from that receipt, in a transaction of its own that also relays the messages the
subscriber wrote meanwhile (held with the handoff's id). Both ways out are one
compare-and-set on the row: a failure never overwrites a dispatch recorded as sent (a
person was notified, so the handoff is activated instead), and two activations of the same
receipt (the request and another instance's sweep) make one. A crash between the send and
the activation leaves a sent dispatch beside a `dispatching` row: `recover_dispatches`
activates it from the stored receipt, then fails what stayed `dispatching` for good.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import func, select, update
from sqlmodel import col

from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import HandoffContext
from bot.domain.handoffs.notices import Notices
from bot.domain.handoffs.outcomes import HandoffActivated, HeldMessagesOrphaned
from bot.errors import found
from bot.runtime.signals import Changed, record
from bot.store import audit
from bot.store.models import HandoffRecipient, HandoffSession, Message, OutboxItem
from bot.store.vocabulary import HandoffState, OutboxState
from channels.base import Receipt

log = structlog.get_logger(__name__)

# Longer than the step from recording a dispatch as sent to activating its handoff: the
# sweep leaves a dispatch this fresh to the request that sent it.
ACTIVATION_GRACE = timedelta(seconds=10)


class Activation:
    """The transitions out of `dispatching`, and their recovery after a stop."""

    def __init__(self, ctx: HandoffContext, notices: Notices) -> None:
        self.ctx, self.notices = ctx, notices

    async def fail(self, sid: str, *, error: str, hint: str, attempts: int | None = None, actor: str = "dispatcher") -> bool:
        """dispatching → failed, unless its dispatch is recorded as sent: a person was
        notified then, and the handoff is activated from that receipt instead."""
        now = self.ctx.clock.now()
        async with self.ctx.db.transaction() as session:
            handoff = await rows.transition(session, rows.FAIL, sid, state=HandoffState.FAILED, failure=hint)
            if handoff is None:
                return False
            await session.execute(
                update(OutboxItem)
                .where(col(OutboxItem.handoff_session_id) == sid, col(OutboxItem.purpose) == "dispatch", col(OutboxItem.state) != OutboxState.SENT)
                .values(state=OutboxState.FAILED, lease_until=None)
            )
            held = await session.scalar(
                select(func.count()).select_from(Message)
                .where(col(Message.handoff_session_id) == sid, col(Message.role) == "subscriber")
            )
            await audit.note(
                session, "dispatch_failed", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, error=error, hint=hint, attempts=attempts,
                held_messages=held or None,
            )
            if held:  # the subscriber wrote while we waited for the channel: nobody will answer but the agent
                record(session.info, HeldMessagesOrphaned(handoff))
        log.warning("handoff_dispatch_failed", handoff_session_id=sid, hint=hint)
        return True

    async def activate(
        self, sid: str, receipt: Receipt, *, actor: str = "dispatcher", recipient: HandoffRecipient | None = None,
        offer_until: datetime | None = None, turn: int = 0,
    ) -> HandoffSession | None:
        """dispatching → active from the dispatch's receipt, in a transaction of its own:
        the relays of held messages, the subscriber's notice and the audit event commit with
        it. None when the compare-and-set found nothing to do: the session left
        `dispatching` (another caller activated it, or the sweep failed it as stuck), or its
        dispatch is not recorded as sent (the send's record lost its claim)."""
        now = self.ctx.clock.now()
        async with self.ctx.db.transaction() as session:
            if recipient is None:
                handoff = await rows.transition(
                    session, rows.ACTIVATE, sid, state=HandoffState.ACTIVE, channel_message_id=receipt.message_id,
                    thread_key=receipt.thread_key, thread=receipt.thread, activated_at=now, focused_at=now,
                    last_activity_at=now, idle_deadline=now + self.ctx.idle_timeout,
                )
            else:  # the ladder wakes when the offer ends, or sooner for a person's next contact method
                escalate_at = await recipients.next_wake(session, sid, offer_until)
                handoff = await rows.transition(
                    session, rows.ACTIVATE_ROUTED, sid, state=HandoffState.ACTIVE, channel_id=recipient.channel_id,
                    channel_kind=recipient.channel_kind, channel_label=recipient.channel_label,
                    channel_message_id=receipt.message_id, thread_key=receipt.thread_key, thread=receipt.thread,
                    activated_at=now, focused_at=now, last_activity_at=now, idle_deadline=None, escalate_at=escalate_at,
                    offer_until=offer_until, turn=turn,
                )
            if handoff is None:
                return None
            held = await rows.held_messages(session, sid)
            if held:  # written while the dispatch was in flight
                # never deleted, so always found: the handoff's foreign key
                conversation = found(await rows.conversation(session, handoff.conversation_id), "conversation",
                                     handoff.conversation_id)
                for message in held:
                    await self.notices.queue_relay(session, handoff, conversation, message, now)
            await self.notices.tell_subscriber(session, handoff, "messages/subscriber_handoff_started.txt", now)
            await audit.note(
                session, "handoff_activated", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, channel_message_id=receipt.message_id,
                idle_deadline=handoff.idle_deadline.isoformat() if handoff.idle_deadline else None,
                escalate_at=handoff.escalate_at.isoformat() if handoff.escalate_at else None,
                held_messages=len(held) or None,
            )
            record(session.info, Changed(handoff.conversation_id))  # its pages show who is on the line now
            record(session.info, HandoffActivated(handoff))
        return handoff

    async def activated_meanwhile(self, sid: str) -> HandoffSession | None:
        """The session, when another caller (the sweep of another instance) activated it
        from the same sent dispatch before this one could."""
        handoff = await self.ctx.get(sid)
        return handoff if handoff.state == HandoffState.ACTIVE else None

    async def recover_dispatches(self) -> None:
        """After a crash or a stop: activate the handoffs whose dispatch was sent, then fail
        the ones left `dispatching` for good (run by the sweep, which also runs at start)."""
        await self.activate_sent_dispatches()
        await self.fail_stale_dispatches()

    async def activate_sent_dispatches(self) -> int:
        """Handoffs still `dispatching` although their dispatch is recorded as sent: the
        process stopped between recording the send and activating. A person was notified,
        so each is activated from the receipt stored on its dispatch item."""
        cutoff = self.ctx.clock.now() - ACTIVATION_GRACE
        async with self.ctx.db.read() as session:
            rows = (await session.execute(
                select(col(HandoffSession.id), col(OutboxItem.receipt), col(HandoffSession.route_id),
                       col(HandoffSession.step), col(OutboxItem.id))
                .join(OutboxItem, col(OutboxItem.handoff_session_id) == col(HandoffSession.id))
                .where(col(HandoffSession.state) == HandoffState.DISPATCHING, col(OutboxItem.purpose) == "dispatch",
                       col(OutboxItem.state) == OutboxState.SENT, col(OutboxItem.sent_at) <= cutoff)
            )).all()
        activated = 0
        for sid, receipt, route_id, step, item_id in rows:
            try:
                routed: dict[str, Any] = {}
                if route_id is not None:
                    routed = await self._routed_activation(route_id, step, item_id)
                if receipt is not None and await self.activate(sid, Receipt.model_validate(receipt), actor="sweeper", **routed):
                    log.info("handoff_activated_on_recovery", handoff_session_id=sid)
                    activated += 1
            except Exception:  # one bad row must not keep the others inactive
                log.exception("handoff_recovery_failed", handoff_session_id=sid)
        return activated

    async def _routed_activation(self, route_id: int, step: int | None, item_id: int) -> dict[str, Any]:
        """What activating a route's handoff from a sent dispatch needs: its recipient, and the
        offer's deadline from now (a ladder since removed from the config escalates at once)."""
        async with self.ctx.db.read() as session:
            recipient = await recipients.by_item(session, item_id)
        ladder = self.ctx.ladders.get(route_id)
        wait = ladder.steps[step].claim_within if ladder is not None and step is not None and step < len(ladder.steps) else timedelta(0)
        return {"recipient": recipient, "offer_until": self.ctx.clock.now() + wait, "turn": recipient.turn if recipient else 0}

    async def fail_stale_dispatches(self) -> int:
        """Sessions stuck in `dispatching` (the server stopped mid-dispatch) become `failed`,
        so the conversation is not blocked from a new handoff forever."""
        cutoff = self.ctx.clock.now() - (self.ctx.settings.dispatch_timeout * 2 + timedelta(seconds=30))
        async with self.ctx.db.read() as session:
            query = select(col(HandoffSession.id)).where(col(HandoffSession.state) == HandoffState.DISPATCHING, col(HandoffSession.created_at) < cutoff)
            stale = list((await session.scalars(query)).all())
        failed = 0
        for sid in stale:
            hint = "the server stopped while this handoff was being dispatched"
            failed += await self.fail(sid, error="interrupted", hint=hint, actor="sweeper")
        return failed


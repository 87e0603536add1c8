"""The brief, and its dispatches: what a channel is sent when a handoff reaches it, stored and sent.

A dispatch is stored in the outbox claimed (so no worker sends it behind the request's back)
and sent inline by the request that waits for it. On a route, one dispatch per channel of a
step goes out side by side, each with its recipient row; the first delivered answers the
request and the rest go on in the background, how each ends recorded on its recipient by the
outbox's settle hook (`escalation.py`). A channel an earlier step reached is never dispatched
again: a later step naming it reminds it instead.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncSession

from bot.config import format_duration
from bot.delivery.outbox import DeliveryFailed
from bot.domain import conversations
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import HandoffContext
from bot.domain.handoffs.inputs import stored_fields
from bot.domain.hours import Closed
from bot.domain.ladder import StepPlan
from bot.domain.offers import Offer
from bot.runtime.text import one_line
from bot.store import audit
from bot.store.models import Conversation, HandoffRecipient, HandoffSession, Message, OutboxItem
from bot.store.vocabulary import RecipientState
from channels.base import ChannelAdapter, Dispatch, HandoffBrief, Receipt


@dataclass(frozen=True)
class Sending:
    """A route's dispatch stored claimed, to be sent inline, and the recipient it is for."""

    item: OutboxItem
    recipient: HandoffRecipient


class Dispatches:
    """Writes a handoff's brief and sends it to the channels of a step."""

    def __init__(self, ctx: HandoffContext) -> None:
        self.ctx = ctx

    async def notify_step(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, history: list[Message],
        plan: StepPlan, now: datetime,
    ) -> list[Sending]:
        """Store one dispatch per channel of the step not notified before and one per person
        the step offers it to on this turn (claimed, to be sent inline), each with its
        recipient row; returns what to send. A room or a person's contact method an earlier
        step already reached is not dispatched again (it was reminded, when the step says so).
        Whoever the step passed over (away, at capacity …) is in the audit trail."""
        already = {r.lane_key for r in await recipients.of_handoff(session, handoff.id)}
        sending = []
        for adapter in plan.adapters:
            if f"c:{adapter.id}" in already:
                continue
            closed = self.ctx.hours.closed(adapter.config) or plan.closed
            outbound = self.outbound(handoff, conversation, history, closed=closed, to=adapter)
            item = await self.ctx.outbox.enqueue(session, channel_id=adapter.id, outbound=outbound, now=now, claimed=True)
            recipient = await recipients.add(
                session, handoff_session_id=handoff.id, lane_key=f"c:{adapter.id}", channel_id=adapter.id, channel_kind=adapter.kind,
                channel_label=adapter.label, step=plan.index, turn=plan.turn, state=RecipientState.SENDING, outbox_item_id=item.id,
                created_at=now,
            )
            sending.append(Sending(item, recipient))
        for offer in plan.offers:
            if offer.lane_key in already:
                continue
            sent = await self.offer(session, handoff, conversation, history, offer, plan, now, inline=True)
            if sent is not None:
                sending.append(sent)
        for passed in plan.passed:
            await audit.note(
                session, "offer_passed_over", at=now, actor="ladder", handoff_session_id=handoff.id, person_id=passed.person_id,
                conversation_id=handoff.conversation_id, target=passed.target, why=passed.why, step=plan.index, turn=plan.turn,
            )
        return sending

    async def offer(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, history: list[Message],
        offer: Offer, plan: StepPlan, now: datetime, *, inline: bool,
    ) -> Sending | None:
        """Store the brief to one person on one contact method, with its recipient row (None
        when the channel has left the config). `inline`: stored claimed, for the caller to
        send; otherwise queued, sent by the outbox once the transaction commits. The person's
        next method is due after the step's `contact_after`."""
        adapter = self.ctx.channels.get(offer.method.channel_id)
        if adapter is None:
            return None
        key = offer.lane_key
        outbound = self.outbound(handoff, conversation, history, closed=plan.closed, to=adapter)
        outbound = outbound.model_copy(update={"direct": offer.method.address})
        if inline:
            item = await self.ctx.outbox.enqueue(session, channel_id=adapter.id, outbound=outbound, now=now, claimed=True)
        else:
            item = await self.ctx.outbox.queue(session, channel_id=adapter.id, outbound=outbound, now=now)
        after = plan.step.contact_after
        recipient = await recipients.add(
            session, handoff_session_id=handoff.id, lane_key=key, channel_id=adapter.id, channel_kind=adapter.kind,
            channel_label=adapter.label, step=plan.index, turn=plan.turn, person_id=offer.person_id, target=offer.target,
            address=offer.method.address, contact_index=offer.method.position,
            next_contact_at=now + after if after is not None else None,
            state=RecipientState.SENDING, outbox_item_id=item.id, created_at=now,
        )
        await audit.note(
            session, "handoff_offered", at=now, actor="ladder", handoff_session_id=handoff.id, person_id=offer.person_id,
            conversation_id=handoff.conversation_id, target=offer.target, layer=offer.layer, channel_id=adapter.id,
            contact=offer.method.kind, contact_index=offer.method.position, step=plan.index, turn=plan.turn,
        )
        self.ctx.metrics.offers.labels("offered").inc()
        return Sending(item, recipient)

    async def next_methods(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, history: list[Message],
        plan: StepPlan, offered: list[HandoffRecipient], now: datetime, *, inline: bool = True,
    ) -> list[Sending]:
        """Each person of the plan's turn whose every dispatch so far failed, on their next
        contact method (once each): what the caller sends when `inline`, else what was queued."""
        reach = self.ctx.reach
        if reach is None:
            return []
        mine = [r for r in offered if r.person_id is not None and r.step == plan.index and r.turn == plan.turn]
        live = {r.person_id for r in mine if r.state != RecipientState.FAILED}
        sending: list[Sending] = []
        for failed in mine:
            if failed.person_id in live or failed.state != RecipientState.FAILED:
                continue
            method = await reach.next_method(session, failed, offered)
            if method is None:
                continue
            live.add(failed.person_id)
            offer = Offer(failed.person_id or "", "", failed.target or "", method)
            sent = await self.offer(session, handoff, conversation, history, offer, plan, now, inline=inline)
            if sent is not None:
                sending.append(sent)
        return sending

    async def first_reached(
        self, sending: list[Sending], failed: list[int],
    ) -> tuple[tuple[HandoffRecipient, Receipt] | None, list[str]]:
        """Send a step's dispatches side by side and return with the first one delivered; the
        others go on in the background (how each ends is recorded on its recipient by the
        outbox's settle hook). Appends the channels that failed to `failed`."""
        budget = self.ctx.settings.dispatch_timeout
        tasks = {
            self.ctx.background.spawn(self.deliver(s.item, budget), name=f"dispatch:{s.item.id}"): s for s in sending
        }
        hints: list[str] = []
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                result = task.result()
                if isinstance(result, Receipt):
                    return (tasks[task].recipient, result), hints
                failed.append(tasks[task].recipient.channel_id)
                hints.append(result)
        return None, hints

    async def deliver(self, item: OutboxItem, budget: timedelta) -> Receipt | str:
        """One dispatch of a step: its receipt, or the channel's hint when it was given up."""
        try:
            return await self.ctx.outbox.deliver_now(item, budget=budget)
        except DeliveryFailed as exc:
            return exc.error.hint

    def outbound(
        self, handoff: HandoffSession, conversation: Conversation, history: list[Message], *, closed: Closed | None,
        to: ChannelAdapter | None = None,
    ) -> Dispatch:
        """The brief for the handoff's channel, or, on a route, for one recipient `to` (the
        first to claim takes it, which the brief says and a Claim button offers)."""
        brief = self._brief(handoff, conversation, history if handoff.include_transcript else [])
        if to is not None:
            brief = brief.model_copy(update={"claimable": True})
        if closed is not None:
            outside = self.ctx.renderer.render("messages/out_of_hours_dispatch.txt", estimated_response=handoff.estimated_response)
            brief = brief.model_copy(update={"outside_hours": outside.strip()})
        text = self.ctx.renderer.render(
            "messages/dispatch.txt",
            brief=brief,
            field_lines=brief.field_lines,
            claimable=brief.claimable,
            channel_label=to.label if to is not None else handoff.channel_label,
            idle_timeout=format_duration(self.ctx.idle_timeout),
            form_ttl=format_duration(self.ctx.forms.ttl),
        )
        subject = f"[Handoff {handoff.short_code}] {one_line(handoff.summary, 80)}"
        return Dispatch(handoff_id=handoff.id, text=text, subject=subject, brief=brief)

    def _brief(self, handoff: HandoffSession, conversation: Conversation, history: list[Message]) -> HandoffBrief:
        return HandoffBrief(
            handoff_session_id=handoff.id,
            short_code=handoff.short_code,
            conversation_id=conversation.id,
            subscriber_name=conversation.subscriber_name,
            subscriber_email=conversation.subscriber_email,
            summary=handoff.summary,
            expected_action=handoff.expected_action,
            urgency=handoff.urgency,
            contact_back_email=handoff.contact_back_email,
            extra_context=handoff.extra_context,
            expected_return=stored_fields(handoff),
            transcript=conversations.transcript(history, conversation),
            form_url=self.ctx.forms.url(handoff.form_link_id),
            idle_timeout_seconds=self.ctx.idle_timeout.total_seconds(),
        )

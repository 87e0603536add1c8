"""Requesting a handoff: stored `dispatching`, dispatched, and answered once a person was
reached (or refused, with the facts of why).

The request stores the handoff row (with its first return-form link), the audit event and
its dispatches in one transaction, with no look for an open handoff first: the unique index
on one open handoff per conversation refuses the insert, and only then is the open one read
(`HandoffAlreadyOpen`). It then sends inline within the dispatch budget and activates from
the receipt (`activation.py`). Straight to a channel, one dispatch; on a route, every
channel of the first open step at once, the first delivered answering, and a step whose
every channel fails giving way to the next at once; only when every channel the ladder
could use now failed is the handoff failed (`DispatchFailed`).
"""

from __future__ import annotations

import time
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import Ladder
from bot.delivery.outbox import DeliveryFailed
from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.activation import Activation
from bot.domain.handoffs.context import HandoffContext, handoff_in
from bot.domain.handoffs.dispatch import Dispatches, Sending
from bot.domain.handoffs.inputs import HandoffRequestInput
from bot.domain.handoffs.outcomes import ChannelUnavailable, DispatchFailed, HandoffAlreadyOpen, HandoffStarted, RouteClosed
from bot.domain.hours import Closed
from bot.domain.ladder import StepPlan
from bot.store import audit
from bot.store.models import Conversation, HandoffSession, new_id
from bot.store.vocabulary import HandoffState, RecipientState
from channels.base import ChannelAdapter
from forms.links import new_link_id


class Requests:
    """`handoff_request`, straight to a channel or on a route."""

    def __init__(self, ctx: HandoffContext, dispatch: Dispatches, activation: Activation) -> None:
        self.ctx, self.dispatch, self.activation = ctx, dispatch, activation

    async def record_rejection(self, conversation_id: str, *, actor: str, error: str, hint: str, **detail: Any) -> int:
        """Audit a handoff_request that started nothing; returns the event id."""
        async with self.ctx.db.transaction() as session:
            event = await audit.record(
                session, "handoff_request_rejected", at=self.ctx.clock.now(), actor=actor,
                conversation_id=conversation_id, error=error, hint=hint, **detail,
            )
        self.ctx.metrics.handoff_requests.labels("none", "rejected").inc()
        return int(event.id or 0)

    async def request(self, conversation: Conversation, req: HandoffRequestInput, *, actor: str = "agent") -> HandoffStarted:
        """Start a handoff and dispatch it now: the caller learns whether a person was
        notified. Raises ChannelUnavailable or HandoffAlreadyOpen (nothing stored; the caller
        records the rejection with its wording), or DispatchFailed (the handoff is failed).
        `conversation` is the one the caller just read (the tool's context): conversations are
        never deleted, and the brief needs only who the subscriber is, so it is not read again."""
        ladder = self.ctx.ladders.get(req.channel_id)
        if ladder is not None and self.ctx.steps.is_available(ladder):
            return await self._on_route(conversation, req, ladder, actor=actor)
        adapter = self.ctx.channels.get(req.channel_id)
        if adapter is None or adapter not in self.ctx.channels.available():
            raise ChannelUnavailable(req.channel_id, self.ctx.target_ids())

        now = self.ctx.clock.now()
        sid = new_id("hs")
        conversation_id = conversation.id
        closed = self.ctx.hours.closed(adapter.config)
        estimate = self._estimate(adapter.config.estimated_response, closed)
        try:
            async with self.ctx.db.transaction(effect=True) as session:
                # No look for an open handoff first: the one-open-per-conversation unique index
                # refuses the insert below, and only then is the open one's id looked up.
                history = await conversations.recent_messages(session, conversation_id, self.ctx.settings.transcript_messages)
                handoff = await self._insert_requested(session, sid, conversation, req, adapter, estimate, now)
                requested = await audit.record(
                    session, "handoff_requested", at=now, actor=actor, handoff_session_id=sid,
                    conversation_id=conversation_id, channel_id=adapter.id, channel_kind=adapter.kind,
                    request=req.model_dump(mode="json", exclude_none=True),
                )
                outbound = self.dispatch.outbound(handoff, conversation, history, closed=closed)
                item = await self.ctx.outbox.enqueue(session, channel_id=adapter.id, outbound=outbound, now=now, claimed=True)
        except IntegrityError:  # the unique index on one open handoff per conversation
            raise HandoffAlreadyOpen(await self._open_id(conversation_id)) from None

        started = time.perf_counter()
        refused = partial(
            DispatchFailed, handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=adapter.id,
            channel_label=adapter.label,
        )
        try:
            try:
                receipt = await self.ctx.outbox.deliver_now(item, budget=self.ctx.settings.dispatch_timeout)
            except DeliveryFailed as exc:
                await self.activation.fail(sid, error=str(exc.error), hint=exc.error.hint, attempts=exc.attempts)
                self.ctx.metrics.handoff_requests.labels(adapter.kind, "dispatch_failed").inc()
                raise refused(attempts=exc.attempts, reason=exc.error.hint) from None
            # The send is recorded; the activation is this service's own step.
            activated = await self.activation.activate(sid, receipt) or await self.activation.activated_meanwhile(sid)
        finally:
            self.ctx.metrics.dispatch_seconds.labels(adapter.kind).observe(time.perf_counter() - started)

        if activated is None:
            self.ctx.metrics.handoff_requests.labels(adapter.kind, "dispatch_failed").inc()
            raise refused(attempts=None, reason=None)
        self.ctx.metrics.handoff_requests.labels(adapter.kind, "ok").inc()
        return HandoffStarted(
            handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=adapter.id,
            channel_kind=adapter.kind, channel_label=adapter.label, channel_message_id=receipt.message_id,
            estimated_response=estimate,
        )

    async def _on_route(
        self, conversation: Conversation, req: HandoffRequestInput, ladder: Ladder, *, actor: str,
    ) -> HandoffStarted:
        """Start a handoff on a route: notify its first open step's channels and people at
        once and return as soon as one of them is reached; a person whose contact method fails
        is tried on their next one, and a step whose every dispatch fails gives way to its next
        turn or step at once. Fails (DispatchFailed, the bypass never active) only when every
        channel and person the ladder could use now failed. Nobody available on the whole
        ladder (no channel open, every person away) is `when_closed`'s case, as closed hours are."""
        now = self.ctx.clock.now()
        sid = new_id("hs")
        try:
            async with self.ctx.db.transaction(effect=True) as session:
                plan = await self._first_plan(session, ladder, req, now)
                estimate = self._estimate(ladder.route.estimated_response, plan.closed)
                first = plan.adapters[0] if plan.adapters else self.ctx.channels.get(plan.offers[0].method.channel_id)
                assert first is not None  # an offer's method is through a channel up now
                history = await conversations.recent_messages(session, conversation.id, self.ctx.settings.transcript_messages)
                handoff = await self._insert_requested(
                    session, sid, conversation, req, first, estimate, now, route_id=ladder.id, step=plan.index, turn=plan.turn,
                )
                requested = await audit.record(
                    session, "handoff_requested", at=now, actor=actor, handoff_session_id=sid,
                    conversation_id=conversation.id, channel_id=ladder.id, channel_kind="route", route_id=ladder.id,
                    request=req.model_dump(mode="json", exclude_none=True),
                )
                sending = await self.dispatch.notify_step(session, handoff, conversation, history, plan, now)
        except IntegrityError:  # the unique index on one open handoff per conversation
            raise HandoffAlreadyOpen(await self._open_id(conversation.id)) from None

        started = time.perf_counter()
        failed: list[int] = []
        last_hint: str | None = None
        try:
            while True:
                reached, hints = await self.dispatch.first_reached(sending, failed)
                last_hint = hints[-1] if hints else last_hint
                if reached is not None:
                    break
                following = await self._after_failures(sid, conversation, ladder, plan)
                if following is None:
                    await self.activation.fail(sid, error="every channel of the route failed", hint=last_hint or "no channel could be reached")
                    self.ctx.metrics.handoff_requests.labels("route", "dispatch_failed").inc()
                    raise DispatchFailed(
                        handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
                        channel_label=ladder.route.label, attempts=len(failed), reason=last_hint, failed=tuple(failed),
                    )
                plan, sending = following
            recipient, receipt = reached
            activated = await self.activation.activate(
                sid, receipt, recipient=recipient, offer_until=self.ctx.clock.now() + plan.step.claim_within, turn=plan.turn,
            ) or await self.activation.activated_meanwhile(sid)
        finally:
            self.ctx.metrics.dispatch_seconds.labels("route").observe(time.perf_counter() - started)
        if activated is None:
            self.ctx.metrics.handoff_requests.labels("route", "dispatch_failed").inc()
            raise DispatchFailed(
                handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
                channel_label=ladder.route.label, attempts=None, reason=None, failed=tuple(failed),
            )
        self.ctx.metrics.handoff_requests.labels("route", "ok").inc()
        async with self.ctx.db.read() as session:
            now_known = await recipients.of_handoff(session, sid)
        rooms = [r for r in now_known if r.person_id is None]
        return HandoffStarted(
            handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
            channel_kind="route", channel_label=ladder.route.label, channel_message_id=receipt.message_id,
            estimated_response=estimate, route_id=ladder.id,
            notified=tuple(r.channel_id for r in rooms if r.state == RecipientState.NOTIFIED),
            failed=tuple(r.channel_id for r in rooms if r.state == RecipientState.FAILED),
            pending=tuple(r.channel_id for r in rooms if r.state == RecipientState.SENDING),
            people=tuple(dict.fromkeys(r.person_id for r in now_known if r.person_id is not None and r.state != RecipientState.FAILED)),
        )

    async def _first_plan(self, session: AsyncSession, ladder: Ladder, req: HandoffRequestInput, now: datetime) -> StepPlan:
        """The step to start with: the first that reaches someone now, or, when none does, the
        one that opens soonest (`when_closed: dispatch`), or the refusal."""
        plan = await self.ctx.steps.plan(session, ladder, 0, now)
        if plan is not None:
            return plan
        later = self.ctx.steps.first_to_open(ladder, now)
        if later is None:
            if any(step.targets for step in ladder.steps):
                raise RouteClosed(ladder.id, None)  # its people are all away or unreachable: nobody is there
            raise ChannelUnavailable(req.channel_id, self.ctx.target_ids())
        if ladder.route.when_closed == "refuse":
            raise RouteClosed(ladder.id, later.closed.back_text if later.closed else None)
        return later

    async def _after_failures(
        self, sid: str, conversation: Conversation, ladder: Ladder, plan: StepPlan,
    ) -> tuple[StepPlan, list[Sending]] | None:
        """Everything of the current offer failed while the request waits: each person's next
        contact method, else the step's next turn, else the next step that reaches someone,
        now. None when nothing is left."""
        now = self.ctx.clock.now()
        async with self.ctx.db.transaction() as session:
            handoff = await handoff_in(session, sid)
            history = await conversations.recent_messages(session, conversation.id, self.ctx.settings.transcript_messages)
            offered = await recipients.of_handoff(session, sid)
            sending = await self.dispatch.next_methods(session, handoff, conversation, history, plan, offered, now)
            if sending:
                return plan, sending
            following = (await self.ctx.steps.next_turn(session, ladder, plan.index, plan.turn + 1, now, offered)
                         or await self.ctx.steps.plan(session, ladder, plan.index + 1, now, offered))
            if following is None:
                return None
            await session.execute(update(HandoffSession).where(col(HandoffSession.id) == sid)
                                  .values(step=following.index, turn=following.turn))
            sending = await self.dispatch.notify_step(session, handoff, conversation, history, following, now)
            await audit.note(
                session, "handoff_escalated", at=now, actor="ladder", handoff_session_id=sid,
                conversation_id=conversation.id, to_step=following.index, turn=following.turn, why="failed_delivery",
                notify=[s.recipient.channel_id for s in sending],
            )
        self.ctx.metrics.escalations.labels(str(ladder.id), "failed_delivery").inc()
        return following, sending

    def _estimate(self, usual: str, closed: Closed | None) -> str:
        """What the model and the subscriber are told to expect: the channel's (or route's) own
        estimate, or, outside its office hours, when its people are back (a template owners can reword)."""
        if closed is None:
            return usual
        return self.ctx.renderer.render("messages/out_of_hours_estimate.txt", back=closed.back_text, usual=usual).strip()

    async def _insert_requested(
        self, session: AsyncSession, sid: str, conversation: Conversation, req: HandoffRequestInput, to: ChannelAdapter,
        estimate: str, now: datetime, **route: int,
    ) -> HandoffSession:
        """The handoff row as asked for, `dispatching` on `to` (on a route, its first channel,
        with `route_id` and `step`), and its first return-form link. The row is inserted already
        naming the link, then the link (its foreign key needs the handoff)."""
        link_id = new_link_id()
        handoff = await rows.insert_handoff(
            session, id=sid, conversation_id=conversation.id, channel_id=to.id, channel_kind=to.kind,
            channel_label=to.label, state=HandoffState.DISPATCHING, urgency=req.urgency, summary=req.summary,
            expected_action=req.expected_action,
            contact_back_email=str(req.contact_back_email or conversation.subscriber_email or "") or None,
            include_transcript=req.include_transcript, extra_context=req.extra_context or {},
            expected_return=[f.model_dump(exclude_none=True) for f in req.expected_return or []],
            estimated_response=estimate, created_at=now, form_link_id=link_id, **route,
        )
        await self.ctx.forms.store(session, link_id, sid, now)
        await rows.mark_escalated(session, conversation.id, now)
        return handoff

    async def _open_id(self, conversation_id: str) -> str | None:
        async with self.ctx.db.read() as session:
            found = await rows.open_handoff(session, conversation_id)
            return found.id if found else None

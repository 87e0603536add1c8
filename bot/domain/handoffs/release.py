"""Release: the bypass ends and the agent resumes.

A release is one compare-and-set active → released, committed together with its audit
event, the subscriber's notice and the resume message. When two release paths race (a form
submission and the idle timer, say) exactly one UPDATE matches, exactly one resume message
is written, and each loser is recorded as a `release_noop`. An idle release applies only
while the deadline is still due (a message that pushed it out wins over a late timer), the
ladder's end only while nobody has claimed it. Returned values are typed against the fields
the handoff asked for before anything changes; values that do not fit are refused
(`release_refused`) and nothing is released. On a route nobody had claimed, a person who
hands it back claimed it by doing so (`Claims.by_release`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import format_duration
from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.claims import Claims
from bot.domain.handoffs.context import HandoffContext, elapsed, handoff_in, route_label
from bot.domain.handoffs.inputs import stored_fields
from bot.domain.handoffs.notices import Notices
from bot.domain.handoffs.outcomes import HandoffReleased, NotActive, ReleaseResult
from bot.domain.resume import resume_message
from bot.runtime.signals import record
from bot.store import audit
from bot.store.models import HandoffSession, Message
from bot.store.vocabulary import HandoffState, OfferResult, Outcome, ReleaseReason, Role
from forms.fields import CoercedReturn, ReturnValuesInvalid, coerce_returned

log = structlog.get_logger(__name__)

# The release reasons that are a person's own act: on a route nobody had claimed, they claim it too.
_A_PERSON_ACTED = (ReleaseReason.FORM, ReleaseReason.RELEASE_TOKEN, ReleaseReason.OWNER, ReleaseReason.AGENT)


class Releases:
    """Ending the bypass, and what the idle timer asks about it."""

    def __init__(self, ctx: HandoffContext, notices: Notices, claims: Claims) -> None:
        self.ctx, self.notices, self.claims = ctx, notices, claims

    async def release(
        self,
        sid: str,
        *,
        reason: ReleaseReason,
        actor: str,
        person_id: str | None = None,
        outcome: Outcome | None = None,
        note: str | None = None,
        return_values: dict[str, Any] | None = None,
        idle_cutoff: datetime | None = None,
        unclaimed_cutoff: datetime | None = None,
        guard: Callable[[AsyncSession, datetime], Awaitable[None]] | None = None,
    ) -> ReleaseResult:
        """End the bypass. Exactly one caller wins; the rest are recorded as no-ops.
        `person_id`: the person of the directory releasing (`actor` is then their name),
        kept on the row as `released_person_id` and in the audit trail.

        `idle_cutoff` makes it an idle release: it only applies while the deadline is at or
        before the cutoff, so a message that pushed the deadline out wins over a late timer;
        `unclaimed_cutoff` makes it the ladder's end: only while nobody has claimed it and its
        last deadline is at or before the cutoff.
        `guard` runs inside the winning transaction (e.g. consuming a form link); if it
        raises, nothing of the release is committed and the exception propagates.
        Returned values that do not fit the handoff's fields raise ReturnValuesInvalid
        before anything changes (recorded as `release_refused`), whoever sent them.
        """
        now = self.ctx.clock.now()
        reason = ReleaseReason(reason)  # callers outside the type checker pass the plain word
        outcome = Outcome(outcome) if outcome else reason.default_outcome
        note = note.strip() if note and note.strip() else None
        refused: ReturnValuesInvalid | None = None
        resume: Message | None = None
        # One transaction whichever way it goes: the values are typed against the row read
        # here, and the loser's `release_noop` is recorded beside that read.
        async with self.ctx.db.transaction(effect=True) as session:
            handoff = await handoff_in(session, sid)
            try:
                coerced = coerce_returned(stored_fields(handoff), return_values)
            except ReturnValuesInvalid as exc:
                await audit.note(
                    session, "release_refused", at=now, actor=actor, person_id=person_id, handoff_session_id=sid,
                    conversation_id=handoff.conversation_id, reason=reason, invalid=exc.problems,
                )
                refused = exc
            else:
                change = _Release(reason=reason, actor=actor, person_id=person_id, outcome=outcome, note=note,
                                  coerced=coerced, lasted=elapsed(handoff.activated_at, now))
                released = await change.apply(session, sid, now, idle_cutoff=idle_cutoff, unclaimed_cutoff=unclaimed_cutoff)
                if released is None:
                    handoff = await handoff_in(session, sid)  # what the winner (or another change) left
                    await audit.note(
                        session, "release_noop", at=now, actor=actor, person_id=person_id, handoff_session_id=sid,
                        conversation_id=handoff.conversation_id, reason=reason, state=handoff.state,
                        released_by_reason=handoff.release_reason,
                    )
                else:
                    handoff = released
                    if guard is not None:
                        await guard(session, now)
                    resume = await self._after_release(session, handoff, now, change)
        if refused is not None:
            raise refused
        if resume is None:
            self.ctx.metrics.release_noops.labels(reason).inc()
            return ReleaseResult(released=False, session=handoff)
        self.ctx.metrics.releases.labels(reason).inc()
        if handoff.activated_at is not None:
            lasted = (now - handoff.activated_at).total_seconds()
            self.ctx.metrics.duration.labels(handoff.channel_kind, route_label(handoff)).observe(lasted)
        log.info("handoff_released", handoff_session_id=sid, reason=reason, outcome=outcome)
        return ReleaseResult(released=True, session=handoff, resume_message_id=resume.id)

    async def _after_release(self, session: AsyncSession, handoff: HandoffSession, now: datetime, change: _Release) -> Message:
        """What the winning release writes with it: the subscriber's notice, the resume
        message, the audit event, the recipient's notice and the signal. Returns the resume."""
        reason, actor, outcome, note, coerced = change.reason, change.actor, change.outcome, change.note, change.coerced
        lines = await self.notices.lines(session, handoff)  # on a route nobody claimed: every recipient reached hears of it
        if handoff.route_id is not None and handoff.claimed_at is None and reason in _A_PERSON_ACTED:
            # Nobody had claimed it, and a person just handed it back: that was the claim.
            handoff = await self.claims.by_release(session, handoff, actor, reason, now, change.person_id)
        if handoff.route_id is not None:  # offers still open end with it: missed when nobody came
            ended = OfferResult.MISSED if reason == ReleaseReason.UNCLAIMED else OfferResult.ENDED
            self.ctx.metrics.offers_ended(await recipients.end_offers(session, handoff.id, ended, now))
        await self.notices.tell_subscriber(session, handoff, "messages/subscriber_handoff_ended.txt", now, reason=reason)
        text = resume_message(
            reason=reason, outcome=outcome, note=note, returned=coerced.values,
            missing_required=coerced.missing_required, idle_timeout=self.ctx.idle_timeout,
        )
        resume = await conversations.add_message(
            session, handoff.conversation_id, role=Role.SYSTEM, text=text, now=now, handoff_session_id=handoff.id
        )
        await audit.note(
            session, "handoff_released", at=now, actor=actor, person_id=change.person_id, handoff_session_id=handoff.id,
            conversation_id=handoff.conversation_id, reason=reason, outcome=outcome, note=note,
            returned=coerced.values, missing_required=coerced.missing_required or None,
            resume_message_id=resume.id,
        )
        notice = self.ctx.renderer.render(
            "messages/released.txt", reason=reason, outcome=outcome, actor=actor,
            short_code=handoff.short_code, idle_timeout=format_duration(self.ctx.idle_timeout),
        )
        await self.notices.notify(session, handoff, "released", notice, now, to=lines)
        record(session.info, HandoffReleased(handoff))
        return resume

    async def reissue_form_link(self, sid: str, *, actor: str) -> str:
        """A fresh return-form link (older unused ones stop working), sent to the recipient
        through the channel as well. Returns the new URL."""
        now = self.ctx.clock.now()
        async with self.ctx.db.transaction() as session:
            handoff = await handoff_in(session, sid)
            if handoff.state != HandoffState.ACTIVE:
                raise NotActive(f"handoff {sid} is {handoff.state}; it has no return form any more", state=handoff.state)
            link = await self.ctx.forms.issue(session, handoff, now)
            url = self.ctx.forms.url(link.id) or ""
            await audit.note(
                session, "form_link_issued", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, expires_at=link.expires_at.isoformat(),
            )
            text = self.ctx.renderer.render(
                "messages/form_link.txt", short_code=handoff.short_code, url=url, form_ttl=format_duration(self.ctx.forms.ttl)
            )
            await self.notices.notify(session, handoff, "form_link", text, now)
        return url

    async def release_if_idle(self, sid: str) -> ReleaseResult:
        return await self.release(sid, reason=ReleaseReason.IDLE_TIMEOUT, actor="idle timer", idle_cutoff=self.ctx.clock.now())

    async def overdue(self, limit: int = 500) -> list[str]:
        now = self.ctx.clock.now()
        async with self.ctx.db.read() as session:
            query = (
                select(col(HandoffSession.id))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.idle_deadline) <= now)
                .order_by(col(HandoffSession.idle_deadline))
                .limit(limit)
            )
            return list((await session.scalars(query)).all())

    async def due_before(self, horizon: datetime, limit: int = 5000) -> list[tuple[str, datetime]]:
        """Active sessions whose idle deadline falls before `horizon`, soonest first."""
        async with self.ctx.db.read() as session:
            query = (
                select(col(HandoffSession.id), col(HandoffSession.idle_deadline))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.idle_deadline) <= horizon)
                .order_by(col(HandoffSession.idle_deadline))
                .limit(limit)
            )
            # `<= horizon` already left out sessions without a deadline; the filter tells mypy so
            return [(sid, deadline) for sid, deadline in (await session.execute(query)).all() if deadline is not None]


@dataclass(frozen=True)
class _Release:
    """One release as asked: why, by whom, how it went, and the values typed for its fields."""

    reason: ReleaseReason
    actor: str
    person_id: str | None
    outcome: Outcome
    note: str | None
    coerced: CoercedReturn
    lasted: float | None  # seconds from the activation (None: never activated)

    async def apply(
        self, session: AsyncSession, sid: str, now: datetime, *, idle_cutoff: datetime | None,
        unclaimed_cutoff: datetime | None = None,
    ) -> HandoffSession | None:
        """The compare-and-set active → released; the released row as the UPDATE returns it
        (no read after it), or None when the handoff was not active (or not idle, or claimed) any more."""
        statement, guard = (rows.RELEASE, {}) if idle_cutoff is None else (rows.RELEASE_IDLE, {"cutoff": idle_cutoff})
        if unclaimed_cutoff is not None:
            statement, guard = rows.RELEASE_UNCLAIMED, {"cutoff": unclaimed_cutoff}
        return await rows.transition(
            session, statement, sid, **guard, state=HandoffState.RELEASED, released_at=now, release_reason=self.reason,
            released_by=self.actor, released_person_id=self.person_id,
            releaser=(self.person_id or "") if self.reason.by_a_person else None,
            outcome=self.outcome, note=self.note, returned=self.coerced.values,
            missing_required=self.coerced.missing_required, duration_seconds=self.lasted,
        )

"""Claims: on a route, the first person to take a handoff has it.

A claim is one compare-and-set on the row (active, on a route, nobody has claimed it), as a
release is: exactly one wins, the rest are recorded as `claim_noop`. The winner's thread
becomes the handoff's line (the subscriber's messages go only there from then on), the idle
timer starts and the ladder stops; the other recipients are told who has it and the
subscriber who has joined. A reply or a `/release` from a thread that does not hold the
claim is refused (`speaking`), its thread told who has it, and nothing of it reaches the
subscriber. A handoff straight to a channel has no claim: its one line always speaks.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import structlog
from sqlalchemy import func, literal, update
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.handoffs.context import HandoffContext, handoff_in, seconds_to_person
from bot.domain.handoffs.notices import Notices, line_of
from bot.domain.handoffs.outcomes import ClaimResult, HandoffClaimed, Speaking
from bot.runtime.signals import Changed, record
from bot.store import audit
from bot.store.dialects import seconds_between
from bot.store.models import HandoffRecipient, HandoffSession
from bot.store.vocabulary import HandoffState, OfferResult, RecipientState, ReleaseReason

log = structlog.get_logger(__name__)


class Claims:
    """Who has a handoff on a route, and whether a recipient's act goes through."""

    def __init__(self, ctx: HandoffContext, notices: Notices) -> None:
        self.ctx, self.notices = ctx, notices

    async def claim(
        self, sid: str, *, by: str, via: str, recipient_id: int | None = None, effect: bool = False,
        record_noop: bool = True, person_id: str | None = None,
    ) -> ClaimResult:
        """Take a handoff on a route nobody has claimed yet: exactly one claim wins (a
        compare-and-set on the row, as a release is); the rest are recorded as no-ops. The
        winner's thread becomes the handoff's line (the subscriber's messages go only there
        from now on), the idle timer starts, the other recipients are told who has it, and the
        subscriber who has joined. `effect`: this claim is what its caller's event does (a
        Claim press), not a step before the message that claims (a reply). `record_noop`
        False: a caller that records the lost claim its own way (`speaking`). `person_id`: the
        person of the directory claiming (`by` is then their name), kept on the row."""
        now = self.ctx.clock.now()
        by = " ".join(by.split())[:200] or "recipient"
        async with self.ctx.db.transaction(effect=effect) as session:
            recipient = await recipients.get(session, recipient_id) if recipient_id is not None else None
            values: dict[str, Any] = {
                "claimed_at": now, "claimed_by": by, "claimed_via": via[:40], "claimed_recipient_id": recipient_id,
                "claimed_person_id": person_id, "handled_by": person_id or "",
                "escalate_at": None, "idle_deadline": now + self.ctx.idle_timeout, "last_activity_at": now,
                "time_to_person_seconds": _seconds_to_person_sql(now),
            }
            if recipient is not None and recipient.thread_key is not None:
                values.update(
                    channel_id=recipient.channel_id, channel_kind=recipient.channel_kind, channel_label=recipient.channel_label,
                    thread_key=recipient.thread_key, thread=recipient.thread, channel_message_id=recipient.channel_message_id,
                )
            row = (await session.execute(
                update(rows.HANDOFFS)
                .where(rows.HANDOFFS.c.id == sid, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                       rows.HANDOFFS.c.route_id.is_not(None), rows.HANDOFFS.c.claimed_at.is_(None))
                .values(**values).returning(*rows.HANDOFFS.columns)
            )).first()
            handoff = rows.handoff_of(row)
            if handoff is None:
                current = await handoff_in(session, sid)
                if not record_noop:
                    return ClaimResult(claimed=False, handoff=current)
                await audit.note(
                    session, "claim_noop", at=now, actor=by, person_id=person_id, handoff_session_id=sid,
                    conversation_id=current.conversation_id, via=via, state=current.state, claimed_by=current.claimed_by,
                )
                self.ctx.metrics.claims.labels("noop").inc()
                return ClaimResult(claimed=False, handoff=current)
            waited = (now - handoff.activated_at).total_seconds() if handoff.activated_at else None
            self.ctx.metrics.offers_ended(await recipients.end_offers(
                session, sid, OfferResult.TAKEN, now, winner=recipient_id, winner_person=person_id))
            await audit.note(
                session, "handoff_claimed", at=now, actor=by, person_id=person_id, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, via=via, channel_id=recipient.channel_id if recipient else None,
                step=handoff.step,
                waited_seconds=round(waited, 3) if waited is not None else None,
            )
            await self.notices.tell_subscriber(session, handoff, "messages/subscriber_handoff_claimed.txt", now, person=by)
            await self._tell_claim(session, handoff, recipient, now)
            record(session.info, Changed(handoff.conversation_id))
            record(session.info, HandoffClaimed(handoff))
        self._observe_claim(handoff, recipient.channel_kind if recipient else via.split(":")[0], now)
        log.info("handoff_claimed", handoff_session_id=sid, by=by, via=via)
        return ClaimResult(claimed=True, handoff=handoff)

    async def by_release(
        self, session: AsyncSession, handoff: HandoffSession, actor: str, reason: ReleaseReason, now: datetime,
        person_id: str | None = None,
    ) -> HandoffSession:
        """A person handed back a routed handoff nobody had claimed: that was the claim, in the
        release's transaction (the handoff as claimed; as it was when someone else has it)."""
        row = (await session.execute(
            update(rows.HANDOFFS).where(rows.HANDOFFS.c.id == handoff.id, rows.HANDOFFS.c.claimed_at.is_(None))
            .values(claimed_at=now, claimed_by=actor[:200], claimed_via=str(reason), claimed_person_id=person_id,
                    handled_by=person_id or "", escalate_at=None, time_to_person_seconds=seconds_to_person(handoff, now))
            .returning(*rows.HANDOFFS.columns)
        )).first()
        claimed = rows.handoff_of(row)
        if claimed is None:
            return handoff
        self.ctx.metrics.offers_ended(await recipients.end_offers(session, handoff.id, OfferResult.TAKEN, now, winner_person=person_id))
        await audit.note(
            session, "handoff_claimed", at=now, actor=actor, person_id=person_id, handoff_session_id=handoff.id,
            conversation_id=handoff.conversation_id, via=str(reason), step=handoff.step,
        )
        self._observe_claim(claimed, claimed.channel_kind, now)
        return claimed

    def _observe_claim(self, handoff: HandoffSession, kind: str, now: datetime) -> None:
        """A claim won: counted, and timed like any claim from the activation (a person was reached now)."""
        self.ctx.metrics.claims.labels("claimed").inc()
        if handoff.activated_at is not None:
            waited = (now - handoff.activated_at).total_seconds()
            self.ctx.metrics.time_to_claim.labels(str(handoff.route_id), kind).observe(waited)
            self.ctx.observe_time_to_human(handoff, kind, now)

    async def _tell_claim(
        self, session: AsyncSession, handoff: HandoffSession, winner: HandoffRecipient | None, now: datetime,
    ) -> None:
        """The claimer's thread hears it has the handoff; every other recipient reached, who has
        it (an adapter that can edits its dispatch to say so)."""
        at = now.strftime("%H:%M UTC")
        for other in await recipients.of_handoff(session, handoff.id, state=RecipientState.NOTIFIED):
            line = [line_of(other)]
            if winner is not None and other.id == winner.id:
                text = self.ctx.renderer.render("messages/claimed.txt", short_code=handoff.short_code, by=handoff.claimed_by).strip()
                await self.notices.notify(session, handoff, "claimed", text, now, to=line)
            else:
                text = self.ctx.renderer.render(
                    "messages/taken.txt", short_code=handoff.short_code, by=handoff.claimed_by,
                    via=winner.channel_label if winner else handoff.claimed_via, at=at,
                ).strip()
                await self.notices.notify(session, handoff, "taken", text, now, to=line)

    async def speaking(self, sid: str, channel_id: int | None, *, by: str, via: str, claiming: bool = False,
                       person_id: str | None = None, thread_key: str | None = None) -> Speaking:
        """Whether what a recipient on `channel_id` does next (a reply, `/release`) goes
        through: always on a handoff straight to a channel; on a route, if their thread holds
        the claim, or takes it now. When it does not, their thread is told who has it (nothing
        of theirs reaches the subscriber) and the refusal is in the audit trail. `claiming`:
        the act is the claim itself (a Claim press), so the claim is its effect and a late one
        is recorded as a `claim_noop`. `person_id`: the person acting, when the desk knows them.
        `thread_key`: the thread they acted in, which tells a person's direct line from their
        channel's room."""
        async with self.ctx.db.read() as session:
            handoff = await handoff_in(session, sid)
            if handoff.route_id is None:
                return Speaking(allowed=True, handoff=handoff)
            recipient = await recipients.on_channel(session, sid, channel_id, thread_key) if channel_id is not None else None
        if handoff.claimed_at is None:
            result = await self.claim(
                sid, by=by, via=via, recipient_id=recipient.id if recipient else None, effect=claiming, record_noop=False,
                person_id=person_id,
            )
            handoff = result.handoff
            if result.claimed:
                return Speaking(allowed=True, handoff=handoff)
        if handoff.state != HandoffState.ACTIVE:
            return Speaking(allowed=True, handoff=handoff)  # ended meanwhile: the caller's own step says so
        ours = recipient is not None and handoff.claimed_recipient_id == recipient.id
        if ours or (recipient is None and handoff.claimed_via == via):
            return Speaking(allowed=True, handoff=handoff)
        now = self.ctx.clock.now()
        if claiming:
            self.ctx.metrics.claims.labels("noop").inc()
        async with self.ctx.db.transaction(effect=claiming) as session:
            await audit.note(
                session, "claim_noop" if claiming else "not_relayed", at=now, actor=by, person_id=person_id,
                handoff_session_id=sid, conversation_id=handoff.conversation_id, via=via, claimed_by=handoff.claimed_by,
            )
            # A late Claim press wrote nothing: its thread already heard who took it ("taken")
            if not claiming and recipient is not None and recipient.state == RecipientState.NOTIFIED:
                text = self.ctx.renderer.render("messages/not_yours.txt", short_code=handoff.short_code, by=handoff.claimed_by).strip()
                await self.notices.notify(session, handoff, "not_yours", text, now, to=[line_of(recipient)])
        return Speaking(allowed=False, handoff=handoff, holder=handoff.claimed_by)


def _seconds_to_person_sql(now: datetime) -> Any:
    """`seconds_to_person` (context.py) as SQL, for the claim's compare-and-set, which reads no row before it."""
    started = func.coalesce(rows.HANDOFFS.c.activated_at, rows.HANDOFFS.c.created_at)
    return seconds_between(started, literal(now, type_=rows.HANDOFFS.c.claimed_at.type))


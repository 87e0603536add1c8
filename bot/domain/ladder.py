"""A route's ladder at run time: which step is open now, who it notifies, and the rows that
record each notified channel (`HandoffRecipient`).

A handoff on a route keeps its one "line" on the session row, as every handoff does — the
channel and thread that get its messages once someone has claimed it (before that, its first
notified recipient's). What only a route has lives here: every channel it notified, the
thread each dispatch landed in (a reply or a Claim press in any of them finds the handoff),
and whether each was delivered, so the ladder can move on the moment a whole step has failed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import HoursConfig, Ladder, StepConfig
from bot.delivery.channel_set import ChannelSet
from bot.domain.handoff_rows import HANDOFFS, handoff_of, new_row
from bot.domain.hours import Closed, OfficeHours, is_open, next_opening
from bot.domain.offers import Offer, Passed, Reach
from bot.store.db import execute_dml
from bot.store.models import HandoffRecipient, HandoffSession
from bot.store.rows import Rows
from bot.store.vocabulary import HandoffState, OfferResult, RecipientState
from channels.base import ChannelAdapter, Receipt

_RECIPIENTS = HandoffRecipient.__table__  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models
_RECIPIENT = Rows(HandoffRecipient)


# --------------------------------------------------------------------------- the steps


@dataclass(frozen=True)
class StepPlan:
    """The step to notify: its place in the ladder, the channels of it that can be reached
    now, the people its targets offer it to on this turn (`offers`, with who was passed over
    and why), and, when it runs although nobody is there (`when_closed: dispatch`), when they are back."""

    index: int
    step: StepConfig
    adapters: tuple[ChannelAdapter, ...]
    closed: Closed | None = None
    offers: tuple[Offer, ...] = ()
    passed: tuple[Passed, ...] = ()
    turn: int = 0

    @property
    def reaches_anyone(self) -> bool:
        return bool(self.adapters or self.offers)


class Steps:
    """Which of a ladder's steps can run at the desk's clock: a step whose own `hours` are
    closed is skipped, and so is each channel in it whose `hours` are closed or that is down.
    A step's people (`person:`, `team:`, `oncall:`) are asked of `reach` (bot/domain/offers.py),
    which reads the directory: `plan` does, in the caller's transaction."""

    def __init__(self, channels: ChannelSet, hours: OfficeHours, reach: Reach | None = None) -> None:
        self.channels, self.hours, self.reach = channels, hours, reach

    async def plan(
        self, session: AsyncSession, ladder: Ladder, start: int, now: datetime, offered: Sequence[HandoffRecipient] = (),
    ) -> StepPlan | None:
        """The first step from `start` on that reaches someone now: a channel of it, or a person
        its targets offer it to on its first turn. `offered`: the handoff's recipients so far."""
        for index in range(start, len(ladder.steps)):
            step = ladder.steps[index]
            if step.hours is not None and not is_open(self.schedules[step.hours], now):
                continue
            plan = StepPlan(index, step, self.reachable(step, now))
            if step.targets and self.reach is not None:
                turn = await self.reach.turn(session, step, 0, offered, now)
                plan = replace(plan, offers=turn.offers, passed=turn.passed)
            if plan.reaches_anyone:
                return plan
        return None

    async def next_turn(
        self, session: AsyncSession, plan_of: Ladder, index: int, turn: int, now: datetime,
        offered: Sequence[HandoffRecipient],
    ) -> StepPlan | None:
        """The step's next offer when it offers one person at a time and someone is left;
        None when its turns are over (the next step runs)."""
        step = plan_of.steps[index]
        if self.reach is None or not step.targets:
            return None
        found = await self.reach.turn(session, step, turn, offered, now)
        if not found.offers:
            return None
        return StepPlan(index, step, (), offers=found.offers, passed=found.passed, turn=turn)

    @property
    def schedules(self) -> Mapping[str, HoursConfig]:
        return self.hours.schedules

    def reachable(self, step: StepConfig, now: datetime, *, ignore_hours: bool = False) -> tuple[ChannelAdapter, ...]:
        """The step's channels up and open now (its people are `plan`'s)."""
        if not ignore_hours and step.hours is not None and not is_open(self.schedules[step.hours], now):
            return ()
        found = []
        for cid in step.channels:
            adapter = self.channels.get(cid)
            if adapter is None or not self.channels.is_available(cid):
                continue
            if not ignore_hours and self.hours.closed(adapter.config) is not None:
                continue
            found.append(adapter)
        return tuple(found)

    def next_open(self, ladder: Ladder, start: int, now: datetime) -> StepPlan | None:
        """The first step from `start` on with a channel there now, or, with people among its
        targets, open now (whether one of them is available is `plan`'s to find out)."""
        for index in range(start, len(ladder.steps)):
            step = ladder.steps[index]
            adapters = self.reachable(step, now)
            people = (self.reach is not None and bool(step.targets)
                      and (step.hours is None or is_open(self.schedules[step.hours], now)))
            if adapters or (people and self._can_reach_people()):
                return StepPlan(index, step, adapters)
        return None

    def _can_reach_people(self) -> bool:
        """Whether a channel that sends to one person is up."""
        return any(a.capabilities.direct for a in self.channels.available())

    def first_to_open(self, ladder: Ladder, now: datetime) -> StepPlan | None:
        """When no step is open: the one whose people are back soonest, to be notified now
        with an honest estimate (None when no step has a channel that is up at all)."""
        plans = [
            StepPlan(index, step, adapters, self._opens(step, adapters, now))
            for index, step in enumerate(ladder.steps)
            if (adapters := self.reachable(step, now, ignore_hours=True))
        ]
        # never-again (back None) last; of the rest the soonest, the earlier step on a tie
        return min(plans, key=lambda p: (p.closed is None or p.closed.back is None, p.closed.back if p.closed and p.closed.back else now),
                   default=None)

    def is_available(self, ladder: Ladder) -> bool:
        """Offered to the model while at least one of its channels is up (for its people, one
        that sends to one person)."""
        if self.reach is not None and any(step.targets for step in ladder.steps) and self._can_reach_people():
            return True
        return any(self.channels.is_available(cid) for cid in ladder.channel_ids)

    def closed_now(self, ladder: Ladder, now: datetime) -> Closed | None:
        """None when some step is open now; otherwise when the first one opens."""
        if self.next_open(ladder, 0, now) is not None:
            return None
        plan = self.first_to_open(ladder, now)
        return plan.closed if plan is not None else Closed(now=now, back=None, timezone="UTC")

    def _opens(self, step: StepConfig, adapters: tuple[ChannelAdapter, ...], now: datetime) -> Closed:
        """When a closed step has someone again: its own hours open and one of its channels' too."""
        candidates: list[tuple[datetime, str]] = []
        if step.hours is not None:
            schedule = self.schedules[step.hours]
            opening = next_opening(schedule, now)
            if opening is None:
                return Closed(now=now, back=None, timezone=schedule.timezone)
            candidates.append((opening.astimezone(schedule.zone), schedule.timezone))
        channel_backs = [closed for a in adapters if (closed := self.hours.closed(a.config)) is not None]
        if len(channel_backs) == len(adapters):  # every channel of it is closed too: the first back counts
            known = [c for c in channel_backs if c.back is not None]
            if not known:
                return Closed(now=now, back=None, timezone=channel_backs[0].timezone)
            first = min(known, key=lambda c: c.back or now)
            candidates.append((first.back or now, first.timezone))
        back, zone = max(candidates) if candidates else (now, "UTC")
        return Closed(now=now, back=back, timezone=zone)


# --------------------------------------------------------------------------- the rows


@dataclass(frozen=True)
class InThread:
    """The active handoff a recipient's thread belongs to, and, on a route, which of its
    recipients that thread is (None for a handoff straight to a channel)."""

    handoff: HandoffSession
    recipient: HandoffRecipient | None


async def add(session: AsyncSession, **values: Any) -> HandoffRecipient:
    row = new_row(HandoffRecipient, **{"id": None, **values})
    row.pop("id")
    recipient_id = (await session.execute(insert(_RECIPIENTS).values(**row).returning(_RECIPIENTS.c.id))).scalar_one()
    return _RECIPIENT.of({"id": recipient_id, **row})


async def of_handoff(session: AsyncSession, sid: str, *, state: RecipientState | None = None) -> list[HandoffRecipient]:
    """A handoff's recipients in the order they were notified."""
    query = select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.handoff_session_id == sid)
    if state is not None:
        query = query.where(_RECIPIENTS.c.state == state)
    return _RECIPIENT.all((await session.execute(query.order_by(_RECIPIENTS.c.id))).all())


async def of_handoffs(session: AsyncSession, sids: Collection[str]) -> dict[str, list[HandoffRecipient]]:
    """The recipients of several handoffs in one read, each handoff's in the order notified."""
    found: dict[str, list[HandoffRecipient]] = {sid: [] for sid in sids}
    if sids:
        query = select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.handoff_session_id.in_(list(sids)))
        for recipient in _RECIPIENT.all((await session.execute(query.order_by(_RECIPIENTS.c.id))).all()):
            found[recipient.handoff_session_id].append(recipient)
    return found


async def get(session: AsyncSession, recipient_id: int) -> HandoffRecipient | None:
    row = (await session.execute(select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.id == recipient_id))).first()
    return _RECIPIENT.one(row) if row is not None else None


async def by_item(session: AsyncSession, outbox_item_id: int) -> HandoffRecipient | None:
    row = (await session.execute(select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.outbox_item_id == outbox_item_id))).first()
    return _RECIPIENT.one(row) if row is not None else None


async def on_channel(session: AsyncSession, sid: str, channel_id: int, thread_key: str | None = None) -> HandoffRecipient | None:
    """The recipient a handoff has on one channel: the one whose thread `thread_key` is (a
    person's direct line and the room are both on their channel), else the channel's room."""
    if thread_key is not None:
        row = (await session.execute(
            select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.handoff_session_id == sid, _RECIPIENTS.c.channel_id == channel_id,
                                               _RECIPIENTS.c.thread_key == thread_key).order_by(_RECIPIENTS.c.id).limit(1)
        )).first()
        if row is not None:
            return _RECIPIENT.one(row)
    row = (await session.execute(
        select(*_RECIPIENTS.columns).where(_RECIPIENTS.c.handoff_session_id == sid, _RECIPIENTS.c.lane_key == f"c:{channel_id}")
    )).first()
    return _RECIPIENT.one(row) if row is not None else None


async def active_in_thread(session: AsyncSession, channel_id: int, thread_key: str) -> InThread | None:
    """The active routed handoff one of whose dispatches landed in this thread."""
    row = (await session.execute(
        select(*_RECIPIENTS.columns, *HANDOFFS.columns)
        .join(HANDOFFS, HANDOFFS.c.id == _RECIPIENTS.c.handoff_session_id)
        .where(_RECIPIENTS.c.channel_id == channel_id, _RECIPIENTS.c.thread_key == thread_key,
               HANDOFFS.c.state == HandoffState.ACTIVE)
        .order_by(_RECIPIENTS.c.id.desc()).limit(1)
    )).first()
    if row is None:
        return None
    split = len(_RECIPIENTS.columns)
    handoff = handoff_of(row[split:])
    assert handoff is not None
    return InThread(handoff, _RECIPIENT.one(row[:split]))


async def open_direct(session: AsyncSession, channel_id: int) -> list[tuple[HandoffRecipient, HandoffSession]]:
    """The active handoffs sent to people directly on this channel whose line is still theirs
    (reached, and not taken by someone else), oldest first."""
    rows = (await session.execute(
        select(*_RECIPIENTS.columns, *HANDOFFS.columns)
        .join(HANDOFFS, HANDOFFS.c.id == _RECIPIENTS.c.handoff_session_id)
        .where(_RECIPIENTS.c.channel_id == channel_id, _RECIPIENTS.c.person_id.is_not(None),
               _RECIPIENTS.c.state == RecipientState.NOTIFIED, HANDOFFS.c.state == HandoffState.ACTIVE,
               or_(_RECIPIENTS.c.result.is_(None), _RECIPIENTS.c.result.in_([OfferResult.CLAIMED, OfferResult.MISSED])))
        .order_by(_RECIPIENTS.c.id)
    )).all()
    split = len(_RECIPIENTS.columns)
    found = []
    for row in rows:
        handoff = handoff_of(row[split:])
        if handoff is not None:
            found.append((_RECIPIENT.one(row[:split]), handoff))
    return found


async def notified_from(session: AsyncSession, outbox_item_id: int, receipt: Receipt, now: datetime) -> HandoffRecipient | None:
    """The dispatch to a recipient was delivered: where it landed. None when the item is no recipient's."""
    row = (await session.execute(
        update(_RECIPIENTS).where(_RECIPIENTS.c.outbox_item_id == outbox_item_id, _RECIPIENTS.c.state == RecipientState.SENDING)
        .values(state=RecipientState.NOTIFIED, thread_key=receipt.thread_key, thread=receipt.thread,
                channel_message_id=receipt.message_id, notified_at=now)
        .returning(*_RECIPIENTS.columns)
    )).first()
    return _RECIPIENT.one(row) if row is not None else None


async def failed_at(session: AsyncSession, outbox_item_id: int, error: str, now: datetime) -> HandoffRecipient | None:
    """The dispatch to a recipient failed, before or after the provider accepted it."""
    row = (await session.execute(
        update(_RECIPIENTS).where(_RECIPIENTS.c.outbox_item_id == outbox_item_id, _RECIPIENTS.c.state != RecipientState.FAILED)
        .values(state=RecipientState.FAILED, error=error[:2000], failed_at=now)
        .returning(*_RECIPIENTS.columns)
    )).first()
    return _RECIPIENT.one(row) if row is not None else None


async def step_has_hope(session: AsyncSession, sid: str, step: int, turn: int = 0) -> bool:
    """Whether any recipient of the step's current offer is still being sent to or was
    reached: a room of the step (notified on its first turn, it stays), or a person offered
    it on this turn."""
    found = await session.scalar(
        select(col(HandoffRecipient.id)).where(
            col(HandoffRecipient.handoff_session_id) == sid, col(HandoffRecipient.step) == step,
            col(HandoffRecipient.state) != RecipientState.FAILED,
            or_(col(HandoffRecipient.person_id).is_(None), col(HandoffRecipient.turn) == turn),
        ).limit(1)
    )
    return found is not None


async def end_offers(
    session: AsyncSession, sid: str, result: OfferResult, now: datetime, *, step: int | None = None,
    turn: int | None = None, winner: int | None = None, winner_person: str | None = None,
) -> dict[OfferResult, int]:
    """How a handoff's open offers to people ended: the winner's `claimed` and the others'
    `taken` on a claim; `missed` when their turn passed (only that step and turn's) or nobody
    claimed; `ended` when the handoff ended otherwise. Returns how many offers ended how (for
    the caller's `handoff_offers_total`): only the rows this call changed, so a race counts once.

    `winner_person`: a person who claimed it elsewhere (the inbox, the return form) rather
    than in an offer's thread: their newest open offer, if they have one, is the winner's."""
    open_offers = [_RECIPIENTS.c.handoff_session_id == sid, _RECIPIENTS.c.person_id.is_not(None), _RECIPIENTS.c.result.is_(None),
                   _RECIPIENTS.c.state != RecipientState.FAILED]
    if winner is None and winner_person is not None:
        winner = await session.scalar(select(_RECIPIENTS.c.id).where(*open_offers, _RECIPIENTS.c.person_id == winner_person)
                                      .order_by(_RECIPIENTS.c.id.desc()).limit(1))
    if step is not None:
        open_offers.append(_RECIPIENTS.c.step == step)
    if turn is not None:
        open_offers.append(_RECIPIENTS.c.turn == turn)
    ended: dict[OfferResult, int] = {}
    if winner is not None:  # first, so the rest below no longer includes it; a missed offer can still be claimed
        won = await execute_dml(session, update(_RECIPIENTS).where(_RECIPIENTS.c.id == winner, _RECIPIENTS.c.person_id.is_not(None))
                                .values(result=OfferResult.CLAIMED, ended_at=now, next_contact_at=None))
        ended[OfferResult.CLAIMED] = won.rowcount
    rest = await execute_dml(session, update(_RECIPIENTS).where(*open_offers)
                             .values(result=result, ended_at=now, next_contact_at=None))
    ended[result] = ended.get(result, 0) + rest.rowcount
    return {how: count for how, count in ended.items() if count}


async def contacts_due(session: AsyncSession, sid: str, now: datetime) -> list[HandoffRecipient]:
    """The handoff's open offers whose person's next contact method is due (`contact_after`)."""
    query = select(*_RECIPIENTS.columns).where(
        _RECIPIENTS.c.handoff_session_id == sid, _RECIPIENTS.c.next_contact_at <= now, _RECIPIENTS.c.result.is_(None),
    ).order_by(_RECIPIENTS.c.id)
    return _RECIPIENT.all((await session.execute(query)).all())


async def take_contact_due(session: AsyncSession, recipient: HandoffRecipient) -> bool:
    """Compare-and-set: this instance tries the person's next contact method (once)."""
    done = await execute_dml(
        session,
        update(_RECIPIENTS).where(_RECIPIENTS.c.id == recipient.id, _RECIPIENTS.c.next_contact_at == recipient.next_contact_at)
        .values(next_contact_at=None),
    )
    return done.rowcount == 1


async def next_wake(session: AsyncSession, sid: str, offer_until: datetime | None) -> datetime | None:
    """When the ladder must look at the handoff next: its offer's end, or sooner, a person's
    next contact method."""
    soonest = await session.scalar(
        select(func.min(_RECIPIENTS.c.next_contact_at)).where(
            _RECIPIENTS.c.handoff_session_id == sid, _RECIPIENTS.c.result.is_(None)))
    times = [t for t in (offer_until, soonest) if t is not None]
    return min(times) if times else None

"""Who a route's step offers a handoff to, person by person: its `person:`, `team:` and
`oncall:` targets turned into offers on people's own contact methods.

A step's channels are notified as they always were (their rooms, all at once). Its targets
name people instead, and each turn of the step picks whom to offer it to now:

- `person:<id>`: that person, on the step's first turn.
- `team:<id>` with `assign: broadcast` (the default): every available member at once, on the
  first turn. With `round_robin` or `least_busy`: one available member per turn, for the
  step's `claim_within` each — the one offered least recently by this team (round robin) or
  the one holding the fewest open handoffs, then least recently offered (least busy). Members
  away, outside their working hours or at capacity (`max_concurrent`: the step's or their
  own, the lower) are passed over.
- `oncall:<id>`: whoever each layer has on call now, first layer first, one per turn; a
  person away passes to the next layer (being on call overrides working hours and capacity).

Everyone passed over is named with why (`Passed`), so the audit trail says who was skipped.
A person is reached on their first contact method; the next one is tried when it fails, or
after the step's `contact_after` (`next_method`). Nothing here writes: the dispatch stores
the offers it is handed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import HoursConfig, StepConfig, Target, TeamConfig
from bot.delivery.channel_set import ChannelSet
from bot.domain.people.contact import direct_channels
from bot.domain.people.reach import ContactMethod, DirectChannel, Presence, contact_methods, presence
from bot.store.models import HandoffRecipient, HandoffSession, Person, PersonIdentity
from bot.store.vocabulary import OPEN_STATES


class Shift(Protocol):
    """One layer's person on call now, as the on-call schedules tell it (bot/domain/oncall.py)."""

    @property
    def person_id(self) -> str: ...

    @property
    def layer(self) -> str: ...


class OnCallNow(Protocol):
    """Who is on call on a schedule at an instant, layer by layer, first layer first."""

    async def now(self, schedule_id: str, at: datetime | None = None) -> Sequence[Shift]: ...


@dataclass(frozen=True)
class Offer:
    """One person to offer the handoff to now, on one of their contact methods."""

    person_id: str
    person_name: str
    target: str  # the step's target that chose them: person:olga, team:support, oncall:nights
    method: ContactMethod
    layer: str | None = None  # the on-call layer they are on

    @property
    def lane_key(self) -> str:
        return lane_key(self.person_id, self.method.channel_id)


@dataclass(frozen=True)
class Passed:
    """Someone a target would have offered it to, and why it did not: away, off_hours,
    at_capacity, no_contact_method or disabled."""

    person_id: str
    target: str
    why: str


@dataclass(frozen=True)
class Turn:
    """A turn of a step: the offers to make now, who was passed over, and whether a later turn
    has anyone left to offer it to (so the step waits for it rather than ending)."""

    offers: tuple[Offer, ...]
    passed: tuple[Passed, ...]
    more: bool


def lane_key(person_id: str, channel_id: int) -> str:
    """A person's recipient row on a handoff: one brief per person per channel."""
    return f"p:{person_id}:{channel_id}"


@dataclass
class _Candidate:
    person: Person
    methods: list[ContactMethod]
    presence: Presence
    held: int
    last_offered: int | None  # the id of the newest offer this target made them (ids only grow)


class Reach:
    """Turns a step's targets into offers, from the directory, the teams, the schedules and the
    channels that can send to one person."""

    def __init__(
        self, *, channels: ChannelSet, teams: Sequence[TeamConfig], schedules: Mapping[str, HoursConfig],
        oncall: OnCallNow | None = None,
    ) -> None:
        self.channels, self.schedules, self.oncall = channels, schedules, oncall
        self.teams = {team.id: team for team in teams}

    def direct_channels(self) -> list[DirectChannel]:
        """The channels up now whose adapter can send to one person."""
        up = self.channels.available()
        kinds = {a.id: a.config.kind for a in up}
        return direct_channels(up, kinds.__getitem__)

    async def methods_of(self, session: AsyncSession, person_id: str) -> list[ContactMethod]:
        """Where `person_id` can be reached now, in their order."""
        person = await session.get(Person, person_id)
        if person is None:
            return []
        identities = (await session.scalars(select(PersonIdentity).where(col(PersonIdentity.person_id) == person_id))).all()
        return contact_methods(person, list(identities), self.direct_channels())

    async def next_method(self, session: AsyncSession, recipient: HandoffRecipient,
                          taken: Sequence[HandoffRecipient]) -> ContactMethod | None:
        """The person's contact method after `recipient`'s whose channel this handoff has not
        used for them yet; None when they have no other."""
        if recipient.person_id is None:
            return None
        used = {r.lane_key for r in taken}
        for method in await self.methods_of(session, recipient.person_id):
            if method.position > (recipient.contact_index or 0) and lane_key(recipient.person_id, method.channel_id) not in used:
                return method
        return None

    async def turn(
        self, session: AsyncSession, step: StepConfig, turn: int, offered: Sequence[HandoffRecipient], now: datetime,
    ) -> Turn:
        """Whom the step offers the handoff to on `turn` (0 = when the step starts). `offered`
        is the handoff's recipients so far: nobody is offered it twice in one step."""
        already = {r.person_id for r in offered if r.person_id is not None}
        offers: list[Offer] = []
        passed: list[Passed] = []
        more = False
        for target in step.targets:
            if target.kind == "oncall":
                chosen, skipped, left = await self._on_call(session, target, already | {o.person_id for o in offers}, now)
            elif target.kind == "team" and step.assign != "broadcast":
                chosen, skipped, left = await self._one_of_team(session, step, target, already | {o.person_id for o in offers}, now)
            elif turn == 0:
                chosen, skipped, left = await self._everyone(session, step, target, already | {o.person_id for o in offers}, now)
            else:
                continue
            offers.extend(chosen)
            passed.extend(skipped)
            more = more or left
        return Turn(tuple(offers), tuple(passed), more)

    # ------------------------------------------------------------------ the three kinds

    async def _everyone(
        self, session: AsyncSession, step: StepConfig, target: Target, already: set[str], now: datetime,
    ) -> tuple[list[Offer], list[Passed], bool]:
        """A person, or a whole team at once: each one available gets an offer."""
        ids = [target.id] if target.kind == "person" else list(self.teams[target.id].members) if target.id in self.teams else []
        found = await self._candidates(session, ids, target, now)
        offers, passed = [], []
        for pid in ids:
            if pid in already or pid not in found:
                continue
            why = self._why_not(found[pid], step, team=target.kind == "team")
            if why is None:
                offers.append(_offer(found[pid], target))
            else:
                passed.append(Passed(pid, str(target), why))
        return offers, passed, False

    async def _one_of_team(
        self, session: AsyncSession, step: StepConfig, target: Target, already: set[str], now: datetime,
    ) -> tuple[list[Offer], list[Passed], bool]:
        """Round robin or least busy: the one member to offer it to on this turn."""
        team = self.teams.get(target.id)
        if team is None:
            return [], [], False
        found = await self._candidates(session, list(team.members), target, now)
        eligible, passed = [], []
        for index, pid in enumerate(team.members):
            if pid in already or pid not in found:
                continue
            why = self._why_not(found[pid], step, team=True)
            if why is None:
                eligible.append((index, found[pid]))
            else:
                passed.append(Passed(pid, str(target), why))
        if not eligible:
            return [], passed, False

        def order(entry: tuple[int, _Candidate]) -> tuple[int, int, int]:
            index, candidate = entry
            offered_at = candidate.last_offered if candidate.last_offered is not None else -1
            busy = candidate.held if step.assign == "least_busy" else 0
            return busy, offered_at, index

        eligible.sort(key=order)
        return [_offer(eligible[0][1], target)], passed, len(eligible) > 1

    async def _on_call(
        self, session: AsyncSession, target: Target, already: set[str], now: datetime,
    ) -> tuple[list[Offer], list[Passed], bool]:
        """The first layer's person on call now who is there; a later turn, the next layer's."""
        if self.oncall is None:
            return [], [], False
        shifts = await self.oncall.now(target.id, now)
        layers: dict[str, str] = {}
        for shift in shifts:
            layers.setdefault(shift.person_id, shift.layer)
        found = await self._candidates(session, list(layers), target, now)
        passed: list[Passed] = []
        chosen: list[Offer] = []
        left = False
        for pid, layer in layers.items():
            if pid in already or pid not in found:
                continue
            candidate = found[pid]
            why = _absent(candidate)
            if why is not None:
                passed.append(Passed(pid, str(target), why))
            elif chosen:
                left = True
                break
            else:
                chosen.append(_offer(candidate, target, layer))
        return chosen, passed, left

    # ------------------------------------------------------------------ what they read

    async def _candidates(self, session: AsyncSession, ids: list[str], target: Target, now: datetime) -> dict[str, _Candidate]:
        """The people `ids` names that exist, each with their contact methods, presence, open
        handoffs held and when this target last offered them one: four reads, whatever the number."""
        if not ids:
            return {}
        people = {p.id: p for p in (await session.scalars(select(Person).where(col(Person.id).in_(ids)))).all()}
        identities: dict[str, list[PersonIdentity]] = {pid: [] for pid in people}
        for identity in (await session.scalars(select(PersonIdentity).where(col(PersonIdentity.person_id).in_(list(people))))).all():
            identities[identity.person_id].append(identity)
        held = dict((await session.execute(
            select(col(HandoffSession.claimed_person_id), func.count())
            .where(col(HandoffSession.claimed_person_id).in_(list(people)), col(HandoffSession.state).in_(list(OPEN_STATES)))
            .group_by(col(HandoffSession.claimed_person_id))
        )).all())
        last = dict((await session.execute(
            select(col(HandoffRecipient.person_id), func.max(col(HandoffRecipient.id)))
            .where(col(HandoffRecipient.person_id).in_(list(people)), col(HandoffRecipient.target) == str(target))
            .group_by(col(HandoffRecipient.person_id))
        )).all())
        channels = self.direct_channels()
        return {
            pid: _Candidate(person, contact_methods(person, identities[pid], channels), presence(person, now, self.schedules),
                            int(held.get(pid, 0)), last.get(pid))
            for pid, person in people.items()
        }

    @staticmethod
    def _why_not(candidate: _Candidate, step: StepConfig, *, team: bool) -> str | None:
        """Why a person or team member is not offered it now; None when they are."""
        why = _absent(candidate)
        if why is not None:
            return why
        if team and candidate.presence == Presence.OFF_HOURS:
            return "off_hours"
        limits = [n for n in (step.max_concurrent, candidate.person.max_concurrent) if n is not None]
        if team and limits and candidate.held >= min(limits):
            return "at_capacity"
        return None


def _absent(candidate: _Candidate) -> str | None:
    """What keeps anyone from an offer, on call or not: disabled, away, no way to reach them."""
    if candidate.presence == Presence.DISABLED:
        return "disabled"
    if candidate.presence == Presence.AWAY:
        return "away"
    if not candidate.methods:
        return "no_contact_method"
    return None


def _offer(candidate: _Candidate, target: Target, layer: str | None = None) -> Offer:
    return Offer(candidate.person.id, candidate.person.name, str(target), candidate.methods[0], layer)

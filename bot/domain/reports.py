"""The owner's reports: how many handoffs, how fast a person was reached, how long they
lasted, how they ended, and how many conversations never needed a person.

Every number is a SQL aggregate over facts the desk writes once, where they happen: a
handoff's `time_to_person_seconds` (at the claim on a route, at the first human reply
straight to a channel), `duration_seconds` (at the release) and `handled_by` (who handled
it), a conversation's `first_handoff_at` (at its first request). No row is loaded into
Python, and a summary's cost does not grow with its range: triggers keep rollups of those
facts per UTC hour or day (`bot/store/rollups.py`), and a summary (`_Rolled`) reads the
range's whole UTC days (its whole UTC hours for the counts per local day) from them, and
only the ragged ends from the rows. `Reports(rollups=False)` counts everything from the
rows, the way the rollups are checked against (tests/test_rollups.py).

From the rows, what costs is SQLite sorting: a GROUP BY sorts the rows it groups. So the
counts per local day group one stretch of the report index at a time (a day's, or a piece
of an hour), group keys are few and integers where they can be, and the bucket of a duration
is a binary search written as nested CASEs (`_interval_of`). A percentile is nearest-rank and
exact, found in two steps: fine-bucket counts (the rollups' and the ragged ends' together)
say where every rank falls, then the value is read from the rows of only the bucket holding
it, in order, through an index on the measure (`_value_at`). The same queries run on
PostgreSQL (bench/reports.py; the figures are in docs/reports.md).

A handoff belongs to the range its `created_at` falls in, and to the local day (in the
summary's timezone, from local midnight to local midnight, so a day of a DST change has 23
or 25 hours) it was created on.

Per person (`PersonFigures`), each handoff a person handled counts for exactly one of them,
so the rows add up to the handoffs people handled: on a route the person who claimed it;
straight to a channel the author of its first human reply (the moment its time to a person
is measured at, so a person is never credited with a colleague's speed); failing both, the
person who released it through a person's door (the form, a release link, the inbox or the
API), as the desk writes it down in `handled_by`. A handoff nobody acted on (released by the
idle timer, the ladder or the agent) is in no row; one whose act carries no person (an
unlinked provider user, a form link opened by anyone, the owner token) is in the row "not
linked to a person". With rollups they come from `report_people` (`report_people_through`
with a channel or route filter) and the ragged ends' rows (`_per_person_rolled`); from the
rows alone, one statement over the range's handoffs and one sort of those a person handled
(`_per_person`).

A route's offers to people (`OfferFigures`, per person and per team or on-call schedule)
are read from the offers' rows of the chosen handoffs (`_offers`), one per handoff and
person however many contact methods it took: offered, claimed by them (the handoff's claim
names them), missed (their turn passed, or nobody claimed, without their claim), and the
seconds from their first offer to their claim, numbered per person or target as the
handoffs are per handler. One statement per table; the rows lie beside their handoff
(`ix_handoff_recipients_handoff_session_id`). Both are skipped when nobody was offered a
handoff directly since the range began (`_offered_to_people_since`).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import (
    CTE,
    ColumnElement,
    RowMapping,
    Select,
    Subquery,
    Table,
    and_,
    bindparam,
    case,
    exists,
    func,
    literal,
    or_,
    select,
    text,
    union_all,
)
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.domain.handoff_rows import HANDOFFS, MESSAGES
from bot.store.db import Database
from bot.store.dialects import seconds_between, unindexed
from bot.store.models import (
    Conversation,
    HandoffRecipient,
    HandoffSatisfaction,
    Person,
    ReportConversations,
    ReportEnding,
    ReportHour,
    ReportMeasure,
    ReportPerson,
    ReportPersonThrough,
)
from bot.store.rollups import DAY, DURATION, FINE_EDGES, HOUR, NO_ROUTE, TIME_TO_PERSON, UNTIMED
from bot.store.rows import Rows
from bot.store.vocabulary import OPEN_STATES, HandoffState, OfferResult, ReleaseReason, Role

SATISFACTION = Rows(HandoffSatisfaction).table
PEOPLE = Rows(Person).table
RECIPIENTS = Rows(HandoffRecipient).table
ROLLED_HOURS, ROLLED_ENDINGS = Rows(ReportHour).table, Rows(ReportEnding).table
ROLLED_MEASURES, ROLLED_CONVERSATIONS = Rows(ReportMeasure).table, Rows(ReportConversations).table
ROLLED_PEOPLE, ROLLED_PEOPLE_THROUGH = Rows(ReportPerson).table, Rows(ReportPersonThrough).table

NOT_LINKED = "not linked to a person"
"""The name of the per-person row of acts nobody known did."""


@dataclass(frozen=True)
class Bucket:
    """One bar of a histogram: the values in [lower, upper) seconds (no upper: and above)."""

    label: str
    lower: float
    upper: float | None


BUCKETS: tuple[Bucket, ...] = (
    Bucket("<1m", 0, 60),
    Bucket("1–5m", 60, 300),
    Bucket("5–15m", 300, 900),
    Bucket("15–60m", 900, 3600),
    Bucket("1–4h", 3600, 14400),
    Bucket(">4h", 14400, None),
)
"""The fixed buckets of both histograms, so two ranges or two channels compare bar by bar."""


@dataclass(frozen=True)
class BucketCount:
    bucket: Bucket
    count: int


@dataclass(frozen=True)
class Distribution:
    """Seconds measured over `count` handoffs; `missing` handoffs had no value (never reached
    a person, or not ended yet). The percentiles and max are None when `count` is 0."""

    count: int
    missing: int
    p50: float | None
    p90: float | None
    max: float | None
    histogram: tuple[BucketCount, ...]


@dataclass(frozen=True)
class DayCount:
    """Handoffs created on one local day through one channel (and route, when routed)."""

    day: date
    channel_id: int
    channel_label: str
    route_id: int | None
    route_label: str | None
    handoffs: int


@dataclass(frozen=True)
class Tally:
    """How many handoffs carried one stored word (a release reason, an outcome)."""

    word: str
    count: int


@dataclass(frozen=True)
class Endings:
    """How the range's `handoffs` ended. `unclaimed` is also among `by_reason`; `open` are
    still dispatching or active; `failed_dispatches` never reached their channel."""

    handoffs: int
    by_reason: tuple[Tally, ...]
    by_outcome: tuple[Tally, ...]
    missing_required: int
    unclaimed: int
    failed_dispatches: int
    open: int


@dataclass(frozen=True)
class Containment:
    """Conversations started in the range: the bot handled `contained` alone, `escalated` had
    at least one handoff. Sibling agents' own conversations are not counted, and the channel
    and route filters do not apply: a conversation without a handoff has no channel."""

    conversations: int
    contained: int
    escalated: int


@dataclass(frozen=True)
class Comment:
    """What a subscriber wrote with their answer, for the handoff it was about; `at` is when
    they answered."""

    handoff_session_id: str
    answer: str | None  # "yes" / "no"
    text: str
    at: datetime


@dataclass(frozen=True)
class Satisfaction:
    """Subscribers' answers to the satisfaction question, and the newest comments given with
    them (`COMMENTS_SHOWN` at most, newest first; `commented` counts them all)."""

    positive: int
    negative: int
    unanswered: int
    commented: int = 0
    comments: tuple[Comment, ...] = ()


@dataclass(frozen=True)
class OfferFigures:
    """A route's handoffs offered to people directly: `offers` counts one per handoff and
    person, however many of their contact methods it took; `claims` those the person offered
    it claimed; `missed` those whose turn passed (or that nobody claimed) without their claim;
    and over the `timed` claims, the nearest-rank p50 and p90 of the seconds from the offer
    (its first contact method) to the claim."""

    offers: int = 0
    claims: int = 0
    missed: int = 0
    timed: int = 0
    p50: float | None = None
    p90: float | None = None


@dataclass(frozen=True)
class TargetFigures:
    """The offers one team or on-call schedule made (`target`: team:support, oncall:nights),
    over the `handoffs` it offered; `unclaimed`: those nobody it offered claimed (someone
    else did, or nobody; one still waiting for a claim is in neither)."""

    target: str
    offered: OfferFigures
    handoffs: int
    unclaimed: int

    @property
    def kind(self) -> str:
        return self.target.partition(":")[0]

    @property
    def id(self) -> str:
        return self.target.partition(":")[2]


@dataclass(frozen=True)
class PersonFigures:
    """One person's handoffs in the range: how many they `handled`, the nearest-rank p50 and
    p90 of the time to claim over the `timed` of them that have one (the seconds from the
    activation to their claim or first reply), and the subscribers' answers to the
    satisfaction question after them. `person_id` None: the row of acts nobody known did."""

    person_id: str | None
    name: str
    disabled: bool
    handled: int
    timed: int
    p50: float | None
    p90: float | None
    positive: int
    negative: int
    unanswered: int
    offered: OfferFigures = field(default_factory=OfferFigures)  # the route's offers made to them directly

    @property
    def asked(self) -> int:
        """How many of their handoffs were followed by the satisfaction question."""
        return self.positive + self.negative + self.unanswered


@dataclass(frozen=True)
class ReportSummary:
    """Everything the reports show for [start, end), with the filters it was asked for.
    `days` lists every local day of the range (a day without handoffs has no `per_day` row).
    `satisfaction` is None when no chosen handoff was asked the satisfaction question.
    `people` has a row for every person of the directory (by name), then "not linked to a
    person"; `targets` a row per team and on-call schedule that offered a chosen handoff."""

    start: datetime
    end: datetime
    timezone: str
    channel_id: int | None
    route_id: int | None
    days: tuple[date, ...]
    per_day: tuple[DayCount, ...]
    handoffs: int
    time_to_person: Distribution
    duration: Distribution
    endings: Endings
    containment: Containment
    satisfaction: Satisfaction | None = None
    people: tuple[PersonFigures, ...] = ()
    targets: tuple[TargetFigures, ...] = ()  # the teams and on-call schedules that offered any, by target


class Reports:
    """The aggregates behind the reports. Each summary runs in one read session on one
    snapshot (its queries build on each other), which never waits for (or holds up) a
    writer. `route_labels` names the config's routes. `rollups` False: count every figure
    from the rows of the range (the way the rollups are checked against)."""

    def __init__(self, db: Database, *, route_labels: Mapping[int, str] | None = None, rollups: bool = True) -> None:
        self.db = db
        self.route_labels = dict(route_labels or {})
        self.rollups = rollups

    async def summary(self, start: datetime, end: datetime, *, channel_id: int | None = None,
                      route_id: int | None = None, timezone: str = "UTC") -> ReportSummary:
        """The handoffs created in [start, end) (through one channel or route when given),
        with local days in `timezone`; the conversations started in that range."""
        if end < start:
            raise ValueError(f"the range ends ({end.isoformat()}) before it starts ({start.isoformat()})")
        zone = ZoneInfo(timezone)
        days = _local_days(start, end, zone)
        through: list[ColumnElement[bool]] = []
        if channel_id is not None:
            through.append(unindexed(HANDOFFS.c.channel_id) == channel_id)
        if route_id is not None:
            through.append(unindexed(HANDOFFS.c.route_id) == route_id)
        chosen = [HANDOFFS.c.created_at >= start, HANDOFFS.c.created_at < end, *through]
        within = {"start": start, "end": end, **({"channel_id": channel_id} if channel_id is not None else {}),
                  **({"route_id": route_id} if route_id is not None else {})}  # the same, as `_value_at` takes it
        # With rollups: the whole UTC days inside the range from them, its ragged ends from the
        # rows. A range without a whole UTC day is all ragged: the rows' single statements
        # answer it in fewer steps
        rolled = _Rolled.within(start, end, channel_id, route_id) if self.rollups else None
        if rolled is not None and rolled.first_day >= rolled.stop_day:
            rolled = None
        pieces = rolled.ends if rolled is not None else ((start, end),)
        async with self.db.read(snapshot=True) as session:  # the ranks are located from the counts
            per_day = await self._per_day(session, start, end, through, days, zone, rolled)
            ends = [[HANDOFFS.c.created_at >= lo, HANDOFFS.c.created_at < hi, *through] for lo, hi in pieces]
            endings = _endings_of(*[await _ending_counts(session, piece, self.db.is_sqlite) for piece in ends],
                                  *([await rolled.endings(session)] if rolled else []))
            measures = (HANDOFFS.c.time_to_person_seconds, HANDOFFS.c.duration_seconds)
            if rolled is None:
                time_to_person, duration = await _distributions(session, measures, chosen, endings.handoffs)
            else:
                time_to_person, duration = [
                    await _distribution_from_counts(
                        session, seconds, within, endings.handoffs,
                        _merged(await rolled.fine(session, measure), *[await _fine_counts(session, seconds, piece) for piece in ends]))
                    for measure, seconds in ((TIME_TO_PERSON, measures[0]), (DURATION, measures[1]))]
            containment = _sum_containments(*[await _containment(session, lo, hi) for lo, hi in pieces],
                                            *([await rolled.containment(session)] if rolled else []))
            satisfaction = await _satisfaction(session, chosen, start)
            offered = _offers(chosen) if await _offered_to_people_since(session, start) else None
            offers = await _offers_per_person(session, offered) if offered is not None else {}
            if rolled is not None:
                people = await _per_person_rolled(session, rolled, start, end, through, within, offers)
            else:
                people = await _per_person(session, chosen, offers)
            targets = await _per_target(session, offered) if offered is not None else ()
        return ReportSummary(
            start=start, end=end, timezone=timezone, channel_id=channel_id, route_id=route_id,
            days=days, per_day=per_day, handoffs=endings.handoffs,
            time_to_person=time_to_person, duration=duration, endings=endings, containment=containment,
            satisfaction=satisfaction, people=people, targets=targets,
        )

    async def _per_day(self, session: AsyncSession, start: datetime, end: datetime,
                       through: Sequence[ColumnElement[bool]], days: tuple[date, ...],
                       zone: ZoneInfo, rolled: _Rolled | None) -> tuple[DayCount, ...]:
        """Counts per (local day, channel, route). A local day is the stretch of UTC instants
        from its midnight to the next. With rollups, its whole UTC hours are summed from
        `report_hours` (one statement: each hour numbered with its day by a binary search
        over the days' first hours) and only the pieces of hours it shares with the day
        before or after, or with the range's ends, are counted from the rows: none in a zone
        of whole-hour offsets over a range of whole hours; a sliver at each midnight in a
        half-hour zone. The rows' pieces are each their own GROUP BY over a stretch of the
        report index, all of them one statement (UNION ALL, at most `DAYS_A_STATEMENT`), so
        the database needs no timezone rules and sorts a piece's rows at a time. A channel
        is shown under its label (the greatest, should it have been renamed within a day)."""
        if not days:
            return ()
        # Each day's stretch: from its local midnight (the range's start on the first day)
        # to the next (the range's end on the last)
        bounds = [start, *(_local_midnight(day, zone) for day in days[1:]), end]
        stretches = [(index, bounds[index], bounds[index + 1]) for index in range(len(days))]
        counted: dict[tuple[int, int, int | None], tuple[int, str]] = {}
        if rolled is not None:
            hours = [(index, _hour_at_or_after(lo), _hour_at_or_before(hi)) for index, lo, hi in stretches]
            whole = [(index, first, stop) for index, first, stop in hours if first < stop]
            stretches = [piece for (index, lo, hi), (_, first, stop) in zip(stretches, hours, strict=True) for piece in (
                ((index, lo, _instant(first)), (index, _instant(stop), hi)) if first < stop else ((index, lo, hi),))
                if piece[1] < piece[2]]
            for row in await rolled.hours(session, whole):
                _add_day_count(counted, *row)
        for row in await _count_stretches(session, stretches, through):
            _add_day_count(counted, *row)
        return tuple(
            DayCount(day=days[index], channel_id=channel_id, channel_label=label, route_id=route_id,
                     route_label=self.route_labels.get(route_id) if route_id is not None else None, handoffs=count)
            for (index, channel_id, route_id), (count, label) in sorted(
                counted.items(), key=lambda item: (item[0][0], item[0][1], -1 if item[0][2] is None else item[0][2]))
            if count
        )


def _add_day_count(counted: dict[tuple[int, int, int | None], tuple[int, str]], index: int, channel_id: int,
                   route_id: int | None, label: str, count: int) -> None:
    key = (int(index), int(channel_id), route_id)
    before, known = counted.get(key, (0, label))
    counted[key] = (before + int(count), max(known, label))


async def _count_stretches(session: AsyncSession, stretches: Sequence[tuple[int, datetime, datetime]],
                           through: Sequence[ColumnElement[bool]]) -> list[Any]:
    """(day index, channel, route, label, handoffs) of the handoffs created in each stretch,
    from the rows: one GROUP BY a stretch, `DAYS_A_STATEMENT` of them a statement."""
    created = HANDOFFS.c.created_at
    channel, route, label = HANDOFFS.c.channel_id, HANDOFFS.c.route_id, HANDOFFS.c.channel_label
    found: list[Any] = []
    for first in range(0, len(stretches), DAYS_A_STATEMENT):
        parts = [
            select(literal(index).label("day"), channel, route, func.max(label), func.count())
            .where(created >= lo, created < hi, *through)
            .group_by(channel, route)
            for index, lo, hi in stretches[first:first + DAYS_A_STATEMENT]
        ]
        found += (await session.execute(union_all(*parts) if len(parts) > 1 else parts[0])).all()
    return found


def _day_of_hour(hour: ColumnElement[int], whole: Sequence[tuple[int, int, int]]) -> ColumnElement[int]:
    """The position in `whole` (each day's whole hours [first, stop)) of the day an hour
    belongs to, as SQL arithmetic: the days fall into runs whose first hours are 24 apart
    (a DST change or a zone's new offset starts a new run; a 25-hour day is a run of its
    own), and within a run the day is (hour - the run's first hour) / 24, so a year takes a
    CASE of a few terms instead of a search over 365 bounds."""
    runs: list[tuple[int, int, int, bool]] = []  # (position of its first day, its first hour, its stop, one day only)
    for position, (_, first, stop) in enumerate(whole):
        if runs and not runs[-1][3] and first == whole[position - 1][1] + 24 and stop - first <= 24:
            runs[-1] = (runs[-1][0], runs[-1][1], stop, False)
        else:
            runs.append((position, first, stop, stop - first > 24))
    terms = [(hour < stop, literal(position) if alone else literal(position) + (hour - first) // 24)
             for position, first, stop, alone in runs]
    return case(*terms[:-1], else_=terms[-1][1]) if len(terms) > 1 else terms[0][1]


def _hour_at_or_after(at: datetime) -> int:
    return -int(-at.timestamp() // HOUR)


def _hour_at_or_before(at: datetime) -> int:
    return int(at.timestamp() // HOUR)


def _instant(hour: int) -> datetime:
    return datetime.fromtimestamp(hour * HOUR, UTC)


@dataclass(frozen=True)
class _Rolled:
    """The part of a range the rollups answer: its whole UTC days [`first_day`, `stop_day`)
    (none when it holds no whole day), and the `ends` before and after them that the rows
    answer. Every figure it reads is filtered by channel and route as the summary is."""

    first_day: int
    stop_day: int
    ends: tuple[tuple[datetime, datetime], ...]
    channel_id: int | None
    route_id: int | None

    @staticmethod
    def within(start: datetime, end: datetime, channel_id: int | None, route_id: int | None) -> _Rolled:
        first, stop = -int(-start.timestamp() // DAY), int(end.timestamp() // DAY)
        if first >= stop:
            return _Rolled(first, first, ((start, end),), channel_id, route_id)
        lo, hi = (datetime.fromtimestamp(day * DAY, UTC) for day in (first, stop))
        return _Rolled(first, stop, tuple((a, b) for a, b in ((start, lo), (hi, end)) if a < b), channel_id, route_id)

    def _through(self, table: Table) -> list[ColumnElement[bool]]:
        terms: list[ColumnElement[bool]] = []
        if self.channel_id is not None:
            terms.append(table.c.channel_id == self.channel_id)
        if self.route_id is not None:
            terms.append(table.c.route == self.route_id)
        return terms

    def _days(self, table: Table) -> list[ColumnElement[bool]]:
        return [table.c.day >= self.first_day, table.c.day < self.stop_day, *self._through(table)]

    async def hours(self, session: AsyncSession, whole: Sequence[tuple[int, int, int]]) -> list[Any]:
        """(day index, channel, route, label, handoffs) over each day's whole UTC hours
        [first, stop): one GROUP BY, each hour numbered with its day by `_day_of_hour` (hours
        between two days' stretches are left out)."""
        if not whole:
            return []
        table = ROLLED_HOURS
        hour = table.c.hour
        gaps = [h for (_, _, stop), (_, first, _) in zip(whole, whole[1:], strict=False) for h in range(stop, first)]
        day = _day_of_hour(hour, whole).label("day")
        rows = (await session.execute(
            select(day, table.c.channel_id, table.c.route, func.max(table.c.channel_label), func.sum(table.c.handoffs))
            .where(hour >= whole[0][1], hour < whole[-1][2], table.c.handoffs > 0, *self._through(table),
                   *([hour.not_in(gaps)] if gaps else []))
            .group_by(day, table.c.channel_id, table.c.route)
        )).all()
        return [(whole[index][0], channel, None if route == NO_ROUTE else route, label, count)
                for index, channel, route, label, count in rows]

    async def endings(self, session: AsyncSession) -> tuple[dict[tuple[str, str | None], int], int]:
        if self.first_day >= self.stop_day:
            return {}, 0
        table = ROLLED_ENDINGS
        rows = (await session.execute(
            select(table.c.ending, table.c.outcome, func.sum(table.c.handoffs), func.sum(table.c.missing_required))
            .where(*self._days(table)).group_by(table.c.ending, table.c.outcome)
        )).all()
        return ({(ending, outcome or None): int(count) for ending, outcome, count, _ in rows},
                sum(int(missing) for *_, missing in rows))

    async def fine(self, session: AsyncSession, measure: int) -> dict[int, int]:
        if self.first_day >= self.stop_day:
            return {}
        table = ROLLED_MEASURES
        rows = (await session.execute(
            select(table.c.fine, func.sum(table.c.handoffs)).where(table.c.measure == measure, *self._days(table))
            .group_by(table.c.fine)
        )).all()
        return {int(fine): int(count) for fine, count in rows}

    async def people(self, session: AsyncSession) -> list[tuple[str, int, int]]:
        """(handler, fine bucket, handoffs) over the whole days: from `report_people`, or
        through one channel or route from `report_people_through`."""
        if self.first_day >= self.stop_day:
            return []
        filtered = self.channel_id is not None or self.route_id is not None
        table = ROLLED_PEOPLE_THROUGH if filtered else ROLLED_PEOPLE
        return [(person, int(fine), int(count)) for person, fine, count in (await session.execute(
            select(table.c.person, table.c.fine, func.sum(table.c.handoffs))
            .where(*(self._days(table) if filtered else (table.c.day >= self.first_day, table.c.day < self.stop_day)))
            .group_by(table.c.person, table.c.fine)
        )).all() if count]

    async def containment(self, session: AsyncSession) -> Containment:
        table = ROLLED_CONVERSATIONS
        conversations, escalated = (await session.execute(
            select(func.coalesce(func.sum(table.c.conversations), 0), func.coalesce(func.sum(table.c.escalated), 0))
            .where(table.c.day >= self.first_day, table.c.day < self.stop_day)
        )).one()
        return Containment(int(conversations), int(conversations) - int(escalated), int(escalated))


def _local_days(start: datetime, end: datetime, zone: ZoneInfo) -> tuple[date, ...]:
    """Every local date that [start, end) touches, in order."""
    if end <= start:
        return ()
    first = start.astimezone(zone).date()
    last = (end - timedelta(microseconds=1)).astimezone(zone).date()
    return tuple(first + timedelta(days=n) for n in range((last - first).days + 1))


def _local_midnight(day: date, zone: ZoneInfo) -> datetime:
    """The UTC instant a local day starts at (midnight exists on every day in the tz database
    zones that shift at night; a zone that skips midnight gets the instant after the gap)."""
    return datetime(day.year, day.month, day.day, tzinfo=zone).astimezone(UTC)


def _interval_of(value: ColumnElement[Any], bounds: Sequence[Any]) -> ColumnElement[Any]:
    """The index i of the interval a (non-NULL) `value` falls in: 0 below `bounds[0]`, i
    from `bounds[i-1]` up to `bounds[i]`, len(bounds) from the last on. A binary search as
    nested CASEs: about log2(n) comparisons a row where a flat CASE makes up to n."""
    def search(low: int, high: int) -> ColumnElement[Any]:
        if low == high:
            return literal(low)
        middle = (low + high) // 2
        return case((value < bounds[middle], search(low, middle)), else_=search(middle + 1, high))

    return search(0, len(bounds))


COMMENTS_SHOWN = 20
"""The newest satisfaction comments a summary carries."""

DAYS_A_STATEMENT = 200
"""Local days per statement of `_per_day` (SQLite allows 500 parts in one UNION)."""

assert {bucket.lower for bucket in BUCKETS[1:]} <= set(FINE_EDGES), "every display bucket edge is a fine edge"


@dataclass(frozen=True)
class _Counted:
    """One measure's values over the chosen handoffs, counted per fine bucket."""

    per_fine: dict[int, int]
    longest: float | None

    @property
    def count(self) -> int:
        return sum(self.per_fine.values())

    def holding(self, rank: int) -> tuple[int, int]:
        """The fine bucket the `rank`-th smallest value (from 1) is in, and how many values
        the buckets below it hold."""
        below = 0
        for index in sorted(self.per_fine):
            if below + self.per_fine[index] >= rank:
                return index, below
            below += self.per_fine[index]
        raise ValueError(f"rank {rank} of {below} values")


async def _distributions(session: AsyncSession, measures: Sequence[ColumnElement[Any]],
                         chosen: Sequence[ColumnElement[bool]], total: int) -> tuple[Distribution, ...]:
    """Count, nearest-rank p50 / p90, max and the histogram of each measure (seconds) over
    the chosen handoffs that have a value; the other `total - count` are `missing`. Per
    measure one GROUP BY over the fine buckets (an integer key: the sort stays cheap) gives
    the counts, the max and the bucket each rank falls in; then per measure one scan numbers
    the rows of just those buckets in order (`_nearest_ranks`)."""
    counted: list[_Counted] = []
    for seconds in measures:
        fine = _fine_of(seconds.name).label("fine")
        rows = (await session.execute(
            select(fine, func.count(), func.max(seconds)).where(*chosen, seconds.is_not(None)).group_by(fine)
        )).all()
        counted.append(_Counted({int(index): int(count) for index, count, _ in rows},
                                max((float(top) for _, _, top in rows), default=None)))
    found = []
    for seconds, spread in zip(measures, counted, strict=True):
        p50 = p90 = None
        if spread.count:
            median, ninetieth = _nearest(spread.count)
            values = await _nearest_ranks(session, seconds, chosen, spread, {median, ninetieth})
            p50, p90 = values[median], values[ninetieth]
        found.append(Distribution(
            count=spread.count, missing=total - spread.count, p50=_float(p50), p90=_float(p90),
            max=_float(spread.longest),
            histogram=tuple(BucketCount(bucket, _in_bucket(bucket, spread.per_fine)) for bucket in BUCKETS),
        ))
    return tuple(found)


async def _nearest_ranks(session: AsyncSession, seconds: ColumnElement[Any], chosen: Sequence[ColumnElement[bool]],
                         spread: _Counted, ranks: set[int]) -> dict[int, Any]:
    """The values at these ranks (from 1, in sorted order) in one scan: only the rows of the
    fine buckets holding them are numbered (a sort of a few percent of the range), and a
    rank's number among those rows follows from the counts of the buckets below."""
    holding = {rank: spread.holding(rank) for rank in ranks}
    buckets = sorted({index for index, _ in holding.values()})
    numbered_from = {b: sum(spread.per_fine[other] for other in buckets if other < b) for b in buckets}
    number_of = {rank: rank - below + numbered_from[index] for rank, (index, below) in holding.items()}
    numbered = (
        select(seconds.label("value"), func.row_number().over(order_by=seconds).label("n"))
        .where(*chosen, or_(*(_within_fine(seconds, b) for b in buckets))).subquery()
    )
    found = dict((await session.execute(
        select(numbered.c.n, numbered.c.value).where(numbered.c.n.in_(sorted(number_of.values())))
    )).all())
    return {rank: found[n] for rank, n in number_of.items()}


async def _fine_counts(session: AsyncSession, seconds: ColumnElement[Any],
                       chosen: Sequence[ColumnElement[bool]]) -> dict[int, int]:
    """How many of the chosen handoffs have `seconds` in each fine bucket, from the rows."""
    fine = _fine_of(seconds.name).label("fine")
    rows = (await session.execute(select(fine, func.count()).where(*chosen, seconds.is_not(None)).group_by(fine))).all()
    return {int(index): int(count) for index, count in rows}


def _merged(*parts: Mapping[int, int]) -> dict[int, int]:
    merged: dict[int, int] = {}
    for part in parts:
        for index, count in part.items():
            merged[index] = merged.get(index, 0) + count
    return {index: count for index, count in merged.items() if count}


async def _distribution_from_counts(session: AsyncSession, seconds: ColumnElement[Any], within: Mapping[str, Any],
                                    total: int, per_fine: dict[int, int]) -> Distribution:
    """A measure's figures from its fine-bucket counts over the chosen handoffs (the
    rollups' and the rows' together): the counts locate each rank's bucket (the max is the
    last rank), and each value is read in order from that bucket's rows alone, through
    the measure's own index (`_value_at`)."""
    spread = _Counted(per_fine, None)
    if not spread.count:
        return Distribution(count=0, missing=total, p50=None, p90=None, max=None,
                            histogram=tuple(BucketCount(bucket, 0) for bucket in BUCKETS))
    median, ninetieth = _nearest(spread.count)
    values = {rank: await _value_at(session, seconds.name, within, rank, *spread.holding(rank))
              for rank in {median, ninetieth, spread.count}}
    return Distribution(
        count=spread.count, missing=total - spread.count, p50=_float(values[median]), p90=_float(values[ninetieth]),
        max=_float(values[spread.count]),
        histogram=tuple(BucketCount(bucket, _in_bucket(bucket, per_fine)) for bucket in BUCKETS),
    )


async def _value_at(session: AsyncSession, measure: str, within: Mapping[str, Any], rank: int, fine: int, below: int) -> Any:
    """The value of `rank` (from 1) of `measure` over the handoffs `within` chooses (see
    `_value_statement`), which falls in fine bucket `fine` with `below` values in the buckets
    under it: the bucket's chosen rows in order, skipping to the rank."""
    low, high = _fine_bounds(fine)
    return (await session.execute(_value_statement(measure, tuple(sorted(within))), {
        **within, "low": max(low, -BEYOND), "high": min(high, BEYOND), "skip": rank - below - 1,
    })).scalar_one()


BEYOND = 1e300
"""Stands for the open end of the first and last fine buckets (a bound parameter is a number)."""


@functools.cache
def _value_statement(measure: str, chosen_by: tuple[str, ...]) -> Select[Any]:
    """The statement behind `_value_at`, built once per measure and choice of filters (its
    parameters: `start`, `end` and the filters named, `low`, `high`, `skip`). The range and
    the channel and route are `unindexed`, so SQLite reads them through the measure's own
    index (ix_handoff_sessions_time_to_person, ix_handoff_sessions_duration: its order is
    the answer's, its columns the filters'), or the handler's (ix_handoff_sessions_handled_by)
    when one is named: the one fine bucket of it and nothing else."""
    seconds, created = HANDOFFS.c[measure], unindexed(HANDOFFS.c.created_at)
    terms = [seconds >= bindparam("low"), seconds < bindparam("high"),
             created >= bindparam("start"), created < bindparam("end")]
    for name in chosen_by:
        if name not in ("start", "end"):
            column = HANDOFFS.c[name]
            terms.append((column if name == "handled_by" else unindexed(column)) == bindparam(name))
    return select(seconds).where(*terms).order_by(seconds).limit(1).offset(bindparam("skip"))


@functools.cache
def _fine_of(measure: str) -> ColumnElement[Any]:
    """The fine bucket of a measure's value, as SQL (built once: it has a hundred nodes)."""
    return _interval_of(HANDOFFS.c[measure], FINE_EDGES)


def _nearest(count: int) -> tuple[int, int]:
    """The nearest ranks (from 1) of the p50 and p90 of `count` values."""
    median, ninetieth = ((percent * count + 99) // 100 for percent in (50, 90))
    return median, ninetieth


def _fine_bounds(index: int) -> tuple[float, float]:
    """[low, high) of fine bucket `index` as `_interval_of` numbers them."""
    return (FINE_EDGES[index - 1] if index > 0 else float("-inf"),
            FINE_EDGES[index] if index < len(FINE_EDGES) else float("inf"))


def _within_fine(seconds: ColumnElement[Any], index: int) -> ColumnElement[bool]:
    """`seconds` inside fine bucket `index`, as SQL."""
    terms: list[ColumnElement[bool]] = [seconds.is_not(None)]
    if index > 0:
        terms.append(seconds >= FINE_EDGES[index - 1])
    if index < len(FINE_EDGES):
        terms.append(seconds < FINE_EDGES[index])
    return and_(*terms)


def _in_bucket(bucket: Bucket, per_fine: Mapping[int, int]) -> int:
    """A display bucket's count, summed from the fine buckets inside it (the first display
    bucket also holds anything below 0 s, a clock's skew between two instances)."""
    return sum(count for index, count in per_fine.items()
               if (bucket.lower == 0 or _fine_bounds(index)[0] >= bucket.lower)
               and (bucket.upper is None or _fine_bounds(index)[0] < bucket.upper))


async def _ending_counts(session: AsyncSession, chosen: Sequence[ColumnElement[bool]],
                        is_sqlite: bool) -> tuple[dict[tuple[str, str | None], int], int]:
    """One GROUP BY over (reason or state, outcome): a handful of rows; and the count of
    releases with required fields missing, from their own small index."""
    # A handoff has a release reason exactly when it was released: the reason, else the
    # state, is one key (SQLite sorts the range's rows by the keys; one fewer is a third less)
    ending = func.coalesce(HANDOFFS.c.release_reason, HANDOFFS.c.state).label("ending")
    rows = (await session.execute(
        select(ending, HANDOFFS.c.outcome, func.count()).where(*chosen).group_by(ending, HANDOFFS.c.outcome)
    )).all()
    lacking = text("missing_required != '[]'" if is_sqlite else "missing_required::text <> '[]'")
    missing_required = int((await session.execute(select(func.count()).where(*chosen, lacking))).scalar_one())
    return {(ended, outcome): int(count) for ended, outcome, count in rows}, missing_required


def _endings_of(*counted: tuple[Mapping[tuple[str, str | None], int], int]) -> Endings:
    """How the handoffs counted (per ending and outcome, and with required fields missing,
    in one or more parts of a range) ended, summed per word."""
    reasons: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    failed = still_open = total = 0
    for per_ending, _ in counted:
        for (ended, outcome), count in per_ending.items():
            total += count
            if outcome is not None:
                outcomes[outcome] = outcomes.get(outcome, 0) + count
            if ended == HandoffState.FAILED:
                failed += count
            elif ended in (HandoffState.DISPATCHING, HandoffState.ACTIVE):
                still_open += count
            else:
                reasons[ended] = reasons.get(ended, 0) + count
    return Endings(
        handoffs=total, by_reason=_tallies({word: n for word, n in reasons.items() if n}),
        by_outcome=_tallies({word: n for word, n in outcomes.items() if n}),
        missing_required=sum(missing for _, missing in counted),
        unclaimed=reasons.get(ReleaseReason.UNCLAIMED, 0), failed_dispatches=failed, open=still_open,
    )


def _sum_containments(*parts: Containment) -> Containment:
    return Containment(*(sum(getattr(part, name) for part in parts) for name in ("conversations", "contained", "escalated")))


async def _satisfaction(session: AsyncSession, chosen: Sequence[ColumnElement[bool]],
                        start: datetime) -> Satisfaction | None:
    """The answers to the satisfaction question asked after the chosen handoffs (None when it
    was never asked of any: the question is off, or nothing ended yet). Read from the
    answers' side: the questions asked since the range began (their `asked_at` index; a
    question comes after its handoff), each checked against its handoff by key, so a desk
    that never asks costs nothing here."""
    answered = SATISFACTION.c
    asked = [answered.asked_at >= start, exists().where(HANDOFFS.c.id == answered.handoff_session_id, *chosen)]
    answers = (await session.execute(
        select(answered.answer, func.count(), func.count(answered.comment)).where(*asked).group_by(answered.answer)
    )).all()
    if not answers:
        return None
    counts = {answer: count for answer, count, _ in answers}
    commented = sum(int(with_comment) for _, _, with_comment in answers)
    said_at = func.coalesce(answered.answered_at, answered.asked_at)
    comments = (await session.execute(
        select(answered.handoff_session_id, answered.answer, answered.comment, said_at)
        .where(*asked, answered.comment.is_not(None))
        .order_by(said_at.desc(), answered.handoff_session_id).limit(COMMENTS_SHOWN)
    )).all() if commented else []
    return Satisfaction(
        positive=counts.get("yes", 0), negative=counts.get("no", 0), unanswered=counts.get(None, 0), commented=commented,
        comments=tuple(Comment(sid, answer, text, at) for sid, answer, text, at in comments),
    )


PERSON_RELEASES = tuple(reason for reason in ReleaseReason if reason.by_a_person)
"""The release doors a person goes through; the idle timer, the ladder and the agent are nobody."""


def _handler() -> tuple[ColumnElement[Any], ColumnElement[bool]]:
    """Who handled a handoff (a person's id, or NULL for nobody known), and whether anyone
    did: the claim's person, else the first human reply's, else a person's release's."""
    handoff = HANDOFFS.c
    first_reply = (
        select(MESSAGES.c.person_id)
        .where(MESSAGES.c.handoff_session_id == handoff.id, MESSAGES.c.role == Role.HUMAN,
               MESSAGES.c.created_at == handoff.first_human_reply_at)
        .order_by(MESSAGES.c.id).limit(1).scalar_subquery()
    )
    person = case((handoff.claimed_at.is_not(None), handoff.claimed_person_id),
                  (handoff.first_human_reply_at.is_not(None), first_reply), else_=handoff.released_person_id)
    acted = or_(handoff.claimed_at.is_not(None), handoff.first_human_reply_at.is_not(None),
                handoff.release_reason.in_(PERSON_RELEASES))
    return person, acted


async def _per_person(session: AsyncSession, chosen: Sequence[ColumnElement[bool]],
                      offers: Mapping[str, OfferFigures]) -> tuple[PersonFigures, ...]:
    """Every person's figures over the chosen handoffs, in one statement: the handoffs
    someone handled, each with its handler, time to a person and satisfaction answer, are
    numbered per handler by that time (those without one last), and only the first row and
    the rows at the two ranks of each handler come back, carrying the handler's counts."""
    person, acted = _handler()
    seconds = HANDOFFS.c.time_to_person_seconds
    answer = SATISFACTION.c.answer
    handled = (
        select(person.label("person"), seconds.label("seconds"), answer.label("answer"),
               SATISFACTION.c.handoff_session_id.is_not(None).label("asked"))
        .select_from(HANDOFFS.outerjoin(SATISFACTION, SATISFACTION.c.handoff_session_id == HANDOFFS.c.id))
        .where(*chosen, acted).cte("handled")
    )
    per = handled.c.person
    timed = func.count(handled.c.seconds).over(partition_by=per)
    ranked = select(
        handled.c.person, handled.c.seconds, timed.label("timed"), func.count().over(partition_by=per).label("handled"),
        func.row_number().over(partition_by=per, order_by=(handled.c.seconds.is_(None), handled.c.seconds)).label("n"),
        *(func.sum(case((term, 1), else_=0)).over(partition_by=per).label(name) for name, term in (
            ("positive", handled.c.answer == "yes"), ("negative", handled.c.answer == "no"),
            ("unanswered", and_(handled.c.asked, handled.c.answer.is_(None))))),
    ).subquery()
    median, ninetieth = ((percent * ranked.c.timed + 99) // 100 for percent in (50, 90))  # as `_nearest`, in SQL
    rows = (await session.execute(
        select(ranked).where(or_(ranked.c.n == 1, ranked.c.n == median, ranked.c.n == ninetieth))
    )).mappings().all()
    return _people_figures(_handled_of(rows), await _directory(session), offers)


@dataclass
class _Handled:
    """One handler's figures before they meet the directory."""

    handled: int = 0
    timed: int = 0
    p50: float | None = None
    p90: float | None = None
    positive: int = 0
    negative: int = 0
    unanswered: int = 0


def _handled_of(rows: Sequence[RowMapping]) -> dict[str | None, _Handled]:
    """Each handler's counts (on every row of theirs in `_per_person`'s rows) and the values
    at their ranks."""
    counted: dict[str | None, RowMapping] = {}
    at_rank: dict[tuple[str | None, int], Any] = {}
    for row in rows:
        counted[row["person"]] = row
        at_rank[(row["person"], int(row["n"]))] = row["seconds"]
    found = {}
    for pid, row in counted.items():
        timed = int(row["timed"])
        p50, p90 = (at_rank.get((pid, rank)) for rank in _nearest(timed)) if timed else (None, None)
        found[pid] = _Handled(int(row["handled"]), timed, _float(p50), _float(p90),
                              int(row["positive"]), int(row["negative"]), int(row["unanswered"]))
    return found


async def _per_person_rolled(session: AsyncSession, rolled: _Rolled, start: datetime, end: datetime,
                             through: Sequence[ColumnElement[bool]], within: Mapping[str, Any],
                             offers: Mapping[str, OfferFigures]) -> tuple[PersonFigures, ...]:
    """Every person's figures over the chosen handoffs (`through` a channel or route, and
    `within` as `_value_at` takes it), as `_per_person` counts them, from the rollups: per
    handler the fine-bucket counts of their times (whole UTC days from `report_people`, the
    ragged ends from the rows' `handled_by`) locate their ranks, and each value is read from
    that one bucket of theirs through the handler's index (ix_handoff_sessions_handled_by);
    the satisfaction answers are counted from the answers' side, as the summary's are."""
    handler, seconds, created = HANDOFFS.c.handled_by, HANDOFFS.c.time_to_person_seconds, HANDOFFS.c.created_at
    per_fine: dict[str, dict[int, int]] = {}

    def add(person: str, fine: int, count: int) -> None:
        per_fine.setdefault(person, {})
        per_fine[person][fine] = per_fine[person].get(fine, 0) + count

    for row in await rolled.people(session):
        add(*row)
    fine = case((seconds.is_(None), UNTIMED), else_=_fine_of(seconds.name)).label("fine")
    for lo, hi in rolled.ends:
        for person, index, count in (await session.execute(
            select(handler, fine, func.count()).where(created >= lo, created < hi, *through, handler.is_not(None))
            .group_by(handler, fine)
        )).all():
            add(person, int(index), int(count))
    found: dict[str | None, _Handled] = {}
    for person, counts in per_fine.items():
        timed = _Counted({index: n for index, n in counts.items() if index != UNTIMED and n}, None)
        figures = found[person or None] = _Handled(handled=sum(counts.values()), timed=timed.count)
        if timed.count:
            median, ninetieth = _nearest(timed.count)
            theirs = {**within, "handled_by": person}
            values = [_float(await _value_at(session, seconds.name, theirs, rank, *timed.holding(rank)))
                      for rank in (median, ninetieth)]
            figures.p50, figures.p90 = values
    answered = SATISFACTION.c
    for person, answer, count in (await session.execute(
        select(handler, answered.answer, func.count())
        .select_from(SATISFACTION.join(HANDOFFS, HANDOFFS.c.id == answered.handoff_session_id))
        .where(answered.asked_at >= start, unindexed(created) >= start, unindexed(created) < end, *through,
               unindexed(handler).is_not(None))  # from the answers' side: their index, each handoff by key
        .group_by(handler, answered.answer)
    )).all():
        figures = found.setdefault(person or None, _Handled())
        if answer == "yes":
            figures.positive += int(count)
        elif answer == "no":
            figures.negative += int(count)
        else:
            figures.unanswered += int(count)
    return _people_figures(found, await _directory(session), offers)


async def _directory(session: AsyncSession) -> list[tuple[str, str, bool]]:
    """Everyone of the directory, by name: id, name, disabled."""
    return [(pid, name, disabled_at is not None) for pid, name, disabled_at in (await session.execute(
        select(PEOPLE.c.id, PEOPLE.c.name, PEOPLE.c.disabled_at).order_by(PEOPLE.c.name, PEOPLE.c.id)
    )).all()]


def _people_figures(counted: Mapping[str | None, _Handled], directory: Sequence[tuple[str, str, bool]],
                    offers: Mapping[str, OfferFigures]) -> tuple[PersonFigures, ...]:
    """A row per person of the directory, then the handlers it does not know (people are
    never deleted, so only a hand-edited database has one: their id is their name), then
    the acts linked to nobody; each with the offers made to them."""

    def figures(pid: str | None, name: str, disabled: bool) -> PersonFigures:
        row = counted.get(pid, _Handled())
        offered = offers.get(pid, OfferFigures()) if pid is not None else OfferFigures()
        return PersonFigures(pid, name, disabled, row.handled, row.timed, row.p50, row.p90,
                             row.positive, row.negative, row.unanswered, offered)

    known = {pid for pid, _, _ in directory}
    strangers = sorted(pid for pid in {*counted, *offers} if pid is not None and pid not in known)
    return (*(figures(pid, name, disabled) for pid, name, disabled in directory),
            *(figures(pid, pid, False) for pid in strangers), figures(None, NOT_LINKED, False))


def _offers(chosen: Sequence[ColumnElement[bool]]) -> CTE:
    """The chosen handoffs' offers to people, one row per handoff, person and target (a
    person is offered a handoff once, on one or more of their contact methods): whether they
    claimed it (the handoff's claim names them, whichever thread or page they took it from),
    whether an offer of theirs was missed, the seconds from their first offer to their claim,
    and whether the handoff still waits for a claim."""
    offer, handoff = RECIPIENTS.c, HANDOFFS.c
    theirs = and_(handoff.claimed_at.is_not(None), handoff.claimed_person_id == offer.person_id)
    claimed = func.max(case((theirs, 1), else_=0))
    return (
        select(offer.handoff_session_id.label("sid"), offer.person_id.label("person"), offer.target.label("target"),
               claimed.label("claimed"), func.max(case((offer.result == OfferResult.MISSED, 1), else_=0)).label("missed"),
               case((claimed == 1, seconds_between(func.min(offer.created_at), func.max(handoff.claimed_at)))).label("seconds"),
               func.max(case((and_(handoff.claimed_at.is_(None), handoff.state.in_(list(OPEN_STATES))), 1), else_=0))
               .label("waiting"))
        .select_from(HANDOFFS.join(RECIPIENTS, offer.handoff_session_id == handoff.id))
        .where(*chosen, offer.person_id.is_not(None))
        .group_by(offer.handoff_session_id, offer.person_id, offer.target).cte("offered")
    )


def _ranked_offers(offered: CTE, key: str, *where: ColumnElement[bool]) -> Subquery:
    """The offers numbered per `key` (person or target) by their time to claim (unclaimed
    last), each row carrying its key's counts, as `_per_person` numbers the handoffs."""
    per, o = offered.c[key], offered.c
    return select(
        per.label("key"), o.seconds, func.count(o.seconds).over(partition_by=per).label("timed"),
        func.count().over(partition_by=per).label("offers"), func.sum(o.claimed).over(partition_by=per).label("claims"),
        func.sum(case((and_(o.missed == 1, o.claimed == 0), 1), else_=0)).over(partition_by=per).label("missed"),
        func.row_number().over(partition_by=per, order_by=(o.seconds.is_(None), o.seconds)).label("n"),
    ).where(*where).subquery()


def _at_ranks(ranked: Subquery) -> ColumnElement[bool]:
    """A key's first row and the rows at the ranks of its p50 and p90 (as `_nearest`, in SQL)."""
    median, ninetieth = ((percent * ranked.c.timed + 99) // 100 for percent in (50, 90))
    return or_(ranked.c.n == 1, ranked.c.n == median, ranked.c.n == ninetieth)


def _offer_figures(rows: Sequence[RowMapping]) -> dict[str, OfferFigures]:
    """Per key, its counts (on every row of it) and the values at its two ranks."""
    counted: dict[str, RowMapping] = {}
    at_rank: dict[tuple[str, int], Any] = {}
    for row in rows:
        counted[row["key"]] = row
        at_rank[(row["key"], int(row["n"]))] = row["seconds"]
    found = {}
    for key, row in counted.items():
        timed = int(row["timed"])
        p50, p90 = (at_rank.get((key, rank)) for rank in _nearest(timed)) if timed else (None, None)
        found[key] = OfferFigures(int(row["offers"]), int(row["claims"]), int(row["missed"]), timed, _float(p50), _float(p90))
    return found


async def _offered_to_people_since(session: AsyncSession, start: datetime) -> bool:
    """Whether any handoff was offered to a person directly since `start` (an offer comes
    after its handoff): a desk whose routes only notify rooms skips the offers' statements,
    which read the range's handoffs."""
    offer = RECIPIENTS.c
    return (await session.execute(
        select(offer.id).where(offer.person_id.is_not(None), offer.created_at >= start).limit(1)
    )).first() is not None


async def _offers_per_person(session: AsyncSession, offered: CTE) -> dict[str, OfferFigures]:
    """Each person's offers over the chosen handoffs, in one statement."""
    ranked = _ranked_offers(offered, "person")
    return _offer_figures((await session.execute(select(ranked).where(_at_ranks(ranked)))).mappings().all())


async def _per_target(session: AsyncSession, offered: CTE) -> tuple[TargetFigures, ...]:
    """Each team's and on-call schedule's offers over the chosen handoffs, and the handoffs
    it offered that none of its people claimed, in one statement (a person: target is the
    person's own row)."""
    groups = or_(offered.c.target.like("team:%"), offered.c.target.like("oncall:%"))
    ranked = _ranked_offers(offered, "target", groups)
    per_handoff = (select(offered.c.target, func.max(offered.c.claimed).label("won"), func.max(offered.c.waiting).label("waiting"))
                   .where(groups).group_by(offered.c.target, offered.c.sid).subquery())
    handoffs = select(
        per_handoff.c.target, func.count().label("handoffs"),
        func.sum(case((and_(per_handoff.c.won == 0, per_handoff.c.waiting == 0), 1), else_=0)).label("unclaimed"),
    ).group_by(per_handoff.c.target).subquery()
    rows = (await session.execute(
        select(ranked, handoffs.c.handoffs, handoffs.c.unclaimed).join(handoffs, handoffs.c.target == ranked.c.key)
        .where(_at_ranks(ranked))
    )).mappings().all()
    figures = _offer_figures(rows)
    counts = {row["key"]: (int(row["handoffs"]), int(row["unclaimed"])) for row in rows}
    return tuple(TargetFigures(target, figures[target], *counts[target]) for target in sorted(figures))


async def _containment(session: AsyncSession, start: datetime, end: datetime) -> Containment:
    """Conversations started in [start, end), and how many of them have had a handoff
    (`first_handoff_at`), from the conversations' report index alone. Sibling agents'
    conversations are left out by a CASE, not a WHERE: `serves_handoff_session_id IS NULL`
    would tempt SQLite into that column's index, which holds nearly every conversation."""
    subscribers = col(Conversation.serves_handoff_session_id).is_(None)
    escalated = and_(subscribers, col(Conversation.first_handoff_at).is_not(None))
    conversations, had_handoff = (await session.execute(
        select(func.coalesce(func.sum(case((subscribers, 1), else_=0)), 0),
               func.coalesce(func.sum(case((escalated, 1), else_=0)), 0))
        .where(col(Conversation.created_at) >= start, col(Conversation.created_at) < end)
    )).one()
    return Containment(conversations=int(conversations), contained=int(conversations) - int(had_handoff),
                       escalated=int(had_handoff))


def _tallies(counts: Mapping[str, int]) -> tuple[Tally, ...]:
    """Most frequent first, then by word, so the order is stable."""
    return tuple(Tally(word, count) for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _float(value: Any) -> float | None:
    """PostgreSQL answers numeric (Decimal), SQLite float."""
    return None if value is None else round(float(value), 3)


"""The owner's reports: how many handoffs, how fast a person was reached, how long they
lasted, how they ended, and how many conversations never needed a person.

Every number is a SQL aggregate over the handoff records (`handoff_sessions`, the first
`human` message of each handoff in `messages`, `conversations`): no row is loaded into
Python, so a summary costs the same few queries on a long history as on a short one. The
percentiles are nearest-rank ones taken with `row_number()` over the sorted values, one
query shape that SQLite (3.25+) and PostgreSQL both run; the only per-dialect piece is the
number of seconds between two timestamps (`_seconds`).

A handoff belongs to the range its `created_at` falls in, and to the local day (in the
summary's timezone, from local midnight to local midnight, so a day of a DST change has 23
or 25 hours) it was created on. The indexes these queries lean on (migration 0017):
`ix_handoff_sessions_created_at` (the range of handoffs), `ix_handoff_sessions_channel_created_at`
and `ix_handoff_sessions_route_created_at` (the range through one channel or route: without
them SQLite walks every handoff of the channel), `ix_conversations_created_at`
(the range of conversations) and `ix_messages_handoff_role_created_at` (one seek per handoff
for its first human message).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from sqlalchemy import ColumnElement, and_, case, exists, extract, func, literal, or_, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.store.db import Database
from bot.store.models import Conversation, HandoffSatisfaction, HandoffSession, Message
from bot.store.vocabulary import HandoffState, ReleaseReason, Role


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
class Satisfaction:
    """Subscribers' answers to the satisfaction question."""

    positive: int
    negative: int
    unanswered: int


@dataclass(frozen=True)
class ReportSummary:
    """Everything the reports show for [start, end), with the filters it was asked for.
    `days` lists every local day of the range (a day without handoffs has no `per_day` row).
    `satisfaction` is None when no chosen handoff was asked the satisfaction question."""

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


class Reports:
    """The aggregates behind the reports. Each summary runs in one read session, which never
    waits for (or holds up) a writer. `route_labels` names the config's routes."""

    def __init__(self, db: Database, *, route_labels: Mapping[int, str] | None = None) -> None:
        self.db = db
        self.route_labels = dict(route_labels or {})

    async def summary(self, start: datetime, end: datetime, *, channel_id: int | None = None,
                      route_id: int | None = None, timezone: str = "UTC") -> ReportSummary:
        """The handoffs created in [start, end) (through one channel or route when given),
        with local days in `timezone`; the conversations started in that range."""
        if end < start:
            raise ValueError(f"the range ends ({end.isoformat()}) before it starts ({start.isoformat()})")
        zone = ZoneInfo(timezone)
        days = _local_days(start, end, zone)
        handoffs = HandoffSession
        chosen: list[ColumnElement[bool]] = [col(handoffs.created_at) >= start, col(handoffs.created_at) < end]
        if channel_id is not None:
            chosen.append(col(handoffs.channel_id) == channel_id)
        if route_id is not None:
            chosen.append(col(handoffs.route_id) == route_id)
        seconds = _seconds_between(self.db)
        started = func.coalesce(col(handoffs.activated_at), col(handoffs.created_at))
        async with self.db.read() as session:
            per_day = await self._per_day(session, chosen, days, zone)
            endings = await _endings(session, chosen)
            total = endings.handoffs
            time_to_person = await _distribution(session, seconds(started, _reached_person()), chosen, total)
            duration = await _distribution(session, seconds(col(handoffs.activated_at), col(handoffs.released_at)), chosen, total)
            containment = await _containment(session, start, end)
            satisfaction = await _satisfaction(session, chosen)
        return ReportSummary(
            start=start, end=end, timezone=timezone, channel_id=channel_id, route_id=route_id,
            days=days, per_day=per_day, handoffs=endings.handoffs,
            time_to_person=time_to_person, duration=duration, endings=endings, containment=containment,
            satisfaction=satisfaction,
        )

    async def _per_day(self, session: AsyncSession, chosen: Sequence[ColumnElement[bool]],
                       days: tuple[date, ...], zone: ZoneInfo) -> tuple[DayCount, ...]:
        """Counts per (local day, channel, route). The day is a CASE over the UTC instants of
        the range's local midnights, so the database needs no timezone rules of its own."""
        created = col(HandoffSession.created_at)
        midnights = [_local_midnight(day, zone) for day in days[1:]]
        day_index: ColumnElement[Any] = (
            case(*((created < midnight, index) for index, midnight in enumerate(midnights)), else_=len(midnights))
            if midnights else literal(0)
        )
        inner = select(day_index.label("day"), col(HandoffSession.channel_id), col(HandoffSession.channel_label),
                       col(HandoffSession.route_id)).where(*chosen).subquery()
        rows = (await session.execute(
            select(inner.c.day, inner.c.channel_id, inner.c.channel_label, inner.c.route_id, func.count())
            .group_by(inner.c.day, inner.c.channel_id, inner.c.channel_label, inner.c.route_id)
            .order_by(inner.c.day, inner.c.channel_id, inner.c.route_id.nulls_first())
        )).all()
        return tuple(
            DayCount(day=days[index], channel_id=channel, channel_label=label, route_id=route,
                     route_label=self.route_labels.get(route) if route is not None else None, handoffs=count)
            for index, channel, label, route, count in rows
        )


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


def _seconds_between(db: Database) -> Any:
    """The dialect's expression for the seconds from `a` to `b` (NULL when either is NULL):
    julianday on SQLite, rounded to the millisecond so a whole minute stays a whole minute in
    the buckets; EXTRACT(EPOCH …) of the interval on PostgreSQL, which is exact."""
    def sqlite(a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        return func.round((func.julianday(b) - func.julianday(a)) * 86400.0, 3)

    def postgresql(a: ColumnElement[Any], b: ColumnElement[Any]) -> ColumnElement[Any]:
        return extract("epoch", b - a)

    return sqlite if db.is_sqlite else postgresql


def _reached_person() -> ColumnElement[Any]:
    """When a person took the handoff: the earlier of its claim and its first human message,
    NULL when neither happened. The subquery asks only for a human message before the claim
    (one seek of `ix_messages_handoff_role_created_at`), so the answer is that message or
    else the claim, with no comparison that would repeat the subquery."""
    claimed = col(HandoffSession.claimed_at)
    first_reply_before_claim = (
        select(func.min(col(Message.created_at)))
        .where(col(Message.handoff_session_id) == col(HandoffSession.id), col(Message.role) == Role.HUMAN,
               or_(claimed.is_(None), col(Message.created_at) < claimed))
        .correlate(HandoffSession).scalar_subquery()
    )
    return func.coalesce(first_reply_before_claim, claimed)


async def _distribution(session: AsyncSession, seconds: ColumnElement[Any],
                        chosen: Sequence[ColumnElement[bool]], total: int) -> Distribution:
    """Count, nearest-rank p50 / p90, max and the histogram of `seconds` over the chosen
    handoffs that have a value, in one query; the other `total - count` are `missing`. One
    window, over the measured values only: on SQLite each extra window (a partition, a
    count over the whole set) costs as much again as the sort itself."""
    values = select(seconds.label("s")).where(*chosen).subquery()
    ranked = select(
        values.c.s,
        func.row_number().over(order_by=values.c.s).label("rank"),
        func.count().over().label("n"),
    ).where(values.c.s.is_not(None)).subquery()
    value, rank, n = ranked.c.s, ranked.c.rank, ranked.c.n

    def nearest_rank(percent: int) -> ColumnElement[Any]:
        return func.max(case((rank == (percent * n + 99) // 100, value)))

    def within(bucket: Bucket) -> ColumnElement[Any]:
        inside = value >= bucket.lower if bucket.upper is None else and_(value >= bucket.lower, value < bucket.upper)
        return func.coalesce(func.sum(case((inside, 1), else_=0)), 0)

    row = (await session.execute(select(
        func.count(), nearest_rank(50), nearest_rank(90), func.max(value), *(within(bucket) for bucket in BUCKETS),
    ).select_from(ranked))).one()
    count, p50, p90, longest, *bars = row
    return Distribution(
        count=count, missing=total - count, p50=_float(p50), p90=_float(p90), max=_float(longest),
        histogram=tuple(BucketCount(bucket, int(bar)) for bucket, bar in zip(BUCKETS, bars, strict=True)),
    )


async def _endings(session: AsyncSession, chosen: Sequence[ColumnElement[bool]]) -> Endings:
    """One GROUP BY over (state, reason, outcome): a handful of rows, summed per word."""
    handoffs = HandoffSession
    lacking = case((func.json_array_length(col(handoffs.missing_required)) > 0, 1), else_=0)
    rows = (await session.execute(
        select(col(handoffs.state), col(handoffs.release_reason), col(handoffs.outcome), func.count(), func.sum(lacking))
        .where(*chosen).group_by(col(handoffs.state), col(handoffs.release_reason), col(handoffs.outcome))
    )).all()
    reasons: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    missing_required = failed = still_open = total = 0
    for state, reason, outcome, count, lacking_count in rows:
        total += count
        if reason is not None:
            reasons[reason] = reasons.get(reason, 0) + count
        if outcome is not None:
            outcomes[outcome] = outcomes.get(outcome, 0) + count
        if state == HandoffState.RELEASED:
            missing_required += int(lacking_count or 0)
        elif state == HandoffState.FAILED:
            failed += count
        else:
            still_open += count
    return Endings(
        handoffs=total, by_reason=_tallies(reasons), by_outcome=_tallies(outcomes), missing_required=missing_required,
        unclaimed=reasons.get(ReleaseReason.UNCLAIMED, 0), failed_dispatches=failed, open=still_open,
    )


async def _satisfaction(session: AsyncSession, chosen: Sequence[ColumnElement[bool]]) -> Satisfaction | None:
    """The answers to the satisfaction question asked after the chosen handoffs (None when it
    was never asked of any: the question is off, or nothing ended yet)."""
    answers = (await session.execute(
        select(col(HandoffSatisfaction.answer), func.count())
        .join(HandoffSession, col(HandoffSession.id) == col(HandoffSatisfaction.handoff_session_id))
        .where(*chosen).group_by(col(HandoffSatisfaction.answer))
    )).all()
    if not answers:
        return None
    counts = {answer: count for answer, count in answers}
    return Satisfaction(positive=counts.get("yes", 0), negative=counts.get("no", 0), unanswered=counts.get(None, 0))


async def _containment(session: AsyncSession, start: datetime, end: datetime) -> Containment:
    """Conversations started in [start, end), and how many of them had a handoff (an EXISTS
    on the handoffs' conversation index). Sibling agents' conversations are left out by a
    CASE, not a WHERE: `serves_handoff_session_id IS NULL` would tempt SQLite into that
    column's index, which holds nearly every conversation, instead of the range's."""
    had_handoff = exists().where(col(HandoffSession.conversation_id) == col(Conversation.id))
    subscribers = col(Conversation.serves_handoff_session_id).is_(None)
    conversations, escalated = (await session.execute(
        select(func.coalesce(func.sum(case((subscribers, 1), else_=0)), 0),
               func.coalesce(func.sum(case((and_(subscribers, had_handoff), 1), else_=0)), 0))
        .where(col(Conversation.created_at) >= start, col(Conversation.created_at) < end)
    )).one()
    return Containment(conversations=int(conversations), contained=int(conversations) - int(escalated),
                       escalated=int(escalated))


def _tallies(counts: Mapping[str, int]) -> tuple[Tally, ...]:
    """Most frequent first, then by word, so the order is stable."""
    return tuple(Tally(word, count) for word, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def _float(value: Any) -> float | None:
    """PostgreSQL answers numeric (Decimal), SQLite float."""
    return None if value is None else round(float(value), 3)


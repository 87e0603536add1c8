"""The report aggregates against a generated history whose every answer is known: stored
handoff records on a real database (SQLite and PostgreSQL), times taken from a fixed clock,
ranges that cross local midnight and both DST changes of 2026 in Europe/Berlin."""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest
from alembic import command
from sqlalchemy import insert, select
from sqlalchemy.engine import Connection
from sqlmodel import col

from bot.domain import reports as reports_module
from bot.domain.handoff_rows import CONVERSATIONS, HANDOFFS, MESSAGES, new_row
from bot.domain.reports import (
    BUCKETS,
    NOT_LINKED,
    Containment,
    DayCount,
    OfferFigures,
    PersonFigures,
    Reports,
    Satisfaction,
    Tally,
)
from bot.runtime.clock import ManualClock
from bot.store.db import Database, alembic_config
from bot.store.models import Conversation, HandoffSatisfaction, HandoffSession, Message, Person
from bot.store.vocabulary import HandoffState, Outcome, ReleaseReason, Role
from tests.conftest import StartDesk
from tests.fakes import ScriptedChannel
from tests.test_offers import later, people_desk, reply_in_dm, request
from tests.test_routes import escalate, reply, route_desk, route_handoff

NOW = datetime(2026, 6, 10, 12, 0, tzinfo=UTC)  # the generator's clock: every time below is relative to it
SUPPORT = (1, "Support")
BILLING = (2, "Billing")
_ids = itertools.count()


@dataclass
class Planned:
    """One handoff of the generated history; offsets are seconds after `created`."""

    created: datetime
    channel: tuple[int, str] = SUPPORT
    route_id: int | None = None
    activated: float | None = 0
    claimed: float | None = None
    human_replies: tuple[float, ...] = ()
    released: float | None = None
    reason: ReleaseReason | None = None
    outcome: Outcome | None = None
    missing: list[str] = field(default_factory=list)
    failed: bool = False
    claimed_person: str | None = None
    reply_people: tuple[str | None, ...] = ()  # who wrote each of `human_replies` (nobody known when left out)
    released_person: str | None = None


async def store(db: Database, *handoffs: Planned, plain_conversations: tuple[datetime, ...] = (),
                facts: bool = True) -> list[str]:
    """Write the history (and answer the handoffs' ids, in order): a conversation per handoff (created with it) plus conversations
    that never had one. Each row carries the facts the desk writes where they happen (a real
    desk writing them: tests/test_handoffs.py, and on a route below): the seconds from the activation to
    the earlier of the claim and the first human reply, the seconds it lasted, the
    conversation's first handoff, and straight to a channel the first reply's mark; and the
    people who claimed, replied and released. `facts` False: a history stored before there
    were such columns (on a schema downgraded past them), written through the tables' older
    columns."""
    conversations, sessions, messages = [], [], []
    for at in plain_conversations:
        conversations.append(new_row(Conversation, id=f"c_plain{next(_ids)}", created_at=at, last_message_at=at))
    for plan in handoffs:
        n = next(_ids)
        at = plan.created
        conversations.append(new_row(Conversation, id=f"c{n}", created_at=at, last_message_at=at, first_handoff_at=at))
        state = (HandoffState.FAILED if plan.failed else HandoffState.RELEASED if plan.released is not None
                 else HandoffState.ACTIVE)
        started = plan.activated or 0
        reached = min((t for t in (plan.claimed, *plan.human_replies) if t is not None), default=None)
        sessions.append(new_row(
            HandoffSession, id=f"h{n}", conversation_id=f"c{n}", channel_id=plan.channel[0], channel_kind="inbox",
            channel_label=plan.channel[1], state=state, urgency="normal", summary="s", expected_action="a",
            created_at=at, activated_at=_after(at, plan.activated), claimed_at=_after(at, plan.claimed),
            released_at=_after(at, plan.released), release_reason=plan.reason, outcome=plan.outcome,
            missing_required=plan.missing, route_id=plan.route_id,
            time_to_person_seconds=None if reached is None else reached - started,
            duration_seconds=None if plan.released is None or plan.activated is None else plan.released - started,
            first_human_reply_at=_after(at, min(plan.human_replies)) if plan.human_replies and plan.route_id is None else None,
            claimed_person_id=plan.claimed_person, released_person_id=plan.released_person, handled_by=_handler(plan),
        ))
        people = plan.reply_people + (None,) * (len(plan.human_replies) - len(plan.reply_people))
        messages += [new_row(Message, conversation_id=f"c{n}", role=Role.HUMAN, text="hi", handoff_session_id=f"h{n}",
                             created_at=at + timedelta(seconds=offset), person_id=person)
                     for offset, person in zip(plan.human_replies, people, strict=True)]
        # Messages that must not count as a person: the subscriber's and the agent's
        messages.append(new_row(Message, conversation_id=f"c{n}", role=Role.SUBSCRIBER, text="help",
                                handoff_session_id=f"h{n}", created_at=at + timedelta(seconds=1)))
    if not facts:  # the columns of migrations 0020, 0021 and 0023, and the mark 0018 added but never filled in
        for row in conversations:
            del row["first_handoff_at"]
        for row in sessions:
            del row["time_to_person_seconds"], row["duration_seconds"]
            del row["claimed_person_id"], row["released_person_id"]  # 0021's, later still
            del row["turn"], row["offer_until"]  # 0023's
            del row["handled_by"]  # 0024's
        for row in messages:
            del row["person_id"]
    for row in messages:
        del row["id"]  # the database numbers them
    async with db.transaction() as session:
        for table, rows in ((CONVERSATIONS, conversations), (HANDOFFS, sessions), (MESSAGES, messages)):
            if rows:  # an INSERT of the columns the rows name, the rest left to the database
                await session.execute(insert(table), rows)
    return [row["id"] for row in sessions]


def _handler(plan: Planned) -> str | None:
    """Who handled it, as the desk writes it down: the claim's person, else (straight to a
    channel) the first reply's, else a person's release's; '' for nobody linked."""
    if plan.claimed is not None:
        return plan.claimed_person or ""
    if plan.human_replies and plan.route_id is None:
        people = plan.reply_people + (None,) * (len(plan.human_replies) - len(plan.reply_people))
        return min(zip(plan.human_replies, range(len(people)), people, strict=True))[2] or ""
    if plan.reason is not None and plan.reason.by_a_person:
        return plan.released_person or ""
    return None


def _after(at: datetime, seconds: float | None) -> datetime | None:
    return None if seconds is None else at + timedelta(seconds=seconds)


def bars(*counts: int) -> tuple[int, ...]:
    assert len(counts) == len(BUCKETS)
    return counts


async def test_every_aggregate_of_a_known_history(db: Database) -> None:
    start = NOW - timedelta(days=1)
    hour = timedelta(hours=1)
    await store(
        db,
        # Ten handoffs reached after 10, 20, … 100 s by a claim; released after 10 min (one with fields missing)
        *(Planned(start + hour, activated=5, claimed=5 + 10 * i, released=5 + 600, reason=ReleaseReason.FORM,
                  outcome=Outcome.RESOLVED, missing=["order_id"] if i == 1 else []) for i in range(1, 11)),
        # The earlier of claim and first human reply counts; a reply alone counts; 60 s is in 1–5m
        Planned(start + 2 * hour, claimed=400, human_replies=(300, 350), released=7200,
                reason=ReleaseReason.IDLE_TIMEOUT, outcome=Outcome.UNRESOLVED, channel=BILLING),
        Planned(start + 2 * hour, claimed=200, human_replies=(500,), released=20000,
                reason=ReleaseReason.OWNER, outcome=Outcome.NEEDS_FOLLOWUP, channel=BILLING),
        Planned(start + 2 * hour, human_replies=(60,), channel=BILLING),
        # Never activated (a failed dispatch), and never claimed (released unclaimed): nobody reached
        Planned(start + 3 * hour, activated=None, failed=True),
        Planned(start + 3 * hour, released=1800, reason=ReleaseReason.UNCLAIMED, outcome=Outcome.UNRESOLVED),
        # Outside the range on both sides
        Planned(start - timedelta(seconds=1), claimed=1),
        Planned(NOW, claimed=1),
        plain_conversations=(start, start + hour, NOW - timedelta(seconds=1), NOW),
    )
    summary = await Reports(db).summary(start, NOW)

    assert summary.handoffs == 15
    assert summary.days == (date(2026, 6, 9), date(2026, 6, 10))
    assert summary.per_day == (
        DayCount(date(2026, 6, 9), 1, "Support", None, None, 12),
        DayCount(date(2026, 6, 9), 2, "Billing", None, None, 3),
    )
    reached = summary.time_to_person
    # 10…100, 300, 200, 60 (300 s opens 5–15m): sorted 10 20 30 40 50 60 60 70 80 90 100 200 300 (n = 13)
    assert (reached.count, reached.missing) == (13, 2)
    assert (reached.p50, reached.p90, reached.max) == (60, 200, 300)  # ranks 7 and 12
    assert tuple(b.count for b in reached.histogram) == bars(5, 7, 1, 0, 0, 0)
    lasted = summary.duration
    # 600 ×10, 7200, 20000, 1800; still active and the failed one have none
    assert (lasted.count, lasted.missing) == (13, 2)
    assert (lasted.p50, lasted.p90, lasted.max) == (600, 7200, 20000)  # ranks 7 and 12
    assert tuple(b.count for b in lasted.histogram) == bars(0, 0, 10, 1, 1, 1)
    endings = summary.endings
    assert endings.by_reason == (Tally("form", 10), Tally("idle_timeout", 1), Tally("owner", 1), Tally("unclaimed", 1))
    assert endings.by_outcome == (Tally("resolved", 10), Tally("unresolved", 2), Tally("needs_followup", 1))
    assert (endings.missing_required, endings.unclaimed, endings.failed_dispatches, endings.open) == (1, 1, 1, 1)
    assert summary.containment == Containment(conversations=18, contained=3, escalated=15)
    assert summary.satisfaction is None


async def test_a_channel_filter_and_a_route_filter_choose_their_handoffs(db: Database) -> None:
    start = NOW - timedelta(days=7)
    await store(
        db,
        Planned(start, claimed=30),
        Planned(start, claimed=90, channel=BILLING, route_id=7),
        Planned(start + timedelta(days=1), claimed=1000, channel=BILLING, route_id=7),
        Planned(start + timedelta(days=1), claimed=5000, channel=BILLING),
    )
    reports = Reports(db, route_labels={7: "Escalations"})

    billing = await reports.summary(start, NOW, channel_id=2)
    assert billing.handoffs == 3
    assert (billing.time_to_person.p50, billing.time_to_person.max) == (1000, 5000)
    assert billing.per_day == (
        DayCount(date(2026, 6, 3), 2, "Billing", 7, "Escalations", 1),
        DayCount(date(2026, 6, 4), 2, "Billing", None, None, 1),
        DayCount(date(2026, 6, 4), 2, "Billing", 7, "Escalations", 1),
    )

    routed = await reports.summary(start, NOW, route_id=7)
    assert routed.handoffs == 2
    assert (routed.time_to_person.p50, routed.time_to_person.p90) == (90, 1000)
    assert [row.route_label for row in routed.per_day] == ["Escalations", "Escalations"]
    assert len(routed.days) == 8  # 3 June 12:00 to 10 June 12:00 touches eight days


async def test_a_day_is_local_midnight_to_local_midnight_across_both_dst_changes(db: Database) -> None:
    await store(
        db,
        # Spring forward, Sunday 29 March 2026: the local day is 23 h, 28 Mar 23:00 to 29 Mar 22:00 UTC
        Planned(datetime(2026, 3, 28, 22, 59, tzinfo=UTC)),  # 23:59 CET on the 28th
        Planned(datetime(2026, 3, 28, 23, 0, tzinfo=UTC)),  # 00:00 CET on the 29th
        Planned(datetime(2026, 3, 29, 21, 59, tzinfo=UTC)),  # 23:59 CEST on the 29th
        Planned(datetime(2026, 3, 29, 22, 0, tzinfo=UTC)),  # 00:00 CEST on the 30th
        # Fall back, Sunday 25 October 2026: the local day is 25 h, 24 Oct 22:00 to 25 Oct 23:00 UTC
        Planned(datetime(2026, 10, 24, 21, 59, tzinfo=UTC)),  # 23:59 CEST on the 24th
        Planned(datetime(2026, 10, 24, 22, 0, tzinfo=UTC)),  # 00:00 CEST on the 25th
        Planned(datetime(2026, 10, 25, 22, 30, tzinfo=UTC)),  # 23:30 CET on the 25th
        Planned(datetime(2026, 10, 25, 23, 0, tzinfo=UTC)),  # 00:00 CET on the 26th
    )
    reports = Reports(db)

    def counted(rows: tuple[DayCount, ...]) -> list[tuple[date, int]]:
        return [(row.day, row.handoffs) for row in rows]

    spring = await reports.summary(datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC),
                                   timezone="Europe/Berlin")
    assert spring.days == (date(2026, 3, 28), date(2026, 3, 29), date(2026, 3, 30))
    assert counted(spring.per_day) == [(date(2026, 3, 28), 1), (date(2026, 3, 29), 2), (date(2026, 3, 30), 1)]

    autumn = await reports.summary(datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC),
                                   timezone="Europe/Berlin")
    assert counted(autumn.per_day) == [(date(2026, 10, 24), 1), (date(2026, 10, 25), 2), (date(2026, 10, 26), 1)]

    # The same instants in UTC fall on other days
    utc = await reports.summary(datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC))
    assert counted(utc.per_day) == [(date(2026, 10, 24), 2), (date(2026, 10, 25), 2)]


async def test_a_range_that_starts_and_ends_inside_local_days(db: Database) -> None:
    # 21:30 to 02:30 Berlin time (CEST, +2): two local days, one handoff on each side of midnight
    start, end = datetime(2026, 6, 9, 19, 30, tzinfo=UTC), datetime(2026, 6, 10, 0, 30, tzinfo=UTC)
    await store(db, Planned(datetime(2026, 6, 9, 21, 59, tzinfo=UTC)), Planned(datetime(2026, 6, 9, 22, 0, tzinfo=UTC)))
    summary = await Reports(db).summary(start, end, timezone="Europe/Berlin")
    assert summary.days == (date(2026, 6, 9), date(2026, 6, 10))
    assert [(row.day, row.handoffs) for row in summary.per_day] == [(date(2026, 6, 9), 1), (date(2026, 6, 10), 1)]


def nearest_rank(values: list[float], percent: int) -> float:
    ordered = sorted(values)
    return ordered[(percent * len(ordered) + 99) // 100 - 1]


async def test_percentiles_are_exact_wherever_the_values_fall(db: Database) -> None:
    """Percentiles come from the fine bucket holding each rank: two ranks in one bucket,
    ranks in buckets far apart, and a value beyond the last edge, against the nearest rank
    worked out here."""
    start = NOW - timedelta(days=1)
    rng = random.Random(7)
    spread = [round(rng.lognormvariate(5.5, 1.4), 3) for _ in range(61)] + [800_000.5]  # the last past a week
    close = [600 + n / 10 for n in range(1, 11)]  # 600.1 … 601.0: p50 and p90 share a bucket
    await store(db, *(Planned(start, claimed=seconds) for seconds in spread),
                *(Planned(start + timedelta(hours=2), channel=BILLING, claimed=seconds) for seconds in close))
    reports = Reports(db)
    everything = (await reports.summary(start, NOW)).time_to_person
    values = spread + close
    assert (everything.p50, everything.p90, everything.max) == (
        nearest_rank(values, 50), nearest_rank(values, 90), 800_000.5)
    billing = (await reports.summary(start, NOW, channel_id=BILLING[0])).time_to_person
    assert (billing.p50, billing.p90) == (600.5, 600.9)


async def test_a_summary_reads_one_snapshot_while_another_instance_writes(
    db: Database, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The percentiles are located from the counts of an earlier query: a claim committed by
    another instance between the two must not move the ranks (on PostgreSQL each statement
    of a READ COMMITTED transaction would see it). The write is made to land exactly there.
    The range holds a whole UTC day: its counts come from the rollups."""
    start = NOW - timedelta(days=2)
    await store(db, *(Planned(start, claimed=10 * i) for i in range(1, 11)))  # 10 … 100
    locate = reports_module._value_at  # reads a rank's value once the counts have located it
    claims = []

    async def after_a_claim_elsewhere(*args: Any, **kwargs: Any) -> Any:
        if not claims:
            claims.append(await store(db, Planned(start + timedelta(minutes=1), claimed=45)))  # committed on its own connection
        return await locate(*args, **kwargs)

    monkeypatch.setattr(reports_module, "_value_at", after_a_claim_elsewhere)
    reached = (await Reports(db).summary(start, NOW)).time_to_person
    assert claims
    assert (reached.count, reached.p50, reached.p90, reached.max) == (10, 50, 90, 100)


async def test_an_empty_range_has_zeros_and_no_percentiles(db: Database) -> None:
    await store(db, Planned(NOW - timedelta(days=3), claimed=10, released=100, reason=ReleaseReason.FORM,
                            outcome=Outcome.RESOLVED))
    reports = Reports(db)
    for start, end in ((NOW - timedelta(days=1), NOW), (NOW, NOW)):
        summary = await reports.summary(start, end, channel_id=1)
        assert summary.handoffs == 0
        assert summary.per_day == ()
        for spread in (summary.time_to_person, summary.duration):
            assert (spread.count, spread.missing, spread.p50, spread.p90, spread.max) == (0, 0, None, None, None)
            assert all(b.count == 0 for b in spread.histogram)
        assert (summary.endings.by_reason, summary.endings.by_outcome) == ((), ())
        assert summary.containment == Containment(0, 0, 0)
    assert (await reports.summary(NOW, NOW)).days == ()
    # A channel that has no handoffs over a range that has some
    assert (await reports.summary(NOW - timedelta(days=7), NOW, channel_id=99)).handoffs == 0


async def test_a_range_that_ends_before_it_starts_is_refused(db: Database) -> None:
    with pytest.raises(ValueError, match="before it starts"):
        await Reports(db).summary(NOW, NOW - timedelta(seconds=1))


async def test_a_sibling_agents_own_conversation_is_no_subscriber_conversation(db: Database) -> None:
    await store(db, Planned(NOW - timedelta(hours=1)))
    async with db.transaction() as session:
        session.add(Conversation(id="c_sibling", created_at=NOW - timedelta(minutes=30),
                                 last_message_at=NOW, serves_handoff_session_id="h_any"))
    summary = await Reports(db).summary(NOW - timedelta(days=1), NOW)
    assert summary.containment == Containment(conversations=1, contained=0, escalated=1)


async def test_satisfaction_counts_the_answers_of_the_chosen_handoffs(db: Database) -> None:
    start = NOW - timedelta(days=1)
    await store(db, *(Planned(start + timedelta(minutes=i), released=600, reason=ReleaseReason.FORM,
                               outcome=Outcome.RESOLVED, channel=SUPPORT if i < 3 else BILLING) for i in range(4)))
    async with db.read() as session:
        sids = sorted((await session.scalars(select(col(HandoffSession.id)).where(col(HandoffSession.created_at) >= start))).all())
    async with db.transaction() as session:
        for sid, answer in zip(sids, ("yes", "yes", None, "no"), strict=True):
            handoff = await session.get(HandoffSession, sid)
            assert handoff is not None
            session.add(HandoffSatisfaction(
                handoff_session_id=sid, conversation_id=handoff.conversation_id, asked_at=start, asked_on="web",
                in_words=False, question_message_id=1, answer=answer,
            ))
    reports = Reports(db)
    everything = await reports.summary(start, NOW)
    assert everything.satisfaction == Satisfaction(positive=2, negative=1, unanswered=1)
    support = await reports.summary(start, NOW, channel_id=SUPPORT[0])
    assert support.satisfaction == Satisfaction(positive=2, negative=0, unanswered=1)
    assert (await reports.summary(NOW - timedelta(days=9), NOW - timedelta(days=8))).satisfaction is None


# --------------------------------------------------------------------------- per person


async def directory(db: Database, *people: tuple[str, str, bool]) -> None:
    """People of the directory as (id, name, disabled), stored as the directory stores them."""
    async with db.transaction() as session:
        for pid, name, disabled in people:
            session.add(Person(id=pid, name=name, email=f"{pid}@example.com", email_key=f"{pid}@example.com",
                               role="agent", source="cli", created_at=NOW, updated_at=NOW,
                               disabled_at=NOW if disabled else None))


async def asked(db: Database, answers: dict[str, str | None]) -> None:
    """The satisfaction question asked after these handoffs (by id), answered so."""
    async with db.transaction() as session:
        for sid, answer in answers.items():
            handoff = await session.get(HandoffSession, sid)
            assert handoff is not None
            session.add(HandoffSatisfaction(
                handoff_session_id=sid, conversation_id=handoff.conversation_id, asked_at=NOW - timedelta(minutes=1),
                asked_on="web", in_words=False, question_message_id=1, answer=answer,
            ))


def person(pid: str | None, name: str, handled: int = 0, timed: int = 0, p50: float | None = None,
           p90: float | None = None, answers: tuple[int, int, int] = (0, 0, 0), disabled: bool = False) -> PersonFigures:
    return PersonFigures(pid, name, disabled, handled, timed, p50, p90, *answers)


async def test_each_handoff_counts_for_the_one_person_who_handled_it(db: Database) -> None:
    """The claim's person on a route; straight to a channel the first reply's, not a later
    replier's nor the releaser's; failing both a person's release. Nobody's acts (the idle
    timer) count for no row; acts without a person for "not linked to a person"."""
    await directory(db, ("olga", "Olga Petrova", False), ("sam", "Sam Okafor", False), ("kim", "Kim Lee", True))
    start = NOW - timedelta(days=1)
    sids = await store(
        db,
        # Olga claims four on a route, after 30, 60, 90 and 120 s
        *(Planned(start, route_id=7, claimed=30 * i, claimed_person="olga", released=900, reason=ReleaseReason.FORM,
                  outcome=Outcome.RESOLVED, released_person="olga") for i in range(1, 5)),
        # Straight to a channel: Sam answered first, Olga later and she released it
        Planned(start, human_replies=(10, 40), reply_people=("sam", "olga"), released=600, reason=ReleaseReason.OWNER,
                outcome=Outcome.RESOLVED, released_person="olga"),
        # Someone nobody linked answered first, Sam after
        Planned(start, human_replies=(20, 25), reply_people=(None, "sam")),
        # Nobody replied; Olga released it from the inbox: hers, with no time to claim
        Planned(start, released=300, reason=ReleaseReason.OWNER, outcome=Outcome.RESOLVED, released_person="olga"),
        # Claimed by a provider user linked to nobody; a form released by whoever held the link
        Planned(start, route_id=7, claimed=50),
        Planned(start, released=400, reason=ReleaseReason.FORM, outcome=Outcome.RESOLVED),
        # Nobody acted: the idle timer ended it, the ladder gave it back
        Planned(start, released=1800, reason=ReleaseReason.IDLE_TIMEOUT, outcome=Outcome.UNRESOLVED),
        Planned(start, route_id=7, released=900, reason=ReleaseReason.UNCLAIMED, outcome=Outcome.UNRESOLVED),
        # Sam on the Billing channel; Olga outside the range
        Planned(start + timedelta(hours=1), channel=BILLING, human_replies=(200,), reply_people=("sam",)),
        Planned(start - timedelta(seconds=1), route_id=7, claimed=5, claimed_person="olga"),
    )
    await asked(db, {sids[0]: "yes", sids[1]: "no", sids[4]: None, sids[5]: "yes"})
    reports = Reports(db, route_labels={7: "Escalations"})

    everyone = (await reports.summary(start, NOW)).people
    assert everyone == (
        person("kim", "Kim Lee", disabled=True),  # in the directory, nothing in the range
        person("olga", "Olga Petrova", handled=5, timed=4, p50=60, p90=120, answers=(1, 1, 0)),  # ranks 2 and 4 of 4
        person("sam", "Sam Okafor", handled=2, timed=2, p50=10, p90=200, answers=(0, 0, 1)),
        person(None, NOT_LINKED, handled=3, timed=2, p50=20, p90=50, answers=(1, 0, 0)),
    )
    assert sum(row.handled for row in everyone) == 10  # of the 12 in the range, the two nobody acted on are in no row
    assert [row.asked for row in everyone] == [0, 2, 1, 1]

    billing = (await reports.summary(start, NOW, channel_id=BILLING[0])).people
    assert [(row.name, row.handled, row.p50) for row in billing] == [
        ("Kim Lee", 0, None), ("Olga Petrova", 0, None), ("Sam Okafor", 1, 200), (NOT_LINKED, 0, None)]
    routed = (await reports.summary(start, NOW, route_id=7)).people
    assert [(row.name, row.handled, row.timed) for row in routed] == [
        ("Kim Lee", 0, 0), ("Olga Petrova", 4, 4), ("Sam Okafor", 0, 0), (NOT_LINKED, 1, 1)]


async def test_a_desk_without_people_has_one_row_for_everything(db: Database) -> None:
    await store(db, Planned(NOW - timedelta(hours=1), route_id=7, claimed=90), Planned(NOW - timedelta(hours=1)))
    assert (await Reports(db).summary(NOW - timedelta(days=1), NOW)).people == (
        person(None, NOT_LINKED, handled=1, timed=1, p50=90, p90=90),)
    assert (await Reports(db).summary(NOW - timedelta(days=9), NOW - timedelta(days=8))).people == (
        person(None, NOT_LINKED),)


async def test_a_person_the_directory_does_not_know_keeps_their_id(db: Database) -> None:
    """People are never deleted; a database edited by hand may still name someone gone."""
    await directory(db, ("olga", "Olga Petrova", False))
    await store(db, Planned(NOW - timedelta(hours=1), route_id=7, claimed=90, claimed_person="zed"))
    people = (await Reports(db).summary(NOW - timedelta(days=1), NOW)).people
    assert [(row.person_id, row.name, row.handled) for row in people] == [
        ("olga", "Olga Petrova", 0), ("zed", "zed", 1), (None, NOT_LINKED, 0)]


# --------------------------------------------------------------------------- the facts a real desk writes


async def test_on_a_route_the_claim_is_the_time_to_a_person_the_reports_read(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    clock = harness.desk.clock
    assert isinstance(clock, ManualClock)
    asked_at = clock.now()
    _, started = await route_handoff(harness)
    await escalate(harness, timedelta(minutes=5))
    clock.advance(timedelta(minutes=2))
    await reply(harness, 3, "On it.", "Kim")
    handoff = await harness.desk.handoffs.get(started["handoff_session_id"])
    assert (handoff.claimed_by, handoff.time_to_person_seconds, handoff.duration_seconds) == ("Kim", 420, None)
    assert handoff.handled_by == ""  # Kim is linked to nobody of the directory
    summary = await Reports(harness.desk.db).summary(asked_at, clock.now(), route_id=20)
    assert (summary.time_to_person.p50, summary.endings.open, summary.duration.missing) == (420, 1, 1)


async def test_the_upgrade_fills_in_the_facts_of_the_handoffs_stored_before_it(start_desk: StartDesk) -> None:
    """Migration 0020 on a history written before it: the reached moment as the reports
    worked it out then (the first human message before any claim, else the claim), and the
    first-reply mark 0018 left empty, so a reply after the upgrade is not taken for the first."""
    harness = await start_desk(adapters={1: ScriptedChannel})
    cid = await harness.conversation()
    url = harness.desk.config.database_url
    await harness.desk.stop()
    start = NOW - timedelta(days=1)
    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(lambda sync: _downgrade(sync, "0019"))
        await store(db, Planned(start, activated=5, human_replies=(65, 200), released=605, reason=ReleaseReason.FORM,
                                outcome=Outcome.RESOLVED),
                    Planned(start, activated=5, claimed=35, human_replies=(50,)),
                    Planned(start, activated=None, failed=True),
                    Planned(start + timedelta(hours=1), activated=5, human_replies=(50,)), facts=False)
        await db.upgrade()
        async with db.read() as session:
            facts = sorted((await session.execute(
                select(col(HandoffSession.time_to_person_seconds), col(HandoffSession.duration_seconds))
                .where(col(HandoffSession.created_at) == start)
            )).all(), key=str)
            firsts = (await session.execute(select(col(Conversation.id), col(Conversation.first_handoff_at)))).all()
            [still_open] = (await session.scalars(
                select(col(HandoffSession.id)).where(col(HandoffSession.created_at) == start + timedelta(hours=1))
            )).all()
    finally:
        await db.dispose()
    assert facts == sorted([(60, 600), (30, None), (None, None)], key=str)
    assert dict(firsts)[cid] is None  # no handoff: still the bot's alone
    assert sum(1 for _, first in firsts if first == start) == 3

    upgraded = await start_desk(adapters={1: ScriptedChannel}, url=url)
    reopened = await upgraded.desk.handoffs.get(still_open)
    assert (reopened.first_human_reply_at, reopened.time_to_person_seconds) == (
        start + timedelta(hours=1, seconds=50), 45)
    await upgraded.desk.handoffs.recipient_message(still_open, "Still looking.", author="Sam", via="test")
    assert (await upgraded.desk.handoffs.get(still_open)).time_to_person_seconds == 45


def _downgrade(connection: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.downgrade(cfg, revision)


# --------------------------------------------------------------------------- offers to people


NIGHTS = {"id": "nights", "label": "Night on-call", "layers": [{"name": "primary", "people": ["sam"], "shift": "1d",
                                                                "start": "2026-12-01"}]}


async def test_offers_claims_misses_and_time_to_claim_per_person_team_and_schedule(start_desk: StartDesk) -> None:
    """A team's round robin, then the night on-call: four handoffs through a real desk, each
    offer's result and time to claim known from the clock."""
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"},
        {"notify": ["oncall:nights"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}], oncall=[NIGHTS],
    )
    start = harness.desk.clock.now()

    async def offered_to(*people: str) -> str:
        _, started = await request(harness)
        assert started["people_offered"] == list(people), started
        return str(started["handoff_session_id"])

    await offered_to("olga")  # 1: Olga misses it, Ben claims a minute after his offer
    await later(harness, timedelta(minutes=5))
    await later(harness, timedelta(minutes=1))
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    await offered_to("olga")  # 2: Olga claims after two minutes
    await later(harness, timedelta(minutes=2))
    assert await reply_in_dm(harness, 5, "olga") == "relayed"
    third = await offered_to("ben")  # 3: Ben and Olga both miss it; Sam, on call, claims after three minutes
    await later(harness, timedelta(minutes=5))
    await later(harness, timedelta(minutes=5))
    assert (await harness.desk.handoffs.get(third)).step == 1
    await later(harness, timedelta(minutes=3))
    assert await reply_in_dm(harness, 5, "sam") == "relayed"
    await offered_to("ben")  # 4: still waiting for Ben: an offer, no claim, no miss, not unclaimed yet

    summary = await Reports(harness.desk.db).summary(start, harness.desk.clock.now() + timedelta(seconds=1))
    people = {row.person_id: row.offered for row in summary.people}
    assert people["olga"] == OfferFigures(offers=3, claims=1, missed=2, timed=1, p50=120, p90=120)
    assert people["ben"] == OfferFigures(offers=3, claims=1, missed=1, timed=1, p50=60, p90=60)
    assert people["sam"] == OfferFigures(offers=1, claims=1, missed=0, timed=1, p50=180, p90=180)
    assert people["ines"] == OfferFigures() and people[None] == OfferFigures()
    assert {row.person_id: row.handled for row in summary.people} == {"olga": 1, "ben": 1, "sam": 1, "ines": 0, None: 0}
    nights, team = summary.targets  # by target
    assert (team.target, team.kind, team.id) == ("team:support", "team", "support")
    assert (team.offered, team.handoffs, team.unclaimed) == (
        OfferFigures(offers=6, claims=2, missed=3, timed=2, p50=60, p90=120), 4, 1)
    assert (nights.target, nights.offered, nights.handoffs, nights.unclaimed) == (
        "oncall:nights", OfferFigures(offers=1, claims=1, missed=0, timed=1, p50=180, p90=180), 1, 0)
    # the range and the filters choose the offers as they choose the handoffs
    later_on = await Reports(harness.desk.db).summary(harness.desk.clock.now(), harness.desk.clock.now() + timedelta(seconds=1))
    assert [row.offered.offers for row in later_on.people if row.person_id == "ben"] == [1]
    assert (await Reports(harness.desk.db).summary(start, harness.desk.clock.now(), route_id=99)).targets == ()


async def test_a_handoff_nobody_claims_is_a_miss_for_everyone_offered_and_unclaimed_for_their_team(
    start_desk: StartDesk,
) -> None:
    harness = await people_desk(start_desk, {"notify": ["team:support"], "claim_within": "5m"},
                                teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}])
    start = harness.desk.clock.now()
    _, started = await request(harness)
    await later(harness, timedelta(minutes=5))
    assert (await harness.desk.handoffs.get(started["handoff_session_id"])).release_reason == ReleaseReason.UNCLAIMED
    summary = await Reports(harness.desk.db).summary(start, harness.desk.clock.now())
    assert {row.person_id: (row.offered.offers, row.offered.missed) for row in summary.people if row.offered.offers} == {
        "olga": (1, 1), "ben": (1, 1)}
    [team] = summary.targets
    assert (team.offered.claims, team.offered.p50, team.handoffs, team.unclaimed) == (0, None, 1, 1)

"""The reports' rollups (bot/store/rollups.py) against the rows they count, on SQLite and
PostgreSQL: randomized histories (handoffs created, then claimed onto another channel,
released, their facts written) whose every summary from the rollups equals the one counted
from the rows alone, over ranges with ragged ends, across both DST changes of 2026 in
Berlin, in a half-hour zone (Kolkata) and across a zone's change of offset (Caracas went
from -04:30 to -04:00 on 2016-05-01); the rebuild reproduces what the triggers kept; and
writers racing on PostgreSQL keep every count exact."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, text, update

from bot.domain.handoff_rows import HANDOFFS
from bot.domain.reports import Reports
from bot.store.db import Database
from bot.store.rollups import ROLLUP_TABLES, ROLLUPS, rebuild
from bot.store.vocabulary import HandoffState, Outcome, ReleaseReason
from tests.test_cli import handoff
from tests.test_reports import BILLING, SUPPORT, Planned, store

ZONES = ("UTC", "Europe/Berlin", "Asia/Kolkata", "America/Caracas")
WINDOWS = (datetime(2026, 3, 26, 7, 13, tzinfo=UTC), datetime(2026, 10, 23, 19, 41, tzinfo=UTC),
           datetime(2016, 4, 28, 2, 5, tzinfo=UTC))
"""Where each history starts: five days across Berlin's spring change, its autumn change,
and Caracas' change of offset."""
SPAN = timedelta(days=5)
REASONS = (ReleaseReason.FORM, ReleaseReason.RELEASE_TOKEN, ReleaseReason.AGENT, ReleaseReason.IDLE_TIMEOUT,
           ReleaseReason.UNCLAIMED)


def planned(rng: random.Random, first: datetime) -> Planned:
    """A handoff created somewhere in the window, as a desk leaves it at some point of its life."""
    created = first + timedelta(seconds=rng.uniform(0, SPAN.total_seconds()))
    routed = rng.random() < 0.4
    fate = rng.random()
    if fate < 0.05:
        return Planned(created, channel=rng.choice((SUPPORT, BILLING)), activated=None, failed=True)
    reached = rng.lognormvariate(5, 1.4)
    if fate < 0.2:  # still waiting
        return Planned(created, channel=rng.choice((SUPPORT, BILLING)), route_id=20 if routed else None)
    return Planned(
        created, channel=rng.choice((SUPPORT, BILLING)), route_id=rng.choice((20, 21)) if routed else None,
        claimed=reached if routed else None, human_replies=() if routed else (reached,),
        released=reached + rng.lognormvariate(7, 1), reason=rng.choice(REASONS),
        outcome=rng.choice((Outcome.RESOLVED, Outcome.UNRESOLVED, None)),
        missing=["order_id"] if rng.random() < 0.1 else [],
    )


async def later_in_their_lives(db: Database, ids: list[str], rng: random.Random) -> None:
    """What happens to stored handoffs afterwards, one transaction each: a claim moves one to
    the other channel with its time to a person, a release ends one, a fact is rewritten."""
    for sid in rng.sample(ids, len(ids) // 3):
        change: dict[str, Any] = rng.choice((
            {"channel_id": BILLING[0], "channel_label": BILLING[1], "time_to_person_seconds": round(rng.uniform(1, 9000), 3)},
            {"state": HandoffState.RELEASED, "release_reason": ReleaseReason.OWNER, "outcome": Outcome.NEEDS_FOLLOWUP,
             "duration_seconds": round(rng.uniform(10, 90000), 3), "missing_required": ["eta"],
             "handled_by": func.coalesce(HANDOFFS.c.handled_by, "")},  # as the desk's release writes it
            {"time_to_person_seconds": None, "duration_seconds": round(rng.uniform(0, 3), 3)},
            {"route_id": None},
        ))
        async with db.transaction() as session:
            await session.execute(update(HANDOFFS).where(HANDOFFS.c.id == sid).values(**change))


def ranges(rng: random.Random, first: datetime) -> list[tuple[datetime, datetime]]:
    """Whole UTC days, ragged ends, whole hours, the whole window and past it, an empty one."""
    day = datetime(first.year, first.month, first.day, tzinfo=UTC) + timedelta(days=1)
    anywhere = [first + timedelta(seconds=rng.uniform(0, SPAN.total_seconds())) for _ in range(4)]
    return [
        (day, day + timedelta(days=3)),
        (min(anywhere[:2]), max(anywhere[:2])),
        (min(anywhere[2:]), max(anywhere[2:]) + timedelta(days=1)),
        (day + timedelta(hours=5), day + timedelta(days=2, hours=17)),
        (first - timedelta(days=1), first + SPAN + timedelta(days=1)),
        (day, day),
    ]


async def rollup_rows(db: Database) -> dict[str, set[tuple[Any, ...]]]:
    """Every rollup's rows that count something (a count taken back to 0 leaves its row)."""
    counts = {rollup.table: [name for name, _ in rollup.counts] for rollup in ROLLUPS}
    async with db.read() as session:
        return {table: {tuple(row.values()) for row in (await session.execute(text(f"SELECT * FROM {table}"))).mappings()
                        if any(row[name] for name in counts[table])}
                for table in ROLLUP_TABLES}


@pytest.mark.parametrize("first", WINDOWS, ids=("spring", "autumn", "caracas"))
async def test_the_rollups_answer_what_the_rows_do(db: Database, first: datetime) -> None:
    rng = random.Random(first.toordinal())
    plain = tuple(first + timedelta(seconds=rng.uniform(0, SPAN.total_seconds())) for _ in range(40))
    ids = await store(db, *(planned(rng, first) for _ in range(160)), plain_conversations=plain)
    await later_in_their_lives(db, ids, rng)
    rolled, counted = Reports(db), Reports(db, rollups=False)
    compared = 0
    for start, end in ranges(rng, first):
        for zone in ZONES:
            for through in ({}, {"channel_id": BILLING[0]}, {"route_id": 20}):
                expected = await counted.summary(start, end, timezone=zone, **through)
                assert await rolled.summary(start, end, timezone=zone, **through) == expected, (start, end, zone, through)
                compared += expected.handoffs
    assert compared > 1000  # the ranges held handoffs


async def test_the_rebuild_counts_what_the_triggers_kept(db: Database) -> None:
    rng = random.Random(7)
    first = WINDOWS[0]
    ids = await store(db, *(planned(rng, first) for _ in range(120)),
                      plain_conversations=tuple(first + timedelta(hours=n) for n in range(30)))
    await later_in_their_lives(db, ids, rng)
    kept = await rollup_rows(db)
    assert all(kept.values())
    async with db.transaction() as session:
        await rebuild(session, "sqlite" if db.is_sqlite else "postgresql")
    assert await rollup_rows(db) == kept


async def test_writers_racing_keep_every_count_exact(db: Database) -> None:
    """Forty transactions at once (on PostgreSQL each its own connection), all counting into
    the same hour's and day's rows: each creates a handoff, claims it onto the other channel,
    and releases it; the rollups then hold exactly what a rebuild counts."""
    at = datetime(2026, 6, 1, 10, 30, tzinfo=UTC)

    async def lifetime(n: int) -> None:
        [sid] = await store(db, Planned(at + timedelta(seconds=n), route_id=20))
        async with db.transaction() as session:
            await session.execute(update(HANDOFFS).where(HANDOFFS.c.id == sid).values(
                channel_id=BILLING[0], channel_label=BILLING[1], time_to_person_seconds=float(n)))
        async with db.transaction() as session:
            await session.execute(update(HANDOFFS).where(HANDOFFS.c.id == sid).values(
                state=HandoffState.RELEASED, release_reason=ReleaseReason.FORM, duration_seconds=60.0 + n))

    await asyncio.gather(*(lifetime(n) for n in range(40)))
    summary = await Reports(db).summary(at - timedelta(days=1), at + timedelta(days=1))
    assert summary.handoffs == 40
    assert [(day.channel_id, day.handoffs) for day in summary.per_day] == [(BILLING[0], 40)]
    assert (summary.time_to_person.count, summary.time_to_person.p50, summary.duration.max) == (40, 19, 99)
    kept = await rollup_rows(db)
    async with db.transaction() as session:
        await rebuild(session, "sqlite" if db.is_sqlite else "postgresql")
    assert await rollup_rows(db) == kept
    async with db.read() as session:
        ended = (await session.execute(text(
            "SELECT ending, sum(handoffs) FROM report_endings GROUP BY ending HAVING sum(handoffs) <> 0"))).all()
    assert ended == [("form", 40)]  # over the key's shards (bot/store/rollups.py SHARDS)
    if not db.is_sqlite:  # forty handoffs' ids spread over more than one shard of the key
        async with db.read() as session:
            assert await session.scalar(text("SELECT count(DISTINCT shard) FROM report_hours")) > 1


def test_handoff_reports_rebuild_counts_a_history_afresh(tmp_path: Path) -> None:
    path = tmp_path / "desk.db"
    url = f"sqlite:///{path}"

    async def history() -> None:
        db = Database(url)
        await db.upgrade()
        try:
            await store(db, *(Planned(WINDOWS[0] + timedelta(hours=n), claimed=30.0 * n, route_id=20) for n in range(1, 6)))
            async with db.transaction() as session:
                await session.execute(text("DELETE FROM report_measures"))  # as if lost, or counted wrong
                await session.execute(text("UPDATE report_hours SET handoffs = 99"))
            async with db.read() as session:
                assert (await session.execute(select(HANDOFFS.c.id))).all()
        finally:
            await db.dispose()

    asyncio.run(history())
    result = handoff("reports", "rebuild", "--database-url", url)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "reports' rollups rebuilt from 5 handoffs and 5 conversations"
    with sqlite3.connect(path) as connection:
        assert connection.execute("SELECT sum(handoffs) FROM report_hours").fetchone() == (5,)
        assert connection.execute("SELECT sum(handoffs) FROM report_measures WHERE measure = 0").fetchone() == (5,)

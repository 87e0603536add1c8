"""Reports benchmark: what one summary of the owner's reports costs on a long history.

Run:  python bench/reports.py [--handoffs N] [--days D] [--calls N] [--row-calls N] [--keep PATH [--reuse]]

Builds a SQLite file (migrated, the desk's pragmas) holding N handoffs (100,000 by default)
spread over D days (90 by default) with a daily rhythm, over four channels and two routes, each in its own
conversation with the subscriber's, the agent's and the people's messages; beside them 1.5
conversations per handoff that never needed a person. Ends are mixed the way a desk sees
them: releases by form, token, agent, owner, idle timeout and unclaimed; failed dispatches;
a few still open; required fields missing on some form releases. Twelve people of the
directory claim, reply and release (one act in ten by someone linked to nobody), which the
per-person figures read. Rows go in by bulk inserts (executemany in batches); the database's
triggers keep the reports' rollups as they go in, as they do for a desk.

Then it times `Reports.summary` (bot/domain/reports.py), the one call behind the reports
page, for the last 24 h, 7 days and 30 days (the page's ranges) and the whole history (a
custom range), each without a filter and with a channel filter (in Europe/Berlin): p50 /
p99 wall time and CPU time per call, per query and over all of them, and the process RSS.
With --row-calls N (0 skips it) the same summaries are also counted from the rows alone
(`Reports(rollups=False)`, the reports before the rollups) in the same run, and their ratio
printed. Figures are wall-clock on whatever machine runs this; nothing here asserts a
threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import sqlalchemy  # noqa: E402
from sqlalchemy import create_engine, insert  # noqa: E402

from bench.lifecycle import rss_mib  # noqa: E402
from bot.domain.reports import Reports  # noqa: E402
from bot.store.db import Database  # noqa: E402
from bot.store.models import Conversation, HandoffSession, Message, Person  # noqa: E402

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # the end of the generated history
CHANNELS = ((1, "owner_inbox", "Owner inbox"), (2, "slack", "Slack #support"), (3, "telegram", "Telegram on-call"),
            (4, "email", "Billing email"))
CHANNEL_WEIGHTS = (20, 45, 25, 10)
ROUTES = (None, 10, 11)
ROUTE_WEIGHTS = (70, 20, 10)
# (release reason, outcome) of released handoffs, with weights; unclaimed ones never reach a person
ENDINGS = ((("form", "resolved"), 38), (("form", "needs_followup"), 7), (("release_token", "resolved"), 15),
           (("agent", "resolved"), 15), (("owner", "unresolved"), 5), (("idle_timeout", "unresolved"), 12),
           (("unclaimed", "unresolved"), 8))
HOURLY = tuple(1 + 4 * math.exp(-((h - 14) ** 2) / 18) for h in range(24))  # busier in the afternoon (UTC)
BATCH = 10_000
PEOPLE = tuple(f"person{n:02d}" for n in range(12))


@dataclass(frozen=True)
class Timed:
    """Per-call wall and CPU times (seconds) of one query."""

    name: str
    wall: list[float]
    cpu: list[float]


# --------------------------------------------------------------------------- data


def batches(count: int, size: int) -> Iterator[range]:
    for first in range(0, count, size):
        yield range(first, min(first + size, count))


def created_at(rng: random.Random, history: timedelta) -> datetime:
    """A moment in the history, busier in the afternoon."""
    day = NOW - history + timedelta(days=rng.randrange(history.days))
    hour = rng.choices(range(24), HOURLY)[0]
    moment = day.replace(hour=hour, minute=0, second=0) + timedelta(seconds=rng.uniform(0, 3600))
    return min(moment, NOW - timedelta(seconds=1))


def handoff_rows(i: int, at: datetime, rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """One conversation, its handoff and its messages, created at `at`."""
    cid, hid = f"c_bench{i:09d}", f"hs_bench{i:09d}"
    channel_id, kind, label = rng.choices(CHANNELS, CHANNEL_WEIGHTS)[0]
    route_id = rng.choices(ROUTES, ROUTE_WEIGHTS)[0]
    activated = at + timedelta(seconds=rng.uniform(0.2, 3))
    failed = rng.random() < 0.02
    still_open = not failed and at > NOW - timedelta(hours=2) and rng.random() < 0.5
    (reason, outcome) = rng.choices([e for e, _ in ENDINGS], [w for _, w in ENDINGS])[0]
    reached = not failed and reason != "unclaimed"
    to_person = timedelta(seconds=rng.lognormvariate(math.log(240), 1.1))
    who = rng.choice(PEOPLE) if rng.random() < 0.9 else None  # the person who handles it, if linked
    # On a route a person's first act claims it; straight to a channel their first reply reaches it
    claimed = activated + to_person if reached and route_id is not None else None
    first_reply = activated + to_person * (rng.uniform(1, 1.5) if claimed else 1) if reached else None
    released = None if failed or still_open else activated + to_person + timedelta(seconds=rng.lognormvariate(math.log(1500), 0.9))
    messages = [
        {"conversation_id": cid, "role": "subscriber", "text": "My order is late.", "author": None, "person_id": None,
         "handoff_session_id": None, "created_at": at - timedelta(seconds=30)},
        {"conversation_id": cid, "role": "agent", "text": "Let me get a person.", "author": None, "person_id": None,
         "handoff_session_id": None, "created_at": at - timedelta(seconds=1)},
    ]
    if first_reply is not None:
        replies = [first_reply + timedelta(seconds=60 * n) for n in range(rng.randrange(1, 4))]
        messages += [{"conversation_id": cid, "role": "human", "text": "I'm on it.", "author": "Sam",
                      "person_id": who, "handoff_session_id": hid, "created_at": moment} for moment in replies]
    conversation = {"id": cid, "subscriber_name": "Ana", "subscriber_email": None, "subscriber_external_id": None,
                    "serves_handoff_session_id": None, "created_at": at - timedelta(seconds=30), "last_message_at": at,
                    "first_handoff_at": at}
    state = "failed" if failed else "active" if still_open else "released"
    ended = state == "released"
    handoff = {
        "id": hid, "conversation_id": cid, "channel_id": channel_id, "channel_kind": kind, "channel_label": label,
        "state": state, "urgency": "normal", "summary": "Order #1234 is a week late.",
        "expected_action": "Check the order.", "contact_back_email": None, "include_transcript": True,
        "extra_context": {}, "expected_return": [], "estimated_response": None, "channel_message_id": None,
        "thread_key": hid, "thread": {}, "failure": "refused" if failed else None, "created_at": at,
        "activated_at": None if failed else activated, "last_activity_at": None, "idle_deadline": None,
        "released_at": released, "release_reason": reason if ended else None, "released_by": None,
        "outcome": outcome if ended else None, "note": None, "returned": {},
        "missing_required": ["order_id"] if ended and reason == "form" and rng.random() < 0.05 else [],
        "route_id": route_id, "claimed_at": claimed, "claimed_by": "Sam" if claimed else None,
        "claimed_person_id": who if claimed else None,
        "released_person_id": who if ended and reason in ("form", "release_token", "owner") else None,
        "first_human_reply_at": first_reply if route_id is None else None,
        "handled_by": (who or "") if reached else None,  # the claim's or first reply's person ('' linked to nobody)
        # The facts the desk writes at the claim or first reply, and at the release
        "time_to_person_seconds": round(to_person.total_seconds(), 3) if reached else None,
        "duration_seconds": round((released - activated).total_seconds(), 3) if released is not None else None,
    }
    return conversation, handoff, messages


def plain_rows(i: int, at: datetime) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A conversation the bot handled alone, started at `at`."""
    cid = f"c_plain{i:09d}"
    conversation = {"id": cid, "subscriber_name": None, "subscriber_email": None, "subscriber_external_id": None,
                    "serves_handoff_session_id": None, "created_at": at, "last_message_at": at, "first_handoff_at": None}
    return conversation, [
        {"conversation_id": cid, "role": role, "text": text, "author": None, "person_id": None, "handoff_session_id": None,
         "created_at": at + timedelta(seconds=n)} for n, (role, text) in enumerate((("subscriber", "Where is my order?"),
                                                                                    ("agent", "It ships tomorrow.")))
    ]


def load(path: Path, handoffs: int, history: timedelta) -> None:
    """Bulk-insert the history into the migrated file at `path`, oldest first as a desk writes it."""
    rng = random.Random(18)
    handoff_times = sorted(created_at(rng, history) for _ in range(handoffs))
    plain_times = sorted(created_at(rng, history) for _ in range(handoffs * 3 // 2))
    engine = create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(insert(Person.__table__), [
            {"id": pid, "name": f"Person {pid[-2:]}", "email": f"{pid}@example.com", "email_key": f"{pid}@example.com",
             "role": "agent", "timezone": "UTC", "source": "cli", "created_at": NOW - history, "updated_at": NOW - history}
            for pid in PEOPLE])
        for ids in batches(handoffs, BATCH):
            rows = [handoff_rows(i, handoff_times[i], rng) for i in ids]
            conn.execute(insert(Conversation.__table__), [c for c, _h, _m in rows])
            conn.execute(insert(HandoffSession.__table__), [h for _c, h, _m in rows])
            conn.execute(insert(Message.__table__), [m for _c, _h, ms in rows for m in ms])
        for ids in batches(len(plain_times), BATCH):
            plain = [plain_rows(i, plain_times[i]) for i in ids]
            conn.execute(insert(Conversation.__table__), [c for c, _m in plain])
            conn.execute(insert(Message.__table__), [m for _c, ms in plain for m in ms])
    engine.dispose()


# --------------------------------------------------------------------------- the runs


async def time_query(reports: Reports, name: str, span: timedelta, channel_id: int | None, calls: int) -> Timed:
    """`calls` summaries in sequence after two unrecorded ones."""
    async def once() -> None:
        await reports.summary(NOW - span, NOW, channel_id=channel_id, timezone="Europe/Berlin")

    for _ in range(2):
        await once()
    wall, cpu = [], []
    for _ in range(calls):
        w0, c0 = time.perf_counter(), time.process_time()
        await once()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    return Timed(name, wall, cpu)


def p(samples: list[float], percent: int) -> float:
    """A percentile in milliseconds."""
    ms = sorted(s * 1000 for s in samples)
    return statistics.quantiles(ms, n=100, method="inclusive")[percent - 1] if len(ms) > 1 else ms[0]


def print_table(rows: list[Timed]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'query':<{width}}  {'n':>5}  {'p50 ms':>8}  {'p99 ms':>8}  {'cpu p50 ms':>10}")
    print("-" * (width + 39))
    for r in rows:
        print(f"{r.name:<{width}}  {len(r.wall):>5}  {p(r.wall, 50):8.1f}  {p(r.wall, 99):8.1f}  {p(r.cpu, 50):10.1f}")


async def main(handoffs: int, days: int, calls: int, row_calls: int, keep: Path | None, reuse: bool) -> None:
    history = timedelta(days=days)
    with tempfile.TemporaryDirectory(prefix="handoff-bench-") as tmp:
        path = keep or Path(tmp) / "reports.db"
        db = Database(f"sqlite:///{path}")
        await db.upgrade()
        print("Handoff Desk reports benchmark")
        print(f"Python {platform.python_version()} | SQLite {sqlite3.sqlite_version} | SQLAlchemy {sqlalchemy.__version__}"
              f" | {platform.platform()}")
        rss_before = rss_mib()
        started, cpu_started = time.perf_counter(), time.process_time()
        if reuse:
            print(f"reusing the history in {path} (built with the same --handoffs and --days)\n", flush=True)
        else:
            load(path, handoffs, history)
            print(f"loaded {handoffs:,} handoffs, {handoffs * 5 // 2:,} conversations over {days} days in"
                  f" {time.perf_counter() - started:.1f} s ({time.process_time() - cpu_started:.1f} s CPU;"
                  f" {path.stat().st_size / 2**20:.0f} MiB)\n", flush=True)
        spans = (("24 h", timedelta(days=1)), ("7 d", timedelta(days=7)), ("30 d", timedelta(days=30)),
                 (f"{days} d", history))
        rows: list[Timed] = []
        reference: list[Timed] = []
        try:
            for label, span in spans:
                for channel_id in (None, 2):
                    name = f"summary {label}" + (f", channel {channel_id}" if channel_id else "")
                    rows.append(await time_query(Reports(db), name, span, channel_id, calls))
            sample = await Reports(db).summary(NOW - timedelta(days=30), NOW, timezone="Europe/Berlin")
            rss_after = rss_mib()
            if row_calls:
                for label, span in spans:
                    for channel_id in (None, 2):
                        name = f"from the rows {label}" + (f", channel {channel_id}" if channel_id else "")
                        reference.append(await time_query(Reports(db, rollups=False), name, span, channel_id, row_calls))
        finally:
            await db.dispose()
        everything = Timed("all summaries", [w for r in rows for w in r.wall], [c for r in rows for c in r.cpu])
        print_table([*rows, everything])
        if reference:
            print()
            print_table(reference)
            print("\nrollups / rows (p50 wall, p50 CPU): " + "; ".join(
                f"{r.name.removeprefix('summary ')} {p(r.wall, 50) / p(o.wall, 50):.2f}, {p(r.cpu, 50) / p(o.cpu, 50):.2f}"
                for r, o in zip(rows, reference, strict=True)))
        reached = sample.time_to_person
        print(f"\n30 d: {sample.handoffs:,} handoffs; time to a person p50 {reached.p50:.0f} s, p90 {reached.p90:.0f} s,"
              f" not reached {reached.missing:,}; containment {sample.containment.contained:,} of"
              f" {sample.containment.conversations:,}")
        print(f"process RSS {rss_after:.0f} MiB after the summaries from rollups, {rss_mib():.0f} MiB at the end"
              f" (before loading {rss_before:.0f} MiB)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--handoffs", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=90, help="the history's length")
    parser.add_argument("--calls", type=int, default=30, help="timed summaries per query")
    parser.add_argument("--row-calls", type=int, default=10,
                        help="timed summaries per query counted from the rows alone (0: none)")
    parser.add_argument("--keep", type=Path, help="build the database here and leave it")
    parser.add_argument("--reuse", action="store_true", help="time the history already in --keep (no load)")
    args = parser.parse_args()
    if args.reuse and (args.keep is None or not args.keep.exists()):
        parser.error("--reuse: give --keep PATH of a database an earlier run built")
    asyncio.run(main(args.handoffs, args.days, args.calls, args.row_calls, args.keep, args.reuse))

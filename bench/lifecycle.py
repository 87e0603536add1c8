"""Lifecycle benchmark: what one handoff costs, and what 100,000 open handoffs cost.

Run:  python bench/lifecycle.py [--quick]

Everything runs in one process, on SQLite, in a fresh temporary directory (file databases,
WAL, synchronous=NORMAL, the pragmas the desk sets). It measures the paths the design
leans on:

1. `handoff_request` to the owner inbox channel, on a fresh conversation each time:
   called directly on a started Desk (`desk.router.call_tool`), and through the HTTP API
   (httpx.ASGITransport against `create_app(desk, manage_desk=False)`, no sockets).
   One call is five short transactions (read the conversation; store session + audit +
   outbox item; claim the dispatch; mark it sent; activate) plus rendering the dispatch.
2. The subscriber -> recipient relay during active handoffs, several conversations at
   once: the rate of `router.subscriber_message` (store message + bump idle deadline +
   enqueue relay, one transaction), the rate at which the outbox delivers that backlog,
   and the end-to-end rate with the outbox worker running (sent, not just stored).
3. Scale: with 100,000 active handoff sessions in the database (10,000 with --quick),
   the latency of one relay (which bumps `idle_deadline` in its transaction), the time of
   one idle sweep with nothing due (it runs every `sweep_interval`, 30 s by default), and
   the process RSS before and after loading the sessions. The design claims idle
   handoffs cost an index, not memory or scheduler jobs; this checks it.
4. Baselines: the bare stack (SQLAlchemy Core + aiosqlite, same schema, same pragmas,
   same kind of file) doing the minimum of the same work, in the same run, so the ratio
   column says what the desk's bookkeeping costs on this machine:
   - for (1): insert one session row + one audit row in one transaction;
   - for (3): `UPDATE handoff_sessions SET idle_deadline=? WHERE id=? AND state='active'`
     + insert one message, in one transaction, against the same 100k rows.

At the 100k size it also times two reads that run often and scale with the number of open
sessions: `Handoffs.by_thread` (every recipient reply arriving through a channel) and
`Queries.handoffs` (bot/domain/queries.py) (the owner inbox page and GET /api/handoffs).

The outbox worker is paused while latencies are taken (so its passes don't interleave
with the calls being timed) and running for the end-to-end relay figure. Figures are
wall-clock on whatever machine runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import httpx  # noqa: E402
import sqlalchemy  # noqa: E402
from sqlalchemy import event, func, insert, select, text  # noqa: E402
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine  # noqa: E402
from sqlmodel import SQLModel  # noqa: E402

from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from bot.store.models import Conversation, HandoffEvent, HandoffSession, Message, OutboxItem  # noqa: E402
from bot.web.app import create_app  # noqa: E402

SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."
REQUEST = {"channel_id": 1, "summary": SUMMARY, "expected_action": ACTION}
WARMUP = 10


# --------------------------------------------------------------------------- figures


@dataclass
class Row:
    name: str
    n: int
    p50_ms: float | None = None
    p99_ms: float | None = None
    rate: float | None = None
    ratio: float | None = None


def timed_row(name: str, samples: list[float], elapsed: float) -> Row:
    """A row from per-call durations (seconds) and the wall time of the whole loop."""
    ms = sorted(s * 1000 for s in samples)
    p99 = statistics.quantiles(ms, n=100, method="inclusive")[98] if len(ms) > 1 else ms[0]
    return Row(name, len(ms), statistics.median(ms), p99, len(ms) / elapsed)


async def measure(n: int, call: Callable[[int], Awaitable[Any]], warmup: int = WARMUP) -> tuple[list[float], float]:
    """Await `call(i)` n times in sequence, after `warmup` unrecorded calls `call(-1)`, `call(-2)`, ..."""
    for i in range(warmup):
        await call(-1 - i)
    samples = []
    start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        await call(i)
        samples.append(time.perf_counter() - t0)
    return samples, time.perf_counter() - start


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    import resource  # not Linux: peak RSS instead (bytes on macOS, KiB elsewhere)

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)


def fmt(value: float | None, width: int, spec: str, suffix: str = "") -> str:
    return f"{'-' if value is None else format(value, spec) + suffix:>{width}}"


def print_table(rows: list[Row]) -> None:
    width = max(len(r.name) for r in rows)
    print(f"{'name':<{width}}  {'n':>7}  {'p50 ms':>8}  {'p99 ms':>8}  {'rate/s':>9}  {'ours/bare':>9}")
    print("-" * (width + 51))
    for r in rows:
        print(
            f"{r.name:<{width}}  {r.n:>7}  {fmt(r.p50_ms, 8, '.3f')}  {fmt(r.p99_ms, 8, '.3f')}  "
            f"{fmt(r.rate, 9, '.0f')}  {fmt(r.ratio, 9, '.1f', 'x')}"
        )


# --------------------------------------------------------------------------- data


def now() -> datetime:
    return datetime.now(UTC)


def conversation_row(i: int, at: datetime) -> dict[str, Any]:
    return {
        "id": f"c_bench{i:09d}", "subscriber_name": "Ana", "subscriber_email": "ana@example.com",
        "subscriber_external_id": None, "serves_handoff_session_id": None, "created_at": at, "last_message_at": at,
    }


def session_row(i: int, at: datetime, *, state: str = "active", deadline: datetime | None = None) -> dict[str, Any]:
    sid = f"hs_bench{i:09d}"
    return {
        "id": sid, "conversation_id": f"c_bench{i:09d}", "channel_id": 1, "channel_kind": "owner_inbox",
        "channel_label": "Owner inbox", "state": state, "urgency": "normal", "summary": SUMMARY,
        "expected_action": ACTION, "contact_back_email": "ana@example.com", "include_transcript": True,
        "extra_context": {}, "expected_return": [], "estimated_response": "within 1 business day",
        "channel_message_id": f"inbox:{sid}", "thread_key": sid, "thread": {}, "failure": None, "created_at": at,
        "activated_at": at if state == "active" else None, "last_activity_at": at if state == "active" else None,
        "idle_deadline": deadline, "released_at": None, "release_reason": None, "released_by": None,
        "outcome": None, "note": None, "returned": {}, "missing_required": [],
    }


def batches(start: int, count: int, size: int) -> Iterator[range]:
    for first in range(start, start + count, size):
        yield range(first, min(first + size, start + count))


async def load_sessions(engine: AsyncEngine, count: int, *, first: int = 0, batch: int = 10_000) -> None:
    """Bulk-insert `count` conversations, each with one ACTIVE handoff whose idle deadline
    is 10-30 minutes away (so an idle sweep finds nothing due)."""
    at = now()
    rng = random.Random(7)
    for ids in batches(first, count, batch):
        async with engine.begin() as conn:
            await conn.execute(insert(Conversation.__table__), [conversation_row(i, at) for i in ids])
            await conn.execute(
                insert(HandoffSession.__table__),
                [session_row(i, at, deadline=at + timedelta(seconds=rng.uniform(600, 1800))) for i in ids],
            )


def bare_engine(path: Path) -> AsyncEngine:
    """The bare stack: SQLAlchemy Core on aiosqlite, the same pragmas the desk sets, the
    driver's own (deferred) transactions."""
    engine = create_async_engine(f"sqlite+aiosqlite:///{path}")

    @event.listens_for(engine.sync_engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    return engine


# --------------------------------------------------------------------------- the runs


async def bench_request(desk: Desk, client: httpx.AsyncClient, n: int) -> tuple[Row, Row]:
    async def fresh() -> str:
        return await desk.conversations.start(name="Ana", email="ana@example.com")

    # Conversations are made up front so only the handoff_request itself is timed.
    direct_ids = [await fresh() for _ in range(n + WARMUP)]
    http_ids = [await fresh() for _ in range(n + WARMUP)]

    async def direct(i: int) -> None:
        result = await desk.router.call_tool(direct_ids[i], "handoff_request", REQUEST)
        assert result.get("ok"), result

    async def over_http(i: int) -> None:
        response = await client.post(f"/api/conversations/{http_ids[i]}/tools/handoff_request", json=REQUEST)
        assert response.status_code == 200 and response.json().get("ok"), response.text

    return (
        timed_row("handoff_request, direct (desk.router.call_tool)", *await measure(n, direct)),
        timed_row("handoff_request, HTTP (ASGITransport)", *await measure(n, over_http)),
    )


async def bench_bare_request(engine: AsyncEngine, n: int) -> Row:
    """One session row + one audit row in a transaction (the conversation already exists)."""
    at = now()
    base = 50_000_000  # ids clear of the 100k loaded later
    async with engine.begin() as conn:
        await conn.execute(insert(Conversation.__table__), [conversation_row(base + i, at) for i in range(n + WARMUP)])
    sessions, events = HandoffSession.__table__, HandoffEvent.__table__

    async def insert_pair(i: int) -> None:
        i = base + (i if i >= 0 else n - 1 - i)
        row = session_row(i, now(), state="dispatching")
        async with engine.begin() as conn:
            await conn.execute(insert(sessions).values(row))
            await conn.execute(insert(events).values(
                handoff_session_id=row["id"], conversation_id=row["conversation_id"], kind="handoff_requested",
                actor="agent", detail={"request": REQUEST}, created_at=row["created_at"],
            ))

    return timed_row("bare: insert session + audit row", *await measure(n, insert_pair))


async def pending_relays(desk: Desk) -> int:
    async with desk.db.transaction() as session:
        query = select(func.count()).select_from(OutboxItem).where(OutboxItem.purpose == "relay", OutboxItem.state != "sent")
        return int(await session.scalar(query) or 0)


async def bench_relay(desk: Desk, conversations: int, messages: int) -> list[Row]:
    cids = [await desk.conversations.start(name="Ana", email="ana@example.com") for _ in range(conversations)]
    for cid in cids:
        assert (await desk.router.call_tool(cid, "handoff_request", REQUEST)).get("ok")
    per_conversation = messages // conversations

    async def senders(samples: list[float]) -> float:
        """One task per conversation, each sending its messages in order; returns wall time."""
        async def send(cid: str) -> None:
            for k in range(per_conversation):
                t0 = time.perf_counter()
                result = await desk.router.subscriber_message(cid, f"message {k}: is there any news on my order?")
                samples.append(time.perf_counter() - t0)
                assert result.routed_to == "human"

        start = time.perf_counter()
        await asyncio.gather(*(send(cid) for cid in cids))
        return time.perf_counter() - start

    # Stored and queued, not yet delivered (worker paused), then the backlog delivered.
    await desk.outbox.stop()
    samples: list[float] = []
    stored = timed_row(f"relay store+enqueue, {conversations} convs concurrent", samples, await senders(samples))
    start = time.perf_counter()
    await desk.outbox.drain()
    drained = time.perf_counter() - start
    assert await pending_relays(desk) == 0
    drain = Row(f"outbox drain of that backlog ({conversations} sessions)", stored.n, rate=stored.n / drained)

    # End to end: worker running, from the first send until every relay is sent.
    desk.outbox.start()
    samples = []
    start = time.perf_counter()
    await senders(samples)
    while await pending_relays(desk):
        await desk.settle()
    end_to_end = time.perf_counter() - start
    e2e = timed_row(f"relay end-to-end incl. delivery, {conversations} convs", samples, end_to_end)
    return [stored, drain, e2e]


async def bench_scale(desk: Desk, bare: AsyncEngine, sessions: int, n: int) -> tuple[list[Row], dict[str, float]]:
    memory: dict[str, float] = {}
    gc.collect()
    memory["before load"] = rss_mib()
    start = time.perf_counter()
    await load_sessions(desk.db.engine, sessions)
    load_seconds = time.perf_counter() - start
    gc.collect()
    memory["after load"] = rss_mib()
    await load_sessions(bare, sessions)  # the baseline runs against the same number of rows

    async with desk.db.transaction() as session:
        active = await session.scalar(select(func.count()).select_from(HandoffSession).where(HandoffSession.state == "active"))
    rows = [Row(f"bulk load, conversation+session ({active:,} active now)", sessions, rate=sessions / load_seconds)]

    rng = random.Random(11)
    picks = [rng.randrange(sessions) for _ in range(n + WARMUP)]
    await desk.outbox.stop()  # relays queue up; the worker would otherwise interleave its passes

    async def relay(i: int) -> None:
        result = await desk.router.subscriber_message(f"c_bench{picks[i]:09d}", "any news on my order?")
        assert result.routed_to == "human"

    ours = timed_row(f"relay + idle bump @ {sessions:,} sessions", *await measure(n, relay))

    bump = text("UPDATE handoff_sessions SET idle_deadline = :deadline, last_activity_at = :now WHERE id = :sid AND state = 'active'")
    messages = Message.__table__

    async def bare_relay(i: int) -> None:
        at = now()
        k = picks[i]
        async with bare.begin() as conn:
            changed = await conn.execute(bump, {
                "deadline": (at + timedelta(minutes=30)).strftime("%Y-%m-%d %H:%M:%S.%f"),
                "now": at.strftime("%Y-%m-%d %H:%M:%S.%f"), "sid": f"hs_bench{k:09d}",
            })
            assert changed.rowcount == 1
            await conn.execute(insert(messages).values(
                conversation_id=f"c_bench{k:09d}", role="subscriber", text="any news on my order?",
                handoff_session_id=f"hs_bench{k:09d}", created_at=at,
            ))

    base = timed_row("bare: UPDATE idle_deadline + insert message", *await measure(n, bare_relay))
    ours.ratio = ours.p50_ms / base.p50_ms  # type: ignore[operator]
    rows += [ours, base]

    async def sweep(_i: int) -> None:
        await desk.timers.sweep()

    rows.append(timed_row(f"idle sweep, nothing due @ {sessions:,} sessions", *await measure(20, sweep)))

    # Two frequent reads whose cost grows with the number of open sessions (see the docstring).
    async def thread_lookup(i: int) -> None:
        assert await desk.handoffs.by_thread(1, f"hs_bench{picks[i]:09d}") is not None

    async def open_list(_i: int) -> None:
        await desk.queries.handoffs(states=("dispatching", "active"))

    rows.append(timed_row(f"reply-thread lookup (by_thread) @ {sessions:,}", *await measure(10, thread_lookup, 2)))
    rows.append(timed_row(f"open handoffs, newest 100 @ {sessions:,}", *await measure(10, open_list, 2)))

    start = time.perf_counter()
    await desk.outbox.drain()
    rows.append(Row(f"outbox drain of those relays ({n} sessions)", n, rate=n / (time.perf_counter() - start)))
    desk.outbox.start()
    gc.collect()
    memory["after relays + sweeps"] = rss_mib()
    return rows, memory


async def main(quick: bool) -> None:
    configure_logging(level="warning", fmt="console")
    n_request = 100 if quick else 300
    relay_convs, relay_messages = 8, (400 if quick else 1000)
    sessions = 10_000 if quick else 100_000
    n_relay = 300 if quick else 2000

    with tempfile.TemporaryDirectory(prefix="handoff-bench-") as tmp:
        db_path, bare_path = Path(tmp) / "bench.db", Path(tmp) / "bare.db"
        config = Config.from_mapping({
            "database_url": f"sqlite:///{db_path}",
            "secret_key": "bench-secret-key-0123456789",
            "server": {"public_url": "http://desk.test"},
            "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}],
        })
        desk = Desk(config, run_timers=False)
        await desk.start()  # runs the migrations
        bare = bare_engine(bare_path)
        async with bare.begin() as conn:
            await conn.run_sync(SQLModel.metadata.create_all)
        app = create_app(desk, manage_desk=False)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test")

        print(f"Handoff Desk lifecycle benchmark ({'quick' if quick else 'full'})")
        print(
            f"Python {platform.python_version()} | SQLite {sqlite3.sqlite_version} | SQLAlchemy {sqlalchemy.__version__}"
            f" | {os.cpu_count()} CPUs | {platform.platform()}"
        )
        print(f"databases in {tmp} (file, WAL, synchronous=NORMAL)\n", flush=True)

        started = time.perf_counter()
        rows: list[Row] = []
        try:
            direct, over_http = await bench_request(desk, client, n_request)
            bare_request = await bench_bare_request(bare, n_request)
            direct.ratio = direct.p50_ms / bare_request.p50_ms  # type: ignore[operator]
            over_http.ratio = over_http.p50_ms / bare_request.p50_ms  # type: ignore[operator]
            rows += [direct, over_http, bare_request]
            rows += await bench_relay(desk, relay_convs, relay_messages)
            scale_rows, memory = await bench_scale(desk, bare, sessions, n_relay)
            rows += scale_rows
        finally:
            await client.aclose()
            await desk.stop()
            await bare.dispose()

        print_table(rows)
        print("\nratio = p50 ours / p50 bare; rate/s = n / wall time of the whole loop. Calls are sequential")
        print("except the 'convs' relay rows: one task per conversation, all at once, p50/p99 per call.")
        print(f"\nprocess RSS (MiB), {sessions:,} active sessions loaded in between:")
        for label, value in memory.items():
            print(f"  {label:<24}{value:8.1f}")
        print(f"  {'delta from loading':<24}{memory['after load'] - memory['before load']:8.1f}")
        size = sum(p.stat().st_size for p in Path(tmp).glob("bench.db*"))
        print(f"\ndatabase files: {size / 2**20:.1f} MiB; total run time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts (10k sessions) for a fast check")
    asyncio.run(main(parser.parse_args().quick))

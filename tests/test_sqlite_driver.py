"""The inline SQLite driver: statements run on the loop's thread, and a write lock held by
another connection is waited for with async sleeps while the loop keeps running."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from bot.store.db import Database
from bot.store.sqlite_driver import InlineConnection, create_inline_engine, is_busy


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    inline = create_inline_engine(f"sqlite+aiosqlite:///{tmp_path / 'inline.db'}", busy_budget=0.3, checkpoint_every=3)
    async with inline.engine.begin() as conn:
        await conn.execute(text("PRAGMA journal_mode=WAL"))
    async with inline.engine.begin() as conn:
        await conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))
    yield inline.engine
    await inline.dispose()


def other_writer(engine: AsyncEngine) -> sqlite3.Connection:
    """A second, plain connection to the same file holding the write lock, as another
    process (a `handoff` command) would."""
    holder = sqlite3.connect(str(engine.url.database), isolation_level=None, timeout=0)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("INSERT INTO notes (body) VALUES ('from the other writer')")
    return holder


async def test_statements_run_and_report_rows(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        await conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), [{"body": "one"}, {"body": "two"}])
        changed = await conn.execute(text("UPDATE notes SET body = 'uno' WHERE body = 'one'"))
        assert changed.rowcount == 1
    async with engine.connect() as conn:
        assert (await conn.execute(text("SELECT body FROM notes ORDER BY id"))).scalars().all() == ["uno", "two"]
        streamed = await conn.stream(text("SELECT body FROM notes ORDER BY id"))
        assert [row.body async for row in streamed] == ["uno", "two"]


async def test_a_failed_transaction_rolls_back(engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError, match="changed my mind"):
        async with engine.begin() as conn:
            await conn.execute(text("INSERT INTO notes (body) VALUES ('draft')"))
            raise RuntimeError("changed my mind")
    async with engine.connect() as conn:
        assert await conn.scalar(text("SELECT count(*) FROM notes")) == 0


async def test_begin_immediate_waits_for_another_writer_without_blocking_the_loop(engine: AsyncEngine) -> None:
    holder = other_writer(engine)

    async def write() -> None:
        async with engine.connect() as conn:
            await conn.exec_driver_sql("BEGIN IMMEDIATE")
            await conn.execute(text("INSERT INTO notes (body) VALUES ('ours')"))
            await conn.commit()

    writer = asyncio.create_task(write())
    ticks = 0
    while ticks < 200:  # the loop keeps turning while the writer waits for the lock
        await asyncio.sleep(0)
        ticks += 1
    assert not writer.done()
    holder.commit()
    holder.close()
    async with asyncio.timeout(5):
        await writer
    async with engine.connect() as conn:
        bodies = (await conn.execute(text("SELECT body FROM notes ORDER BY id"))).scalars().all()
    assert bodies == ["from the other writer", "ours"]


async def test_a_writer_gives_up_after_the_busy_budget_with_sqlites_error(engine: AsyncEngine) -> None:
    holder = other_writer(engine)
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        with pytest.raises(OperationalError, match="database is locked"):
            async with engine.begin() as conn:
                await conn.exec_driver_sql("BEGIN IMMEDIATE")
    finally:
        ticker.cancel()
        holder.rollback()
        holder.close()
    assert loop.time() - started >= 0.3
    assert ticks > 10


async def test_the_desks_sqlite_connections_never_wait_inside_sqlite(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    await db.upgrade()
    try:
        async with db.read() as session:
            assert await session.scalar(text("PRAGMA busy_timeout")) == 0
            assert await session.scalar(text("PRAGMA journal_mode")) == "wal"
            assert await session.scalar(text("PRAGMA foreign_keys")) == 1
            raw = await (await session.connection()).get_raw_connection()
            assert isinstance(raw.driver_connection, InlineConnection)
            assert raw.driver_connection.isolation_level is None  # the desk emits BEGIN itself
    finally:
        await db.dispose()


async def test_the_wal_is_checkpointed_in_the_background_not_by_a_commit(tmp_path: Path) -> None:
    inline = create_inline_engine(f"sqlite+aiosqlite:///{tmp_path / 'inline.db'}", checkpoint_every=3)
    assert inline.checkpointer is not None
    try:
        async with inline.engine.begin() as conn:
            await conn.execute(text("PRAGMA journal_mode=WAL"))
            assert await conn.scalar(text("PRAGMA wal_autocheckpoint")) == 0
            await conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))
        for body in ("one", "two"):
            async with inline.engine.begin() as conn:
                await conn.execute(text("INSERT INTO notes (body) VALUES (:body)"), {"body": body})
        await inline.checkpointer.wait()
        assert inline.checkpointer.checkpoints == 1  # after the third commit
        reader = sqlite3.connect(tmp_path / "inline.db")
        busy, wal_frames, checkpointed = reader.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        reader.close()
        assert (busy, checkpointed) == (0, wal_frames)
    finally:
        await inline.dispose()


def test_a_stale_snapshot_is_not_worth_retrying() -> None:
    def error(code: int) -> sqlite3.OperationalError:
        raised = sqlite3.OperationalError("database is locked")
        raised.sqlite_errorcode = code
        return raised

    assert is_busy(error(sqlite3.SQLITE_BUSY))
    assert is_busy(error(sqlite3.SQLITE_BUSY_RECOVERY))
    assert not is_busy(error(sqlite3.SQLITE_BUSY_SNAPSHOT))
    assert not is_busy(error(sqlite3.SQLITE_LOCKED))

"""The database layer: one open handoff per conversation is the database's rule, and
readers never wait behind a writer."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.domain import conversations
from bot.store.db import Database, execute_dml
from bot.store.models import Conversation, HandoffSession


async def test_the_database_allows_one_open_handoff_per_conversation(database_url: str) -> None:
    db = Database(database_url)
    await db.upgrade()
    now = datetime.now(UTC)

    def session_row(sid: str, cid: str, state: str) -> HandoffSession:
        return HandoffSession(id=sid, conversation_id=cid, channel_id=1, channel_kind="owner_inbox", channel_label="x",
                              state=state, urgency="normal", summary="s" * 20, expected_action="a" * 10, created_at=now)
    try:
        async with db.transaction() as session:
            cid = (await conversations.create(session, now=now)).id
            session.add(session_row("hs_1", cid, "active"))
            session.add(session_row("hs_2", cid, "released"))  # closed ones do not count
        with pytest.raises(IntegrityError):
            async with db.transaction() as session:
                session.add(session_row("hs_3", cid, "dispatching"))
    finally:
        await db.dispose()


async def test_sqlite_readers_do_not_wait_for_a_writer(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    await db.upgrade()
    writing, done = asyncio.Event(), asyncio.Event()

    async def writer() -> None:
        async with db.transaction() as session:
            await session.execute(text("UPDATE alembic_version SET version_num = version_num"))
            writing.set()
            await done.wait()  # hold the write lock

    task = asyncio.create_task(writer())
    await writing.wait()
    try:
        async with asyncio.timeout(5), db.read() as session:
            assert await session.scalar(text("SELECT count(*) FROM conversations")) == 0
    finally:
        done.set()
        await task
        await db.dispose()


async def test_execute_dml_reports_how_many_rows_a_guarded_update_changed(sqlite_url: str) -> None:
    db = Database(sqlite_url)
    await db.upgrade()
    now = datetime.now(UTC)
    try:
        async with db.transaction() as session:
            first = (await conversations.create(session, now=now)).id
            await conversations.create(session, now=now)
        async with db.transaction() as session:
            everyone = await execute_dml(session, update(Conversation).values(subscriber_name="Ana"))
            assert everyone.rowcount == 2
            guarded = update(Conversation).where(col(Conversation.id) == first, col(Conversation.subscriber_name) == "Bo")
            missed = await execute_dml(session, guarded.values(subscriber_name="Cy"))
            assert missed.rowcount == 0
    finally:
        await db.dispose()


async def test_sqlite_held_connections_read_every_commit_and_forget_rolled_back_work(sqlite_url: str) -> None:
    """The database keeps its SQLite connections between transactions: each read still starts
    from the last commit, a failed write leaves nothing behind for the next one, and two
    reads at once get a connection each."""
    db = Database(sqlite_url)
    await db.upgrade()
    now = datetime.now(UTC)
    count = text("SELECT count(*) FROM conversations")
    try:
        async with db.read() as session:
            assert await session.scalar(count) == 0
        async with db.transaction() as session:
            await conversations.create(session, now=now)
        with pytest.raises(RuntimeError, match="rolled back"):
            async with db.transaction() as session:
                await conversations.create(session, now=now)
                await session.flush()
                raise RuntimeError("rolled back")
        async with db.transaction() as session:
            await conversations.create(session, now=now)
        async with db.read() as first, db.read() as second:
            assert await first.scalar(count) == await second.scalar(count) == 2
            assert (await first.connection()).sync_connection is not (await second.connection()).sync_connection
        async with db.read() as session:
            assert await session.scalar(count) == 2
    finally:
        await db.dispose()


@pytest.mark.postgres
async def test_postgres_replaces_an_idle_connection_the_server_dropped_before_using_it(database_url: str) -> None:
    if not database_url.startswith("postgres"):
        pytest.skip("PostgreSQL's pooled connections")
    db = Database(database_url, ping_after_idle=0.0)  # every checkout counts as after an idle spell
    await db.upgrade()
    try:
        async with db.transaction() as session:
            before = await session.scalar(text("SELECT pg_backend_pid()"))
        import asyncpg

        admin = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://"))
        try:  # the server drops the pooled connection while it sits idle
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", before)
        finally:
            await admin.close()
        async with db.transaction() as session:
            after = await session.scalar(text("SELECT pg_backend_pid()"))
        assert after != before
    finally:
        await db.dispose()


async def test_a_single_prepared_read_on_its_own_sees_the_last_commit(database_url: str) -> None:
    from sqlalchemy import bindparam, select

    from bot.store.prepared import Prepared

    db = Database(database_url)
    await db.upgrade()
    name = Prepared(select(Conversation.subscriber_name).where(col(Conversation.id) == bindparam("cid")))
    now = datetime.now(UTC)
    try:
        async with db.transaction() as session:
            cid = (await conversations.create(session, now=now, name="Ana")).id
        assert await db.fetch_one(name, {"cid": cid}) == ("Ana",)
        async with db.transaction() as session:
            await session.execute(update(Conversation).values(subscriber_name="Bo"))
        assert await db.fetch_all(name, {"cid": cid}) == [("Bo",)]
        assert await db.fetch_one(name, {"cid": "c_none"}) is None
    finally:
        await db.dispose()

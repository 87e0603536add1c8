"""The database: one async engine, short transactions, and schema upgrades through alembic.

SQLite is the default and PostgreSQL the multi-instance option; the same code runs on both.
On SQLite the engine's connections run each call inline on the event loop's thread
(`bot/store/sqlite_driver.py`: no thread hop per call, and a busy database is waited for
with async sleeps, never inside SQLite). A writing transaction starts with BEGIN IMMEDIATE:
a deferred transaction that reads and then writes can fail with "database is locked" at its
first write, while an immediate one takes the write lock first or waits for it. Within one
process, writers also queue on an asyncio lock first, in arrival order, so they never poll
against each other. Read-only work uses `read()`, a plain deferred BEGIN that WAL lets run
beside the writer.

Transactions are kept short and never span a network call: the pool can not deadlock when
a request waits on a provider while holding a connection.
"""
from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, cast

from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import event, text
from sqlalchemy.engine import Connection, CursorResult
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import Session
from sqlalchemy.sql.dml import UpdateBase

from bot.runtime import effects
from bot.runtime.paths import MIGRATIONS_DIR
from bot.runtime.signals import Signals, take
from bot.store import prepared
from bot.store.prepared import Prepared, Row
from bot.store.sqlalchemy_internals import await_in_sync, run_sync
from bot.store.sqlite_driver import InlineConnection, create_inline_engine

_READ_ONLY = "handoff_desk_read_only"
# PostgreSQL connections an instance keeps open, and how many more it may open in a burst.
# Measured under bench/roundtrip.py: with 5 kept, 10 clients per instance made the pool open
# and close a connection at almost every transaction (a new PostgreSQL backend each time),
# which cost more CPU on both sides than the round trips themselves, and 15 kept still
# churned at 20 clients on two instances. 25 + 15 keeps two instances within PostgreSQL's
# default of 100 connections (the README says so to whoever runs more).
POOL_SIZE = 25
POOL_OVERFLOW = 15
# A pooled PostgreSQL connection idle this long is pinged before it is used again (see
# `_ping_after_idle`): longer than the gaps of a busy server, shorter than a restart.
PING_AFTER_IDLE_SECONDS = 10.0
MESSAGE_HOOKS = "handoff_desk_message_hooks"
# Any constant works; it only has to be the same for every instance sharing a database.
_MIGRATION_LOCK_ID = 0x48414E44  # "HAND"


def async_url(url: str) -> str:
    """Map the URLs owners write to the async drivers we ship."""
    if url.startswith("sqlite:"):
        return "sqlite+aiosqlite:" + url[len("sqlite:"):]
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix):]
    return url


def _configure_sqlite(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we emit BEGIN ourselves, below
        # No busy timeout: the connection runs inline, so it must never wait inside SQLite.
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=0", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        readonly = connection.get_execution_options().get(_READ_ONLY, False)
        # Straight to the driver: through `exec_driver_sql` the BEGIN cost a whole statement's
        # execution machinery (~0.1 ms of CPU), once per transaction.
        driver = connection.connection.driver_connection
        if isinstance(driver, InlineConnection):
            await_in_sync(driver.run_retrying_busy(driver.sqlite.execute, "BEGIN" if readonly else "BEGIN IMMEDIATE"))
        else:
            connection.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def _ping_after_idle(engine: AsyncEngine, seconds: float) -> None:
    """Check a pooled server connection before use only when it sat idle for `seconds`: one
    that was in use a moment ago is alive, and `pool_pre_ping` (a round trip at every
    checkout) cost ~0.5 ms of CPU and a server round trip per transaction. A connection that
    fails its ping is replaced before anyone uses it (SQLAlchemy's pessimistic disconnect
    handling). The price: a connection the server dropped less than `seconds` after its last
    use (a database restart) fails the one transaction that takes it next, and SQLAlchemy
    then replaces the rest of the pool."""

    @event.listens_for(engine.sync_engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < seconds:
            return
        try:
            dbapi_connection.ping()
        except Exception as error:  # whatever the driver raises for a dead connection
            raise DisconnectionError(f"the pooled connection failed its ping: {error}") from error


async def execute_dml(session: AsyncSession, statement: UpdateBase) -> CursorResult[Any]:
    """Run an UPDATE, DELETE or INSERT and keep its `rowcount`, the compare-and-set answer the
    state machines rely on ("did my guarded update win?"). SQLAlchemy returns a CursorResult
    for these statements, but `AsyncSession.execute` is typed as the generic `Result`."""
    return cast(CursorResult[Any], await session.execute(statement))


def alembic_config(url: str | None = None) -> AlembicConfig:
    cfg = AlembicConfig()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url:
        cfg.set_main_option("sqlalchemy.url", async_url(url).replace("%", "%%"))
    return cfg


class Database:
    def __init__(self, url: str, *, pool_size: int = POOL_SIZE, signals: Signals | None = None,
                 ping_after_idle: float = PING_AFTER_IDLE_SECONDS) -> None:
        self.url = async_url(url)
        self.is_sqlite = self.url.startswith("sqlite")
        # Every session ends its own transaction (commit, or rollback on error or cancel), so on
        # SQLite the pool's extra rollback at check-in is only another call per transaction.
        options: dict[str, Any] = {"pool_reset_on_return": None} if self.is_sqlite else {}
        if not self.is_sqlite:
            options.update(pool_size=pool_size, max_overflow=POOL_OVERFLOW)
        self._inline = create_inline_engine(self.url, **options) if self.is_sqlite else None
        self.engine = self._inline.engine if self._inline is not None else create_async_engine(self.url, **options)
        if self.is_sqlite:
            _configure_sqlite(self.engine)
        else:
            _ping_after_idle(self.engine, ping_after_idle)
        self._read_engine = self.engine.execution_options(**{_READ_ONLY: True})
        self._read_sessions = async_sessionmaker(self._read_engine, expire_on_commit=False)
        self._write_lock = asyncio.Lock() if self.is_sqlite else None
        file_backed = self._inline is not None and not self._inline.in_memory
        self._connections = _HeldConnections(self.engine) if file_backed else None
        # Called with (session, message, extras) for every conversation message stored, in the
        # storing transaction (bot.domain.conversations.add_message): how messages reach a
        # subscriber's chat on a front without every writer knowing about fronts.
        self.message_hooks: list[Any] = []
        # Hears what each committed transaction recorded (bot.runtime.signals); without it
        # (a bare database in a test or a migration) recorded signals are dropped.
        self.signals = signals

    @asynccontextmanager
    async def transaction(self, *, effect: bool = False) -> AsyncIterator[AsyncSession]:
        """A session inside one writing transaction: committed on success, rolled back on
        error. Never open one inside another in the same task (on SQLite they queue). The
        signals it recorded are published after the commit (see `bot/runtime/signals.py`).

        `effect`: this transaction makes the change a caller's request or event asked for,
        so it also carries the caller's mark, if one is pending (`bot/runtime/effects.py`)."""
        carried = effects.take_pending() if effect else None
        try:
            if self._write_lock is None:
                async with self._pooled_transaction(carried) as session:
                    yield session
            else:
                async with self._write_lock:
                    if self._connections is None:  # an in-memory SQLite database: the pool's one connection
                        async with self._pooled_transaction(carried) as session:
                            yield session
                    else:
                        connection = await self._connections.writer()
                        async with self._connections.session(connection) as session:
                            session.info[MESSAGE_HOOKS] = self.message_hooks
                            yield session
                            if carried is not None:
                                await carried.mark(session)
                        self._publish(session)
        except BaseException:
            if carried is not None:
                effects.settle(carried, committed=False)
            raise
        if carried is not None:
            effects.settle(carried, committed=True)

    @asynccontextmanager
    async def _pooled_transaction(self, carried: effects.Effect | None) -> AsyncIterator[AsyncSession]:
        """A transaction on a connection of the pool: PostgreSQL's, or an in-memory SQLite
        database's one connection."""
        async with _one_transaction(self.engine, shield_end=True) as session:
            session.info[MESSAGE_HOOKS] = self.message_hooks
            yield session
            if carried is not None:
                await carried.mark(session)
        self._publish(session)

    def _publish(self, session: AsyncSession) -> None:
        """Only reached once the transaction has committed: an error or a cancel inside it
        rolls back and propagates past this, taking the recorded signals with it."""
        signals = take(session.info)
        if self.signals is not None and signals:
            self.signals.publish(signals)

    @asynccontextmanager
    async def read(self, *, snapshot: bool = False) -> AsyncIterator[AsyncSession]:
        """A session for reading only: it does not wait for (or hold up) writers. `snapshot`:
        every statement in it sees the same committed state, for readers whose statements
        build on each other (a report's counts, then the ranks they locate). A SQLite read
        transaction always does; on PostgreSQL it is REPEATABLE READ instead of each
        statement seeing what committed before it."""
        if self._connections is None and snapshot and not self.is_sqlite:
            async with self._read_sessions() as session, session.begin():
                await session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
                yield session
            return
        if self._connections is None:  # PostgreSQL, or an in-memory SQLite database
            async with _one_transaction(self._read_engine, shield_end=True) as session:
                yield session
            return
        connection = await self._connections.reader()
        try:
            async with self._connections.session(connection) as session:
                yield session
        finally:
            await self._connections.give_back(connection)

    async def fetch_all(self, statement: Prepared, params: Mapping[str, Any] | None = None) -> list[Row]:
        """One prepared SELECT, read on its own. A single statement is its own snapshot, so it
        runs with no BEGIN or COMMIT around it (a read transaction's fixed cost is several
        times a short SELECT's): on a SQLite file on an idle reader connection, on PostgreSQL
        on a pooled connection, straight on asyncpg. An in-memory SQLite database runs it in
        `read()`."""
        if self._connections is not None:
            connection = await self._connections.reader()
            try:
                assert connection.sync_connection is not None
                inline = prepared.raw_of(connection.sync_connection, in_transaction=False)
                assert inline is not None, "held connections are inline ones (bot/store/sqlite_driver.py)"
                return await prepared.fetch_all_raw(inline, statement, params)
            finally:
                await self._connections.give_back(connection)
        if self.is_sqlite:
            async with self.read() as session:
                return await prepared.fetch_all(session, statement, params)
        async with self.engine.connect() as connection:  # checked out as any transaction's: pinged after idle
            assert connection.sync_connection is not None
            direct = prepared.raw_of(connection.sync_connection, in_transaction=False)
            assert direct is not None, "PostgreSQL runs on asyncpg (async_url)"
            return await prepared.fetch_all_raw(direct, statement, params)

    async def fetch_one(self, statement: Prepared, params: Mapping[str, Any] | None = None) -> Row | None:
        """The first row of `fetch_all`, or None."""
        rows = await self.fetch_all(statement, params)
        return rows[0] if rows else None

    async def upgrade(self) -> None:
        """Bring the schema to the newest migration. Safe with several instances starting at
        once: on PostgreSQL they queue on an advisory lock."""
        async with self.engine.begin() as conn:
            if not self.is_sqlite:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
            await conn.run_sync(_upgrade_on)

    async def dispose(self) -> None:
        if self._connections is not None:
            await self._connections.close()
        if self._inline is not None:
            await self._inline.dispose()
        else:
            await self.engine.dispose()


class _HeldConnections:
    """SQLite's connections, held open by the database instead of checked out of the pool
    per transaction: one for writing (writers queue on the write lock, so one is all they
    can use) and as many for reading as there are reads at once. Checking a connection out
    of the pool and back, and opening and closing an async session the shielded way, cost
    more CPU than a short transaction's statements; a held connection and a session closed
    in place cost neither, and SQLite connections need no liveness checks."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._read_engine = engine.execution_options(**{_READ_ONLY: True})
        self._writer: AsyncConnection | None = None
        self._idle_readers: list[AsyncConnection] = []
        self._closed = False

    async def writer(self) -> AsyncConnection:
        if self._writer is not None and not _reusable(self._writer):
            await self._writer.close()
            self._writer = None
        if self._writer is None:
            self._writer = await self._engine.connect()
        return self._writer

    async def reader(self) -> AsyncConnection:
        if self._idle_readers:
            return self._idle_readers.pop()
        return await self._read_engine.connect()

    async def give_back(self, connection: AsyncConnection) -> None:
        # Not after the database was disposed of while this read was under way, nor when the
        # read's end failed: a transaction left open would be joined by the next session,
        # which would then read an old snapshot.
        if self._closed or not _reusable(connection):
            await connection.close()
        else:
            self._idle_readers.append(connection)

    def session(self, connection: AsyncConnection) -> AbstractAsyncContextManager[AsyncSession]:
        """A session in a transaction on `connection` (see `_one_transaction`); inline, begin and
        end await nothing but the driver, so no cancellation can land between commit and close."""
        return _one_transaction(connection, shield_end=False)

    async def close(self) -> None:
        self._closed = True
        held = [*self._idle_readers, *([self._writer] if self._writer is not None else [])]
        self._writer, self._idle_readers = None, []
        for connection in held:
            await connection.close()


@asynccontextmanager
async def _one_transaction(bind: AsyncConnection | AsyncEngine, *, shield_end: bool) -> AsyncIterator[AsyncSession]:
    """A session in a transaction on `bind` (a connection, or one the engine's pool lends),
    begun at once (so prepared statements find it under way), committed on success, rolled
    back on error, and closed in place. Begin-and-connect and end-and-close are one trip into
    SQLAlchemy's sync core each (`async with session.begin()`, its first statement and
    `await session.close()` take five, and a task for the close). `shield_end`: a cancel that
    lands at the end can not keep the connection from the pool (`AsyncSession` shields its
    close the same way), for a connection that awaits the network at its commit."""
    session = AsyncSession(bind=bind, expire_on_commit=False)
    try:
        await run_sync(_begin, session.sync_session)  # a failed checkout or BEGIN is rolled back and closed too
        yield session
    except BaseException:
        await _finish(session, False, shield_end)
        raise
    await _finish(session, True, shield_end)


async def _finish(session: AsyncSession, commit: bool, shield: bool) -> None:
    try:
        await run_sync(_end, session.sync_session, commit)
    except asyncio.CancelledError:
        # A cancel at the commit still runs the close (`_end`'s finally) in the same trip, unless
        # a second cancel lands there: then close again, shielded (closing twice is harmless).
        if shield:
            await asyncio.shield(run_sync(session.sync_session.close))
        raise


def _reusable(connection: AsyncConnection) -> bool:
    return not connection.invalidated and not connection.in_transaction()


def _begin(session: Session) -> None:
    session.begin()
    prepared.attach(session, session.connection())


def _end(session: Session, commit: bool) -> None:
    try:
        if commit:
            session.commit()
        else:
            session.rollback()
    finally:
        session.close()


def _upgrade_on(connection: Connection) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, "head")

"""SQLite for SQLAlchemy's `sqlite+aiosqlite` dialect without a thread: each call runs inline.

aiosqlite hands every call (cursor, execute, fetch, close, commit) to a thread of its own and
wakes the event loop when it is done. A statement on a local file takes microseconds; the
hand-off and the wake-up cost ten times that. `InlineConnection` offers the awaitables the
dialect's adapter expects of an aiosqlite connection and runs the sqlite3 call directly on
the loop's thread, so a statement costs what it costs through sync SQLite.

Inline, the loop must never wait inside SQLite: a busy timeout would freeze the whole server
while another process (a `handoff` command, a second server) holds the write lock, and
within one process it could never end, since the holder needs the loop to finish. So the
connection opens with a busy timeout of 0, and when a call meets SQLITE_BUSY (at BEGIN
IMMEDIATE, at COMMIT, a read during recovery) it is retried after a short, growing
`asyncio.sleep` until `BUSY_BUDGET_SECONDS` are spent, and then the last "database is locked"
error is raised, the one a busy timeout of the same length would have raised.

A commit that pushes the WAL past SQLite's auto-checkpoint size would also copy it into the
database file and fsync both, inline: measured under bench/roundtrip.py that made the worst
commits take tens to hundreds of milliseconds, the whole loop with them. So auto-checkpoints
are off on these connections and `BackgroundCheckpointer` runs a PASSIVE checkpoint (it never
blocks a writer or a reader) in a worker thread every `CHECKPOINT_EVERY_COMMITS` commits.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, NamedTuple, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# As long as the busy timeout the desk used to give SQLite: how long a writer waits for
# another process's transaction before it gives up.
BUSY_BUDGET_SECONDS = 30.0
# The first retry comes quickly (most write locks are held for well under a millisecond),
# later ones back off so a long holder does not cost a wake-up per millisecond.
_FIRST_DELAY = 0.0005
_MAX_DELAY = 0.02

# Frequent enough to keep the WAL to a few hundred pages under load, rare enough that the
# thread hop is nothing next to the commits between two checkpoints.
CHECKPOINT_EVERY_COMMITS = 200

_T = TypeVar("_T")


def is_busy(error: sqlite3.Error) -> bool:
    """SQLITE_BUSY in any of its extended forms but one: BUSY_SNAPSHOT means a read
    transaction's snapshot is stale, which no retry of the same statement can fix."""
    code = getattr(error, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY and code != sqlite3.SQLITE_BUSY_SNAPSHOT


class InlineCursor:
    """An aiosqlite-shaped cursor over a sqlite3 cursor: the awaitables complete at once."""

    __slots__ = ("_connection", "_cursor")

    def __init__(self, connection: InlineConnection, cursor: sqlite3.Cursor) -> None:
        self._connection = connection
        self._cursor = cursor

    async def __aenter__(self) -> InlineCursor:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self._cursor.close()

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    @property
    def lastrowid(self) -> int | None:
        return self._cursor.lastrowid

    @property
    def arraysize(self) -> int:
        return self._cursor.arraysize

    @arraysize.setter
    def arraysize(self, value: int) -> None:
        self._cursor.arraysize = value

    async def execute(self, sql: str, parameters: Any = ()) -> InlineCursor:
        # One statement is atomic: when it fails busy it did nothing, so running it again is safe.
        await self._connection.run_retrying_busy(self._cursor.execute, sql, parameters)
        return self

    async def executemany(self, sql: str, parameters: Iterable[Any]) -> InlineCursor:
        if self._connection.in_transaction:
            # Inside a transaction the batch is all or nothing; outside one, each row commits on
            # its own, and a retry after a busy row would repeat the rows already stored.
            await self._connection.run_retrying_busy(self._cursor.executemany, sql, list(parameters))
        else:
            self._cursor.executemany(sql, parameters)
        return self

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchmany(self, size: int | None = None) -> list[Any]:
        return self._cursor.fetchmany(self._cursor.arraysize if size is None else size)

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def close(self) -> None:
        self._cursor.close()

    async def __aiter__(self) -> AsyncIterator[Any]:
        for row in self._cursor:
            yield row


class _InlineCallQueue:
    """Stands in for aiosqlite's queue of calls to its thread, which SQLAlchemy's adapter uses
    directly to set `isolation_level`: the call runs at once and settles its future."""

    __slots__ = ()

    def put_nowait(self, item: tuple[asyncio.Future[Any], Callable[[], Any]]) -> None:
        future, function = item
        try:
            future.set_result(function())
        except Exception as error:  # handed to whoever awaits the future, as aiosqlite does
            future.set_exception(error)


class InlineConnection:
    """The aiosqlite connection interface SQLAlchemy's `sqlite+aiosqlite` adapter uses, over a
    sqlite3 connection used on the event loop's thread. `_conn`, `_connection` and `_tx` are
    the attribute names the adapter reads on an aiosqlite connection
    (`AIOSQLITE_CONNECTION_ATTRIBUTES` in bot/store/sqlalchemy_internals.py)."""

    def __init__(self, connection: sqlite3.Connection, *, busy_budget: float = BUSY_BUDGET_SECONDS,
                 checkpointer: BackgroundCheckpointer | None = None) -> None:
        self._conn = connection
        # The same connection under the project's own name (`_conn` is the adapter's): an
        # attribute, not a property, since every prepared statement and BEGIN reads it.
        self.sqlite = connection
        self._connection: sqlite3.Connection | None = connection  # None once closed
        self._tx = _InlineCallQueue()
        self.busy_budget = busy_budget
        self._checkpointer = checkpointer
        if checkpointer is not None:
            connection.execute("PRAGMA wal_autocheckpoint=0")

    @property
    def isolation_level(self) -> str | None:
        return self._conn.isolation_level

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def cursor(self) -> InlineCursor:
        return InlineCursor(self, self._conn.cursor())

    async def commit(self) -> None:
        # A COMMIT that fails busy leaves the transaction open, ready to be committed again.
        await self.run_retrying_busy(self._conn.commit)
        if self._checkpointer is not None:
            self._checkpointer.after_commit()

    async def rollback(self) -> None:
        self._conn.rollback()

    async def create_function(self, *args: Any, **kwargs: Any) -> None:
        self._conn.create_function(*args, **kwargs)

    async def close(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Close at once; the adapter's `terminate` calls it outside the event loop too."""
        if self._connection is not None:
            self._connection = None
            self._conn.close()

    async def run_retrying_busy(self, call: Callable[..., _T], *args: Any) -> _T:
        """Run `call` now; while SQLite answers busy, sleep a little longer each time and try
        again, for up to `busy_budget` seconds, then raise SQLite's last error."""
        try:
            return call(*args)
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_budget
        delay = _FIRST_DELAY
        while True:
            await asyncio.sleep(min(delay, max(deadline - loop.time(), 0.0)))
            try:
                return call(*args)
            except sqlite3.OperationalError as error:
                if not is_busy(error) or loop.time() >= deadline:
                    raise
            delay = min(delay * 2, _MAX_DELAY)


class BackgroundCheckpointer:
    """Checkpoints the WAL in a worker thread, one checkpoint at a time, on its own connection,
    so the fsyncs of a checkpoint never run on the event loop."""

    def __init__(self, database: str, *, every: int = CHECKPOINT_EVERY_COMMITS, **options: Any) -> None:
        self._database, self._options, self._every = database, options, every
        self._commits = 0
        self._running: asyncio.Task[None] | None = None
        self._connection: sqlite3.Connection | None = None
        self.checkpoints = 0

    def after_commit(self) -> None:
        self._commits += 1
        if self._commits >= self._every and self._running is None:
            self._commits = 0
            self._running = asyncio.get_running_loop().create_task(self._checkpoint())

    async def _checkpoint(self) -> None:
        try:
            await asyncio.to_thread(self._checkpoint_now)
        finally:
            self._running = None

    def _checkpoint_now(self) -> None:
        if self._connection is None:
            self._connection = sqlite3.connect(self._database, **self._options)
        # PASSIVE copies what no reader still needs and returns; the next one takes the rest,
        # as it does when another connection holds a lock the checkpoint needs right now.
        try:
            self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            return
        self.checkpoints += 1

    async def wait(self) -> None:
        """Until the checkpoint under way (if any) is done."""
        if self._running is not None:
            await asyncio.shield(self._running)

    async def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # a failed checkpoint was reported by its task
            await self.wait()
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class InlineEngine(NamedTuple):
    engine: AsyncEngine
    checkpointer: BackgroundCheckpointer | None  # None for an in-memory database
    in_memory: bool

    async def dispose(self) -> None:
        await self.engine.dispose()
        if self.checkpointer is not None:
            await self.checkpointer.close()


def create_inline_engine(url: str, *, busy_budget: float = BUSY_BUDGET_SECONDS,
                         checkpoint_every: int = CHECKPOINT_EVERY_COMMITS, **options: Any) -> InlineEngine:
    """An async engine for a `sqlite+aiosqlite` URL whose connections are `InlineConnection`s,
    opened with the arguments the dialect derives from the URL (path, `uri=true`, ...): no busy
    timeout (see the module docstring), usable from whichever thread closes them."""
    engine = create_async_engine(url, async_creator=lambda: connect(), **options)
    args, kwargs = engine.dialect.create_connect_args(engine.url)
    kwargs.update(timeout=0, check_same_thread=False)
    database: str = args[0] if args else ""
    in_memory = database in ("", ":memory:") or "mode=memory" in database
    checkpointer = None if in_memory else BackgroundCheckpointer(database, every=checkpoint_every, **kwargs)

    async def connect() -> InlineConnection:
        connection = sqlite3.connect(database, **kwargs)
        return InlineConnection(connection, busy_budget=busy_budget, checkpointer=checkpointer)

    return InlineEngine(engine, checkpointer, in_memory)


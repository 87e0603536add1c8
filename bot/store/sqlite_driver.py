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
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# As long as the busy timeout the desk used to give SQLite: how long a writer waits for
# another process's transaction before it gives up.
BUSY_BUDGET_SECONDS = 30.0
# The first retry comes quickly (most write locks are held for well under a millisecond),
# later ones back off so a long holder does not cost a wake-up per millisecond.
_FIRST_DELAY = 0.0005
_MAX_DELAY = 0.02

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
    the attribute names the adapter reads on an aiosqlite connection."""

    def __init__(self, connection: sqlite3.Connection, *, busy_budget: float = BUSY_BUDGET_SECONDS) -> None:
        self._conn = connection
        self._connection: sqlite3.Connection | None = connection  # None once closed
        self._tx = _InlineCallQueue()
        self.busy_budget = busy_budget

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


def connect_inline(database: str, *, busy_budget: float = BUSY_BUDGET_SECONDS, **options: Any) -> InlineConnection:
    """Open `database` for inline use: no busy timeout (see the module docstring), and usable
    from whichever thread closes it."""
    options.update(timeout=0, check_same_thread=False)
    return InlineConnection(sqlite3.connect(database, **options), busy_budget=busy_budget)


def create_inline_engine(url: str, *, busy_budget: float = BUSY_BUDGET_SECONDS, **options: Any) -> AsyncEngine:
    """An async engine for a `sqlite+aiosqlite` URL whose connections are `InlineConnection`s,
    opened with the arguments the dialect derives from the URL (path, `uri=true`, ...)."""
    engine: AsyncEngine

    async def connect() -> InlineConnection:
        args, kwargs = engine.dialect.create_connect_args(engine.url)
        return connect_inline(*args, busy_budget=busy_budget, **kwargs)

    engine = create_async_engine(url, async_creator=connect, **options)
    return engine


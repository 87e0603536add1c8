"""Prepared statements: the hot paths' SQL, compiled once, run on the transaction's own connection.

Through an async session every statement pays SQLAlchemy's execution machinery: a greenlet
switch, a cache key, an execution context, a result object, and for ORM work an identity map
and a unit of work. Measured on a SQLite file, an INSERT costs ~130 µs of CPU that way and
~10 µs as the sqlite3 call it ends in. A `Prepared` statement is a Core construct (so the
tables stay defined once, in `bot/store/models.py`) that is compiled once per dialect and set
of parameter names into SQL text, the order of its parameters and the type processors
SQLAlchemy itself would apply to each parameter and each result column. It then runs as one
driver call on the session's own connection, inside the session's transaction: on SQLite one
sqlite3 call, on PostgreSQL one asyncpg call (asyncpg's own prepared statements, cached per
connection, and the type codecs SQLAlchemy installed on it), ~15 µs of CPU where
`session.execute` cost ~100-300 µs.

On PostgreSQL SQLAlchemy's asyncpg adapter sends BEGIN with the first statement it runs in a
transaction, not when the session's transaction begins. So a prepared statement that finds
the asyncpg connection outside a transaction (asyncpg's public `is_in_transaction()`) is the
transaction's first: it goes through the adapter's DB-API cursor (PEP 249, run in
SQLAlchemy's sync layer as `AsyncConnection.run_sync` runs code; the adapter begins, then runs
it), and every later one runs on asyncpg directly. Commit, rollback, the pool and its ping
stay SQLAlchemy's; a statement that finds its connection closed invalidates it, as
SQLAlchemy does for a statement of its own.

Rules a caller keeps:
- Parameters are given by name. A column an INSERT or UPDATE leaves out is treated as
  SQLAlchemy treats it: its Python-side default (or `onupdate`) is filled in, else the
  database's own default applies. A `bindparam` the statement names and the caller does not
  give is an error naming it.
- Results are plain tuples in the statement's column order, already converted to Python
  values (datetimes, JSON) exactly as SQLAlchemy returns them.
- A session is one transaction on one connection (`bot/store/db.py` opens one per
  transaction): the connection is looked up once per session.
- ORM objects the session holds do not see these statements: the session's pending
  changes are flushed before one runs, but an object loaded earlier in the same
  transaction is not refreshed by a prepared UPDATE of its row. Use prepared statements for
  whole steps, not interleaved with ORM edits of the same rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import asyncpg
from sqlalchemy.engine import Connection, CursorResult, Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter, ClauseElement
from sqlalchemy.sql.type_api import TypeEngine
from sqlalchemy.sql.visitors import iterate

from bot.store import sqlalchemy_internals as internals
from bot.store.sqlite_driver import InlineConnection

_RAW_CONNECTION = "handoff_desk_raw_connection"

Processor = internals.Processor
Row = tuple[Any, ...]
_T = TypeVar("_T")


@dataclass(slots=True)
class _Compiled:
    sql: str
    # For each positional parameter: its name, the value bound into the statement itself
    # (used when the caller passes none), and the bind processor of its type.
    names: tuple[str, ...]
    bound: tuple[Any, ...]
    has_bound: tuple[bool, ...]
    # The column's Python-side default (or `onupdate`) where the caller gave no value.
    defaults: tuple[Callable[[], Any] | None, ...]
    binds: tuple[Processor, ...]
    # The type of each result column, and the result processor of each once the driver has
    # said what the database returns (`_learn_results`): a type's processor may depend on it
    # (asyncpg's Numeric and Float convert only what PostgreSQL returns as the other kind).
    result_types: tuple[TypeEngine[Any], ...]
    results: tuple[Processor, ...] | None = None
    converts_results: bool = False

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, bound, has_bound, default, process in zip(self.names, self.bound, self.has_bound, self.defaults,
                                                            self.binds, strict=True):
            if name in params:
                value = params[name]
            elif default is not None:
                value = default()
            elif has_bound:
                value = bound
            else:
                raise KeyError(f"prepared statement parameter {name!r} was not given")
            values.append(value if process is None or value is None else process(value))
        return values

    def rows(self, raw: Sequence[Row]) -> list[Row]:
        if not self.converts_results:
            return list(raw)
        results = self.results
        assert results is not None, "a statement's results are learnt before its first run"
        return [tuple(v if p is None or v is None else p(v) for v, p in zip(row, results, strict=True)) for row in raw]


class Prepared:
    """One Core statement, compiled lazily per dialect and per set of parameter names."""

    __slots__ = ("statement", "_compiled", "_required", "_known")

    def __init__(self, statement: Executable) -> None:
        self.statement = statement
        self._compiled: dict[tuple[str, frozenset[str]], _Compiled] = {}
        # The `bindparam`s without a value: checked on every database, so a missing one is
        # the same KeyError on PostgreSQL as on SQLite.
        named = frozenset(element.key for element in iterate(cast(ClauseElement, statement)) if isinstance(element, BindParameter))
        self._required = frozenset(
            element.key for element in iterate(cast(ClauseElement, statement)) if isinstance(element, BindParameter) and element.required)
        # An INSERT or UPDATE takes its table's columns and its own parameters, nothing else:
        # a misspelt column would otherwise be left out of the statement without a word.
        table = getattr(statement, "table", None) if isinstance(statement, UpdateBase) else None
        self._known = None if table is None else named | frozenset(column.key for column in table.columns)

    def check(self, params: Mapping[str, Any]) -> None:
        missing = self._required.difference(params)
        if missing:
            raise KeyError(f"prepared statement parameter {sorted(missing)[0]!r} was not given")
        if self._known is not None and not self._known.issuperset(params):
            raise ValueError(f"prepared statement: unconsumed column names {sorted(set(params) - self._known)}")

    def compiled(self, dialect: Dialect, names: frozenset[str]) -> _Compiled:
        key = (dialect.name, names)
        found = self._compiled.get(key)
        if found is None:
            found = self._compiled[key] = _compile(self.statement, dialect, names)
        return found


def _compile(statement: Executable, dialect: Dialect, names: frozenset[str]) -> _Compiled:
    # What SQLAlchemy keeps of a compiled statement, read through bot/store/sqlalchemy_internals.py
    compiled = internals.compile_positional(cast(ClauseElement, statement), dialect, sorted(names))
    defaults = internals.prefetched_defaults(compiled)
    order = internals.parameter_order(compiled)
    processors = internals.bind_processors(compiled)
    binds = {name: internals.bind_parameters(compiled)[name] for name in order}
    computed = [name for name in order if binds[name].callable is not None]
    if computed:
        raise ValueError(f"prepared statement: give {computed[0]!r} a value (a bindparam computed at execution is not run)")
    if internals.expands_in_lists(compiled):
        raise ValueError("prepared statements can not expand IN lists; give each value its own parameter")
    return _Compiled(
        sql=compiled.string,
        names=order,
        bound=tuple(binds[n].value for n in order),
        has_bound=tuple(not binds[n].required for n in order),  # a literal None is bound too
        defaults=tuple(defaults.get(n) for n in order),
        binds=tuple(processors.get(n) for n in order),  # a sequence only for tuple types, unused here
        result_types=internals.result_types(compiled),
    )


async def _learn_results(raw: Raw, compiled: _Compiled) -> None:
    """Find each result column's processor the first time `compiled` runs on a database, as
    SQLAlchemy does from a cursor's description: with the type code the driver reports."""
    if compiled.results is None:
        types = compiled.result_types
        codes = await raw.column_type_codes(compiled.sql, len(types)) if types else ()
        results = tuple(internals.result_processor(t, raw.dialect, code) for t, code in zip(types, codes, strict=True))
        compiled.results, compiled.converts_results = results, any(p is not None for p in results)


@dataclass(frozen=True, slots=True)
class Inline:
    """Where a session's prepared statements run on SQLite: its connection and dialect."""

    connection: InlineConnection
    dialect: Dialect

    async def column_type_codes(self, _sql: str, count: int) -> tuple[Any, ...]:
        """sqlite3 reports no column types (its cursor's description has None for each)."""
        return (None,) * count

    async def fetch(self, sql: str, values: list[Any]) -> Sequence[Row]:
        return (await self._run(self.connection.sqlite.execute, sql, values)).fetchall()

    async def execute(self, sql: str, values: list[Any]) -> int:
        return (await self._run(self.connection.sqlite.execute, sql, values)).rowcount

    async def execute_many(self, sql: str, values: list[list[Any]]) -> None:
        await self._run(self.connection.sqlite.executemany, sql, values)

    async def _run(self, call: Callable[[str, Any], sqlite3.Cursor], sql: str, values: Any) -> sqlite3.Cursor:
        """One sqlite3 call; its errors are raised as the SQLAlchemy exceptions a session would
        raise (`IntegrityError` for a unique index, `OperationalError`, ...), so callers catch
        the same thing on every database and never name the driver."""
        try:
            return await self.connection.run_retrying_busy(call, sql, values)
        except sqlite3.Error as error:
            raise internals.driver_error(sql, values, error, sqlite3.Error, self.dialect) from error


@dataclass(frozen=True, slots=True)
class Direct:
    """Where prepared statements run on PostgreSQL: the asyncpg connection under a SQLAlchemy
    connection (`driver_connection`, public), and whether they belong to that connection's
    transaction (a session's) or are each their own (`Database.fetch_all`)."""

    sqlalchemy: Connection
    connection: asyncpg.Connection
    dialect: Dialect
    in_transaction: bool

    async def column_type_codes(self, sql: str, _count: int) -> tuple[Any, ...]:
        """The type OID of each result column, as the adapter's cursor description reports them
        (one round trip, once per statement and process)."""
        statement = await self._run(sql, (), self.connection.prepare, sql)
        return tuple(attribute.type.oid for attribute in statement.get_attributes())

    async def fetch(self, sql: str, values: list[Any]) -> Sequence[Row]:
        if self._begins():
            return (await self._through_the_adapter(sql, values, many=False))[0]
        return [tuple(record) for record in await self._run(sql, values, self.connection.fetch, sql, *values)]

    async def execute(self, sql: str, values: list[Any]) -> int:
        if self._begins():
            return (await self._through_the_adapter(sql, values, many=False))[1]
        status = await self._run(sql, values, self.connection.execute, sql, *values)
        # The command tag's last word is the rows the command matched ("UPDATE 2", "INSERT 0 1").
        return int(status.rpartition(" ")[2])

    async def execute_many(self, sql: str, values: list[list[Any]]) -> None:
        if self._begins():
            await self._through_the_adapter(sql, values, many=True)
        else:
            await self._run(sql, values, self.connection.executemany, sql, values)

    def _begins(self) -> bool:
        """Whether this statement is its transaction's first, which SQLAlchemy's asyncpg adapter
        must run: it sends BEGIN with the first statement it runs, not when the session's
        transaction begins."""
        return self.in_transaction and not self.connection.is_in_transaction()

    async def _run(self, sql: str, values: Any, call: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """One asyncpg call. Its errors are raised as the SQLAlchemy exceptions a session would
        raise, and a connection it found closed is invalidated, as SQLAlchemy invalidates one
        a statement of its own found closed (the pool then replaces it)."""
        try:
            return await call(*args)
        except _ASYNCPG_ERRORS as error:
            await self._invalidate_if_closed()
            raise internals.asyncpg_error(sql, values, error, self.dialect) from error

    async def _through_the_adapter(self, sql: str, values: Any, *, many: bool) -> tuple[list[Row], int]:
        """The statement through the adapter's DB-API cursor (PEP 249, in SQLAlchemy's sync
        layer, as `AsyncConnection.run_sync` runs it): the adapter begins, then runs it."""
        dbapi_error: type[Exception] = self.dialect.loaded_dbapi.Error
        try:
            return await internals.run_sync(_on_the_cursor, self.sqlalchemy, sql, values, many)
        except dbapi_error as error:
            await self._invalidate_if_closed()
            raise internals.driver_error(sql, values, error, dbapi_error, self.dialect) from error

    async def _invalidate_if_closed(self) -> None:
        if self.connection.is_closed():  # what SQLAlchemy's asyncpg dialect takes for a disconnect
            await internals.run_sync(self.sqlalchemy.invalidate)


def _on_the_cursor(connection: Connection, sql: str, values: Any, many: bool) -> tuple[list[Row], int]:
    cursor = connection.connection.cursor()
    try:
        if many:
            cursor.executemany(sql, values)
        else:
            cursor.execute(sql, values)
        return ([tuple(row) for row in cursor.fetchall()] if cursor.description else []), cursor.rowcount
    finally:
        cursor.close()


# What asyncpg raises for a statement: the server's errors, and its own (a closed connection,
# a value its codec refuses). Anything else (a cancel) passes through untouched.
_ASYNCPG_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError)

Raw = Inline | Direct


def attach(session: AsyncSession | Session, connection: Connection) -> None:
    """Tell the prepared statements which connection `session`'s transaction (already begun)
    runs on, so they need not ask the session for it: SQLAlchemy's sync `connection`, which
    code running in SQLAlchemy's sync layer (`bot/store/db.py`'s begin) holds already."""
    session.info[_RAW_CONNECTION] = raw_of(connection, in_transaction=True)


async def _raw_connection(session: AsyncSession) -> Raw | None:
    """The transaction's inline SQLite or asyncpg connection, or None on any other database.
    Taking the connection begins the session's transaction, as its first statement would."""
    info = session.info
    if _RAW_CONNECTION not in info:
        connection = (await session.connection()).sync_connection
        assert connection is not None, "a session's connection is connected"
        attach(session, connection)
    return cast(Raw | None, info[_RAW_CONNECTION])


async def _flush_pending(session: AsyncSession) -> None:
    if session.new or session.dirty or session.deleted:
        await session.flush()


async def fetch_all(session: AsyncSession, prepared: Prepared, params: Mapping[str, Any] | None = None) -> list[Row]:
    """The rows of a SELECT, or of a statement with RETURNING."""
    params = params or {}
    await _flush_pending(session)
    raw = await _raw_connection(session)
    if raw is None:
        prepared.check(params)
        return [tuple(row) for row in await session.execute(prepared.statement, dict(params))]
    return await fetch_all_raw(raw, prepared, params)  # checks the parameters itself


def raw_of(connection: Connection, *, in_transaction: bool) -> Raw | None:
    """Where prepared statements run on `connection`: an inline SQLite connection, or an
    asyncpg one, in its transaction or (`in_transaction` false: the connection must not be in
    one) each statement on its own; None for any other driver."""
    driver = connection.connection.driver_connection
    if isinstance(driver, InlineConnection):
        return Inline(driver, connection.dialect)
    if isinstance(driver, asyncpg.Connection):
        return Direct(connection, driver, connection.dialect, in_transaction)
    return None


async def fetch_all_raw(raw: Raw, prepared: Prepared, params: Mapping[str, Any] | None = None) -> list[Row]:
    """`fetch_all` straight on a driver's connection, in whatever transaction it is in (none:
    then the statement is its own)."""
    params = params or {}
    prepared.check(params)
    compiled = prepared.compiled(raw.dialect, frozenset(params))
    await _learn_results(raw, compiled)
    return compiled.rows(await raw.fetch(compiled.sql, compiled.values(params)))


async def fetch_one(session: AsyncSession, prepared: Prepared, params: Mapping[str, Any] | None = None) -> Row | None:
    """The first row, or None when there is none."""
    rows = await fetch_all(session, prepared, params)
    return rows[0] if rows else None


async def execute(session: AsyncSession, prepared: Prepared, params: Mapping[str, Any] | None = None) -> int:
    """Run an INSERT, UPDATE or DELETE without RETURNING; the rows it matched (the
    compare-and-set answer: did my guarded update win?)."""
    params = params or {}
    prepared.check(params)
    await _flush_pending(session)
    raw = await _raw_connection(session)
    if raw is None:
        result = cast(CursorResult[Any], await session.execute(prepared.statement, dict(params)))
        return result.rowcount
    compiled = prepared.compiled(raw.dialect, frozenset(params))
    return await raw.execute(compiled.sql, compiled.values(params))


async def execute_many(session: AsyncSession, prepared: Prepared, rows: Sequence[Mapping[str, Any]]) -> None:
    """Run one INSERT (or UPDATE) for each of `rows`, which all name the same parameters."""
    if not rows:
        return
    for row in rows:
        prepared.check(row)
    await _flush_pending(session)
    raw = await _raw_connection(session)
    if raw is None:
        await session.execute(prepared.statement, [dict(r) for r in rows])
        return
    compiled = prepared.compiled(raw.dialect, frozenset(rows[0]))
    values = [compiled.values(r) for r in rows]
    await raw.execute_many(compiled.sql, values)

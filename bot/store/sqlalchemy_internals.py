"""The one module that touches SQLAlchemy's internals; everything else asks it.

Prepared statements (bot/store/prepared.py) and the inline SQLite transactions
(bot/store/db.py) buy their speed by doing a part of SQLAlchemy's work themselves: they
compile a Core statement once and keep what SQLAlchemy would do per execution (the SQL text,
the order of the positional parameters, the type processors, the Python-side defaults), and
they begin and end transactions without a statement's execution machinery. Doing so reads
things SQLAlchemy does not promise to keep: private attributes of a compiled statement, the
way a column default wraps a callable, the greenlet bridge, the attribute names its aiosqlite
adapter reads on a connection. That is why pyproject.toml pins SQLAlchemy's minor series.

Each internal is read here and nowhere else, through a small typed function, and
tests/test_sqlalchemy_internals.py checks each one against the installed SQLAlchemy (and
that no other module of bot/ reaches for them). Lifting the pin is then: run that test, fix
what it names here; docs/architecture.md, "Lifting the SQLAlchemy pin".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, cast

from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.elements import BindParameter, ClauseElement
from sqlalchemy.sql.type_api import TypeEngine
from sqlalchemy.util import await_only, greenlet_spawn

Processor = Callable[[Any], Any] | None


# The attribute names SQLAlchemy's `sqlite+aiosqlite` adapter reads on the aiosqlite
# connection it wraps (`AsyncAdapt_aiosqlite_connection`: the sqlite3 connection, whether it
# is still open, the queue of calls to aiosqlite's thread). `InlineConnection`
# (bot/store/sqlite_driver.py) stands in for an aiosqlite connection, so it has exactly these.
AIOSQLITE_CONNECTION_ATTRIBUTES = ("_conn", "_connection", "_tx")

# The marker SQLAlchemy writes into compiled SQL where an expanding IN list is rendered at
# execution time ("post-compile" parameters).
_POSTCOMPILE = "POSTCOMPILE"


def compile_positional(statement: ClauseElement, dialect: Dialect, column_keys: list[str]) -> SQLCompiler:
    """`statement` compiled for `dialect`, an INSERT or UPDATE naming `column_keys`."""
    return cast(SQLCompiler, statement.compile(dialect=dialect, column_keys=column_keys))


def parameter_order(compiled: SQLCompiler) -> tuple[str, ...]:
    """The names of the positional parameters in the order the SQL text takes them
    (`SQLCompiler.positiontup`); a ValueError for a named paramstyle, which has no order."""
    if compiled.positiontup is None:
        raise ValueError(f"prepared statements need a positional paramstyle, not {compiled.dialect.paramstyle!r}")
    return tuple(compiled.positiontup)


def bind_parameters(compiled: SQLCompiler) -> Mapping[str, BindParameter[Any]]:
    """Each parameter's `BindParameter`, by name (`SQLCompiler.binds`)."""
    return compiled.binds


def bind_processors(compiled: SQLCompiler) -> Mapping[str, Processor]:
    """The type's bind processor of each parameter that has one, by name
    (`SQLCompiler._bind_processors`): what SQLAlchemy applies to a value before the driver."""
    return cast(Mapping[str, Processor], compiled._bind_processors)


def result_types(compiled: SQLCompiler) -> tuple[TypeEngine[Any], ...]:
    """The type of each result column, in column order (`SQLCompiler._result_columns`)."""
    return tuple(entry.type for entry in compiled._result_columns)


def result_processor(type_: TypeEngine[Any], dialect: Dialect, type_code: Any) -> Processor:
    """What SQLAlchemy applies to a value of a result column of `type_` that the driver reported
    as `type_code` (`TypeEngine._cached_result_processor`, as the cursor's description gives it)."""
    return cast(Processor, type_._cached_result_processor(dialect, type_code))


def prefetched_defaults(compiled: SQLCompiler) -> dict[str, Callable[[], Any]]:
    """The Python-side defaults SQLAlchemy fills in before an INSERT (`insert_prefetch`: each
    column's `default`) or an UPDATE (`update_prefetch`: its `onupdate`), by column key."""
    defaults: dict[str, Callable[[], Any]] = {}
    for column in compiled.insert_prefetch:
        defaults[column.key] = _default_of(column, column.default)
    for column in compiled.update_prefetch:
        defaults[column.key] = _default_of(column, column.onupdate)
    return defaults


def _default_of(column: Any, default: Any) -> Callable[[], Any]:
    """A producer of the value SQLAlchemy would fill in for `column` (scalar or callable
    defaults); SQL-expression defaults are refused, since only the database can run them."""
    if default is not None and default.is_scalar:
        value = default.arg
        return lambda: value
    if default is not None and default.is_callable:
        # SQLAlchemy wraps a column default's callable to take an execution context; ours need none
        produce = default.arg
        return lambda: produce(None)
    raise ValueError(f"prepared statement: give {column.key!r} a value (its default is a SQL expression)")


def expands_in_lists(compiled: SQLCompiler) -> bool:
    """Whether the SQL renders an expanding IN list at execution (a post-compile parameter)."""
    return _POSTCOMPILE in compiled.string


def asyncpg_error(sql: str, values: Any, error: Exception, dialect: Dialect) -> Exception:
    """The SQLAlchemy exception a session would raise for an error asyncpg raised (a unique
    index: `IntegrityError`; ...): asyncpg's exception is first given the DB-API class SQLAlchemy's
    asyncpg adapter gives it (its `_asyncpg_error_translate`, read through the dialect's DB-API
    module), then wrapped as `driver_error` wraps any driver's. An error the adapter does not
    translate is returned as it is, as the adapter raises it."""
    dbapi = cast(Any, dialect.loaded_dbapi)
    for kind in type(error).__mro__:
        translated = dbapi._asyncpg_error_translate.get(kind)
        if translated is not None:
            return driver_error(sql, values, translated(error.args[0] if error.args else str(error), error), dbapi.Error, dialect)
    return error


def driver_error(sql: str, values: Any, error: Exception, driver_error_class: type[Exception], dialect: Dialect) -> DBAPIError:
    """The SQLAlchemy exception a session would raise for the driver's `error`
    (`DBAPIError.instance`: `IntegrityError` for a unique index, `OperationalError`, ...)."""
    return cast(DBAPIError, DBAPIError.instance(sql, values, error, driver_error_class, dialect=dialect))


# SQLAlchemy's greenlet bridge, named for what the store does with it: `await_in_sync` awaits
# from SQLAlchemy's sync code (an event handler), `run_sync` runs sync SQLAlchemy code (a
# `Session`'s begin, commit, close) in one trip through the bridge, as `AsyncSession` does per
# call. The functions themselves, not wrappers: they sit on every transaction's path.
await_in_sync = await_only
run_sync = greenlet_spawn

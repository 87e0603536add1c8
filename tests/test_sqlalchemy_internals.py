"""Each SQLAlchemy internal bot/store/sqlalchemy_internals.py relies on still exists and behaves
as assumed, and no other module of bot/ reaches for SQLAlchemy's internals.

A failure names the internal that changed and what to do: see docs/architecture.md,
"Lifting the SQLAlchemy pin".
"""

from __future__ import annotations

import ast
import inspect
import os
import re
from collections.abc import AsyncIterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import Column, DateTime, Float, Integer, MetaData, String, Table, bindparam, insert, select, text, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import aiosqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, create_async_engine

from bot.store import prepared
from bot.store import sqlalchemy_internals as internals

POSTGRES_URL = os.environ.get("HANDOFF_TEST_POSTGRES_URL")

ROOT = Path(__file__).resolve().parent.parent
HOW = "see docs/architecture.md, 'Lifting the SQLAlchemy pin'"

metadata = MetaData()
things = Table(
    "things", metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String, default="unnamed"),
    Column("seen", DateTime, onupdate=lambda: datetime(2026, 1, 2)),
    Column("made", DateTime, default=datetime.now),
)


def changed(internal: str, what: str) -> str:
    return f"SQLAlchemy {sqlalchemy.__version__} changed {internal}: {what}; {HOW}"


def test_positional_parameter_order() -> None:
    compiled = internals.compile_positional(
        select(things.c.id).where(things.c.name == bindparam("n"), things.c.id > bindparam("i")), sqlite.dialect(), [])
    assert hasattr(compiled, "positiontup"), changed("`SQLCompiler.positiontup`", "it is gone")
    assert internals.parameter_order(compiled) == ("n", "i"), changed(
        "`SQLCompiler.positiontup`", "it no longer lists the parameters in the SQL's order")


def test_binds_and_bind_processors() -> None:
    compiled = internals.compile_positional(select(things.c.id).where(things.c.seen == bindparam("s")), sqlite.dialect(), [])
    assert isinstance(internals.bind_parameters(compiled)["s"], sqlalchemy.sql.elements.BindParameter), changed(
        "`SQLCompiler.binds`", "it no longer maps names to BindParameter")
    assert hasattr(compiled, "_bind_processors"), changed("`SQLCompiler._bind_processors`", "it is gone")
    process = internals.bind_processors(compiled).get("s")
    assert process is not None and process(datetime(2026, 1, 2)) == "2026-01-02 00:00:00.000000", changed(
        "`SQLCompiler._bind_processors`", "SQLite's DateTime is no longer stored as SQLAlchemy's text")


def test_result_processors() -> None:
    compiled = internals.compile_positional(select(things.c.id, things.c.seen), sqlite.dialect(), [])
    assert hasattr(compiled, "_result_columns"), changed("`SQLCompiler._result_columns`", "it is gone")
    assert hasattr(things.c.seen.type, "_cached_result_processor"), changed("`TypeEngine._cached_result_processor`", "it is gone")
    ident, seen = (internals.result_processor(t, sqlite.dialect(), None) for t in internals.result_types(compiled))
    assert ident is None and seen is not None and seen("2026-01-02 00:00:00.000000") == datetime(2026, 1, 2), changed(
        "`SQLCompiler._result_columns` / `TypeEngine._cached_result_processor`", "the result processors differ")


def test_prefetched_defaults() -> None:
    made = internals.compile_positional(insert(things), sqlite.dialect(), ["id"])
    assert {"insert_prefetch", "update_prefetch"} <= set(dir(made)), changed(
        "`SQLCompiler.insert_prefetch` / `update_prefetch`", "they are gone")
    defaults = internals.prefetched_defaults(made)
    assert defaults["name"]() == "unnamed" and isinstance(defaults["made"](), datetime), changed(
        "`SQLCompiler.insert_prefetch` or a column default's wrapped callable (`ColumnDefault.arg`)",
        "the Python-side defaults of an INSERT are not found or not callable with one argument")
    touched = internals.compile_positional(update(things).where(things.c.id == bindparam("i")), sqlite.dialect(), ["name"])
    assert internals.prefetched_defaults(touched)["seen"]() == datetime(2026, 1, 2), changed(
        "`SQLCompiler.update_prefetch`", "an UPDATE's `onupdate` is not found")


def test_expanding_in_lists_are_seen() -> None:
    compiled = internals.compile_positional(
        select(things.c.id).where(things.c.id.in_(bindparam("ids", expanding=True))), sqlite.dialect(), [])
    assert internals.expands_in_lists(compiled), changed("the POSTCOMPILE marker of expanding IN lists", "it is not in the SQL")


def test_driver_error() -> None:
    import sqlite3

    error = internals.driver_error("INSERT", (), sqlite3.IntegrityError("UNIQUE constraint failed"), sqlite3.Error, sqlite.dialect())
    assert isinstance(error, IntegrityError), changed("`DBAPIError.instance`", "a driver's IntegrityError is not wrapped as one")


async def test_the_greenlet_bridge() -> None:
    async def answer() -> int:
        return 42

    assert await internals.run_sync(lambda: internals.await_in_sync(answer())) == 42, changed(
        "`sqlalchemy.util.greenlet_spawn` / `await_only`", "sync code can no longer await through them")


def test_the_aiosqlite_adapter_reads_the_attributes_inline_connections_have() -> None:
    # Both ways: a name the adapter no longer reads is kept for nothing, and a private name it
    # has started to read is one InlineConnection does not provide.
    read = set(re.findall(r"_connection\.(_\w+)", inspect.getsource(aiosqlite)))
    for name in internals.AIOSQLITE_CONNECTION_ATTRIBUTES:
        assert name in read, changed(
            f"the aiosqlite adapter's use of `{name}`", "InlineConnection (bot/store/sqlite_driver.py) provides it for nothing")
    assert read <= set(internals.AIOSQLITE_CONNECTION_ATTRIBUTES), changed(
        f"the aiosqlite adapter now reads {sorted(read - set(internals.AIOSQLITE_CONNECTION_ATTRIBUTES))} on its connection",
        "InlineConnection (bot/store/sqlite_driver.py) must provide them")
    import sqlite3

    from bot.store.sqlite_driver import InlineConnection

    inline = InlineConnection(sqlite3.connect(":memory:"))
    assert all(hasattr(inline, name) for name in internals.AIOSQLITE_CONNECTION_ATTRIBUTES)
    inline.stop()


# --------------------------------------------------------------------------- PostgreSQL: prepared statements on asyncpg


def asyncpg_dialect() -> Dialect:
    return create_async_engine("postgresql+asyncpg://nobody@127.0.0.1:1/none").dialect  # never connects


def test_asyncpg_errors_become_the_exceptions_a_session_raises() -> None:
    import asyncpg

    assert hasattr(asyncpg_dialect().loaded_dbapi, "_asyncpg_error_translate"), changed(
        "the asyncpg adapter's `_asyncpg_error_translate`", "it is gone")
    unique = internals.asyncpg_error("INSERT", (), asyncpg.exceptions.UniqueViolationError("duplicate key"), asyncpg_dialect())
    assert isinstance(unique, IntegrityError), changed(
        "the asyncpg adapter's `_asyncpg_error_translate`", "asyncpg's UniqueViolationError is no longer an IntegrityError")
    not_translated = ValueError("not asyncpg's")
    assert internals.asyncpg_error("SELECT", (), not_translated, asyncpg_dialect()) is not_translated


def test_asyncpg_result_processors_depend_on_the_reported_type() -> None:
    # Why prepared statements learn each column's type OID before converting (bot/store/prepared.py)
    dialect = asyncpg_dialect()
    float8, numeric = 701, 1700
    assert internals.result_processor(Float(), dialect, float8) is None, changed(
        "`TypeEngine._cached_result_processor` on asyncpg", "a float column's floats are converted")
    process = internals.result_processor(Float(), dialect, numeric)
    assert process is not None and process(Decimal("1.5")) == 1.5, changed(
        "`TypeEngine._cached_result_processor` on asyncpg", "the reported type code no longer chooses the processor")


@pytest.fixture
async def pg_engine() -> AsyncIterator[AsyncEngine]:
    if not POSTGRES_URL:
        pytest.skip("HANDOFF_TEST_POSTGRES_URL is not set (.ci/run starts a PostgreSQL cluster)")
    engine = create_async_engine(POSTGRES_URL)
    try:
        yield engine
    finally:
        await engine.dispose()


@pytest.mark.postgres
async def test_the_asyncpg_adapter_begins_at_the_first_statement_on_its_connection(pg_engine: AsyncEngine) -> None:
    async with AsyncSession(pg_engine) as session, session.begin():
        direct = prepared.raw_of((await session.connection()).sync_connection, in_transaction=True)  # type: ignore[arg-type]  # connected
        assert isinstance(direct, prepared.Direct), changed("`driver_connection` of a pooled asyncpg connection", "it is not asyncpg's")
        assert not direct.connection.is_in_transaction(), changed(
            "the asyncpg adapter's lazy BEGIN", "it begins before the first statement; prepared statements need not "
            "send their first through its cursor (bot/store/prepared.py, `Direct._begins`)")
        ((ours,),) = await direct.fetch("SELECT txid_current()", [])  # the first: through the adapter's cursor
        assert direct.connection.is_in_transaction(), changed(
            "the asyncpg adapter's lazy BEGIN", "a statement run on its DB-API cursor did not begin the transaction")
        ((again,),) = await direct.fetch("SELECT txid_current()", [])  # on asyncpg itself
        assert again == ours, changed("the asyncpg adapter's transaction", "statements on its asyncpg connection run outside it")
        await direct.execute("SELECT set_config('handoff.probe', 'set', true)", [])  # undone with the transaction
        await session.rollback()
    async with AsyncSession(pg_engine) as session:
        (probe,) = (await session.execute(text("SELECT current_setting('handoff.probe', true)"))).one()
    assert probe in (None, ""), changed("the asyncpg adapter's rollback", "it did not roll back what ran on its connection")


@pytest.mark.postgres
async def test_asyncpg_connections_decode_json_as_sqlalchemy_does(pg_engine: AsyncEngine) -> None:
    # The JSON codecs SQLAlchemy's asyncpg dialect installs on every connection (`on_connect`):
    # prepared statements read JSON on asyncpg directly and apply no processor of their own.
    async with pg_engine.connect() as connection:
        direct = prepared.raw_of(connection.sync_connection, in_transaction=False)  # type: ignore[arg-type]  # connected
        assert isinstance(direct, prepared.Direct)
        for kind in ("json", "jsonb"):
            value = await direct.connection.fetchval(f"SELECT $1::{kind}", '{"a": [1, "é"]}')
            assert value == {"a": [1, "é"]}, changed(
                f"the {kind} codec SQLAlchemy's asyncpg dialect installs", "asyncpg no longer decodes it to Python values")


# --------------------------------------------------------------------------- nobody else

INTERNAL_ATTRIBUTES = {"positiontup", "insert_prefetch", "update_prefetch", "_bind_processors", "_result_columns",
                       "_cached_result_processor", "_asyncpg_error_translate"}
ALLOWED = {"bot/store/sqlalchemy_internals.py"}


def offences(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [f"{path}:{node.lineno} imports {a.name}" for a in node.names
                      if a.name == "sqlalchemy.util" or (a.name.startswith("sqlalchemy.") and "._" in a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sqlalchemy"):
            # (sqlalchemy.sql.compiler's `SQLCompiler` is the documented type of an `@compiles` hook's compiler)
            if node.module == "sqlalchemy.util" or any(p.startswith("_") for p in node.module.split(".")):
                found.append(f"{path}:{node.lineno} imports {node.module}")
            found += [f"{path}:{node.lineno} imports {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Attribute) and node.attr in INTERNAL_ATTRIBUTES:
            found.append(f"{path}:{node.lineno} reads .{node.attr}")
        elif isinstance(node, ast.Attribute) and node.attr == "_conn" and not (
                isinstance(node.value, ast.Name) and node.value.id == "self"):
            found.append(f"{path}:{node.lineno} reads another object's ._conn (use InlineConnection.sqlite)")
    return found


def test_only_one_module_touches_sqlalchemy_internals() -> None:
    found = [o for path in sorted((ROOT / "bot").rglob("*.py")) if str(path.relative_to(ROOT)) not in ALLOWED
             for o in offences(path)]
    assert not found, "SQLAlchemy internals outside bot/store/sqlalchemy_internals.py:\n" + "\n".join(found)


@pytest.mark.parametrize("attribute", sorted(INTERNAL_ATTRIBUTES))
def test_the_scan_catches(attribute: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(f"def f(c):\n    return c.{attribute}\n")
    assert offences(module)


@pytest.mark.parametrize("source", [
    "from sqlalchemy.util import greenlet_spawn\n",
    "import sqlalchemy.util\n",
    "from sqlalchemy.engine import _private\n",
    "def f(driver):\n    return driver._conn\n",
])
def test_the_scan_catches_imports_and_the_drivers_connection(source: str, tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(source)
    assert offences(module)

"""Each SQLAlchemy internal bot/store/sqlalchemy_internals.py relies on still exists and behaves
as assumed, and no other module of bot/ reaches for SQLAlchemy's internals.

A failure names the internal that changed and what to do: see docs/architecture.md,
"Lifting the SQLAlchemy pin".
"""

from __future__ import annotations

import ast
import inspect
import re
from datetime import datetime
from pathlib import Path

import pytest
import sqlalchemy
from sqlalchemy import Column, DateTime, Integer, MetaData, String, Table, bindparam, insert, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite import aiosqlite
from sqlalchemy.exc import IntegrityError

from bot.store import sqlalchemy_internals as internals

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
    ident, seen = internals.result_processors(compiled, sqlite.dialect())
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


# --------------------------------------------------------------------------- nobody else

INTERNAL_ATTRIBUTES = {"positiontup", "insert_prefetch", "update_prefetch", "_bind_processors", "_result_columns",
                       "_cached_result_processor"}
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

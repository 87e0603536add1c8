"""SQL that SQLite and PostgreSQL spell each their own way, as constructs that compile to each.

`seconds_between`: SQLite stores timestamps as text and has no interval type, so it is the
`julianday` of each, the difference in days times 86400, rounded to the millisecond (a
double's julian day carries about 40 µs; rounding keeps a whole minute a whole minute).
PostgreSQL subtracts the timestamps into an interval and takes its seconds exactly.

`unindexed`: a term SQLite's planner must not choose an index for. Without statistics it
takes an equality on an index's first column for a handful of rows, so `channel_id = 2`
sends a report's range through the thread index (a row read per handoff of the channel)
instead of the report's covering index. SQLite's documented way to disqualify a term is
the no-op unary `+`; PostgreSQL plans from statistics and gets the column as it is.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Float
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


class seconds_between(FunctionElement[float]):  # noqa: N801 - reads as the SQL function it stands for
    """`seconds_between(a, b)`: b − a in seconds (NULL when either is NULL)."""

    type = Float()
    inherit_cache = True


@compiles(seconds_between, "sqlite")
def _sqlite_seconds(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    a, b = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"round((julianday({b}) - julianday({a})) * 86400.0, 3)"


@compiles(seconds_between, "postgresql")
def _postgres_seconds(element: seconds_between, compiler: SQLCompiler, **kw: Any) -> str:
    a, b = (compiler.process(clause, **kw) for clause in element.clauses)
    return f"CAST(extract(epoch from ({b}) - ({a})) AS double precision)"


class unindexed(FunctionElement[Any]):  # noqa: N801 - reads as the SQL it stands for
    """`unindexed(column)`: the column's value, in a term no SQLite index is chosen for."""

    inherit_cache = True

    def __init__(self, column: ColumnElement[Any]) -> None:
        super().__init__(column)
        self.type = column.type  # so a comparison binds its value as it would to the column


@compiles(unindexed, "sqlite")
def _sqlite_unindexed(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return f"+{compiler.process(next(iter(element.clauses)), **kw)}"


@compiles(unindexed)
def _plain(element: unindexed, compiler: SQLCompiler, **kw: Any) -> str:
    return str(compiler.process(next(iter(element.clauses)), **kw))

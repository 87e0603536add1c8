"""Model objects from the rows of prepared statements (bot/store/prepared.py).

A prepared SELECT (or UPDATE … RETURNING) answers tuples. Where a caller wants the model,
`Rows(Model)` names every column of its table, in order, for the statement to return, and
builds from such a tuple the object the ORM's loader would build: the values put in place
without validation (they come from the database, already converted), then detached, as an
object read in a session that has since closed. Building one costs a few microseconds,
against ~55 µs for a validated construction and more for the ORM's loading; a session it is
added to later updates its row, as it would one loaded there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import Column
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import configure_mappers
from sqlmodel import SQLModel

M = TypeVar("M", bound=SQLModel)


class Rows(Generic[M]):
    """Every column of `model`'s table, and the detached model built from a row of them."""

    __slots__ = ("model", "table", "columns", "_keys", "_mapper", "_primary_key")

    def __init__(self, model: type[M]) -> None:
        self.model = model
        self.table: Any = model.__table__  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models; SQLModel does not declare it
        self.columns: tuple[Column[Any], ...] = tuple(self.table.c)
        self._keys = tuple(column.key for column in self.columns)
        self._mapper: Any = None  # configured on first use: mappers are configured once every model is imported
        self._primary_key = 0

    def one(self, row: Sequence[Any]) -> M:
        if len(row) != len(self._keys):
            raise ValueError(f"a row of {self.model.__name__} has {len(self._keys)} columns, not {len(row)}")
        mapper = self._mapper or self._configure()
        instance: M = mapper.class_manager.new_instance()
        instance.__dict__.update(zip(self._keys, row, strict=True))
        sa_inspect(instance).key = mapper.identity_key_from_primary_key((row[self._primary_key],))
        return instance

    def of(self, values: Mapping[str, Any]) -> M:
        """The detached model of a row given as every column's value by name (a row just
        inserted), whatever order the mapping was built in."""
        return self.one(tuple(values[key] for key in self._keys))

    def all(self, rows: Sequence[Sequence[Any]]) -> list[M]:
        return [self.one(row) for row in rows]

    def _configure(self) -> Any:
        configure_mappers()
        self._mapper = sa_inspect(self.model)
        (key,) = self._mapper.primary_key
        self._primary_key = self._keys.index(key.key)
        return self._mapper

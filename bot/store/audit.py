"""The audit trail: every attempt, transition, relay, failure and no-op gets a row.

Events are written in the same transaction as the change they describe, so the trail can
never claim something happened that was rolled back (or miss something that happened).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, TypeVar

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.store import prepared
from bot.store.models import HandoffEvent
from bot.store.rows import Rows

P = ParamSpec("P")
R = TypeVar("R")
_WritesRow = Callable[[AsyncSession, dict[str, Any]], Awaitable[R]]

_EVENT_ROWS = Rows(HandoffEvent)
_EVENTS = _EVENT_ROWS.table

# Prepared once: an event is one sqlite3 INSERT on the transaction's connection, not an ORM
# flush (which cost several times the statement on the hot paths).
_INSERT_EVENT = prepared.Prepared(insert(_EVENTS))
_INSERT_EVENT_RETURNING_ID = prepared.Prepared(insert(_EVENTS).returning(_EVENTS.c.id))


def _event_row(
    kind: str,
    *,
    at: datetime,
    actor: str,
    person_id: str | None = None,
    handoff_session_id: str | None = None,
    conversation_id: str | None = None,
    **detail: Any,
) -> dict[str, Any]:
    """The row of one event (`detail` without its None values). Its parameters are those of
    `record` and `note` after the session: both are written with `_written_with`. `actor` is
    the text a reader sees ("Olga Petrova (slack)"); `person_id` the person behind it, when
    the directory knows them."""
    return {
        "handoff_session_id": handoff_session_id,
        "conversation_id": conversation_id,
        "kind": kind,
        "actor": actor,
        "person_id": person_id,
        "detail": {k: v for k, v in detail.items() if v is not None},
        "created_at": at,
    }


def _written_with(build: Callable[P, dict[str, Any]]) -> Callable[[_WritesRow[R]], Callable[Concatenate[AsyncSession, P], Awaitable[R]]]:
    """A decorator: a function that writes one row, made to take a session and the arguments
    of `build` (which makes the row) instead, so `record` and `note` share one signature."""

    def taking_arguments(write: _WritesRow[R]) -> Callable[Concatenate[AsyncSession, P], Awaitable[R]]:
        # A plain function handing back `write`'s own coroutine: no second coroutine per event.
        @functools.wraps(write)
        def writer(session: AsyncSession, /, *args: P.args, **kwargs: P.kwargs) -> Awaitable[R]:
            return write(session, build(*args, **kwargs))

        return writer

    return taking_arguments


@_written_with(_event_row)
async def record(session: AsyncSession, row: dict[str, Any]) -> HandoffEvent:
    """Write one event and return it with its id (callers hand it back as `handoff_event_id`).
    The event is not kept in the session: it is a record of what was written."""
    ((event_id,),) = await prepared.fetch_all(session, _INSERT_EVENT_RETURNING_ID, row)
    return _EVENT_ROWS.of({"id": event_id, **row})


@_written_with(_event_row)
async def note(session: AsyncSession, row: dict[str, Any]) -> None:
    """Like `record`, for hot paths that need no event id back."""
    await prepared.execute(session, _INSERT_EVENT, row)


def event_view(event: HandoffEvent) -> dict[str, Any]:
    return {
        "id": str(event.id),
        "kind": event.kind,
        "actor": event.actor,
        "handoff_session_id": event.handoff_session_id,
        "conversation_id": event.conversation_id,
        "detail": event.detail,
        "created_at": event.created_at.isoformat(),
    }

"""The audit trail: every attempt, transition, relay, failure and no-op gets a row.

Events are written in the same transaction as the change they describe, so the trail can
never claim something happened that was rolled back (or miss something that happened).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncSession

from bot.store import prepared
from bot.store.models import HandoffEvent
from bot.store.rows import Rows

_EVENT_ROWS = Rows(HandoffEvent)
_EVENTS = _EVENT_ROWS.table

# Prepared once: an event is one sqlite3 INSERT on the transaction's connection, not an ORM
# flush (which cost several times the statement on the hot paths).
_INSERT_EVENT = prepared.Prepared(insert(_EVENTS))
_INSERT_EVENT_RETURNING_ID = prepared.Prepared(insert(_EVENTS).returning(_EVENTS.c.id))


def _row(kind: str, at: datetime, actor: str, handoff_session_id: str | None, conversation_id: str | None,
         detail: dict[str, Any]) -> dict[str, Any]:
    return {
        "handoff_session_id": handoff_session_id,
        "conversation_id": conversation_id,
        "kind": kind,
        "actor": actor,
        "detail": {k: v for k, v in detail.items() if v is not None},
        "created_at": at,
    }


async def record(
    session: AsyncSession,
    kind: str,
    *,
    at: datetime,
    actor: str,
    handoff_session_id: str | None = None,
    conversation_id: str | None = None,
    **detail: Any,
) -> HandoffEvent:
    """Write one event and return it with its id (callers hand it back as `handoff_event_id`).
    The event is not kept in the session: it is a record of what was written."""
    row = _row(kind, at, actor, handoff_session_id, conversation_id, detail)
    ((event_id,),) = await prepared.fetch_all(session, _INSERT_EVENT_RETURNING_ID, row)
    return _EVENT_ROWS.of({"id": event_id, **row})


async def note(
    session: AsyncSession,
    kind: str,
    *,
    at: datetime,
    actor: str,
    handoff_session_id: str | None = None,
    conversation_id: str | None = None,
    **detail: Any,
) -> None:
    """Like `record`, for hot paths that need no event id back."""
    await prepared.execute(session, _INSERT_EVENT, _row(kind, at, actor, handoff_session_id, conversation_id, detail))


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

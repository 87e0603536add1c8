"""The handoff's rows as the round trip reads and writes them: prepared statements, and
the detached objects built from their tuples.

A handoff request, its activation, the return form and the release each touch the same few
rows (the handoff, its form link, its held messages). Through the ORM every such read builds
an object in an identity map and every write runs a unit of work, which on a SQLite file
costs several times the statement itself. Here each is a `Prepared` statement
(`bot/store/prepared.py`) and the callers get back what they got before, a `HandoffSession`
(or `FormLink`, `Conversation`, `Message`), built from the row's tuple by `Rows`
(`bot/store/rows.py`) the way the ORM's loader builds one and then detached, as an object
read in a session that has closed. The callers keep reading attributes, the pages and the
signals keep their types, and a caller that adds such an object to a session gets what it
would get from one loaded there.

Whole steps use these statements: the prepared UPDATEs return the changed row, so no ORM
object of the same row is ever held beside them (prepared statements do not refresh one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from functools import cache
from typing import Any, cast

from sqlalchemy import String, Table, bindparam, exists, func, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import SQLModel

from bot.store import prepared
from bot.store.models import Conversation, FormLink, HandoffSession, Message, OutboxItem
from bot.store.prepared import Prepared
from bot.store.rows import Rows
from bot.store.vocabulary import HandoffState, OutboxState, Role


def _table(model: type[SQLModel]) -> Table:
    table: Table = model.__table__  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models; SQLModel does not declare it
    return table


HANDOFFS, LINKS, MESSAGES, CONVERSATIONS, OUTBOX = (
    _table(m) for m in (HandoffSession, FormLink, Message, Conversation, OutboxItem)
)
# Built from every column of their table, in order (bot/store/rows.py).
_HANDOFF, _LINK, _MESSAGE, _CONVERSATION = Rows(HandoffSession), Rows(FormLink), Rows(Message), Rows(Conversation)


_REQUIRED = object()


@cache
def _defaults(model: type[SQLModel]) -> tuple[tuple[str, Any, Callable[[], Any] | None], ...]:
    """Per column: its default value, or the factory that makes a fresh one, or _REQUIRED.
    Read off the model once: pydantic's `get_default` costs tens of microseconds a field."""
    fields = model.model_fields
    return tuple(
        (key, _REQUIRED if fields[key].is_required() else fields[key].default,
         cast(Callable[[], Any] | None, fields[key].default_factory))
        for key in (column.key for column in _table(model).columns)
    )


def new_row(model: type[SQLModel], **values: Any) -> dict[str, Any]:
    """Every column of a new row of `model`: `values`, and the model's defaults for the rest
    (a fresh `{}` or `[]` each time), so the INSERT and the object built from it agree. A
    column without a default must be given (a KeyError names it)."""
    row = {}
    for key, default, factory in _defaults(model):
        if key in values:
            row[key] = values[key]
        elif factory is not None:
            row[key] = factory()
        elif default is _REQUIRED:
            raise KeyError(f"a new {model.__name__} needs {key!r}")
        else:
            row[key] = default
    return row


def _sent_dispatch() -> Any:
    return exists().where(
        OUTBOX.c.handoff_session_id == bindparam("sid"), OUTBOX.c.purpose == "dispatch", OUTBOX.c.state == OutboxState.SENT,
    )


def _compare_and_set(guard: Sequence[Any], columns: Sequence[str], **computed: Any) -> Prepared:
    """An UPDATE of `columns` (each its own parameter) and of the `computed` ones (SQL over
    the row as it is then) on one handoff (`sid`), only where `guard` holds, returning the
    changed row whole."""
    return Prepared(
        update(HANDOFFS).where(HANDOFFS.c.id == bindparam("sid"), *guard)
        .values(**{name: bindparam(name) for name in columns}, **computed)
        .returning(*HANDOFFS.columns)
    )


SELECT_HANDOFF = Prepared(select(*HANDOFFS.columns).where(HANDOFFS.c.id == bindparam("sid")))
# Two equalities rather than IN: prepared statements take no expanding lists.
SELECT_OPEN_HANDOFF = Prepared(
    select(*HANDOFFS.columns).where(
        HANDOFFS.c.conversation_id == bindparam("cid"),
        or_(HANDOFFS.c.state == HandoffState.DISPATCHING, HANDOFFS.c.state == HandoffState.ACTIVE),
    ).limit(1)
)
# A recipient's reply finds its handoff by thread (the channel, thread, state index).
SELECT_ACTIVE_IN_THREAD = Prepared(
    select(*HANDOFFS.columns).where(
        HANDOFFS.c.channel_id == bindparam("channel_id"), HANDOFFS.c.thread_key == bindparam("thread_key"),
        HANDOFFS.c.state == HandoffState.ACTIVE,
    ).limit(1)
)
# The newest handoffs of one state, through the (state, created_at) index.
SELECT_NEWEST_IN_STATE = Prepared(
    select(*HANDOFFS.columns).where(HANDOFFS.c.state == bindparam("state"))
    .order_by(HANDOFFS.c.created_at.desc()).limit(bindparam("limit"))
)
INSERT_HANDOFF = Prepared(insert(HANDOFFS))
# A conversation's first handoff request is the moment it stopped being the bot's alone.
MARK_ESCALATED = Prepared(
    update(CONVERSATIONS).where(CONVERSATIONS.c.id == bindparam("cid"), CONVERSATIONS.c.first_handoff_at.is_(None))
    .values(first_handoff_at=bindparam("at"))
)
SELECT_CONVERSATION = Prepared(select(*CONVERSATIONS.columns).where(CONVERSATIONS.c.id == bindparam("cid")))
SELECT_HELD = Prepared(
    select(*MESSAGES.columns)
    .where(MESSAGES.c.handoff_session_id == bindparam("sid"), MESSAGES.c.role == Role.SUBSCRIBER)
    .order_by(MESSAGES.c.id)
)
SELECT_LINKED = Prepared(
    select(*LINKS.columns, *HANDOFFS.columns)
    .join(HANDOFFS, HANDOFFS.c.id == LINKS.c.handoff_session_id)
    .where(LINKS.c.id == bindparam("link_id"))
)

# The transitions, each guarded by the state it leaves. Out of `dispatching`, whether a
# person was notified decides the way: to `active` only once the dispatch is recorded as
# sent, to `failed` only while it is not.
ACTIVATE = _compare_and_set(
    [HANDOFFS.c.state == HandoffState.DISPATCHING, _sent_dispatch()],
    ["state", "channel_message_id", "thread_key", "thread", "activated_at", "focused_at", "last_activity_at",
     "idle_deadline"],
)
# On a route the handoff's line is its first reached recipient's, and the ladder's deadline
# runs instead of the idle timer (the idle deadline stays empty until someone claims it).
ACTIVATE_ROUTED = _compare_and_set(
    [HANDOFFS.c.state == HandoffState.DISPATCHING, _sent_dispatch()],
    ["state", "channel_id", "channel_kind", "channel_label", "channel_message_id", "thread_key", "thread",
     "activated_at", "focused_at", "last_activity_at", "idle_deadline", "escalate_at", "offer_until", "turn"],
)
FAIL = _compare_and_set([HANDOFFS.c.state == HandoffState.DISPATCHING, ~_sent_dispatch()], ["state", "failure"])
_RELEASED = ["state", "released_at", "release_reason", "released_by", "released_person_id", "outcome", "note", "returned",
             "missing_required", "duration_seconds"]
# A person's release is who handled it only when nobody had before (a claim or first reply
# committed by then wins, whichever the release read)
_HANDLED = {"handled_by": func.coalesce(HANDOFFS.c.handled_by, bindparam("releaser", type_=String))}
RELEASE = _compare_and_set([HANDOFFS.c.state == HandoffState.ACTIVE], _RELEASED, **_HANDLED)
# The idle timer's release applies only while the deadline is at or before its cutoff.
RELEASE_IDLE = _compare_and_set(
    [HANDOFFS.c.state == HandoffState.ACTIVE, HANDOFFS.c.idle_deadline <= bindparam("cutoff")], _RELEASED, **_HANDLED
)
# The ladder's last deadline passed with nobody claiming: only while still unclaimed and due.
RELEASE_UNCLAIMED = _compare_and_set(
    [HANDOFFS.c.state == HandoffState.ACTIVE, HANDOFFS.c.claimed_at.is_(None), HANDOFFS.c.escalate_at <= bindparam("cutoff")],
    _RELEASED, **_HANDLED,
)


async def handoff(session: AsyncSession, sid: str) -> HandoffSession | None:
    """The handoff as stored now, or None."""
    return handoff_of(await prepared.fetch_one(session, SELECT_HANDOFF, {"sid": sid}))


def handoff_of(row: Sequence[Any] | None) -> HandoffSession | None:
    return _HANDOFF.one(row) if row is not None else None


async def open_handoff(session: AsyncSession, conversation_id: str) -> HandoffSession | None:
    """The conversation's open handoff (`dispatching` or `active`; the unique index allows one)."""
    row = await prepared.fetch_one(session, SELECT_OPEN_HANDOFF, {"cid": conversation_id})
    return _HANDOFF.one(row) if row is not None else None


async def active_in_thread(session: AsyncSession, channel_id: int, thread_key: str) -> HandoffSession | None:
    """The active handoff a reply in this channel's thread belongs to."""
    row = await prepared.fetch_one(session, SELECT_ACTIVE_IN_THREAD, {"channel_id": channel_id, "thread_key": thread_key})
    return _HANDOFF.one(row) if row is not None else None


async def newest_in_state(session: AsyncSession, state: HandoffState, limit: int) -> list[HandoffSession]:
    """Up to `limit` handoffs in `state`, newest first."""
    found = await prepared.fetch_all(session, SELECT_NEWEST_IN_STATE, {"state": state, "limit": limit})
    return _HANDOFF.all(found)


async def conversation(session: AsyncSession, conversation_id: str) -> Conversation | None:
    row = await prepared.fetch_one(session, SELECT_CONVERSATION, {"cid": conversation_id})
    return _CONVERSATION.one(row) if row is not None else None


async def held_messages(session: AsyncSession, sid: str) -> list[Message]:
    """What the subscriber wrote for a person while the handoff was dispatching, in order."""
    return _MESSAGE.all(await prepared.fetch_all(session, SELECT_HELD, {"sid": sid}))


async def linked(session: AsyncSession, link_id: str) -> tuple[FormLink, HandoffSession] | None:
    """A return-form link and its handoff, in one joined read."""
    row = await prepared.fetch_one(session, SELECT_LINKED, {"link_id": link_id})
    return linked_of(row) if row is not None else None


def linked_of(row: Sequence[Any]) -> tuple[FormLink, HandoffSession]:
    """The link and its handoff from a row of `SELECT_LINKED`."""
    split = len(_LINK.columns)
    return _LINK.one(row[:split]), _HANDOFF.one(row[split:])


async def insert_handoff(session: AsyncSession, **values: Any) -> HandoffSession:
    """INSERT a new handoff; the object as it is now stored."""
    row = new_row(HandoffSession, **values)
    await prepared.execute(session, INSERT_HANDOFF, row)
    return _HANDOFF.of(row)


async def mark_escalated(session: AsyncSession, conversation_id: str, at: datetime) -> None:
    """Record the conversation's first handoff request (a later one leaves it as it is)."""
    await prepared.execute(session, MARK_ESCALATED, {"cid": conversation_id, "at": at})


async def transition(session: AsyncSession, statement: Prepared, sid: str, **values: Any) -> HandoffSession | None:
    """Run one of the compare-and-sets above: the changed row, or None when its guard
    matched nothing (another caller moved the handoff first)."""
    row = await prepared.fetch_one(session, statement, {"sid": sid, **values})
    return _HANDOFF.one(row) if row is not None else None

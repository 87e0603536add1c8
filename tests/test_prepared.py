"""Prepared statements answer exactly what SQLAlchemy answers for the same statement, inside
the session's transaction, on SQLite (one sqlite3 call) and on PostgreSQL (through the
session)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import bindparam, func, insert, select, update
from sqlmodel import col

from bot.domain import conversations
from bot.store import prepared
from bot.store.db import Database
from bot.store.models import Conversation, HandoffEvent, OutboxItem

EVENTS = HandoffEvent.__table__  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models; SQLModel does not declare it
OUTBOX = OutboxItem.__table__  # type: ignore[attr-defined]  # as above
AT = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)

INSERT_EVENT = prepared.Prepared(insert(EVENTS).returning(EVENTS.c.id))
EVENT_BY_KIND = prepared.Prepared(
    select(EVENTS.c.id, EVENTS.c.kind, EVENTS.c.detail, EVENTS.c.created_at, EVENTS.c.conversation_id)
    .where(EVENTS.c.kind == bindparam("kind")).order_by(EVENTS.c.id))
RENAME_KIND = prepared.Prepared(update(EVENTS).where(EVENTS.c.kind == bindparam("old")).values(kind=bindparam("new")))




def event(kind: str, **detail: object) -> dict[str, object]:
    return {"handoff_session_id": None, "conversation_id": None, "kind": kind, "actor": "system", "detail": detail,
            "created_at": AT}


async def test_rows_come_back_converted_as_sqlalchemy_converts_them(db: Database) -> None:
    async with db.transaction() as session:
        (first,) = await prepared.fetch_all(session, INSERT_EVENT, event("relayed", text="héllo", n=2))
        await prepared.execute_many(session, prepared.Prepared(insert(EVENTS)), [event("relayed", n=3), event("other")])
    async with db.read() as session:
        ours = await prepared.fetch_all(session, EVENT_BY_KIND, {"kind": "relayed"})
        theirs = [tuple(row) for row in await session.execute(EVENT_BY_KIND.statement, {"kind": "relayed"})]
    assert ours == theirs
    assert ours[0] == (first[0], "relayed", {"text": "héllo", "n": 2}, AT, None)
    assert ours[0][3].tzinfo is not None and [r[2] for r in ours] == [{"text": "héllo", "n": 2}, {"n": 3}]


async def test_an_update_answers_how_many_rows_it_changed_and_rolls_back_with_its_transaction(db: Database) -> None:
    async with db.transaction() as session:
        await prepared.execute_many(session, prepared.Prepared(insert(EVENTS)), [event("a"), event("a"), event("b")])
    with pytest.raises(RuntimeError, match="undo"):
        async with db.transaction() as session:
            assert await prepared.execute(session, RENAME_KIND, {"old": "a", "new": "c"}) == 2
            raise RuntimeError("undo")
    async with db.transaction() as session:
        assert await prepared.execute(session, RENAME_KIND, {"old": "zz", "new": "c"}) == 0
    async with db.read() as session:
        assert [r[1] for r in await prepared.fetch_all(session, EVENT_BY_KIND, {"kind": "a"})] == ["a", "a"]
        assert await prepared.fetch_one(session, EVENT_BY_KIND, {"kind": "c"}) is None


async def test_pending_orm_changes_are_flushed_before_a_prepared_statement_reads(db: Database) -> None:
    count = prepared.Prepared(select(Conversation.id).where(col(Conversation.id) == bindparam("cid")))
    async with db.transaction() as session:
        session.add(Conversation(id="c_pending", created_at=AT, last_message_at=AT))  # added, not yet flushed
        assert await prepared.fetch_one(session, count, {"cid": "c_pending"}) == ("c_pending",)


async def test_python_side_defaults_are_filled_in_as_sqlalchemy_fills_them(db: Database) -> None:
    returning = (OUTBOX.c.state, OUTBOX.c.attempts, OUTBOX.c.uncertain, OUTBOX.c.delivery_key)
    add = prepared.Prepared(insert(OUTBOX).returning(*returning))
    async with db.transaction() as session:
        conversation = await conversations.create(session, now=AT)
        await session.flush()
        row = {"channel_id": 1, "purpose": "relay", "handoff_session_id": conversation.id, "payload": {"text": "hi"},
               "created_at": AT, "not_before": AT}
        state, attempts, uncertain, key = (await prepared.fetch_all(session, add, row))[0]
        sqlalchemy_row = (await session.execute(insert(OUTBOX).returning(*returning), row)).one()
    assert (state, attempts, uncertain) == tuple(sqlalchemy_row[:3]) == ("pending", 0, False)
    assert key and sqlalchemy_row[3] and key != sqlalchemy_row[3]  # a fresh key each, from the same default


async def test_a_parameter_the_statement_names_must_be_given(db: Database) -> None:
    async with db.read() as session:
        with pytest.raises(KeyError, match="'kind'"):
            await prepared.fetch_all(session, EVENT_BY_KIND, {})


def test_statements_it_can_not_run_as_one_call_are_refused_when_compiled(sqlite_url: str) -> None:
    from sqlalchemy.dialects import sqlite

    expanding = prepared.Prepared(select(EVENTS.c.id).where(EVENTS.c.kind.in_(bindparam("kinds", expanding=True))))
    with pytest.raises(ValueError, match="IN lists"):
        expanding.compiled(sqlite.dialect(), frozenset({"kinds"}))


async def test_a_broken_constraint_is_sqlalchemys_integrity_error_on_every_database(db: Database) -> None:
    from sqlalchemy.exc import IntegrityError

    add = prepared.Prepared(insert(Conversation.__table__))  # type: ignore[attr-defined]  # as above
    row = {"id": "c_same", "created_at": AT, "last_message_at": AT}
    async with db.transaction() as session:
        await prepared.execute(session, add, row)
    with pytest.raises(IntegrityError):
        async with db.transaction() as session:  # the transaction's first statement (on PostgreSQL: the adapter's)
            await prepared.execute(session, add, row)
    with pytest.raises(IntegrityError):
        async with db.transaction() as session:  # a later one (on PostgreSQL: asyncpg's own)
            await prepared.execute(session, add, {**row, "id": "c_other"})
            await prepared.execute(session, add, row)


@pytest.mark.postgres
async def test_a_connection_the_server_dropped_mid_transaction_is_refused_and_replaced(db: Database) -> None:
    import asyncpg
    from sqlalchemy.exc import DBAPIError

    if db.is_sqlite:
        pytest.skip("PostgreSQL's pooled connections")
    pid = prepared.Prepared(select(func.pg_backend_pid()))
    with pytest.raises(DBAPIError):  # SQLAlchemy's, as a statement of its own would raise: not asyncpg's
        async with db.transaction() as session:
            (before,) = await prepared.fetch_one(session, pid) or ()
            admin = await asyncpg.connect(db.url.replace("postgresql+asyncpg://", "postgresql://"))
            try:
                assert await admin.fetchval("SELECT pg_terminate_backend($1)", before)
            finally:
                await admin.close()
            await prepared.fetch_one(session, pid)  # on asyncpg itself, on the closed connection
    async with db.transaction() as session:  # the pool replaced it: no ping needed
        (after,) = await prepared.fetch_one(session, pid) or ()
    assert after != before


async def test_a_literal_none_in_the_statement_is_a_value_not_a_missing_parameter(db: Database) -> None:
    async with db.transaction() as session:
        await prepared.execute_many(session, prepared.Prepared(insert(EVENTS)), [event("a", n=1)])
        clear = prepared.Prepared(update(EVENTS).where(EVENTS.c.kind == bindparam("of_kind")).values(conversation_id=None))
        assert await prepared.execute(session, clear, {"of_kind": "a"}) == 1
        assert (await prepared.fetch_all(session, EVENT_BY_KIND, {"kind": "a"}))[0][4] is None


async def test_a_column_name_the_insert_does_not_have_is_refused_not_dropped(db: Database) -> None:
    from sqlalchemy.exc import CompileError

    async with db.transaction() as session:  # ours on SQLite, SQLAlchemy's own on PostgreSQL
        with pytest.raises((ValueError, CompileError), match="[Uu]nconsumed column names"):
            await prepared.execute(session, prepared.Prepared(insert(EVENTS)), {**event("a"), "kindd": "typo"})

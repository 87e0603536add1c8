"""After-commit signals on a real database: published once a transaction commits, never
for one that rolled back, and each conversation woken once per transaction."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest

from bot.domain import conversations
from bot.runtime.bus import ConversationBus
from bot.runtime.signals import Changed, Signals, record
from bot.store.db import Database
from bot.store.vocabulary import Role

NOW = datetime(2026, 1, 1, tzinfo=UTC)


class RecordingBus(ConversationBus):
    """The real bus, also keeping the order of what it was told."""

    def __init__(self) -> None:
        super().__init__()
        self.notified: list[str] = []

    def notify(self, conversation_id: str) -> None:
        self.notified.append(conversation_id)
        super().notify(conversation_id)


@dataclass(frozen=True)
class Happened:
    what: str


class Boom(Exception):
    pass


@pytest.fixture
async def db(sqlite_url: str) -> AsyncIterator[Database]:
    database = Database(sqlite_url, signals=Signals(RecordingBus()))
    await database.upgrade()
    yield database
    await database.dispose()


def notified(db: Database) -> list[str]:
    assert db.signals is not None and isinstance(db.signals.bus, RecordingBus)
    return db.signals.bus.notified


async def new_conversation(db: Database) -> str:
    async with db.transaction() as session:
        return (await conversations.create(session, now=NOW)).id


async def test_a_committed_message_wakes_its_conversation_once_however_many_were_written(db: Database) -> None:
    first, second = await new_conversation(db), await new_conversation(db)
    notified(db).clear()
    async with db.transaction() as session:
        for text in ("one", "two", "three"):
            await conversations.add_message(session, first, role=Role.AGENT, text=text, now=NOW)
        await conversations.add_message(session, second, role=Role.AGENT, text="four", now=NOW)
        record(session.info, Changed(first))
        assert notified(db) == []  # nothing before the commit
    assert notified(db) == [first, second]


async def test_a_rolled_back_write_wakes_nobody_and_runs_no_handler(db: Database) -> None:
    cid = await new_conversation(db)
    heard: list[Happened] = []
    assert db.signals is not None
    db.signals.on(Happened, heard.append)
    notified(db).clear()
    with pytest.raises(Boom):
        async with db.transaction() as session:
            await conversations.add_message(session, cid, role=Role.AGENT, text="never stored", now=NOW)
            record(session.info, Happened("rolled back"))
            raise Boom
    assert (notified(db), heard) == ([], [])
    async with db.read() as session:
        assert await conversations.messages_after(session, cid) == []

    async with db.transaction() as session:  # the next transaction starts clean
        record(session.info, Happened("committed"))
    assert heard == [Happened("committed")]


async def test_handlers_hear_their_kind_in_order_and_a_failing_one_stops_nobody(db: Database) -> None:
    cid = await new_conversation(db)
    heard: list[str] = []
    assert db.signals is not None

    def broken(_signal: Happened) -> None:
        raise RuntimeError("a bug in one handler")

    db.signals.on(Happened, lambda signal: heard.append(f"first {signal.what}"))
    db.signals.on(Happened, broken)
    db.signals.on(Happened, lambda signal: heard.append(f"last {signal.what}"))
    db.signals.on(Boom, lambda _signal: heard.append("another kind"))
    notified(db).clear()
    async with db.transaction() as session:
        record(session.info, Happened("a"))
        record(session.info, Changed(cid))
        record(session.info, Happened("b"))
    assert heard == ["first a", "last a", "first b", "last b"]
    assert notified(db) == [cid]


async def test_a_database_without_signals_drops_them(sqlite_url: str) -> None:
    database = Database(sqlite_url)
    await database.upgrade()
    try:
        async with database.transaction() as session:
            cid = (await conversations.create(session, now=NOW)).id
            await conversations.add_message(session, cid, role=Role.AGENT, text="hello", now=NOW)
        async with database.read() as session:
            assert [m.text for m in await conversations.messages_after(session, cid)] == ["hello"]
    finally:
        await database.dispose()

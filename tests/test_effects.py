"""Marks that commit with an effect (bot/runtime/effects.py) on a real database: written in
the first effect transaction of the work and only there, never by a transaction that rolled
back (the next effect carries it instead), and never by a background task the work spawned."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import text

from bot.domain import conversations
from bot.runtime.background import Background
from bot.runtime.effects import committed_with
from bot.store import audit
from bot.store.db import Database

NOW = datetime(2026, 1, 1, tzinfo=UTC)
MARKS = text("SELECT count(*) FROM handoff_events WHERE kind = 'marked'")
STARTED = text("SELECT count(*) FROM conversations")




async def mark(session: Any) -> None:
    await audit.note(session, "marked", at=NOW, actor="test")


async def count(db: Database, query: Any) -> int:
    async with db.read() as session:
        return int(await session.scalar(query) or 0)


async def start_conversation(db: Database, *, effect: bool = True) -> None:
    async with db.transaction(effect=effect) as session:
        await conversations.create(session, now=NOW)


async def test_the_mark_commits_with_the_first_effect_and_only_with_it(db: Database) -> None:
    with committed_with(mark) as effect:
        await start_conversation(db, effect=False)  # not an effect: carries nothing
        assert not effect.applied
        await start_conversation(db)
        assert effect.applied
        await start_conversation(db)  # a later effect of the same work (an agent's replies)
    assert await count(db, MARKS) == 1
    assert await count(db, STARTED) == 3


async def test_an_effect_that_rolls_back_leaves_the_mark_for_the_next(db: Database) -> None:
    with committed_with(mark) as effect:
        with pytest.raises(RuntimeError):
            async with db.transaction(effect=True) as session:
                await conversations.create(session, now=NOW)
                raise RuntimeError("rolled back")
        assert not effect.applied
        assert await count(db, MARKS) == 0
        await start_conversation(db)
        assert effect.applied
    assert await count(db, MARKS) == 1


async def test_a_mark_that_fails_rolls_its_effect_back(db: Database) -> None:
    async def broken(session: Any) -> None:
        raise LookupError("the mark could not be written")

    with committed_with(broken) as effect, pytest.raises(LookupError):
        await start_conversation(db)
    assert not effect.applied
    assert await count(db, STARTED) == 0


async def test_work_spawned_in_the_background_does_not_carry_the_mark(db: Database) -> None:
    background = Background()
    with committed_with(mark) as effect:
        background.spawn(start_conversation(db), name="follow-up")
        await background.settle()
        assert not effect.applied
    assert await count(db, MARKS) == 0
    assert await count(db, STARTED) == 1


async def test_without_a_mark_an_effect_transaction_is_a_plain_one(db: Database) -> None:
    await start_conversation(db)
    assert await count(db, MARKS) == 0
    assert await count(db, STARTED) == 1

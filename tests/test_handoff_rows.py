"""The handoff rows the round trip reads and writes through prepared statements: the objects
built from them are what the ORM loads, the compare-and-sets win once, on SQLite and on
PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import inspect, select
from sqlmodel import col

from bot.domain import conversations, handoff_rows
from bot.store.db import Database
from bot.store.models import Conversation, FormLink, HandoffSession, OutboxItem
from bot.store.vocabulary import HandoffState, OutboxState, Role

AT = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)


async def new_handoff(db: Database, **values: object) -> HandoffSession:
    async with db.transaction() as session:
        conversation = await conversations.create(session, now=AT, name="Ana")
        return await handoff_rows.insert_handoff(
            session, id=f"hs_{conversation.id}", conversation_id=conversation.id, channel_id=1, channel_kind="owner_inbox",
            channel_label="Owner inbox", state=HandoffState.DISPATCHING, urgency="normal", summary="s" * 20,
            expected_action="e" * 10, created_at=AT, **values,
        )


def columns(row: object) -> dict[str, object]:
    return {attribute.key: getattr(row, attribute.key) for attribute in inspect(type(row)).column_attrs}


async def test_an_inserted_handoff_is_the_object_the_orm_loads_with_the_models_defaults(db: Database) -> None:
    stored = await new_handoff(db, extra_context={"order": "1234"}, thread={"ts": "1.2"})
    async with db.read() as session:
        loaded = await session.get(HandoffSession, stored.id)
        read = await handoff_rows.handoff(session, stored.id)
    assert loaded is not None and read is not None
    assert columns(stored) == columns(loaded) == columns(read)
    assert stored.returned == {} and stored.missing_required == [] and stored.include_transcript is True
    assert read.created_at == AT and read.created_at.tzinfo is not None and read.short_code == loaded.short_code
    assert inspect(read).detached  # as an object read in a session that has closed


def test_defaults_are_fresh_for_every_row_and_a_column_without_one_must_be_given() -> None:
    given = {"id": "a", "conversation_id": "c", "channel_id": 1, "channel_kind": "k", "channel_label": "l",
             "state": "active", "urgency": "low", "summary": "s", "expected_action": "e", "created_at": AT}
    first, second = handoff_rows.new_row(HandoffSession, **given), handoff_rows.new_row(HandoffSession, **given)
    first["returned"]["x"] = 1
    assert second["returned"] == {} and first["id"] == "a" and first["note"] is None
    with pytest.raises(KeyError, match="created_at"):
        handoff_rows.new_row(HandoffSession, **{k: v for k, v in given.items() if k != "created_at"})


async def test_a_built_object_added_to_a_session_updates_its_row(db: Database) -> None:
    stored = await new_handoff(db)
    async with db.transaction() as session:
        found = await handoff_rows.handoff(session, stored.id)
        assert found is not None
        session.add(found)
        found.note = "edited"
    async with db.read() as session:
        assert (await session.get(HandoffSession, stored.id)).note == "edited"  # type: ignore[union-attr]


async def test_the_open_handoff_of_a_conversation_and_none_once_it_ended(db: Database) -> None:
    stored = await new_handoff(db)
    async with db.transaction() as session:
        assert (await handoff_rows.open_handoff(session, stored.conversation_id)).id == stored.id  # type: ignore[union-attr]
        failed = await handoff_rows.transition(session, handoff_rows.FAIL, stored.id, state=HandoffState.FAILED, failure="no")
        assert failed is not None and failed.state == HandoffState.FAILED and failed.failure == "no"
        assert await handoff_rows.open_handoff(session, stored.conversation_id) is None
        assert await handoff_rows.handoff(session, "hs_missing") is None


async def test_activation_waits_for_the_dispatch_to_be_recorded_as_sent_and_wins_once(db: Database) -> None:
    stored = await new_handoff(db)
    values = {"state": HandoffState.ACTIVE, "channel_message_id": "m1", "thread_key": "t1", "thread": {"ts": "1"},
              "activated_at": AT, "focused_at": AT, "last_activity_at": AT, "idle_deadline": AT + timedelta(minutes=30)}
    async with db.transaction() as session:
        assert await handoff_rows.transition(session, handoff_rows.ACTIVATE, stored.id, **values) is None  # nothing sent yet
        session.add(OutboxItem(channel_id=1, handoff_session_id=stored.id, purpose="dispatch", payload={},
                               state=OutboxState.SENT, not_before=AT, created_at=AT))
    async with db.transaction() as session:
        # the dispatch was sent: failing it as stuck is refused, activating it wins, once
        assert await handoff_rows.transition(session, handoff_rows.FAIL, stored.id, state=HandoffState.FAILED,
                                             failure="stuck") is None
        active = await handoff_rows.transition(session, handoff_rows.ACTIVATE, stored.id, **values)
        assert active is not None
        assert (active.state, active.thread, active.idle_deadline) == ("active", {"ts": "1"}, AT + timedelta(minutes=30))
        assert await handoff_rows.transition(session, handoff_rows.ACTIVATE, stored.id, **values) is None


async def test_the_idle_release_applies_only_while_the_deadline_has_passed_and_ends_the_thread(db: Database) -> None:
    stored = await new_handoff(db)
    async with db.transaction() as session:
        session.add(OutboxItem(channel_id=1, handoff_session_id=stored.id, purpose="dispatch", payload={},
                               state=OutboxState.SENT, not_before=AT, created_at=AT))
    deadline = AT + timedelta(minutes=30)
    released = {"state": HandoffState.RELEASED, "released_at": deadline, "release_reason": "idle_timeout",
                "released_by": "idle timer", "released_person_id": None, "releaser": None, "outcome": "unresolved", "note": None,
                "returned": {"n": 2}, "missing_required": ["eta"], "duration_seconds": 1800.0}
    async with db.transaction() as session:
        await handoff_rows.transition(
            session, handoff_rows.ACTIVATE, stored.id, state=HandoffState.ACTIVE, channel_message_id=None, thread_key="t1",
            thread={}, activated_at=AT, focused_at=AT, last_activity_at=AT, idle_deadline=deadline,
        )
        early = deadline - timedelta(seconds=1)
        assert await handoff_rows.transition(session, handoff_rows.RELEASE_IDLE, stored.id, cutoff=early, **released) is None
        assert (await handoff_rows.active_in_thread(session, 1, "t1")).id == stored.id  # type: ignore[union-attr]
        assert await handoff_rows.active_in_thread(session, 2, "t1") is None
        done = await handoff_rows.transition(session, handoff_rows.RELEASE_IDLE, stored.id, cutoff=deadline, **released)
        assert done is not None and (done.returned, done.missing_required, done.duration_seconds) == ({"n": 2}, ["eta"], 1800)
        assert done.handled_by is None  # the idle timer is nobody
        assert await handoff_rows.transition(session, handoff_rows.RELEASE, stored.id, **released) is None
        assert await handoff_rows.active_in_thread(session, 1, "t1") is None  # released: replies find nothing


async def test_held_messages_and_the_linked_handoff(db: Database) -> None:
    stored = await new_handoff(db, form_link_id="link-1")
    async with db.transaction() as session:
        session.add(FormLink(id="link-1", handoff_session_id=stored.id, created_at=AT, expires_at=AT + timedelta(days=7)))
        for text in ("first", "second"):
            await conversations.add_message(session, stored.conversation_id, role=Role.SUBSCRIBER, text=text, now=AT,
                                            handoff_session_id=stored.id)
        await conversations.add_message(session, stored.conversation_id, role=Role.AGENT, text="not held", now=AT,
                                        handoff_session_id=stored.id)
    async with db.read() as session:
        held = await handoff_rows.held_messages(session, stored.id)
        link, handoff = await handoff_rows.linked(session, "link-1") or (None, None)
        assert await handoff_rows.linked(session, "link-2") is None
        conversation = await handoff_rows.conversation(session, stored.conversation_id)
        loaded = (await session.scalars(select(Conversation).where(col(Conversation.id) == stored.conversation_id))).one()
    assert [m.text for m in held] == ["first", "second"] and held[0].id is not None
    assert link is not None and link.expires_at == AT + timedelta(days=7) and link.consumed_at is None
    assert handoff is not None and columns(handoff) == columns(stored)
    assert conversation is not None and columns(conversation) == columns(loaded)

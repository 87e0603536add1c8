"""Model objects built from prepared rows (bot/store/rows.py) equal what the ORM loads for
the same row, detached, and a session they are added to updates their row."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import bindparam, inspect, select

from bot.store import prepared
from bot.store.models import Conversation, OutboxItem
from bot.store.rows import Rows
from tests.conftest import Harness

AT = datetime(2026, 12, 1, 9, 30, 15, 123456, tzinfo=UTC)
ITEMS = Rows(OutboxItem)
ITEM = prepared.Prepared(select(*ITEMS.columns).where(ITEMS.table.c.id == bindparam("id")))


async def test_a_built_model_equals_the_one_the_orm_loads_and_is_not_tracked(harness: Harness) -> None:
    db = harness.desk.db
    async with db.transaction() as session:
        stored = OutboxItem(channel_id=3, handoff_session_id="hs_1", purpose="relay", payload={"text": "héllo", "n": [1, 2]},
                            not_before=AT, created_at=AT, receipt={"message_id": "m1"})
        session.add(stored)
        await session.flush()
        item_id = stored.id
    async with db.read() as session:
        row = await prepared.fetch_one(session, ITEM, {"id": item_id})
        assert row is not None
        built = ITEMS.one(row)
        loaded = await session.get(OutboxItem, item_id)
    assert loaded is not None and built.model_dump() == loaded.model_dump()
    assert inspect(built).detached  # as if read in a session that has closed: no flush writes it back unasked
    assert built.payload == {"text": "héllo", "n": [1, 2]} and built.not_before == AT and built.uncertain is False


def test_the_columns_are_the_whole_table_in_order_and_a_short_row_is_refused() -> None:
    conversations = Rows(Conversation)
    assert [c.key for c in conversations.columns] == list(Conversation.model_fields)
    with pytest.raises(ValueError):
        conversations.one(("c_1", "Ana"))


async def test_a_built_object_added_to_a_session_updates_its_row(harness: Harness) -> None:
    cid = await harness.desk.conversations.start(name="Ana")
    conversations = Rows(Conversation)
    one = prepared.Prepared(select(*conversations.columns).where(conversations.table.c.id == bindparam("id")))
    async with harness.desk.db.transaction() as session:
        row = await prepared.fetch_one(session, one, {"id": cid})
        assert row is not None
        built = conversations.one(row)
        session.add(built)
        built.subscriber_name = "Ana B."
    assert (await harness.desk.conversations.get(cid)).subscriber_name == "Ana B."


def test_a_model_from_a_mapping_takes_each_value_by_its_column_whatever_the_order() -> None:
    rows = Rows(Conversation)
    values = {"last_message_at": AT, "created_at": AT, "background": True, "serves_handoff_session_id": None,
              "front": "tg", "subscriber_external_id": "chat-1", "subscriber_email": None, "subscriber_name": "Ana",
              "id": "c_1", "first_handoff_at": None}
    built = rows.of(values)
    assert (built.id, built.subscriber_name, built.front, built.subscriber_external_id, built.background) == (
        "c_1", "Ana", "tg", "chat-1", True)
    assert inspect(built).detached
    with pytest.raises(KeyError, match="id"):
        rows.of({k: v for k, v in values.items() if k != "id"})

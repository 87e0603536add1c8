"""The alembic migrations build exactly the schema the models describe, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import insert
from sqlalchemy.engine import Connection
from sqlmodel import SQLModel

import bot.store.models  # noqa: F401
from bot.store.db import Database, alembic_config
from bot.store.models import InboundEvent, OutboxItem
from channels.base import Relay
from tests.conftest import StartDesk
from tests.fakes import ScriptedChannel


async def test_migrations_match_the_models(database_url: str) -> None:
    db = Database(database_url)
    try:
        await db.upgrade()
        await db.upgrade()  # a second run is a no-op (serve upgrades on every start)
        async with db.engine.connect() as conn:
            diff = await conn.run_sync(
                lambda sync: compare_metadata(MigrationContext.configure(sync, opts={"compare_type": True}), SQLModel.metadata)
            )
    finally:
        await db.dispose()
    assert diff == []


async def test_items_stored_before_the_typed_port_are_delivered_and_handled_after_the_upgrade(start_desk: StartDesk) -> None:
    """A desk upgraded with work in flight: outbox items and inbound events stored in the old
    shape (one model with `purpose`, `notice`, `sender`) are rewritten by migration 0011 and
    then delivered and handled as before."""
    harness = await start_desk(adapters={1: ScriptedChannel})
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    channel = harness.desk.channels.get(1)
    assert isinstance(channel, ScriptedChannel)
    url = harness.desk.config.database_url
    await harness.desk.stop()

    db = Database(url)
    try:
        async with db.engine.begin() as conn:
            await conn.run_sync(lambda sync: _migrate(sync, "0010"))
            await conn.execute(insert(OutboxItem).values(
                channel_id=1, handoff_session_id=sid, purpose="relay", delivery_key="hd_old", uncertain=False,
                state="pending", attempts=0, not_before=datetime(2000, 1, 1, tzinfo=UTC), created_at=datetime(2000, 1, 1, tzinfo=UTC),
                payload={"purpose": "relay", "handoff_session_id": sid, "text": "Ana: still there?", "author": "Ana",
                         "body": "still there?", "thread": {"ts": 1}, "notice": None, "approval": None}))
            await conn.execute(insert(InboundEvent).values(
                channel_id=1, dedupe_key="old-1", state="pending", received_at=datetime(2000, 1, 1, tzinfo=UTC),
                payload={"thread_key": f"thread-{sid}", "text": "On it.", "author": "Sam", "dedupe_key": "old-1",
                         "sender": "recipient", "decision": None, "opened": False, "answer": None,
                         "failed_delivery": None}))
    finally:
        await db.dispose()

    restarted = await start_desk(adapters={1: ScriptedChannel}, url=url)
    await restarted.desk.inbound.process_pending()
    await restarted.desk.settle()
    resent = restarted.desk.channels.get(1)
    assert isinstance(resent, ScriptedChannel)
    [relay] = resent.sent
    assert isinstance(relay, Relay)
    assert (relay.handoff_id, relay.body, relay.author, relay.thread) == (sid, "still there?", "Ana", {"ts": 1})
    human = [m for m in await restarted.messages(cid) if m["role"] == "human"]
    assert [(m["author"], m["text"]) for m in human] == [("Sam", "On it.")]


def _migrate(connection: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.downgrade(cfg, revision)

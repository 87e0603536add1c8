"""Pruning of delivery bookkeeping (bot/delivery/retention.py): finished rows past their age go,
pending ones and the audit trail stay."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from bot.config import ConfigError
from bot.store.models import HandoffEvent, InboundEvent, OutboxItem
from channels.base import RecipientText
from tests.conftest import Harness, StartDesk, make_config


async def count(harness: Harness, table: type[InboundEvent] | type[OutboxItem] | type[HandoffEvent]) -> int:
    async with harness.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(table)) or 0)


async def a_relayed_reply(harness: Harness, text: str) -> None:
    """One recipient reply (an inbound event) relayed in a fresh handoff with its outbox items."""
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.say(cid, "hello?")  # a relay in the outbox
    await harness.desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text=text, author="Sam", dedupe_key=text))
    await harness.desk.settle()


async def test_finished_rows_past_their_age_are_pruned_and_the_rest_kept(start_desk: StartDesk) -> None:
    harness = await start_desk(retention={"inbound_events": "2d", "outbox": "3d"})
    desk = harness.desk
    await a_relayed_reply(harness, "old reply")
    desk.clock.advance(timedelta(days=2, hours=12))
    await a_relayed_reply(harness, "newer reply")
    pending = RecipientText(thread_key="nowhere", text="stuck", dedupe_key="stuck")
    await desk.inbound.store(1, pending)  # stored, never processed: kept whatever its age
    old_outbox, audit = await count(harness, OutboxItem), await count(harness, HandoffEvent)

    desk.clock.advance(timedelta(hours=12))  # the first reply is 3 days old, the second half a day
    pruned = await desk.retention.sweep()
    assert pruned == {"inbound_events": 1, "outbox": 0, "revoked_sessions": 0}
    async with desk.db.read() as session:
        assert sorted((await session.scalars(select(InboundEvent.dedupe_key))).all()) == ["newer reply", "stuck"]
    assert await desk.retention.sweep() == {}  # at most once per `every`

    desk.clock.advance(timedelta(hours=1))
    assert (await desk.retention.sweep())["outbox"] == old_outbox // 2  # the first handoff's dispatch and relay
    assert await count(harness, HandoffEvent) == audit  # the audit trail is never pruned
    # a redelivery of a pruned event would be taken as new; of a kept one, it is still dropped
    assert await desk.inbound.submit_and_wait(1, RecipientText(thread_key="x", text="newer reply", dedupe_key="newer reply")) == "duplicate"


async def test_null_keeps_everything(start_desk: StartDesk) -> None:
    harness = await start_desk(retention={"inbound_events": None, "outbox": None})
    await a_relayed_reply(harness, "reply")
    harness.desk.clock.advance(timedelta(days=400))
    assert await harness.desk.retention.prune() == {"inbound_events": 0, "outbox": 0, "revoked_sessions": 0}


def test_the_dedupe_window_is_at_least_a_day(sqlite_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(sqlite_url, retention={"inbound_events": "1h", "outbox": "forever"})
    assert [str(p) for p in caught.value.problems] == [
        "retention.inbound_events: must be at least 1d: providers redeliver events for up to a day",
        "retention.outbox: expected a duration such as 30m, 90s or 24h, got 'forever'",
    ]


async def test_revoked_sessions_go_once_their_cookie_has_expired_anyway(harness: Harness) -> None:
    desk = harness.desk
    now = desk.clock.now()
    await desk.revocations.revoke("soon-expired", expires_at=now + timedelta(hours=1))
    await desk.revocations.revoke("still-valid", expires_at=now + timedelta(hours=12))
    desk.clock.advance(timedelta(hours=2))
    assert (await desk.retention.prune())["revoked_sessions"] == 1
    assert not await desk.revocations.is_revoked("soon-expired")  # its cookie is refused by its age now
    assert await desk.revocations.is_revoked("still-valid")

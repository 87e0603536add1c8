"""The outbox: bounded sends, fencing after a lost lease, chains that keep order."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import select

from bot.models import OutboxItem
from channels.base import TransientChannelError
from tests.conftest import StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def test_a_provider_that_never_answers_fails_the_dispatch_in_time(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted}, handoff={"dispatch_timeout": "200ms"})
    harness.desk.channels.get(1).gate = asyncio.Event()  # never set: the provider hangs
    cid = await harness.conversation()
    result = await asyncio.wait_for(harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    }), timeout=10)
    assert result["error"] == "dispatch_failed" and "did not answer in time" in result["details"]["hint"]
    assert (await harness.say(cid, "hello"))["routed_to"] == "agent"


async def test_a_stale_worker_cannot_overwrite_the_record_of_the_one_that_took_over(
    start_desk: StartDesk, scripted, sqlite_url: str
) -> None:
    first = await start_desk(adapters={1: scripted})
    cid = await first.conversation()
    await first.start_handoff(cid)
    await first.desk.outbox.stop()
    channel_a = first.desk.channels.get(1)
    channel_a.gate = asyncio.Event()
    await first.say(cid, "hello")
    stuck = asyncio.create_task(first.desk.outbox.drain())  # instance A claims the relay, then hangs
    await channel_a.entered.wait()

    second = await start_desk(adapters={1: scripted}, url=sqlite_url, clock=first.desk.clock)
    await second.desk.outbox.stop()
    first.desk.clock.advance(timedelta(seconds=61))  # A's lease runs out
    await second.desk.outbox.drain()  # instance B re-claims and delivers
    assert second.desk.channels.get(1).texts("relay") == ["Ana: hello"]

    channel_a.gate.set()  # A finally hears back from its provider
    await stuck
    async with second.desk.db.read() as session:
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
    assert (relay.state, relay.attempts) == ("sent", 2)  # B's record stands
    kinds = await second.kinds(relay.handoff_session_id)
    assert kinds.count("relayed_to_recipient") == 1 and kinds.count("delivery_claim_lost") == 1


async def test_a_backlog_of_one_handoff_drains_in_one_pass_in_order(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    await harness.desk.outbox.stop()
    for i in range(30):
        await harness.say(cid, f"m{i}")
    started = await harness.desk.outbox.deliver_due()
    assert started == 1  # one chain for the one handoff…
    await harness.desk.outbox.wait_in_flight()
    assert harness.desk.channels.get(1).texts("relay") == [f"Ana: m{i}" for i in range(30)]  # …that carried all of it


async def test_relays_keep_retrying_while_the_handoff_lasts(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted}, delivery={"max_attempts": 2, "base_backoff": "1s"})
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.desk.outbox.stop()
    channel.fail_next(*[TransientChannelError("down")] * 4)
    await harness.say(cid, "are you there?")
    for _ in range(4):
        await harness.desk.outbox.drain()
        harness.desk.clock.advance(timedelta(minutes=11))
    await harness.desk.outbox.drain()
    assert channel.texts("relay") == ["Ana: are you there?"]  # past max_attempts, still delivered
    assert "delivery_failed" not in await harness.kinds(sid)


async def test_a_send_that_timed_out_but_landed_is_reconciled_not_repeated(start_desk: StartDesk) -> None:
    from tests.fakes import ReconcilingChannel

    harness = await start_desk(adapters={1: ReconcilingChannel}, delivery={"base_backoff": "1ms"})
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.desk.outbox.stop()
    channel.land_then_time_out = 1
    await harness.say(cid, "only once please")
    await harness.desk.outbox.drain()  # lands, then "times out": scheduled for a retry
    harness.desk.clock.advance(timedelta(seconds=5))
    await harness.desk.outbox.drain()  # the retry asks the provider first
    assert channel.texts("relay") == ["Ana: only once please"]
    assert channel.lookups and channel.lookups[0].startswith("hd_")
    kinds = await harness.kinds(sid)
    assert kinds.count("delivery_retry_scheduled") == 1 and kinds.count("relayed_to_recipient") == 1

"""The outbox: bounded sends, fencing after a lost lease, chains that keep order."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlmodel import col

from bot.store.models import DeskInstance, OutboxItem
from bot.store.vocabulary import HandoffState
from channels.base import Notice, TransientChannelError, stored_outbound
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
    assert result["error"] == "dispatch_failed"
    assert "did not answer in time" in result["details"]["hint"]
    assert (await harness.say(cid, "hello"))["routed_to"] == "agent"


async def two_instances_one_hung_relay(
    start_desk: StartDesk, scripted: Any, url: str, *, lease_run_out: bool = True,
) -> tuple[Any, Any, Any, Any]:
    """Instance A has claimed a relay and hangs at its provider; instance B shares the
    database, and (with `lease_run_out`) A's lease has just run out. Returns (A, B, A's
    channel, A's drain task)."""
    first = await start_desk(adapters={1: scripted})
    cid = await first.conversation()
    await first.start_handoff(cid)
    await first.desk.outbox.stop()
    channel_a = first.desk.channels.get(1)
    channel_a.gate = asyncio.Event()
    await first.say(cid, "hello")
    stuck = asyncio.create_task(first.desk.outbox.drain())
    await channel_a.entered.wait()
    second = await start_desk(adapters={1: scripted}, url=url, clock=first.desk.clock)
    await second.desk.outbox.stop()
    if lease_run_out:
        first.desk.clock.advance(timedelta(seconds=61))
    return first, second, channel_a, stuck


async def test_a_stale_worker_cannot_overwrite_the_record_of_the_one_that_took_over(
    start_desk: StartDesk, scripted, sqlite_url: str
) -> None:
    first, second, channel_a, stuck = await two_instances_one_hung_relay(start_desk, scripted, sqlite_url)
    await second.desk.outbox.drain()  # instance B re-claims and delivers
    assert second.desk.channels.get(1).texts("relay") == ["Ana: hello"]

    channel_a.gate.set()  # A finally hears back from its provider
    await stuck
    async with second.desk.db.read() as session:
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
    assert (relay.state, relay.attempts) == ("sent", 2)  # B's record stands
    kinds = await second.kinds(relay.handoff_session_id)
    assert kinds.count("relayed_to_recipient") == 1
    assert kinds.count("delivery_claim_lost") == 1


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
    assert channel.lookups
    assert channel.lookups[0].startswith("hd_")
    kinds = await harness.kinds(sid)
    assert kinds.count("delivery_retry_scheduled") == 1
    assert kinds.count("relayed_to_recipient") == 1


async def test_messages_sent_while_one_is_in_flight_keep_their_order(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})  # the outbox runs: claims at enqueue, sends after commit
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    channel.entered.clear()
    held = channel.gate = asyncio.Event()
    await harness.say(cid, "one")
    await channel.entered.wait()  # "one" is at the provider, unanswered
    channel.gate = None  # any other send would go straight through
    for text in ("two", "three", "four"):
        await harness.say(cid, text)
    held.set()
    await harness.desk.settle()
    assert channel.texts("relay") == ["Ana: one", "Ana: two", "Ana: three", "Ana: four"]


async def test_a_stale_claim_is_fenced_while_the_new_owner_is_still_sending(
    start_desk: StartDesk, scripted, sqlite_url: str
) -> None:
    first, second, channel_a, stuck_a = await two_instances_one_hung_relay(start_desk, scripted, sqlite_url)
    channel_b = second.desk.channels.get(1)
    channel_b.gate = asyncio.Event()
    stuck_b = asyncio.create_task(second.desk.outbox.drain())  # B re-claims (attempt 2) and hangs too
    await channel_b.entered.wait()
    channel_a.gate.set()
    await stuck_a  # A's late record must not mark B's attempt done
    async with second.desk.db.read() as session:
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
    assert (relay.state, relay.attempts) == ("sending", 2)
    channel_b.gate.set()
    await stuck_b
    async with second.desk.db.read() as session:
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
    assert relay.state == "sent"
    assert relay.uncertain is False
    kinds = await second.kinds(relay.handoff_session_id)
    assert kinds.count("relayed_to_recipient") == 1
    assert kinds.count("delivery_claim_lost") == 1


async def test_a_send_that_outlives_its_timeout_is_uncertain(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.desk.outbox.stop()
    harness.desk.outbox.send_timeout = 0.05
    channel.gate = asyncio.Event()  # the provider never answers
    await harness.say(cid, "hello?")
    await harness.desk.outbox.drain()
    retry = next(e for e in await harness.events(sid) if e["kind"] == "delivery_retry_scheduled")
    assert retry["detail"]["error_type"] == "UncertainDeliveryError"
    async with harness.desk.db.read() as session:
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
    assert relay.uncertain is True


async def test_an_expired_claim_is_taken_over_with_a_check_first(start_desk: StartDesk) -> None:
    from tests.fakes import ReconcilingChannel

    harness = await start_desk(adapters={1: ReconcilingChannel})
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    await harness.desk.outbox.stop()
    await harness.say(cid, "only once")
    async with harness.desk.db.transaction() as session:  # a worker claimed it, sent it, and died before recording
        relay = (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay"))).one()
        relay.state, relay.attempts = "sending", 1
        relay.lease_until = harness.desk.clock.now() + timedelta(seconds=60)
    await channel.send(stored_outbound(relay.payload).model_copy(update={"delivery_key": relay.delivery_key}))
    harness.desk.clock.advance(timedelta(seconds=61))
    await harness.desk.outbox.drain()
    assert channel.texts("relay") == ["Ana: only once"]
    assert channel.lookups == [relay.delivery_key]


async def test_a_backlog_longer_than_one_chain_is_delivered_and_nothing_stays_claimed(start_desk: StartDesk, scripted) -> None:
    from bot.delivery.outbox import CHAIN_LIMIT

    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    await harness.desk.outbox.stop()
    for i in range(CHAIN_LIMIT + 5):
        await harness.say(cid, f"m{i}")
    await harness.desk.outbox.drain()
    assert len(harness.desk.channels.get(1).texts("relay")) == CHAIN_LIMIT + 5
    async with harness.desk.db.read() as session:
        states = set((await session.scalars(select(OutboxItem.state))).all())
    assert states == {"sent"}


async def test_relays_of_several_handoffs_answered_together_are_each_recorded(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})  # chains of several handoffs share their record transactions
    channel = harness.desk.channels.get(1)
    cids = [await harness.conversation() for _ in range(3)]
    sids = [(await harness.start_handoff(cid))["handoff_session_id"] for cid in cids]
    held = channel.gate = asyncio.Event()
    for round_ in range(2):
        for c, cid in enumerate(cids):
            await harness.say(cid, f"m{round_} from {c}")
    held.set()  # every chain's send is answered at once, the second messages waiting behind
    await harness.desk.settle()
    texts = channel.texts("relay")
    for c in range(3):
        assert [t for t in texts if t.endswith(f"from {c}")] == [f"Ana: m0 from {c}", f"Ana: m1 from {c}"]
    for sid in sids:
        assert (await harness.kinds(sid)).count("relayed_to_recipient") == 2
    async with harness.desk.db.read() as session:
        assert set((await session.scalars(select(OutboxItem.state).where(OutboxItem.purpose == "relay"))).all()) == {"sent"}


async def test_an_item_is_sent_only_once_its_transaction_commits_and_its_chain_is_under_way_at_commit(
    start_desk: StartDesk, scripted,
) -> None:
    harness = await start_desk(adapters={1: scripted})
    desk, channel = harness.desk, harness.desk.channels.get(1)
    sid = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    notice = Notice(handoff_id=sid, text="queued in a transaction", about="routing")

    with pytest.raises(RuntimeError):
        async with desk.db.transaction() as session:
            await desk.outbox.queue(session, channel_id=1, outbound=notice, now=desk.clock.now())
            raise RuntimeError("the step failed after queueing")
    await desk.outbox.drain()
    assert "queued in a transaction" not in channel.texts("notice")
    async with desk.db.read() as session:
        assert (await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "notice"))).all() == []

    async with desk.db.transaction() as session:
        item = await desk.outbox.queue(session, channel_id=1, outbound=notice, now=desk.clock.now())
    # nothing else ran since the commit: the chain was registered by it, not by a worker pass
    await desk.outbox.wait_in_flight()
    assert channel.texts("notice")[-1:] == ["queued in a transaction"]
    async with desk.db.read() as session:
        assert (await session.get(OutboxItem, item.id)).state == "sent"


async def test_what_an_instance_that_stopped_beating_was_sending_is_taken_over_without_waiting_out_a_lease(
    start_desk: StartDesk, scripted: Any, sqlite_url: str,
) -> None:
    """A's relay hangs at its provider; B takes nothing while A beats, and takes the relay
    over as soon as A's heartbeat is a heartbeat old (no clock advanced: the lease is not
    what ends the claim). The provider may have A's attempt too, so the trail says so."""
    first, second, channel_a, stuck = await two_instances_one_hung_relay(start_desk, scripted, sqlite_url, lease_run_out=False)
    dead_after = second.desk.instances.dead_after
    assert await second.desk.outbox.take_over(dead_after) == 0  # A is alive: its send is its own

    async with first.desk.db.transaction() as session:  # A's last beat, a heartbeat and more ago
        await session.execute(update(DeskInstance).where(col(DeskInstance.id) == first.desk.instances.id)
                              .values(beat_at=DeskInstance.beat_at - dead_after - 1))
    assert await second.desk.outbox.take_over(dead_after) == 1
    assert second.desk.metrics.registry.get_sample_value("handoff_taken_over_total", {"what": "outbox_item"}) == 1
    await second.desk.outbox.drain()
    assert second.desk.channels.get(1).texts("relay") == ["Ana: hello"]
    channel_a.gate.set()
    await stuck
    [handoff] = await second.desk.queries.handoffs(states=(HandoffState.ACTIVE,), limit=1)
    [delivered] = [e for e in await second.events(handoff.id) if e["kind"] == "relayed_to_recipient"]
    assert delivered["detail"]["maybe_duplicated"] is True
    assert (await second.kinds(handoff.id)).count("delivery_claim_lost") == 1  # A's late success is not recorded as well


async def test_a_stopped_desk_leaves_so_its_claims_are_taken_over_at_once(start_desk: StartDesk, scripted: Any, sqlite_url: str) -> None:
    """A leaves while its relay is still claimed (a send cut off by the stop): B takes it
    at its next pass, without waiting for A's heartbeat to age or its lease to run out."""
    first, second, channel_a, stuck = await two_instances_one_hung_relay(start_desk, scripted, sqlite_url, lease_run_out=False)
    await first.desk.instances.stop()
    async with second.desk.db.read() as session:
        assert list(await session.scalars(select(DeskInstance.id))) == [second.desk.instances.id]
    assert await second.desk.outbox.take_over(second.desk.instances.dead_after) == 1
    await second.desk.outbox.drain()
    assert second.desk.channels.get(1).texts("relay") == ["Ana: hello"]
    channel_a.gate.set()
    await stuck


"""The outbox's pipelined chains (bot/delivery/outbox.py): items queued behind a send are
claimed at insert and sent from memory right after it, and whatever a chain holds goes back
to pending, in order, when it cannot send it: a failure mid-stream, an instance that may be
taken for dead, followers whose leases ran out and that another instance took. On SQLite and
PostgreSQL (the multi-instance paths share one database)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from bot.store.models import OutboxItem
from channels.base import Outbound, Receipt, TransientChannelError
from tests.conftest import StartDesk
from tests.fakes import ScriptedChannel


class FailsOnce(ScriptedChannel):
    """A provider that refuses the first attempt of the messages named in `fail_once` (by
    their text) with a transient error, and takes everything else."""

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self.fail_once: set[str] = set()

    async def record(self, outbound: Outbound) -> Receipt:
        text = getattr(outbound, "text", None)
        if text in self.fail_once:
            self.fail_once.discard(text)
            self.fail_next(TransientChannelError("the provider had a moment"))
        return await super().record(outbound)


async def relay_rows(harness: Any) -> list[OutboxItem]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "relay").order_by(OutboxItem.id))).all())


async def one_held_and_followers(harness: Any, cid: str, followers: int) -> asyncio.Event:
    """"m0" is at the provider, unanswered, and m1… were queued behind it: returns the gate
    that holds m0."""
    channel = harness.desk.channels.get(1)
    channel.entered.clear()
    held = channel.gate = asyncio.Event()
    await harness.say(cid, "m0")
    await channel.entered.wait()
    channel.gate = None  # only m0 waits
    for i in range(1, followers + 1):
        await harness.say(cid, f"m{i}")
    return held


async def test_a_failure_mid_stream_hands_back_what_the_chain_holds_and_the_order_is_kept(start_desk: StartDesk) -> None:
    harness = await start_desk(adapters={1: FailsOnce}, delivery={"base_backoff": "1s"})
    channel = harness.desk.channels.get(1)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    held = await one_held_and_followers(harness, cid, 4)
    # the followers were claimed at insert, by this instance, for the chain carrying m0
    assert [(r.state, r.claimed_by) for r in await relay_rows(harness)] == [("sending", harness.desk.instances.id)] * 5

    channel.fail_once.add("Ana: m1")
    held.set()
    await harness.desk.outbox.wait_in_flight()
    assert channel.texts("relay") == ["Ana: m0"], "nothing may overtake m1, which waits for its retry"
    rows = await relay_rows(harness)
    assert [(r.state, r.claimed_by) for r in rows] == [("sent", None)] + [("pending", None)] * 4, "m2… were handed back"
    assert rows[1].last_error and not any(r.last_error for r in rows[2:])

    harness.desk.clock.advance(timedelta(seconds=5))  # m1's retry is due
    await harness.desk.outbox.drain()
    assert channel.texts("relay") == [f"Ana: m{i}" for i in range(5)]
    kinds = await harness.kinds(sid)
    assert (kinds.count("relayed_to_recipient"), kinds.count("delivery_retry_scheduled")) == (5, 1)


async def test_what_a_chain_holds_is_handed_back_once_its_instance_may_be_taken_for_dead(
    start_desk: StartDesk, scripted: Any, database_url: str,
) -> None:
    """m1 and m2 wait behind m0 in this instance's memory when it leaves (as one whose beats
    stopped would be taken for dead): m0 was already at the provider, m1 and m2 are not sent by
    it but go back to pending, and another instance sends them, in order."""
    first = await start_desk(adapters={1: scripted})
    cid = await first.conversation()
    await first.start_handoff(cid)
    held = await one_held_and_followers(first, cid, 2)
    await first.desk.instances.stop()
    assert not first.desk.instances.holds_claims()
    held.set()
    await first.desk.outbox.wait_in_flight()
    assert first.desk.channels.get(1).texts("relay") == ["Ana: m0"]
    assert [(r.state, r.claimed_by) for r in await relay_rows(first)] == [("sent", None), ("pending", None), ("pending", None)]

    second = await start_desk(adapters={1: scripted}, url=database_url, clock=first.desk.clock)
    await second.desk.outbox.drain()
    assert second.desk.channels.get(1).texts("relay") == ["Ana: m1", "Ana: m2"]


async def test_another_instance_takes_over_followers_whose_lease_ran_out_and_the_first_sends_none_of_them(
    start_desk: StartDesk, scripted: Any, database_url: str,
) -> None:
    """A's chain holds m1 and m2 while m0 hangs at its provider past every lease; B takes the
    three over in order. When A's provider finally answers, A's record of m0 is fenced and
    it sends neither m1 nor m2 (their claims are B's now)."""
    first = await start_desk(adapters={1: scripted})
    cid = await first.conversation()
    sid = (await first.start_handoff(cid))["handoff_session_id"]
    held = await one_held_and_followers(first, cid, 2)
    second = await start_desk(adapters={1: scripted}, url=database_url, clock=first.desk.clock)
    await second.desk.outbox.stop()
    first.desk.clock.advance(timedelta(seconds=61))
    await second.desk.outbox.drain()
    assert second.desk.channels.get(1).texts("relay") == ["Ana: m0", "Ana: m1", "Ana: m2"]

    held.set()
    await first.desk.outbox.wait_in_flight()
    assert first.desk.channels.get(1).texts("relay") == ["Ana: m0"]  # its send in flight, nothing after it
    assert [(r.state, r.attempts) for r in await relay_rows(second)] == [("sent", 2)] * 3
    kinds = await second.kinds(sid)
    assert (kinds.count("relayed_to_recipient"), kinds.count("delivery_claim_lost")) == (3, 1)



async def test_a_follower_that_waited_most_of_its_lease_is_renewed_so_no_one_takes_it_while_it_is_sent(
    start_desk: StartDesk, scripted: Any, database_url: str,
) -> None:
    """m1 waited behind m0 for 55 of its 60 seconds: too little is left to cover a send, so the
    chain renews its claim first (the same claim, one attempt). While m1 is at the provider
    its first lease runs out, and another instance still takes nothing."""
    first = await start_desk(adapters={1: scripted})
    channel = first.desk.channels.get(1)
    cid = await first.conversation()
    sid = (await first.start_handoff(cid))["handoff_session_id"]
    held = await one_held_and_followers(first, cid, 1)
    first.desk.clock.advance(timedelta(seconds=55))
    channel.entered.clear()
    second_held = channel.gate = asyncio.Event()  # m1 will wait at the provider
    held.set()
    await channel.entered.wait()
    first.desk.clock.advance(timedelta(seconds=10))  # 65 s after m1 was claimed
    second = await start_desk(adapters={1: scripted}, url=database_url, clock=first.desk.clock)
    await second.desk.outbox.stop()
    await second.desk.outbox.drain()
    assert second.desk.channels.get(1).texts("relay") == [], "m1's renewed claim holds"

    second_held.set()
    await first.desk.outbox.wait_in_flight()
    assert channel.texts("relay") == ["Ana: m0", "Ana: m1"]
    assert [(r.state, r.attempts) for r in await relay_rows(first)] == [("sent", 1), ("sent", 1)]
    kinds = await first.kinds(sid)
    assert kinds.count("relayed_to_recipient") == 2 and "delivery_claim_lost" not in kinds

"""The idle timer: deadlines in the database, APScheduler for timing, sweeps for restarts."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta

import pytest

from bot.domain.handoffs import HandoffReleased
from bot.runtime.clock import Clock, ManualClock
from bot.store.models import HandoffSession
from tests.conftest import Harness, StartDesk


def released_event(harness: Harness) -> asyncio.Event:
    event = asyncio.Event()
    harness.desk.signals.on(HandoffReleased, lambda _released: event.set())
    return event


async def test_idle_release_with_the_real_scheduler(start_desk: StartDesk) -> None:
    # A real clock and a shrunken timeout: the exact job fires about 0.3 s after activation.
    harness = await start_desk(clock=Clock(), run_timers=True, handoff={"idle_timeout": "300ms"})
    released = released_event(harness)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await asyncio.wait_for(released.wait(), timeout=10)
    handoff = await harness.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "idle_timeout"
    assert handoff["outcome"] == "unresolved"
    assert handoff["released_by"] == "idle timer"
    await harness.desk.settle()
    messages = await harness.messages(cid)
    assert messages[-3]["role"] == "agent"
    assert messages[-3]["text"] == (
        "The conversation with our team ended after 0.3 seconds without messages, so you're back with the assistant.")
    assert messages[-2]["text"] == "[Bot resumed — the handoff ended after 0.3 seconds without activity. Outcome: unresolved.]"
    assert messages[-1]["role"] == "agent"
    assert "Ask me to try reaching a person again" in messages[-1]["text"]


async def test_activity_pushes_the_deadline_out(harness: Harness) -> None:
    clock: ManualClock = harness.desk.clock  # type: ignore[assignment]
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    clock.advance(timedelta(minutes=20))
    await harness.say(cid, "still there?")  # subscriber → recipient bumps the deadline
    clock.advance(timedelta(minutes=11))  # 31 min after the start, 11 after the last message
    assert await harness.desk.timers.sweep() == 0
    assert (await harness.handoff(sid))["state"] == "active"
    late = await harness.desk.handoffs.release_if_idle(sid)  # a stale job firing now changes nothing
    assert not late.released
    clock.advance(timedelta(minutes=20))
    assert await harness.desk.timers.sweep() == 1
    assert (await harness.handoff(sid))["release_reason"] == "idle_timeout"
    assert (await harness.kinds(sid)).count("release_noop") == 1


async def test_recipient_replies_push_the_deadline_out_too(harness: Harness) -> None:
    clock: ManualClock = harness.desk.clock  # type: ignore[assignment]
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    clock.advance(timedelta(minutes=25))
    await harness.desk.handoffs.recipient_message(sid, "Looking into it", author="Sam", via="test")
    assert (await harness.handoff(sid))["idle_deadline"] == (clock.now() + timedelta(minutes=30)).isoformat()


async def test_a_deadline_that_passed_while_stopped_releases_on_start(start_desk: StartDesk, database_url: str) -> None:
    clock = ManualClock()
    first = await start_desk(clock=clock)
    cid = await first.conversation()
    sid = (await first.start_handoff(cid))["handoff_session_id"]
    await first.desk.stop()
    clock.advance(timedelta(hours=2))  # the server was down past the deadline

    second = await start_desk(clock=clock, run_timers=True, url=database_url)
    released = released_event(second)
    await asyncio.wait_for(released.wait(), timeout=10)  # the first sweep runs at start
    handoff = await second.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "idle_timeout"
    await second.desk.settle()
    system = [m for m in await second.messages(cid) if m["role"] == "system"]
    assert len(system) == 1


async def test_near_deadlines_get_exact_jobs_and_far_ones_wait_for_a_sweep(start_desk: StartDesk) -> None:
    harness = await start_desk(clock=Clock(), run_timers=True, handoff={"idle_timeout": "1h", "sweep_interval": "30s"})
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    scheduler = harness.desk.timers.scheduler
    assert scheduler.get_job(f"idle:{sid}") is None  # an hour away: no job held for it yet
    assert scheduler.get_job("idle-sweep") is not None
    other = await harness.conversation("Ben", email=None)
    await harness.desk.handoffs.release((await harness.start_handoff(other))["handoff_session_id"], reason="owner", actor="t")
    async with harness.desk.db.transaction() as session:  # pretend an hour has nearly passed
        handoff = await session.get(HandoffSession, sid)
        handoff.idle_deadline = harness.desk.clock.now() + timedelta(seconds=10)
    await harness.desk.timers.sweep()
    assert scheduler.get_job(f"idle:{sid}") is not None


async def test_a_dispatch_interrupted_by_a_crash_is_failed_by_the_sweep(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    channel = harness.desk.channels.get(1)
    channel.gate = asyncio.Event()  # the provider never answers
    cid = await harness.conversation()
    request = asyncio.create_task(harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    }))
    await channel.entered.wait()
    harness.desk.clock.advance(timedelta(minutes=5))
    await harness.desk.timers.sweep()
    open_list = (await harness.client.get("/api/handoffs", params={"state": "failed"})).json()["handoffs"]
    assert len(open_list) == 1
    assert open_list[0]["failure"] == "the server stopped while this handoff was being dispatched"
    channel.gate.set()  # the provider finally answers: too late, the session stays failed
    result = await request
    assert result["error"] == "dispatch_failed"
    assert result["details"]["human_notified"] is False
    assert (await harness.say(cid, "hello"))["routed_to"] == "agent"


async def test_stopping_while_a_sweep_runs_ends_it_quietly(start_desk: StartDesk, caplog: pytest.LogCaptureFixture) -> None:
    harness = await start_desk(clock=Clock(), run_timers=True)
    timers = harness.desk.timers
    entered, never = asyncio.Event(), asyncio.Event()

    async def slow_step() -> None:
        entered.set()
        await never.wait()  # still running when the server stops

    timers.also_on_sweep.append(slow_step)
    timers.scheduler.modify_job("idle-sweep", next_run_time=datetime.now(UTC))
    await asyncio.wait_for(entered.wait(), timeout=10)
    await timers.stop()
    assert not timers._running
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [], "stopping logged a failed job"


async def test_stopping_cancels_a_running_job_once_so_its_cleanup_can_finish(start_desk: StartDesk) -> None:
    # Database work cut short cleans up on the way out: SQLAlchemy closes the interrupted
    # connection under asyncio.shield. A second cancel landing in that cleanup orphans the close,
    # and the orphan later hangs the event loop's shutdown. This step cleans up the same way.
    harness = await start_desk(clock=Clock(), run_timers=True)
    timers = harness.desk.timers
    entered = asyncio.Event()
    answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleanups_cut_short: list[str] = []

    async def close_the_connection() -> None:
        for _ in range(3):  # a few loop passes, like a round trip to the database thread
            await asyncio.sleep(0)

    async def step_that_cleans_up() -> None:
        entered.set()
        try:
            await answer
        except asyncio.CancelledError:
            try:
                await asyncio.shield(close_the_connection())
            except asyncio.CancelledError:
                cleanups_cut_short.append("cancelled again while closing")
            raise

    timers.also_on_sweep.append(step_that_cleans_up)
    timers.scheduler.modify_job("idle-sweep", next_run_time=datetime.now(UTC))
    await asyncio.wait_for(entered.wait(), timeout=10)
    answer.set_result(None)  # the database answered, and the server stops before the job wakes
    await timers.stop()
    assert cleanups_cut_short == [], "stop() cancelled the job a second time, in its cleanup"

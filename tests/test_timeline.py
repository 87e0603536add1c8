"""bot/web/timeline.py: a handoff's timeline read from the audit trail a real desk wrote, on
a manual clock so the gaps between steps are known."""

from __future__ import annotations

from datetime import timedelta

from bot.runtime.clock import ManualClock
from bot.web.timeline import RELAYS_SHOWN, RelayRun, Row, Step, short_duration, timeline
from tests.conftest import Harness, StartDesk
from tests.test_routes import escalate, reply, route_desk, route_handoff


def label(channel_id: int) -> str:
    return f"#{channel_id}"


def shown(rows: list[Row]) -> list[tuple[str, str, str]]:
    return [(row.kind, row.summary, row.first.since) if isinstance(row, RelayRun) else (row.what, row.detail, row.since)
            for row in rows]


async def rows_of(harness: Harness, sid: str) -> list[Row]:
    handoff = await harness.desk.handoffs.get(sid)
    return timeline(handoff, await harness.desk.queries.events(sid), label)


def clock_of(harness: Harness) -> ManualClock:
    assert isinstance(harness.desk.clock, ManualClock)
    return harness.desk.clock


async def test_a_handoff_to_a_channel_reads_requested_notified_relays_released(harness: Harness) -> None:
    clock = clock_of(harness)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    clock.advance(timedelta(minutes=3))
    await harness.say(cid, "Hello?")
    await harness.desk.settle()
    clock.advance(timedelta(seconds=90))
    await harness.desk.handoffs.recipient_message(sid, "Hi, Sam here.", author="Sam", via="test")
    clock.advance(timedelta(hours=1, minutes=5))
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    assert shown(await rows_of(harness, sid)) == [
        ("Requested", "by agent", ""),
        ("Notified", "Owner inbox", "+0 s"),
        ("Subscriber → person", "", "+3 min"),
        ("Person → subscriber", "Sam", "+1 min 30 s"),
        ("Released", "by agent (api) · Resolved", "+1 h 5 min"),
    ]


async def test_many_relays_in_a_row_are_one_collapsed_row_with_each_inside(harness: Harness) -> None:
    clock = clock_of(harness)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    for n in range(RELAYS_SHOWN):
        clock.advance(timedelta(minutes=1))
        await harness.say(cid, f"Message {n}")
        await harness.desk.settle()
        clock.advance(timedelta(minutes=1))
        await harness.desk.handoffs.recipient_message(sid, f"Answer {n}", author="Sam", via="test")
    rows = await rows_of(harness, sid)
    assert [row.kind for row in rows] == ["requested", "notified", "relays"]
    run = rows[-1]
    assert isinstance(run, RelayRun) and len(run.steps) == 2 * RELAYS_SHOWN
    assert run.summary == f"{2 * RELAYS_SHOWN} messages relayed: {RELAYS_SHOWN} to the person, {RELAYS_SHOWN} to the subscriber"
    assert run.first.since == "+1 min" and run.lasted == f"{2 * RELAYS_SHOWN - 1} min"
    assert all(step.since == "+1 min" for step in run.steps)


async def test_on_a_route_each_recipient_reached_the_escalation_and_the_claim_are_steps(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    _, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await escalate(harness, timedelta(minutes=5))
    clock_of(harness).advance(timedelta(minutes=2))
    await reply(harness, 3, "On it.", "Kim")
    rows = await rows_of(harness, sid)
    steps = [row for row in rows if isinstance(row, Step)]
    shown_steps = [(s.what, s.detail) for s in steps if s.kind != "relay-to-subscriber"]
    # The first step's two dispatches go side by side: each is shown when it was reached,
    # and which of the two is reached first is up to the channels.
    assert shown_steps[0] == ("Requested", "by agent")
    assert sorted(shown_steps[1:3]) == [("Notified", "#1 (step 1)"), ("Notified", "#2 (step 1)")]
    assert shown_steps[3:] == [
        ("Escalated", "to step 2 (nobody claimed)"),
        ("Notified", "#3 (step 2)"),
        ("Claimed", "by Kim"),
    ]
    assert next(s for s in steps if s.kind == "claimed").since == "+2 min"


def test_short_durations_read_at_a_glance() -> None:
    cases = {0: "0 s", 59: "59 s", 90: "1 min 30 s", 600: "10 min", 725: "12 min", 3600: "1 h", 3725: "1 h 2 min",
             86400: "1 d", 90000: "1 d 1 h"}
    assert {seconds: short_duration(timedelta(seconds=seconds)) for seconds in cases} == cases

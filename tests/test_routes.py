"""Routes through a real desk on a manual clock: fan-out to a step's channels, the first claim
taking the handoff (a reply, a Claim press, the return form) and the others told, the ladder
escalating when nobody claims and stopping when someone does, falling back at once when a
step's dispatches fail (refused, or reported lost after acceptance), office hours skipping a
step, the `unclaimed` release, and the config's problems with their key paths."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from bot.config import RouteConfig, StepConfig
from bot.runtime.clock import ManualClock
from channels.base import ClaimPress, DeliveryFailure, Notice, PermanentChannelError, RecipientText, TransientChannelError
from tests.conftest import Harness, StartDesk, config_problem
from tests.fakes import ScriptedChannel
from tests.test_readme import ROOT, doc_blocks

CHANNELS = [
    {"id": 1, "kind": "owner_inbox", "label": "Slack support", "estimated_response": "within 5 minutes"},
    {"id": 2, "kind": "owner_inbox", "label": "Telegram support", "estimated_response": "within 5 minutes"},
    {"id": 3, "kind": "owner_inbox", "label": "On-call phone", "estimated_response": "within 15 minutes"},
]
SUPPORT = {
    "id": 20, "label": "Support", "public_name": "our support team", "estimated_response": "within 10 minutes",
    "steps": [{"notify": [1, 2], "claim_within": "5m"}, {"notify": [3], "claim_within": "10m", "remind": False}],
}
BRIEF = {
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}
MONDAY_NOON = datetime(2026, 12, 7, 11, 0, tzinfo=UTC)  # Mon 12:00 in Berlin


async def route_desk(start_desk: StartDesk, route: dict[str, Any] | None = None, **overrides: Any) -> Harness:
    """A desk with three scripted channels and one route, on a manual clock (`now`, or a shared `clock`)."""
    clock = overrides.pop("clock", None) or ManualClock(overrides.pop("now", MONDAY_NOON))
    return await start_desk(
        clock=clock, adapters={1: ScriptedChannel, 2: ScriptedChannel, 3: ScriptedChannel},
        channels=CHANNELS, routes=[route or SUPPORT], **overrides,
    )


def channel(harness: Harness, cid: int) -> ScriptedChannel:
    adapter = harness.desk.channels.get(cid)
    assert isinstance(adapter, ScriptedChannel)
    return adapter


def notices(harness: Harness, cid: int, about: str) -> list[Notice]:
    return [o for o in channel(harness, cid).sent if isinstance(o, Notice) and o.about == about]


def dispatch_thread(harness: Harness, cid: int) -> str:
    [dispatch] = [o for o in channel(harness, cid).sent if o.purpose == "dispatch"]
    return f"thread-{dispatch.stream}"


async def reply(harness: Harness, cid: int, text: str, author: str) -> str:
    return await harness.desk.inbound.submit_and_wait(
        cid, RecipientText(thread_key=dispatch_thread(harness, cid), text=text, author=author, user_id=f"u-{author}"),
    )


async def route_handoff(harness: Harness) -> tuple[str, dict[str, Any]]:
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    await harness.desk.settle()
    return cid, started


async def escalate(harness: Harness, by: timedelta) -> None:
    harness.desk.clock.advance(by)  # type: ignore[attr-defined]  # a ManualClock
    await harness.desk.timers.sweep()
    await harness.desk.settle()


async def subscriber_told(harness: Harness, cid: str) -> list[str]:
    return [m["text"] for m in await harness.messages(cid) if m["role"] == "agent"]


# --------------------------------------------------------------------------- fan-out and claims


async def test_a_route_is_offered_like_a_channel(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    cid = await harness.conversation()
    [spec] = [s for s in await harness.desk.router.tool_specs(cid) if s.name == "handoff_request"]
    assert "- channel_id 20: Support (route: Slack support + Telegram support, then On-call phone); responds within 10 minutes" \
        in spec.description
    assert spec.input_schema["properties"]["channel_id"]["enum"] == [1, 2, 3, 20]


async def test_fan_out_then_the_first_reply_claims_and_the_others_are_told(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    assert started["human_notified"] is True and started["channel_id"] == 20 and started["channel_kind"] == "route"
    # The request answers once one channel is reached; the other may still be on its way
    assert sorted(started["channels_notified"] + started["channels_pending"]) == [1, 2] and started["channels_failed"] == []
    await harness.desk.settle()
    assert started["estimated_response"] == "within 10 minutes"
    for cid_ in (1, 2):
        [dispatch] = [o for o in channel(harness, cid_).sent if o.purpose == "dispatch"]
        assert "the first to reply (or press Claim) takes it" in dispatch.text
        assert dispatch.brief.claimable is True  # type: ignore[attr-defined]
    assert channel(harness, 3).sent == []
    assert (await subscriber_told(harness, cid))[-1].startswith("I've asked our support team to join — usually within 10 minutes.")

    await harness.say(cid, "Is anyone there?")
    await harness.desk.settle()
    for cid_ in (1, 2):  # before a claim: to every notified thread
        assert [o.text for o in channel(harness, cid_).sent if o.purpose == "relay"] == [
            next(o.text for o in channel(harness, 1).sent if o.purpose == "relay")]

    assert await reply(harness, 2, "Hi Ana, I'm looking at it.", "Tom") == "relayed"
    await harness.desk.settle()
    handoff = await harness.handoff(sid)
    assert (handoff["claimed_by"], handoff["claimed_via"], handoff["channel_id"]) == ("Tom", "channel:2", 2)
    assert handoff["idle_deadline"] is not None and handoff["escalate_at"] is None
    assert (await subscriber_told(harness, cid))[-1] == "Tom from our support team has joined the conversation."
    [taken] = notices(harness, 1, "taken")
    assert taken.text == f"Handoff {taken.short_code} was taken by Tom (Telegram support) at 11:00 UTC. " \
        "Nothing more to do here."
    assert len(notices(harness, 2, "claimed")) == 1

    await harness.say(cid, "Thanks!")
    await harness.desk.settle()
    assert [o.body for o in channel(harness, 2).sent if o.purpose == "relay"] == ["Is anyone there?", "Thanks!"]  # type: ignore[attr-defined]
    assert [o.body for o in channel(harness, 1).sent if o.purpose == "relay"] == ["Is anyone there?"]  # type: ignore[attr-defined]

    # Someone else writing afterwards reaches nobody, and is told who has it
    assert (await reply(harness, 1, "I can take it too", "Eve")).startswith("not relayed: Tom has this handoff")
    await harness.desk.settle()
    assert ("Eve", "I can take it too") not in await harness.human_texts(cid)
    [not_yours] = notices(harness, 1, "not_yours")
    assert "is Tom's; what you wrote here did not reach the subscriber" in not_yours.text
    kinds = await harness.kinds(sid)
    assert kinds.count("handoff_claimed") == 1 and "not_relayed" in kinds


async def test_two_claims_at_once_one_wins_the_other_is_a_noop(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    _, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    results = await asyncio.gather(*(
        harness.desk.inbound.submit_and_wait(cid_, ClaimPress(thread_key=dispatch_thread(harness, cid_), author=name, user_id=name))
        for cid_, name in ((1, "Ann"), (2, "Tom"))
    ))
    await harness.desk.settle()
    assert sorted(r.split(" by ")[0] for r in results) == ["already claimed", "claimed"]
    handoff = await harness.handoff(sid)
    winner = 1 if handoff["claimed_by"] == "Ann" else 2
    loser = 3 - winner
    assert handoff["channel_id"] == winner
    assert len(notices(harness, loser, "taken")) == 1 and notices(harness, winner, "taken") == []
    kinds = await harness.kinds(sid)
    assert kinds.count("handoff_claimed") == 1 and kinds.count("claim_noop") == 1


# --------------------------------------------------------------------------- the ladder


async def test_the_ladder_escalates_when_nobody_claims_and_stops_when_someone_does(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await escalate(harness, timedelta(minutes=4, seconds=59))
    assert channel(harness, 3).sent == []
    await escalate(harness, timedelta(seconds=2))
    assert [o.purpose for o in channel(harness, 3).sent] == ["dispatch"]
    assert (await subscriber_told(harness, cid))[-1].startswith("Still looking for someone")
    handoff = await harness.handoff(sid)
    assert handoff["step"] == 1 and handoff["claimed_at"] is None
    await harness.say(cid, "Hello?")
    await harness.desk.settle()
    for cid_ in (1, 2, 3):  # every step's recipients still hear the subscriber until someone claims it
        assert [o.body for o in channel(harness, cid_).sent if o.purpose == "relay"] == ["Hello?"]  # type: ignore[attr-defined]

    assert await reply(harness, 3, "On it.", "Olga") == "relayed"
    await escalate(harness, timedelta(minutes=20))  # past the last step's deadline: claimed, nothing escalates
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["claimed_by"], handoff["escalate_at"]) == ("active", "Olga", None)
    await escalate(harness, timedelta(minutes=11))  # the idle timer started at the claim (30 minutes)
    assert (await harness.handoff(sid))["release_reason"] == "idle_timeout"
    assert (await harness.kinds(sid)).count("handoff_escalated") == 1
    for cid_ in (1, 2):
        assert len(notices(harness, cid_, "taken")) == 1


async def test_nobody_claims_the_handoff_is_handed_back_honestly(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    await escalate(harness, timedelta(minutes=5))
    await escalate(harness, timedelta(minutes=10))
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"]) == ("released", "unclaimed", "unresolved")
    resumes = [t for t in await harness.system_texts(cid) if t.startswith("[Bot resumed")]
    assert resumes == ["[Bot resumed — nobody was available to take the handoff, so no person has answered. Outcome: unresolved.]"]
    assert "Nobody from our support team was available to take this right now, so you're back with the assistant." in \
        await subscriber_told(harness, cid)  # then the agent, resumed, speaks
    for cid_ in (1, 2, 3):
        assert len(notices(harness, cid_, "released")) == 1
    await escalate(harness, timedelta(minutes=10))  # a second sweep writes nothing more
    assert len([t for t in await harness.system_texts(cid) if t.startswith("[Bot resumed")]) == 1


async def test_a_reminder_goes_to_a_step_that_asks_for_one(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "steps": [{**SUPPORT["steps"][0], "remind": True}, SUPPORT["steps"][1]]}
    harness = await route_desk(start_desk, route)
    await route_handoff(harness)
    await escalate(harness, timedelta(minutes=5))
    for cid_ in (1, 2):
        [reminder] = notices(harness, cid_, "reminder")
        assert "still waiting for someone" in reminder.text


# --------------------------------------------------------------------------- fallback


@pytest.mark.parametrize("error", [
    PermanentChannelError("403 forbidden", hint="the bot was removed from the channel"),
    TransientChannelError("500 server error"),
])
async def test_a_step_whose_dispatches_fail_gives_way_to_the_next_at_once(start_desk: StartDesk, error: Exception) -> None:
    harness = await route_desk(start_desk, handoff={"dispatch_timeout": "1s"}, delivery={"base_backoff": "2s"})
    channel(harness, 1).fail_next(error, error, error)
    channel(harness, 2).fail_next(error, error, error)
    _, started = await route_handoff(harness)
    assert started["human_notified"] is True
    assert started["channels_notified"] == [3] and sorted(started["channels_failed"]) == [1, 2]
    handoff = await harness.handoff(started["handoff_session_id"])
    assert handoff["step"] == 1 and handoff["channel_id"] == 3
    assert "recipient_failed" in await harness.kinds(started["handoff_session_id"])


async def test_every_channel_failing_fails_the_request(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    refused = PermanentChannelError("403", hint="the bot was removed")
    for cid_ in (1, 2, 3):
        channel(harness, cid_).fail_next(refused)
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    assert result["error"] == "dispatch_failed"
    assert result["details"]["human_notified"] is False
    assert sorted(result["details"]["channels_failed"]) == [1, 2, 3]
    assert (await harness.handoff(result["details"]["handoff_session_id"]))["state"] == "failed"
    asked = await harness.say(cid, "Hello?")
    assert asked["routed_to"] == "agent"  # the bypass never began


async def test_a_failure_reported_after_acceptance_moves_the_ladder_on_at_once(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "steps": [{"notify": [1], "claim_within": "30m"}, {"notify": [3], "claim_within": "10m"}]}
    harness = await route_desk(start_desk, route)
    _, started = await route_handoff(harness)
    await harness.desk.inbound.submit_and_wait(1, DeliveryFailure(message_id="msg-1", error="63016", dedupe_key="late-1"))
    await escalate(harness, timedelta(seconds=1))
    assert [o.purpose for o in channel(harness, 3).sent] == ["dispatch"]
    events = await harness.events(started["handoff_session_id"])
    escalated = [e for e in events if e["kind"] == "handoff_escalated"]
    assert len(escalated) == 1


# --------------------------------------------------------------------------- office hours


OFFICE = {"timezone": "Europe/Berlin", "weekly": {"mon-fri": "09:00-18:00"}, "holidays": ["2026-12-25"]}


async def test_a_closed_step_is_skipped(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "steps": [{**SUPPORT["steps"][0], "hours": "office"}, SUPPORT["steps"][1]]}
    harness = await route_desk(start_desk, route, hours={"office": OFFICE}, now=datetime(2026, 12, 25, 10, 0, tzinfo=UTC))
    _, started = await route_handoff(harness)
    assert started["channels_notified"] == [3]
    assert channel(harness, 1).sent == [] and channel(harness, 2).sent == []


async def test_nothing_open_dispatches_anyway_and_says_when_someone_is_back(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "steps": [{"notify": [1, 2], "claim_within": "5m", "hours": "office"}]}
    harness = await route_desk(start_desk, route, hours={"office": OFFICE}, now=datetime(2026, 12, 4, 18, 0, tzinfo=UTC))
    cid = await harness.conversation()
    [spec] = [s for s in await harness.desk.router.tool_specs(cid) if s.name == "handoff_request"]
    assert "Support (route: Slack support + Telegram support); closed now; back Mon 09:00 (Europe/Berlin)" in spec.description
    started = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    assert started["estimated_response"] == "once they are back, Mon 09:00 (Europe/Berlin)"
    assert sorted(started["channels_notified"] + started["channels_pending"]) == [1, 2]  # one reached; the other on its way


async def test_a_route_can_refuse_while_nobody_is_there(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "when_closed": "refuse", "steps": [{"notify": [1, 2], "claim_within": "5m", "hours": "office"}]}
    harness = await route_desk(start_desk, route, hours={"office": OFFICE}, now=datetime(2026, 12, 4, 18, 0, tzinfo=UTC))
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    assert result["error"] == "nobody_available"
    assert result["details"]["hint"] == "nobody on channel_id 20 is available now; someone is back Mon 09:00 (Europe/Berlin)"
    assert channel(harness, 1).sent == []


# --------------------------------------------------------------------------- the config


def routes_problem(routes: list[Any], **more: Any) -> str:
    return config_problem(channels=CHANNELS, routes=routes, **more)


def test_config_problems_name_the_key_path() -> None:
    assert "routes[0].steps[0].notify[1]: no channel with id 9 (configured: 1, 2, 3)" in routes_problem(
        [{**SUPPORT, "steps": [{"notify": [1, 9], "claim_within": "5m"}]}])
    assert "routes[0].id: id 2 is already a channel's" in routes_problem([{**SUPPORT, "id": 2}])
    assert "routes[0].steps[0].hours: no schedule named 'ofice' under hours: (defined: office); did you mean 'office'?" in \
        routes_problem([{**SUPPORT, "steps": [{"notify": [1], "claim_within": "5m", "hours": "ofice"}]}], hours={"office": OFFICE})
    loop = routes_problem([{**SUPPORT, "when_nobody_claims": 21}, {**SUPPORT, "id": 21, "when_nobody_claims": 20}])
    assert "routes fall through in a loop (20 → 21 → 20); end one of them with when_nobody_claims: release" in loop
    assert "routes[0].steps[0].claim_within: must be between 10s and 7d" in routes_problem(
        [{**SUPPORT, "steps": [{"notify": [1], "claim_within": "1s"}]}])
    assert "routes[0].when_nobody_claims: no route with id 99" in routes_problem([{**SUPPORT, "when_nobody_claims": 99}])


# --------------------------------------------------------------------------- two instances, a restart


async def test_two_instances_escalate_once_and_one_claim_wins_across_them(start_desk: StartDesk, database_url: str) -> None:
    clock = ManualClock(MONDAY_NOON)
    first = await route_desk(start_desk, clock=clock)
    second = await route_desk(start_desk, clock=clock, url=database_url)
    cid, started = await route_handoff(first)
    sid = started["handoff_session_id"]
    clock.advance(timedelta(minutes=5))
    await asyncio.gather(first.desk.timers.sweep(), second.desk.timers.sweep(), first.desk.timers.sweep())
    await asyncio.gather(first.desk.settle(), second.desk.settle())
    dispatched = [h for h in (first, second) if any(o.purpose == "dispatch" for o in channel(h, 3).sent)]
    assert len(dispatched) == 1 and len([o for o in channel(dispatched[0], 3).sent if o.purpose == "dispatch"]) == 1
    assert (await first.kinds(sid)).count("handoff_escalated") == 1
    assert [t for t in await subscriber_told(first, cid) if t.startswith("Still looking")] == [
        "Still looking for someone — I've asked more of our support team. Your messages will reach whoever takes it."]

    # A Claim press on the first instance's Slack and a reply on the second's On-call phone, at once
    thread_1 = dispatch_thread(first, 1)
    thread_3 = dispatch_thread(dispatched[0], 3)
    results = await asyncio.gather(
        first.desk.inbound.submit_and_wait(1, ClaimPress(thread_key=thread_1, author="Ann", user_id="U1")),
        second.desk.inbound.submit_and_wait(3, RecipientText(thread_key=thread_3, text="Mine", author="Olga", user_id="+49")),
    )
    await asyncio.gather(first.desk.settle(), second.desk.settle())
    handoff = await first.handoff(sid)
    assert handoff["claimed_by"] in ("Ann", "Olga")
    kinds = await first.kinds(sid)
    assert kinds.count("handoff_claimed") == 1
    assert kinds.count("claim_noop") + kinds.count("not_relayed") == 1
    if handoff["claimed_by"] == "Ann":
        assert results[1].startswith("not relayed: Ann has this handoff")
        assert ("Olga", "Mine") not in await first.human_texts(cid)
    else:
        assert results == ["already claimed by Olga", "relayed"]
    clock.advance(timedelta(minutes=20))  # claimed: past the ladder's end, no instance escalates or releases it
    await asyncio.gather(first.desk.timers.sweep(), second.desk.timers.sweep())
    assert (await first.handoff(sid))["state"] == "active"
    assert (await first.kinds(sid)).count("handoff_escalated") == 1


async def test_a_ladder_deadline_missed_while_stopped_runs_on_start(start_desk: StartDesk, database_url: str) -> None:
    first = await route_desk(start_desk)
    _, started = await route_handoff(first)
    sid = started["handoff_session_id"]
    await first.desk.stop()
    # down past the first step's deadline and what would have been the second's
    second = await route_desk(start_desk, clock=ManualClock(MONDAY_NOON + timedelta(minutes=20)), url=database_url)
    await second.desk.timers.sweep()
    await second.desk.settle()
    await second.desk.timers.sweep()  # the second step's deadline is counted from its own start
    handoff = await second.handoff(sid)
    assert handoff["step"] == 1 and handoff["state"] == "active"  # nothing was skipped silently: step 2 ran
    assert [o.purpose for o in channel(second, 3).sent] == ["dispatch"]


# --------------------------------------------------------------------------- the worked example of docs/routes.md

ROUTES_PAGE = ROOT / "docs" / "routes.md"


async def test_the_docs_worked_example_happens_as_it_says(start_desk: StartDesk) -> None:
    [block] = [b for b in doc_blocks(ROUTES_PAGE) if b.lang == "yaml" and "routes:" in b.body]
    example = yaml.safe_load("\n".join(block.body))
    tuesday_two_pm = datetime(2026, 12, 1, 13, 0, tzinfo=UTC)  # 14:00 in Berlin
    harness = await start_desk(
        clock=ManualClock(tuesday_two_pm), adapters={1: ScriptedChannel, 2: ScriptedChannel, 3: ScriptedChannel}, **example,
    )
    cid, started = await route_handoff(harness)
    assert {k: started[k] for k in ("ok", "human_notified", "channel_id", "channel_kind", "channels_failed", "estimated_response")} \
        == {"ok": True, "human_notified": True, "channel_id": 20, "channel_kind": "route", "channels_failed": [],
            "estimated_response": "within 10 minutes"}
    assert sorted(started["channels_notified"] + started["channels_pending"]) == [1, 2]  # one reached; the other on its way
    await harness.desk.settle()
    assert "I've asked our support team to join — usually within 10 minutes." in (await subscriber_told(harness, cid))[-1]

    await escalate(harness, timedelta(minutes=5))  # 14:05
    assert [len(notices(harness, c, "reminder")) for c in (1, 2)] == [1, 1]
    assert [o.purpose for o in channel(harness, 3).sent] == ["dispatch"]
    assert (await subscriber_told(harness, cid))[-1].startswith("Still looking for someone — I've asked more of our support team.")

    harness.desk.clock.advance(timedelta(minutes=2))  # type: ignore[attr-defined]  # 14:07
    assert await reply(harness, 3, "Hi Ana, Olga here.", "Olga") == "relayed"
    await harness.desk.settle()
    told = await subscriber_told(harness, cid)
    assert told[-1] == "Olga from our support team has joined the conversation."
    for c in (1, 2):
        [taken] = notices(harness, c, "taken")
        assert taken.text.endswith("was taken by Olga (On-call) at 13:07 UTC. Nothing more to do here.")
    await reply(harness, 1, "I'll take it", "Eve")
    await harness.desk.settle()
    [refused] = notices(harness, 1, "not_yours")
    assert refused.text.endswith("is Olga's; what you wrote here did not reach the subscriber.")


def test_the_docs_document_every_route_and_step_key() -> None:
    [block] = [b for b in doc_blocks(ROUTES_PAGE) if b.lang == "yaml" and "routes:" in b.body]
    shown = "\n".join(block.body)
    for key in [*RouteConfig.model_fields, *StepConfig.model_fields]:
        assert f"{key}:" in shown, key


async def test_a_step_s_hours_follow_the_wall_clock_across_a_change_of_summer_time(start_desk: StartDesk) -> None:
    route = {**SUPPORT, "steps": [{"notify": [1], "claim_within": "5m", "hours": "office"}, {"notify": [3], "claim_within": "5m"}]}
    office = {"timezone": "Europe/Berlin", "weekly": {"sun": "09:00-18:00"}}
    # 2026-03-29: 02:00 CET becomes 03:00 CEST, so 06:30 UTC is 08:30 in Berlin (closed) and 07:30 UTC 09:30 (open)
    for at, reached in (("2026-03-29 06:30", [3]), ("2026-03-29 07:30", [1])):
        harness = await route_desk(start_desk, route, hours={"office": office},
                                   now=datetime.fromisoformat(at).replace(tzinfo=UTC))
        _, started = await route_handoff(harness)
        assert started["channels_notified"] == reached, at


async def test_a_claim_from_a_page_leaves_the_channels_out(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    cid, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    claim = await harness.desk.handoffs.claim(sid, by="Owner", via="inbox")
    assert claim.claimed and (await harness.handoff(sid))["claimed_via"] == "inbox"
    again = await harness.desk.handoffs.claim(sid, by="Someone", via="inbox")
    assert not again.claimed and again.handoff.claimed_by == "Owner"
    await harness.say(cid, "Hello?")
    await harness.desk.settle()
    for c in (1, 2):  # told who has it, and relayed nothing more
        assert len(notices(harness, c, "taken")) == 1
        assert [o for o in channel(harness, c).sent if o.purpose == "relay"] == []
    assert ("Hello?" in [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"])


async def test_the_request_answers_once_one_channel_is_reached(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    slow = channel(harness, 2)
    slow.gate = asyncio.Event()  # Telegram support is slow to answer
    cid, started = await asyncio.wait_for(route_handoff_unsettled(harness), timeout=10)
    assert (started["channels_notified"], started["channels_pending"], started["channels_failed"]) == ([1], [2], [])
    slow.gate.set()
    await harness.desk.settle()
    recipients = (await harness.handoff(started["handoff_session_id"]))["recipients"]
    assert [(r["channel_id"], r["state"]) for r in recipients] == [(1, "notified"), (2, "notified")]
    await harness.say(cid, "Still there?")
    await harness.desk.settle()
    for c in (1, 2):
        assert [o.body for o in channel(harness, c).sent if o.purpose == "relay"] == ["Still there?"]  # type: ignore[attr-defined]


async def route_handoff_unsettled(harness: Harness) -> tuple[str, dict[str, Any]]:
    cid = await harness.conversation()
    return cid, await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})


async def test_on_a_route_the_claim_is_the_time_to_a_person(start_desk: StartDesk) -> None:
    harness = await route_desk(start_desk)
    _, started = await route_handoff(harness)
    clock = harness.desk.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(minutes=2))
    await reply(harness, 2, "On it.", "Kim")
    await reply(harness, 2, "Still here.", "Kim")
    registry = harness.desk.metrics.registry
    labels = {"channel_kind": "scripted", "route": "20"}
    assert registry.get_sample_value("handoff_time_to_human_seconds_count", labels) == 1
    assert registry.get_sample_value("handoff_time_to_human_seconds_sum", labels) == 120


async def test_a_person_handing_back_an_unclaimed_handoff_is_its_claim_and_its_time_to_a_person(
    start_desk: StartDesk,
) -> None:
    harness = await route_desk(start_desk)
    _, started = await route_handoff(harness)
    sid = started["handoff_session_id"]
    clock = harness.desk.clock
    assert isinstance(clock, ManualClock)
    clock.advance(timedelta(minutes=3))
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    handoff = await harness.desk.handoffs.get(sid)
    assert (handoff.claimed_via, handoff.time_to_person_seconds, handoff.duration_seconds) == ("owner", 180, 180)
    registry = harness.desk.metrics.registry
    labels = {"channel_kind": "scripted", "route": "20"}
    assert registry.get_sample_value("handoff_time_to_human_seconds_count", labels) == 1
    assert registry.get_sample_value("handoff_time_to_human_seconds_sum", labels) == 180
    assert registry.get_sample_value("handoff_time_to_claim_seconds_sum", {"route": "20", "channel_kind": "scripted"}) == 180

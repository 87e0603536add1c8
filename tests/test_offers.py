"""A route's people through a real desk on a manual clock (bot/domain/offers.py and the ladder
that uses it): a `person:` target offered on their first contact method and claimed in their
own thread, the next contact method when one fails or after `contact_after`, a team's round
robin one person at a time (the next when one lets it pass, fair over many handoffs, nobody
away or at capacity offered), least busy, and nobody available refusing like closed hours.

The channels are scripted providers that can send to one person (`Capabilities.direct`): the
core's side is tested here; each adapter's own direct messages are tested with its SDK
against its fake (tests/test_channel_*.py)."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

from sqlalchemy import update
from sqlmodel import col

from bot.store.models import Person
from bot.store.vocabulary import ReleaseReason
from channels.base import Capabilities, ClaimPress, Dispatch, Outbound, PermanentChannelError, Receipt, RecipientText, Relay
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel

MONDAY_NOON = datetime(2026, 12, 7, 11, 0, tzinfo=UTC)
BRIEF = {
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}
SLACK = {"id": 5, "kind": "slack", "label": "Slack", "bot_token": "xoxb-test", "signing_secret": "s" * 32, "channel": "C0ROOM"}
EMAIL = {"id": 6, "kind": "email", "label": "E-mail", "to": ["desk@example.com"], "from_address": "desk@example.com",
         "smtp": {"host": "127.0.0.1", "port": 2525, "security": "none"}}
PEOPLE = [
    {"id": "olga", "name": "Olga Petrova", "email": "olga@example.com", "contact": ["slack", "email"]},
    {"id": "ben", "name": "Ben Okoye", "email": "ben@example.com", "contact": ["slack", "email"]},
    {"id": "sam", "name": "Sam Okafor", "email": "sam@example.com", "contact": ["slack", "email"]},
    {"id": "ines", "name": "Ines Duarte", "email": "ines@example.com", "contact": ["slack", "email"]},
]


class DirectSlack(ScriptedChannel):
    """Sends to one person as a provider does: each person's brief lands in a thread of its own."""

    kind: ClassVar[str] = "slack"
    capabilities = Capabilities(threads=True, inbound=True, buttons=True, direct=True)

    async def record(self, outbound: Outbound) -> Receipt:
        receipt = await super().record(outbound)
        if isinstance(outbound, Dispatch) and outbound.direct is not None:
            return receipt.model_copy(update={"thread_key": dm_thread(outbound), "thread": {"dm": outbound.direct}})
        return receipt


class DirectEmail(DirectSlack):
    kind: ClassVar[str] = "email"
    capabilities = Capabilities(threads=True, inbound=True, direct=True)


def dm_thread(dispatch: Dispatch) -> str:
    return f"thread-{dispatch.stream}-{dispatch.direct}"


def route(*steps: dict[str, Any]) -> dict[str, Any]:
    return {"id": 20, "label": "Support", "public_name": "our support team", "steps": list(steps)}


async def people_desk(start_desk: StartDesk, *steps: dict[str, Any], **overrides: Any) -> Harness:
    """A desk whose Slack and e-mail channels can reach people directly; everyone has linked
    their Slack account (user id U-<id>)."""
    harness = await start_desk(
        clock=overrides.pop("clock", None) or _clock(), adapters={5: DirectSlack, 6: DirectEmail},
        channels=[SLACK, EMAIL], routes=[route(*steps)], people=overrides.pop("people", PEOPLE), **overrides,
    )
    for person in await harness.desk.people.all():
        await harness.desk.people.link(person.id, "slack", f"U-{person.id}", verified_via="cli", actor="test")
    return harness


def _clock() -> Any:
    from bot.runtime.clock import ManualClock
    return ManualClock(MONDAY_NOON)


def channel(harness: Harness, cid: int) -> ScriptedChannel:
    adapter = harness.desk.channels.get(cid)
    assert isinstance(adapter, ScriptedChannel)
    return adapter


def briefs(harness: Harness, cid: int) -> list[Dispatch]:
    return [o for o in channel(harness, cid).sent if isinstance(o, Dispatch)]


def direct_to(harness: Harness, cid: int) -> list[str | None]:
    return [d.direct for d in briefs(harness, cid)]


async def request(harness: Harness) -> tuple[str, dict[str, Any]]:
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    await harness.desk.settle()
    return cid, started


async def later(harness: Harness, by: timedelta) -> None:
    harness.desk.clock.advance(by)  # type: ignore[attr-defined]  # a ManualClock
    await harness.desk.timers.sweep()
    await harness.desk.settle()


async def reply_in_dm(harness: Harness, cid: int, person: str, text: str = "On it") -> str:
    [dispatch] = [d for d in briefs(harness, cid) if d.direct in (f"U-{person}", f"{person}@example.com")][-1:]
    return await harness.desk.inbound.submit_and_wait(
        cid, RecipientText(thread_key=dm_thread(dispatch), text=text, author=person.title(), user_id=dispatch.direct),
    )


async def offers(harness: Harness, sid: str) -> list[tuple[str | None, str, str, str | None]]:
    """Each recipient of the handoff: (person, channel kind, state, result)."""
    return [(r.person_id, r.channel_kind, r.state, r.result) for r in await harness.desk.handoffs.recipients_of(sid)]


async def audit_kinds(harness: Harness, sid: str) -> list[str]:
    return [e["kind"] for e in (await harness.client.get(f"/api/handoffs/{sid}/events")).json()["events"]]


# --------------------------------------------------------------------------- one person


async def test_a_person_target_is_offered_on_their_first_contact_method_and_claimed_in_their_own_thread(
    start_desk: StartDesk,
) -> None:
    harness = await people_desk(start_desk, {"notify": ["person:olga"], "claim_within": "10m"})
    cid, started = await request(harness)
    assert started.get("ok") and started["human_notified"], started
    assert started["people_offered"] == ["olga"] and started["channels_notified"] == []
    [brief] = briefs(harness, 5)
    assert brief.direct == "U-olga" and brief.brief.claimable and brief.brief.form_url
    assert briefs(harness, 6) == []  # her e-mail is her second method: not needed
    sid = started["handoff_session_id"]
    assert await reply_in_dm(harness, 5, "olga", "Hi Ana, looking now") == "relayed"
    handoff = await harness.desk.handoffs.get(sid)
    assert handoff.claimed_person_id == "olga" and handoff.claimed_by == "Olga Petrova"
    assert await offers(harness, sid) == [("olga", "slack", "notified", "claimed")]
    # her thread is the handoff's line now: the subscriber's next words go there
    await harness.say(cid, "Thanks!")
    await harness.desk.settle()
    relays = [o for o in channel(harness, 5).sent if isinstance(o, Relay)]
    assert relays and relays[-1].thread == {"dm": "U-olga"}
    kinds = await audit_kinds(harness, sid)
    assert "handoff_offered" in kinds and "recipient_notified" in kinds and "handoff_claimed" in kinds


async def test_a_refused_contact_method_falls_back_to_the_person_s_next_one_at_once(start_desk: StartDesk) -> None:
    harness = await people_desk(start_desk, {"notify": ["person:olga"], "claim_within": "10m"})
    channel(harness, 5).fail_next(PermanentChannelError("cannot_dm_user", hint="Slack refused the direct message"))
    _, started = await request(harness)
    assert started["human_notified"], started
    assert direct_to(harness, 6) == ["olga@example.com"]
    assert await offers(harness, started["handoff_session_id"]) == [("olga", "slack", "failed", None), ("olga", "email", "notified", None)]


async def test_contact_after_also_tries_the_next_method_when_they_have_not_claimed(start_desk: StartDesk) -> None:
    harness = await people_desk(start_desk, {"notify": ["person:olga"], "claim_within": "30m", "contact_after": "5m"})
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    assert direct_to(harness, 5) == ["U-olga"] and briefs(harness, 6) == []
    await later(harness, timedelta(minutes=4))
    assert briefs(harness, 6) == []
    await later(harness, timedelta(minutes=2))
    assert direct_to(harness, 6) == ["olga@example.com"]
    await later(harness, timedelta(minutes=10))
    assert len(briefs(harness, 6)) == 1  # once
    assert "contact_next_method" in await audit_kinds(harness, sid)
    # a reply by e-mail claims it like any other thread of hers
    assert await reply_in_dm(harness, 6, "olga") == "relayed"
    assert (await harness.desk.handoffs.get(sid)).claimed_person_id == "olga"


# --------------------------------------------------------------------------- a team


async def test_round_robin_offers_one_person_at_a_time_and_the_next_when_they_let_it_pass(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben", "sam"]}],
    )
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    assert direct_to(harness, 5) == ["U-olga"]
    await later(harness, timedelta(minutes=5))
    assert direct_to(harness, 5) == ["U-olga", "U-ben"]
    assert (await harness.desk.handoffs.get(sid)).turn == 1
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    assert await offers(harness, sid) == [("olga", "slack", "notified", "missed"), ("ben", "slack", "notified", "claimed")]


async def test_round_robin_is_fair_skips_the_away_and_never_goes_past_capacity(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin", "max_concurrent": 2},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben", "sam", "ines"]}],
    )
    async with harness.desk.db.transaction() as session:  # Ines is away
        await session.execute(update(Person).where(col(Person.id) == "ines").values(away_since=MONDAY_NOON))
    kept: list[str] = []  # Sam keeps the handoffs he takes open: at two he is at capacity
    counts: Counter[str] = Counter()
    for _ in range(100):
        _, started = await request(harness)
        sid = started["handoff_session_id"]
        [person] = started["people_offered"]
        counts[person] += 1
        assert await reply_in_dm(harness, 5, person) == "relayed"
        if person == "sam":
            kept.append(sid)
        else:
            await harness.desk.handoffs.release(sid, reason=ReleaseReason.OWNER, actor="test")
        holding = [s for s in kept if (await harness.desk.handoffs.get(s)).state == "active"]
        assert len(holding) <= 2
    assert "ines" not in counts
    assert counts["sam"] == 2, counts
    assert abs(counts["olga"] - counts["ben"]) <= 1, counts


async def test_least_busy_offers_it_to_whoever_holds_the_fewest(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "least_busy"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
    )
    _, first = await request(harness)
    assert first["people_offered"] == ["olga"]
    await reply_in_dm(harness, 5, "olga")  # Olga holds one now
    _, second = await request(harness)
    assert second["people_offered"] == ["ben"]


async def test_a_broadcast_team_offers_everyone_available_at_once_and_the_first_claim_takes_it(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
    )
    _, started = await request(harness)
    assert sorted(started["people_offered"]) == ["ben", "olga"]
    sid = started["handoff_session_id"]
    await reply_in_dm(harness, 5, "ben")
    assert sorted(await offers(harness, sid)) == [("ben", "slack", "notified", "claimed"), ("olga", "slack", "notified", "taken")]


async def test_a_person_who_claims_outside_their_offer_s_thread_still_counts_as_its_claim(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
    )
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    # Ben opens the handoff in the inbox (the link in his message) and claims it there
    claimed = await harness.desk.handoffs.claim(sid, by="Ben Okoye", via="inbox", person_id="ben")
    assert claimed.claimed
    assert sorted(await offers(harness, sid)) == [("ben", "slack", "notified", "claimed"), ("olga", "slack", "notified", "taken")]


async def test_nobody_available_refuses_like_closed_hours(start_desk: StartDesk) -> None:
    people = [{**p, "working_hours": "office"} for p in PEOPLE[:2]]
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}], people=people,
        hours={"office": {"timezone": "Europe/Berlin", "weekly": {"sat": "09:00-18:00"}}},
    )
    cid = await harness.conversation()
    refused = await harness.tool(cid, "handoff_request", {"channel_id": 20, **BRIEF})
    assert refused["error"] == "nobody_available", refused


# --------------------------------------------------------------------------- two instances


async def test_two_instances_make_each_offer_once_and_one_claim_wins(start_desk: StartDesk, database_url: str) -> None:
    clock = _clock()
    step = {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin", "contact_after": "2m"}
    teams = [{"id": "support", "label": "Support", "members": ["olga", "ben"]}]
    first = await people_desk(start_desk, step, teams=teams, clock=clock)
    second = await start_desk(clock=clock, adapters={5: DirectSlack, 6: DirectEmail}, channels=[SLACK, EMAIL],
                              routes=[route(step)], people=PEOPLE, teams=teams, url=database_url)
    _, started = await request(first)
    sid = started["handoff_session_id"]
    clock.advance(timedelta(minutes=2))  # Olga's e-mail is due: tried once, by one instance
    await asyncio.gather(first.desk.timers.sweep(), second.desk.timers.sweep(), first.desk.timers.sweep())
    await asyncio.gather(first.desk.settle(), second.desk.settle())
    assert [d for h in (first, second) for d in direct_to(h, 6)] == ["olga@example.com"]
    clock.advance(timedelta(minutes=3))  # her turn is over: Ben is offered it, once
    await asyncio.gather(first.desk.timers.sweep(), second.desk.timers.sweep(), second.desk.timers.sweep())
    await asyncio.gather(first.desk.settle(), second.desk.settle())
    assert sorted(d for h in (first, second) for d in direct_to(h, 5)) == ["U-ben", "U-olga"]
    assert (await first.kinds(sid)).count("handoff_offered") == 3  # Olga on Slack, then e-mail; Ben on Slack
    # Olga (first instance) and Ben (second) answer at once: one claim wins
    olga = next(d for h in (first, second) for d in briefs(h, 5) if d.direct == "U-olga")
    ben_home = next(h for h in (first, second) if "U-ben" in direct_to(h, 5))
    ben = next(d for d in briefs(ben_home, 5) if d.direct == "U-ben")
    await asyncio.gather(
        first.desk.inbound.submit_and_wait(5, ClaimPress(thread_key=dm_thread(olga), author="Olga", user_id="U-olga")),
        second.desk.inbound.submit_and_wait(5, RecipientText(thread_key=dm_thread(ben), text="Mine", author="Ben", user_id="U-ben")),
    )
    await asyncio.gather(first.desk.settle(), second.desk.settle())
    kinds = await first.kinds(sid)
    assert kinds.count("handoff_claimed") == 1
    results = sorted(r for _, _, _, r in await offers(first, sid))
    assert results.count("claimed") == 1 and "missed" in results


# --------------------------------------------------------------------------- on call, at night

NIGHTS = {
    "id": "nights", "label": "Night on-call", "timezone": "Europe/Berlin",
    "layers": [
        {"name": "primary", "people": ["olga", "ben"], "shift": "1d", "handover": "09:00", "start": "2026-12-07"},
        {"name": "secondary", "people": ["sam"], "shift": "7d", "handover": "09:00", "start": "2026-12-07"},
    ],
}
TUESDAY_0200_BERLIN = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)  # Olga is primary (Mon 09:00 – Tue 09:00), Sam secondary


async def test_at_night_the_on_call_person_is_offered_it_directly_then_their_e_mail_then_the_next_layer(
    start_desk: StartDesk,
) -> None:
    from bot.runtime.clock import ManualClock
    harness = await people_desk(start_desk, {"notify": ["oncall:nights"], "claim_within": "10m"}, oncall=[NIGHTS],
                                clock=ManualClock(TUESDAY_0200_BERLIN))
    channel(harness, 5).fail_next(PermanentChannelError("cannot_dm_user", hint="Slack refused the direct message"))
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    assert started["people_offered"] == ["olga"]
    assert direct_to(harness, 6) == ["olga@example.com"]  # Slack refused her DM: her e-mail at once
    await later(harness, timedelta(minutes=10))  # she sleeps through it: the secondary layer's Sam
    assert direct_to(harness, 5) == ["U-sam"]
    assert await reply_in_dm(harness, 5, "sam", "Awake, on it") == "relayed"
    assert (await harness.desk.handoffs.get(sid)).claimed_person_id == "sam"
    assert await offers(harness, sid) == [
        ("olga", "slack", "failed", None), ("olga", "email", "notified", "missed"), ("sam", "slack", "notified", "claimed")]
    trail = [k for k in await audit_kinds(harness, sid) if k in (
        "handoff_offered", "recipient_failed", "recipient_notified", "handoff_escalated", "handoff_claimed")]
    assert trail == ["handoff_offered", "recipient_failed", "handoff_offered", "recipient_notified",
                     "handoff_offered", "handoff_escalated", "recipient_notified", "handoff_claimed"]


async def test_an_on_call_person_who_is_away_passes_to_the_next_layer_and_the_audit_says_so(start_desk: StartDesk) -> None:
    from bot.runtime.clock import ManualClock
    harness = await people_desk(start_desk, {"notify": ["oncall:nights"], "claim_within": "10m"}, oncall=[NIGHTS],
                                clock=ManualClock(TUESDAY_0200_BERLIN))
    await harness.desk.availability.set_away("olga", note="flu", via="inbox", actor="Olga Petrova")
    _, started = await request(harness)
    assert started["people_offered"] == ["sam"]
    events = (await harness.client.get(f"/api/handoffs/{started['handoff_session_id']}/events")).json()["events"]
    [passed] = [e for e in events if e["kind"] == "offer_passed_over"]
    assert passed["detail"]["why"] == "away" and passed["detail"]["target"] == "oncall:nights", passed


async def test_a_channel_reads_its_people_s_open_lines_from_the_desk_on_start(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m"},
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben"]}],
    )
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    lines = await harness.desk.handoffs.direct_lines(5)
    assert sorted(line.thread["dm"] for line in lines) == ["U-ben", "U-olga"]
    assert {line.handoff_id for line in lines} == {sid}
    await reply_in_dm(harness, 5, "ben")  # Ben has it: Olga's line is no longer hers
    assert [line.thread["dm"] for line in await harness.desk.handoffs.direct_lines(5)] == ["U-ben"]
    await harness.desk.handoffs.release(sid, reason=ReleaseReason.OWNER, actor="test")
    assert await harness.desk.handoffs.direct_lines(5) == []

"""A route's people end to end through the real provider SDKs: a desk on a manual clock with
a Slack channel (slack_sdk against tests/fake_slack.py) and an e-mail channel (aiosmtplib
against a real aiosmtpd, tests/fake_smtp.py), an on-call schedule and a team.

At night the on-call person's Slack direct message is refused (`conversations.open` answers
`user_not_found`), so the desk mails her at once; she sleeps through it, and the next layer's
person gets a direct message (`conversations.open` + `chat.postMessage` to his D… channel),
claims it by replying in its thread, and the subscriber's words follow into his DM. By day
`/handoff away` from Slack takes a person out of the team's round robin until `/handoff back`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bot.runtime.clock import ManualClock
from tests.conftest import Harness, StartDesk
from tests.fake_slack import FakeSlack, message_event, signed_headers
from tests.fake_smtp import FakeSMTP

SLACK, EMAIL, ROUTE = 3, 4, 20
SLACK_TOKEN = "xoxb-test-token"
SLACK_SECRET = "slack-signing-secret-for-tests"
ROOM = "C0HANDOFF"
FORM = "application/x-www-form-urlencoded"
BRIEF = {
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}
TUESDAY_0200_BERLIN = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)
PEOPLE = [
    {"id": "olga", "name": "Olga Petrova", "email": "olga@example.com", "contact": ["slack", "email"]},
    {"id": "sam", "name": "Sam Okafor", "email": "sam@example.com", "contact": ["slack", "email"]},
    {"id": "ben", "name": "Ben Okoye", "email": "ben@example.com", "contact": ["slack", "email"]},
]
NIGHTS = {
    "id": "nights", "label": "Night on-call", "timezone": "Europe/Berlin",
    "layers": [{"name": "primary", "people": ["olga"], "shift": "7d", "start": "2026-12-07"},
               {"name": "secondary", "people": ["sam"], "shift": "7d", "start": "2026-12-07"}],
}
SLACK_IDS = {"olga": "U0OLGA", "sam": "U0SAM", "ben": "U0BEN"}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    # Olga is not in the workspace the bot sees: conversations.open answers user_not_found
    server = await FakeSlack(token=SLACK_TOKEN, channels=(ROOM,), users={"U0SAM": "Sam", "U0BEN": "Ben"}).start()
    yield server
    await server.stop()


@pytest.fixture
async def smtp() -> AsyncIterator[FakeSMTP]:
    server = await FakeSMTP().start()
    yield server
    await server.stop()


def channels(slack: FakeSlack, smtp: FakeSMTP) -> list[dict[str, Any]]:
    return [
        {"id": SLACK, "kind": "slack", "label": "Slack", "bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET,
         "channel": ROOM, "api_base_url": slack.url},
        {"id": EMAIL, "kind": "email", "label": "E-mail", "to": ["desk@example.com"], "from_address": "desk@example.com",
         "smtp": {"host": "127.0.0.1", "port": smtp.port, "security": "none"}},
    ]


async def people_desk(start_desk: StartDesk, slack: FakeSlack, smtp: FakeSMTP, step: dict[str, Any], *,
                      at: datetime, **overrides: Any) -> Harness:
    harness = await start_desk(
        clock=ManualClock(at), channels=channels(slack, smtp), people=PEOPLE,
        routes=[{"id": ROUTE, "label": "Support", "public_name": "our support team", "steps": [step]}],
        delivery={"base_backoff": "10ms"}, **overrides,
    )
    for pid, user in SLACK_IDS.items():  # each linked their Slack account (by code, in real life)
        await harness.desk.people.link(pid, "slack", user, verified_via="code", actor=pid)
    return harness


async def later(harness: Harness, by: timedelta) -> None:
    harness.desk.clock.advance(by)  # type: ignore[attr-defined]  # a ManualClock
    await harness.desk.timers.sweep()
    await harness.desk.settle()


async def signed(harness: Harness, body: bytes, content_type: str) -> Any:
    headers = signed_headers(SLACK_SECRET, body, content_type=content_type)
    return await harness.client.post(f"/webhooks/{SLACK}", content=body, headers=headers)


async def test_at_night_the_on_call_person_is_reached_directly_and_the_next_layer_after_them(
    start_desk: StartDesk, slack: FakeSlack, smtp: FakeSMTP,
) -> None:
    harness = await people_desk(start_desk, slack, smtp, {"notify": ["oncall:nights"], "claim_within": "10m"},
                                at=TUESDAY_0200_BERLIN, oncall=[NIGHTS])
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": ROUTE, **BRIEF})
    assert started.get("ok"), started
    await harness.desk.settle()
    # Slack refused her DM: the brief went to her mailbox alone, with the form link
    assert [c.args["users"] for c in slack.calls_to("conversations.open")] == ["U0OLGA"]
    [mail] = smtp.messages
    assert mail.rcpt_tos == ["olga@example.com"] and "/f/" in mail.part("text/plain")
    assert slack.top_level(ROOM) == []  # nothing in the room: the step names only the schedule

    await later(harness, timedelta(minutes=10))  # she sleeps through it
    dm = slack.directs["U0SAM"]
    [brief] = slack.top_level(dm)
    buttons = [e["action_id"] for b in brief["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert "handoff_claim" in buttons
    reply = message_event(channel=dm, text="Awake, on it", user="U0SAM", thread_ts=brief["ts"])
    assert (await signed(harness, reply, "application/json")).status_code == 200
    await harness.desk.settle()
    handoff = await harness.desk.handoffs.get(started["handoff_session_id"])
    assert handoff.claimed_person_id == "sam" and handoff.claimed_by == "Sam Okafor"
    assert ("Sam Okafor", "Awake, on it") in [(m["author"], m["text"]) for m in await harness.messages(cid) if m["role"] == "human"]
    await harness.say(cid, "Thank you!")  # the subscriber's words follow into Sam's DM thread
    await harness.desk.settle()
    assert any("Thank you!" in m["text"] for m in slack.posts(dm, thread_ts=brief["ts"]))
    events = (await harness.client.get(f"/api/handoffs/{handoff.id}/events")).json()["events"]
    offered = [(e["detail"].get("person_id") or e.get("person_id"), e["detail"].get("contact"))
               for e in events if e["kind"] == "handoff_offered"]
    assert [c for _, c in offered] == ["slack", "email", "slack"], json.dumps(events)[:2000]


async def test_handoff_away_in_slack_takes_a_person_out_of_the_round_robin_until_they_are_back(
    start_desk: StartDesk, slack: FakeSlack, smtp: FakeSMTP,
) -> None:
    harness = await people_desk(
        start_desk, slack, smtp, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"},
        at=datetime(2026, 12, 7, 11, 0, tzinfo=UTC), teams=[{"id": "support", "label": "Support", "members": ["sam", "ben"]}],
    )
    body, path = slack.slash_command(text="away dentist", user="U0SAM")
    assert (await signed(harness, body, FORM)).status_code == 200
    await harness.desk.settle()
    assert (await harness.desk.people.get("sam")).away_since is not None
    assert slack.answers[path] and "away" in json.dumps(slack.answers[path]).lower()
    for _ in range(2):  # Ben gets both while Sam is away
        cid = await harness.conversation()
        started = await harness.tool(cid, "handoff_request", {"channel_id": ROUTE, **BRIEF})
        assert started["people_offered"] == ["ben"], started
        await harness.desk.handoffs.release(started["handoff_session_id"], reason="owner", actor="test")  # type: ignore[arg-type]  # the plain word
    body, _ = slack.slash_command(text="back", user="U0SAM")
    assert (await signed(harness, body, FORM)).status_code == 200
    await harness.desk.settle()
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": ROUTE, **BRIEF})
    assert started["people_offered"] == ["sam"], started

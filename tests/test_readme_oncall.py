"""README.md's worked example "At night, the person on call", replayed: its YAML block, read
out of the README as it stands, builds a real desk, and each numbered step happens as the
README says. The Slack and e-mail channels are the scripted providers of tests/test_offers.py
that can send to one person (the core's side is what is replayed; each adapter's own direct
messages are tested against its fake in tests/test_channel_*_direct.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import yaml
from sqlmodel import col, select

from bot.config.loading import expand_env
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffEvent
from channels.base import PermanentChannelError
from tests.conftest import StartDesk
from tests.test_offers import BRIEF, DirectEmail, DirectSlack, channel, direct_to, later, offers, reply_in_dm
from tests.test_readme import README, doc_blocks

SECTION = "At night, the person on call"
TUESDAY_0200_BERLIN = datetime(2026, 12, 8, 1, 0, tzinfo=UTC)
ENV = {"SLACK_BOT_TOKEN": "xoxb-readme", "SLACK_SIGNING_SECRET": "s" * 32}


def readme_config() -> dict[str, Any]:
    [block] = [b for b in doc_blocks(README) if b.section == SECTION and b.lang == "yaml"]
    config, problems = expand_env(yaml.safe_load("\n".join(block.body)), ENV)
    assert problems == [], problems
    return dict(config)


def test_the_section_is_short_and_numbers_its_steps() -> None:
    text = README.read_text(encoding="utf-8")
    section = text.split(f"## {SECTION}", 1)[1].split("\n## ", 1)[0]
    assert [line[:3] for line in section.splitlines() if line[:1].isdigit()] == ["1. ", "2. ", "3. ", "4. ", "5. "]
    assert len(section.splitlines()) <= 42
    assert "tests/test_readme_oncall.py" in section


async def test_the_readme_night_happens_as_it_says(start_desk: StartDesk) -> None:
    config = readme_config()
    assert [c["kind"] for c in config["channels"]] == ["slack", "email"]
    [route] = config["routes"]
    harness = await start_desk(clock=ManualClock(TUESDAY_0200_BERLIN), adapters={5: DirectSlack, 6: DirectEmail}, **config)
    for person in await harness.desk.people.all():  # each has linked their Slack account (a code sent from it)
        await harness.desk.people.link(person.id, "slack", f"U-{person.id}", verified_via="code", actor="test")

    # 1. 02:00: the agent hands to route 20; Olga is the primary layer's person tonight
    channel(harness, 5).fail_next(PermanentChannelError("cannot_dm_user", hint="Slack refused the direct message"))
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": route["id"], **BRIEF})
    await harness.desk.settle()
    assert started["human_notified"] and started["people_offered"] == ["olga"], started
    sid = started["handoff_session_id"]

    # 2. her Slack direct message is refused: her e-mail at once
    assert direct_to(harness, 5) == [] and direct_to(harness, 6) == ["olga@example.com"]

    # 3. 02:10, nobody claimed it: the secondary layer's Sam, in his Slack direct message
    await later(harness, timedelta(minutes=10))
    assert direct_to(harness, 5) == ["U-sam"] and direct_to(harness, 6) == ["olga@example.com"]

    # 4. Sam answers there: he has it, and the subscriber reads his answer
    assert await reply_in_dm(harness, 5, "sam", "Awake, on it") == "relayed"
    await harness.desk.settle()
    handoff = await harness.desk.handoffs.get(sid)
    assert (handoff.claimed_person_id, handoff.claimed_by) == ("sam", "Sam Okafor")
    assert "Awake, on it" in [m["text"] for m in await harness.messages(cid)]
    assert await offers(harness, sid) == [
        ("olga", "slack", "failed", None), ("olga", "email", "notified", "missed"), ("sam", "slack", "notified", "claimed")]

    # 5. the audit trail, step by step
    events = (await harness.client.get(f"/api/handoffs/{sid}/events")).json()["events"]
    trail = [e for e in events if e["kind"] in (
        "handoff_offered", "recipient_failed", "recipient_notified", "handoff_escalated", "handoff_claimed")]
    assert [e["kind"] for e in trail] == [
        "handoff_offered", "recipient_failed", "handoff_offered", "recipient_notified",
        "handoff_offered", "handoff_escalated", "recipient_notified", "handoff_claimed"]
    # each offer's row names the person it went to (the events API shows the contact and the layer)
    async with harness.desk.db.transaction() as session:
        rows = (await session.scalars(select(HandoffEvent).where(
            col(HandoffEvent.handoff_session_id) == sid, col(HandoffEvent.kind) == "handoff_offered").order_by(
            col(HandoffEvent.id)))).all()
    assert [(r.person_id, r.detail["contact"]) for r in rows] == [("olga", "slack"), ("olga", "email"), ("sam", "slack")]
    assert (rows[0].detail["layer"], rows[2].detail["layer"]) == ("primary", "secondary")
    [escalated] = [e for e in trail if e["kind"] == "handoff_escalated"]
    assert (escalated["detail"]["from_turn"], escalated["detail"]["to_turn"]) == (0, 1), escalated  # turns count from 0
    assert escalated["detail"]["offered"] == ["sam"] and escalated["detail"]["why"] == "nobody_claimed"
    assert trail[-1]["actor"] == "Sam Okafor", trail[-1]

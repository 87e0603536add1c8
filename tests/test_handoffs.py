"""The handoff lifecycle over the real HTTP API: dispatch, failure, every release path, races."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from bot.domain import conversations
from bot.domain.handoffs import OnTheLine, parse_release_command
from bot.runtime.clock import ManualClock
from bot.store.models import Conversation, HandoffSession, Message, OutboxItem
from bot.store.vocabulary import Role
from channels.base import PermanentChannelError, RecipientText, TransientChannelError
from tests.conftest import Harness, StartDesk

SUCCESS_KEYS = {
    "ok", "action", "channel_kind", "channel_id", "channel_label", "channel_message_id", "estimated_response",
    "handoff_event_id", "handoff_session_id", "human_notified",
}


async def count(harness: Harness, model: type, *where: object) -> int:
    async with harness.desk.db.transaction() as session:
        return int(await session.scalar(select(func.count()).select_from(model).where(*where)) or 0)


async def test_handoff_request_starts_an_active_session(harness: Harness) -> None:
    cid = await harness.conversation()
    result = await harness.start_handoff(cid, urgency="high", extra_context={"order": "1234"})
    assert set(result) == SUCCESS_KEYS
    assert result["action"] == "handoff_session_started"
    assert result["channel_kind"] == "owner_inbox"
    assert result["channel_id"] == 1
    assert result["channel_label"] == "Owner inbox"
    assert result["estimated_response"] == "within 1 business day"
    assert result["human_notified"] is True
    sid = result["handoff_session_id"]
    assert result["channel_message_id"] == f"inbox:{sid}"

    handoff = await harness.handoff(sid)
    assert handoff["state"] == "active"
    assert handoff["contact_back_email"] == "ana@example.com"  # defaults to the subscriber's email
    assert handoff["urgency"] == "high"
    assert handoff["extra_context"] == {"order": "1234"}
    now = harness.desk.clock.now()
    assert handoff["idle_deadline"] == (now + timedelta(minutes=30)).isoformat()
    events = await harness.events(sid)
    assert [e["kind"] for e in events] == ["handoff_requested", "handoff_activated"]
    assert events[0]["id"] == result["handoff_event_id"]


async def test_who_is_on_the_line_is_decided_by_replies_not_by_the_dispatch(harness: Harness) -> None:
    handoffs = harness.desk.handoffs
    cid = await harness.conversation()
    assert await handoffs.on_the_line(cid) is None
    first = (await harness.start_handoff(cid))["handoff_session_id"]
    waiting = OnTheLine(joined=False, name="our team", estimated_response="within 1 business day")
    assert await handoffs.on_the_line(cid) == waiting  # notified is not joined
    await handoffs.recipient_message(first, "Hi, Sam here.", author="Sam", via="test")
    await handoffs.recipient_message(first, "Kim too.", author="Kim", via="test")
    assert await handoffs.on_the_line(cid) == OnTheLine(joined=True, name="Sam", estimated_response="within 1 business day")
    await harness.client.post(f"/api/handoffs/{first}/release", json={})
    assert await handoffs.on_the_line(cid) is None
    await harness.start_handoff(cid)
    assert await handoffs.on_the_line(cid) == waiting  # the earlier handoff's replies do not count for this one


async def test_dispatch_text_carries_the_brief_and_transcript(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    await harness.say(cid, "Hello there")
    await harness.start_handoff(cid, expected_return=[{"name": "eta_date", "type": "date", "required": True, "label": "ETA"}])
    dispatch = harness.desk.channels.get(1).sent[0]
    assert dispatch.purpose == "dispatch"
    assert "Ana's order #1234 is a week late" in dispatch.text
    assert "What to do:\nLook up order #1234" in dispatch.text
    assert "  • ETA [date, YYYY-MM-DD] (required)" in dispatch.text
    assert "  Ana: Hello there" in dispatch.text
    assert dispatch.brief is not None
    assert dispatch.brief.transcript[0].text == "Hello there"
    assert dispatch.subject
    assert dispatch.subject.startswith(f"[Handoff {dispatch.brief.short_code}] Ana's order")


async def test_transcript_is_left_out_when_not_wanted(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    await harness.say(cid, "A private detail")
    await harness.start_handoff(cid, include_transcript=False)
    dispatch = harness.desk.channels.get(1).sent[0]
    assert "A private detail" not in dispatch.text
    assert dispatch.brief.transcript == []


async def test_permanent_dispatch_failure_fails_the_session_and_keeps_the_agent(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    harness.desk.channels.get(1).fail_next(PermanentChannelError("chat not found", hint="the bot is not in chat -100"))
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    })
    assert result["error"] == "dispatch_failed"
    details = result["details"]
    assert details["human_notified"] is False
    assert "the bot is not in chat -100" in details["hint"]
    sid = details["handoff_session_id"]
    handoff = await harness.handoff(sid)
    assert handoff["state"] == "failed"
    assert handoff["failure"] == "the bot is not in chat -100"
    assert await harness.kinds(sid) == ["handoff_requested", "delivery_failed", "dispatch_failed"]
    # the bypass was never activated: the next message still goes to the agent
    body = await harness.say(cid, "hello?")
    assert body["routed_to"] == "agent"
    assert body["replies"]


async def test_transient_dispatch_errors_are_retried(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted}, delivery={"base_backoff": "1ms"})
    channel = harness.desk.channels.get(1)
    channel.fail_next(TransientChannelError("429", retry_after=0.001), TransientChannelError("timeout"))
    cid = await harness.conversation()
    result = await harness.start_handoff(cid)
    assert result["channel_message_id"] == "msg-1"
    kinds = await harness.kinds(result["handoff_session_id"])
    assert kinds == ["handoff_requested", "delivery_retry_scheduled", "delivery_retry_scheduled", "handoff_activated"]


async def test_transient_errors_beyond_the_attempt_limit_fail(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted}, delivery={"base_backoff": "1ms", "max_attempts": 2})
    harness.desk.channels.get(1).fail_next(TransientChannelError("503"), TransientChannelError("503"))
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    })
    assert result["error"] == "dispatch_failed"
    assert result["details"]["attempts"] == 2


async def test_an_adapter_crash_is_a_failed_dispatch_not_a_500(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted}, delivery={"base_backoff": "1ms", "max_attempts": 1})
    harness.desk.channels.get(1).fail_next(RuntimeError("bug in adapter"))
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    })
    assert result["error"] == "dispatch_failed"
    assert "internal error in the channel adapter" in result["details"]["hint"]


async def test_one_open_handoff_per_conversation(harness: Harness) -> None:
    cid = await harness.conversation()
    first = await harness.start_handoff(cid)
    second = await harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "Another summary long enough to pass.", "expected_action": "Do another thing.",
    })
    assert second["error"] == "handoff_already_active"
    assert second["details"]["active_handoff_session_id"] == first["handoff_session_id"]
    assert first["handoff_session_id"] in second["details"]["hint"]
    assert second["details"]["handoff_event_id"]


async def test_concurrent_requests_start_exactly_one_handoff(harness: Harness) -> None:
    cid = await harness.conversation()
    body = {"channel_id": 1, "summary": "Concurrent summary long enough.", "expected_action": "Do the thing now."}
    results = await asyncio.gather(*(harness.tool(cid, "handoff_request", body) for _ in range(6)))
    assert sum(bool(r.get("ok")) for r in results) == 1
    assert {r["error"] for r in results if not r.get("ok")} == {"handoff_already_active"}
    assert await count(harness, HandoffSession, HandoffSession.conversation_id == cid) == 1


async def test_owner_release_writes_one_resume_message_with_returned_data(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, expected_return=[
        {"name": "order_status", "type": "enum", "enum_values": ["shipped", "lost"], "required": True},
        {"name": "eta_date", "type": "date", "required": True},
        {"name": "items", "type": "number"},
    ]))["handoff_session_id"]
    response = await harness.client.post(f"/api/handoffs/{sid}/release", json={
        "outcome": "needs_followup", "note": "Carrier will call back.",
        "return_values": {"order_status": "shipped", "items": "3"},
    })
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["released"] is True
    handoff = body["handoff"]
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "owner"
    assert handoff["returned"] == {"order_status": "shipped", "items": 3}
    assert handoff["missing_required"] == ["eta_date"]
    assert handoff["idle_deadline"] is None
    system = [m for m in await harness.messages(cid) if m["role"] == "system"]
    assert [m["text"] for m in system] == [
        "[Bot resumed — the owner released the conversation. Outcome: needs_followup. Carrier will call back.]\n"
        "Returned data:\n  • order_status: shipped\n  • items: 3\nMissing required: eta_date"
    ]
    released = next(e for e in await harness.events(sid) if e["kind"] == "handoff_released")
    assert released["detail"]["missing_required"] == ["eta_date"]
    assert released["detail"]["reason"] == "owner"


async def test_the_agent_resumes_after_release(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, expected_return=[{"name": "resolution", "type": "multiline"}]))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"return_values": {"resolution": "Refunded"}})
    await harness.desk.settle()
    roles = [(m["role"], m["text"]) for m in await harness.messages(cid)]
    assert roles[-2][0] == "system"
    assert roles[-1][0] == "agent"
    assert "Our team noted: Refunded." in roles[-1][1]


async def test_recipient_release_token_releases(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    outcome = await harness.desk.inbound.submit_and_wait(
        1, RecipientText(thread_key=sid, text="/release unresolved customer unreachable", author="Sam")
    )
    assert outcome == "released"
    handoff = await harness.handoff(sid)
    assert (handoff["release_reason"], handoff["outcome"], handoff["note"], handoff["released_by"]) == (
        "release_token", "unresolved", "customer unreachable", "Sam")
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system == ["[Bot resumed — the recipient released the conversation. Outcome: unresolved. customer unreachable]"]


async def test_sibling_agent_releases_with_handoff_release(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, expected_return=[{"name": "eta_date", "type": "date"}]))["handoff_session_id"]
    sibling = (await harness.client.post("/api/conversations", json={"serves_handoff_session_id": sid})).json()["conversation_id"]
    tools = (await harness.client.get(f"/api/conversations/{sibling}/tools")).json()["tools"]
    assert [t["name"] for t in tools] == ["handoff_release"]  # no handoff_request back: no ping-pong
    wrong = await harness.tool(sibling, "handoff_release", {"handoff_session_id": "hs_other", "outcome": "resolved"})
    assert wrong["error"] == "invalid_input"
    assert wrong["details"]["field"] == "handoff_session_id"
    result = await harness.tool(sibling, "handoff_release", {
        "handoff_session_id": sid, "outcome": "resolved", "note": "Looked up order 1234.",
        "return_values": {"eta_date": "2026-06-10"},
    })
    assert result == {
        "ok": True, "action": "handoff_released", "handoff_session_id": sid, "outcome": "resolved",
        "returned": {"eta_date": "2026-06-10"}, "missing_required": [],
    }
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system == [
        "[Bot resumed — the sibling agent has handed control back. Outcome: resolved. Looked up order 1234.]\n"
        "Returned data:\n  • eta_date: 2026-06-10"
    ]
    again = await harness.tool(sibling, "handoff_release", {"handoff_session_id": sid, "outcome": "resolved"})
    assert again["error"] == "handoff_not_active"
    assert "released: agent" in again["details"]["hint"]


async def test_concurrent_releases_produce_exactly_one_resume_message(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    harness.desk.clock.advance(timedelta(hours=1))  # the idle deadline has passed too
    handoffs = harness.desk.handoffs
    attempts = [handoffs.release(sid, reason="owner", actor=f"owner-{i}") for i in range(8)]
    attempts += [handoffs.release_if_idle(sid) for _ in range(4)]
    attempts += [handoffs.recipient_message(sid, "/release", author=f"r{i}", via="test") for i in range(4)]
    results = await asyncio.gather(*attempts)
    assert sum(r.released for r in results) == 1
    assert await count(harness, Message, Message.conversation_id == cid, Message.role == "system") == 1
    kinds = await harness.kinds(sid)
    assert kinds.count("handoff_released") == 1
    assert kinds.count("release_noop") == 15


async def test_release_of_an_unknown_or_ended_session(harness: Harness) -> None:
    response = await harness.client.post("/api/handoffs/hs_nope/release", json={})
    assert response.status_code == 404
    assert response.json() == {"error": "not_found", "details": {"hint": "handoff session 'hs_nope' not found"}}
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    assert (await harness.client.post(f"/api/handoffs/{sid}/release", json={})).status_code == 200
    late = await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    assert late.status_code == 409
    assert late.json()["error"] == "handoff_not_active"
    assert late.json()["details"]["state"] == "released"
    assert (await harness.kinds(sid)).count("release_noop") == 1


async def test_a_reply_after_release_is_not_relayed(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{sid}/release", json={})
    outcome = await harness.desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text="one more thing", author="Sam"))
    assert outcome == "no active handoff in this thread"
    assert all(m["role"] != "human" for m in await harness.messages(cid))


async def test_a_new_handoff_can_start_after_release(harness: Harness) -> None:
    cid = await harness.conversation()
    first = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{first}/release", json={})
    second = await harness.start_handoff(cid)
    assert second["handoff_session_id"] != first


@pytest.mark.parametrize(("text", "parsed"), [
    ("/release", (None, None)),
    ("  /release  ", (None, None)),
    ("/release resolved", ("resolved", None)),
    ("/release needs_followup call back Monday", ("needs_followup", "call back Monday")),
    ("/release done, refunded", (None, "done, refunded")),
    ("/release@HandoffBot resolved", ("resolved", None)),
    ("/RELEASE", (None, None)),
    ("/release\nresolved\tShipped Friday", ("resolved", "Shipped Friday")),
    ("/release\n\nthanks, all done", (None, "thanks, all done")),
    ("", None),
    ("please /release", None),
    ("/released it", None),
    ("release", None),
])
def test_release_command_parsing(text: str, parsed: tuple | None) -> None:
    assert parse_release_command(text) == parsed


async def crashed_after_the_dispatch_was_sent(harness: Harness, cid: str, *, sent_ago: timedelta) -> str:
    """The rows a process leaves when it dies after the outbox recorded the dispatch as sent
    and before the handoff service activated the handoff: a `dispatching` session, its
    dispatch `sent` with the receipt, and a subscriber message held for the person."""
    now = harness.desk.clock.now()
    sid = "hs_crashed"
    async with harness.desk.db.transaction() as session:
        session.add(HandoffSession(
            id=sid, conversation_id=cid, channel_id=1, channel_kind="scripted", channel_label="Owner inbox",
            state="dispatching", urgency="normal", summary="Ana's order is late and she wants a person.",
            expected_action="Tell Ana when it arrives.", estimated_response="soon", created_at=now - sent_ago,
        ))
        await session.flush()
        session.add(OutboxItem(
            channel_id=1, handoff_session_id=sid, purpose="dispatch", payload={}, state="sent", attempts=1,
            not_before=now - sent_ago, created_at=now - sent_ago, sent_at=now - sent_ago,
            receipt={"message_id": "msg-9", "thread_key": "thread-crashed", "thread": {"ts": 9}},
        ))
        await conversations.add_message(session, cid, role=Role.SUBSCRIBER, text="are you there?", now=now,
                                        handoff_session_id=sid)
    return sid


async def test_a_dispatch_sent_before_a_crash_is_activated_by_the_sweep_not_failed(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    # older than the stale-dispatch cutoff: only the sent record keeps it from being failed
    sid = await crashed_after_the_dispatch_was_sent(harness, cid, sent_ago=timedelta(hours=1))

    await harness.desk.timers.sweep()
    await harness.desk.settle()

    handoff = await harness.desk.handoffs.get(sid)
    assert handoff.state == "active"
    assert (handoff.thread_key, handoff.channel_message_id, handoff.thread) == ("thread-crashed", "msg-9", {"ts": 9})
    assert handoff.idle_deadline == harness.desk.clock.now() + timedelta(minutes=30)
    assert harness.desk.channels.get(1).texts("relay")[-1].endswith("are you there?")  # type: ignore[union-attr]
    activated = [e for e in await harness.events(sid) if e["kind"] == "handoff_activated"]
    assert [(e["actor"], e["detail"]["held_messages"]) for e in activated] == [("sweeper", 1)]
    assert "dispatch_failed" not in await harness.kinds(sid)

    await harness.desk.timers.sweep()  # the compare-and-set keeps it to one activation
    assert [e["kind"] for e in await harness.events(sid)].count("handoff_activated") == 1


async def test_a_dispatch_sent_a_moment_ago_is_left_to_the_request_that_sent_it(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    sid = await crashed_after_the_dispatch_was_sent(harness, cid, sent_ago=timedelta(seconds=1))
    assert await harness.desk.handoffs.activate_sent_dispatches() == 0
    assert (await harness.handoff(sid))["state"] == "dispatching"
    harness.desk.clock.advance(timedelta(seconds=30))  # type: ignore[attr-defined]
    assert await harness.desk.handoffs.activate_sent_dispatches() == 1


async def test_a_dispatch_failed_as_stuck_while_in_flight_is_never_activated(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    channel = harness.desk.channels.get(1)
    channel.gate = asyncio.Event()  # type: ignore[union-attr]
    cid = await harness.conversation()
    request = asyncio.create_task(harness.tool(cid, "handoff_request", {
        "channel_id": 1, "summary": "A summary that is long enough to pass.", "expected_action": "Do the thing now.",
    }))
    await channel.entered.wait()  # type: ignore[union-attr]
    harness.desk.clock.advance(timedelta(hours=1))  # type: ignore[attr-defined]
    await harness.desk.handoffs.recover_dispatches()  # the sweep takes it for a dispatch a stopped server left
    channel.gate.set()  # type: ignore[union-attr]  # the provider answers after all: too late

    result = await request
    sid = result["details"]["handoff_session_id"]
    assert result == {"error": "dispatch_failed", "details": {
        "hint": "the handoff was cancelled while it was being dispatched", "handoff_event_id": result["details"]["handoff_event_id"],
        "handoff_session_id": sid, "human_notified": False,
    }}
    assert (await harness.handoff(sid))["state"] == "failed"
    kinds = await harness.kinds(sid)
    assert "handoff_activated" not in kinds and "dispatch_failed" in kinds and "delivery_claim_lost" in kinds


async def test_time_to_a_person_is_the_first_reply_and_the_duration_is_observed_at_release(harness: Harness) -> None:
    """Straight to a channel: the first human reply observes the time to a person once (later
    replies do not), and the release observes how long the handoff lasted; both are written
    on the handoff for the reports, as the request is on its conversation."""
    registry, clock = harness.desk.metrics.registry, harness.desk.clock
    assert isinstance(clock, ManualClock)
    labels = {"channel_kind": "owner_inbox", "route": ""}
    cid = await harness.conversation()
    asked_at = clock.now()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    clock.advance(timedelta(minutes=4))
    await harness.desk.handoffs.recipient_message(sid, "Hi, Sam here.", author="Sam", via="test")
    clock.advance(timedelta(minutes=3))
    await harness.desk.handoffs.recipient_message(sid, "Found it.", author="Sam", via="test")
    assert registry.get_sample_value("handoff_time_to_human_seconds_count", labels) == 1
    assert registry.get_sample_value("handoff_time_to_human_seconds_sum", labels) == 240
    clock.advance(timedelta(minutes=5))
    await harness.client.post(f"/api/handoffs/{sid}/release", json={})
    assert registry.get_sample_value("handoff_duration_seconds_count", labels) == 1
    assert registry.get_sample_value("handoff_duration_seconds_sum", labels) == 720
    handoff = await harness.desk.handoffs.get(sid)
    assert (handoff.time_to_person_seconds, handoff.duration_seconds) == (240, 720)
    assert handoff.handled_by == ""  # Sam's reply handled it (he is nobody of the directory), not the owner's release
    async with harness.desk.db.read() as session:
        conversation = await session.get(Conversation, cid)
    assert conversation is not None and conversation.first_handoff_at == asked_at
    # Released by the owner before anyone wrote: the release is who handled it
    unanswered = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    assert (await harness.desk.handoffs.get(unanswered)).handled_by is None
    await harness.client.post(f"/api/handoffs/{unanswered}/release", json={})
    assert (await harness.desk.handoffs.get(unanswered)).handled_by == ""

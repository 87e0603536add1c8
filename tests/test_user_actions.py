"""User actions through the HTTP API: the tools, the subscriber's side, expectations,
timeouts, redaction and background mode, with the rules agent reading the outcomes."""

from __future__ import annotations

import asyncio
import contextlib
import json
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import select
from sqlmodel import col

from bot.agents.webhook import InvalidSignature, verify
from bot.store.models import HandoffEvent, OutboxItem
from tests import approval_actions
from tests.conftest import Harness, StartDesk
from tests.fake_endpoint import Answer, FakeEndpoint
from tests.fake_server import serving

ORCHESTRATOR_SECRET = "orchestrator-secret-0123456789"
CODE = {"reason": "verification_code", "details": "We sent a 6-digit code to your phone ending in 42.",
        "suggested_action": "Enter the code on the bank's page"}


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    approval_actions.CALLS.clear()


async def ask(harness: Harness, cid: str, **body: Any) -> dict[str, Any]:
    return await harness.tool(cid, "request_user_action", {**CODE, **body})


async def texts(harness: Harness, cid: str, role: str | None = None) -> list[str]:
    return [m["text"] for m in await harness.messages(cid) if role is None or m["role"] == role]


async def test_the_subscriber_sees_the_instruction_and_done_resumes_the_agent(harness: Harness) -> None:
    cid = await harness.conversation()
    result = await ask(harness, cid)
    assert result["status"] == "HUMAN_HANDOFF_REQUESTED"
    assert result["reason"] == "verification_code"
    [instruction] = await texts(harness, cid, "agent")
    assert instruction.startswith("A verification code was sent to you. Please enter it yourself")
    assert "→ Enter the code on the bank's page" in instruction
    assert 'Reply "done"' in instruction

    routed = await harness.say(cid, "Done!")
    assert routed["routed_to"] == "agent"
    assert routed["replies"] == []
    await harness.desk.settle()
    view = (await harness.client.get(f"/api/user_actions/{result['user_action_id']}")).json()
    assert view["state"] == "done"
    assert view["resolved_via"] == "subscriber"
    notes = await texts(harness, cid, "system")
    assert notes == ["[User action — verification_code: the user says it is done (not verified). "
                     "Look at the current state before you act.]"]
    assert (await texts(harness, cid, "agent"))[-1] == "Thanks, that's done. Let's carry on."


async def test_cancel_and_timeout_have_their_own_outcomes(start_desk: StartDesk) -> None:
    harness = await start_desk()
    cid = await harness.conversation()
    await ask(harness, cid)
    await harness.say(cid, "cancel")
    await harness.desk.settle()
    assert "HANDOFF_CANCELLED" in (await texts(harness, cid, "system"))[-1]

    other = await harness.conversation("Ben", None)
    aid = (await ask(harness, other, reason="captcha", details="Please solve the picture puzzle on the page."))["user_action_id"]
    harness.desk.clock.advance(timedelta(minutes=5, seconds=1))  # type: ignore[attr-defined]
    assert await harness.desk.user_actions.expire_due() == 1
    await harness.desk.settle()
    assert "HANDOFF_TIMEOUT" in (await texts(harness, other, "system"))[-1]
    late = await harness.client.post(f"/api/user_actions/{aid}/response", json={"outcome": "done"})
    assert late.json()["error"] == "HANDOFF_TIMEOUT"
    assert late.json()["already"] is True


async def test_an_expectation_decides_whether_done_is_done(start_desk: StartDesk) -> None:
    harness = await start_desk(user_actions={"expectations": [
        {"id": "card_linked", "description": "The card shows as linked", "run": {"callable": "tests.approval_actions:refund"}},
        {"id": "never", "description": "Something that never holds", "run": {"callable": "tests.approval_actions:broken"}},
    ]})
    cid = await harness.conversation()
    tools = (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]
    [request] = [t for t in tools if t["name"] == "request_user_action"]
    assert request["input_schema"]["properties"]["expectation"]["enum"] == ["card_linked", "never"]

    # `refund` answers without "holds": true, so the expectation is not observed
    aid = (await ask(harness, cid, expectation="card_linked"))["user_action_id"]
    answer = await harness.client.post(f"/api/user_actions/{aid}/response", json={"outcome": "done"})
    assert answer.json()["error"] == "HANDOFF_FAILED"
    assert "The card shows as linked: not observed" in answer.json()["details"]["hint"]
    assert approval_actions.CALLS[0]["user_action_id"] == aid

    aid = (await ask(harness, cid, expectation="never"))["user_action_id"]
    broken = await harness.tool(cid, "response_user_action", {"user_action_id": aid, "outcome": "done"})
    assert broken["error"] == "HANDOFF_FAILED"
    assert "could not run" in broken["details"]["hint"]

    bad = await ask(harness, cid, expectation="unknown_check")
    assert bad["error"] == "invalid_input"
    assert "expectation" in bad["details"]["fields"]


async def test_an_expectation_that_holds(start_desk: StartDesk) -> None:
    received: list[dict[str, Any]] = []
    secret = "bank-check-secret-0123456789"

    async def check(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify(secret, request.headers, body)
        except InvalidSignature:
            return web.Response(status=401)
        received.append(json.loads(body))
        return web.json_response({"holds": True, "observed": "card •••• 4242 linked"})

    app = web.Application()
    app.router.add_post("/check", check)
    async with serving(app) as port:
        harness = await start_desk(user_actions={"expectations": [{
            "id": "card_linked", "description": "The card shows as linked",
            "run": {"url": f"http://127.0.0.1:{port}/check", "secret": secret}}]})
        cid = await harness.conversation()
        aid = (await ask(harness, cid, expectation="card_linked"))["user_action_id"]
        await harness.say(cid, "done")
        await harness.desk.settle()
    assert received[0]["arguments"]["user_action_id"] == aid
    assert (await texts(harness, cid, "system"))[-1] == (
        "[User action — verification_code: done, and the check card_linked held (observed: card •••• 4242 linked). "
        "Look at the current state before you act.]")


async def test_guided_steps_move_one_at_a_time(harness: Harness) -> None:
    cid = await harness.conversation()
    aid = (await ask(harness, cid, reason="permission_confirmation", details="Your browser will ask to share your location.",
                     steps=[{"instruction": "Click the lock icon next to the address"},
                            {"instruction": "Set Location to Allow"}]))["user_action_id"]
    assert (await texts(harness, cid, "agent"))[-1].count("Step 1 of 2: Click the lock icon") == 1
    moved = (await harness.client.post(f"/api/user_actions/{aid}/step", json={"move": "next"})).json()
    assert moved["step"] == 1
    assert "Step 2 of 2: Set Location to Allow" in (await texts(harness, cid, "agent"))[-1]
    same = (await harness.client.post(f"/api/user_actions/{aid}/step", json={"move": "next"})).json()
    assert same["step"] == 1
    assert len(await texts(harness, cid, "agent")) == 2  # no step past the last
    back = (await harness.client.post(f"/api/user_actions/{aid}/step", json={"move": "previous"})).json()
    assert back["step"] == 0
    assert back["state"] == "pending"  # moving completes nothing


async def test_a_pasted_code_is_hidden_everywhere_and_the_subscriber_reminded(start_desk: StartDesk) -> None:
    harness = await start_desk()
    cid = await harness.conversation()
    await ask(harness, cid)
    result = await harness.say(cid, "the code is 482 913, and my password is Hunter2!x")
    assert result["replies"][0]["text"].startswith("I've hidden what looked like a code in your message")
    stored = await texts(harness, cid, "subscriber")
    assert stored == ["the code is [hidden], and my password is [hidden]"]
    assert not any("482" in t or "Hunter2" in t for t in await texts(harness, cid))
    # ordinary numbers are left alone once nothing secret is being asked for
    await harness.say(cid, "done")
    await harness.desk.settle()
    await harness.say(cid, "my order is 123456")
    assert (await texts(harness, cid, "subscriber"))[-1] == "my order is 123456"


async def test_one_pending_request_at_a_time(harness: Harness) -> None:
    cid = await harness.conversation()
    first = await ask(harness, cid)
    again = await ask(harness, cid)
    assert again["error"] == "user_action_pending"
    assert first["user_action_id"] in again["details"]["hint"]
    assert "the same request" in again["details"]["hint"]
    other = await ask(harness, cid, reason="captcha", details="Please solve the picture puzzle on the page.")
    assert other["error"] == "user_action_pending"
    assert "another user action" in other["details"]["hint"]


async def test_invalid_requests_name_the_field(harness: Harness) -> None:
    cid = await harness.conversation()
    bad = await harness.tool(cid, "request_user_action", {"reason": "password_please", "details": "short"})
    assert bad["error"] == "invalid_input"
    assert set(bad["details"]["fields"]) == {"reason", "details"}


async def background_desk(start_desk: StartDesk, endpoint: FakeEndpoint, **overrides: Any) -> tuple[Harness, str]:
    """A desk whose background tasks' orchestrator is `endpoint`, and a background conversation."""
    harness = await start_desk(user_actions={"webhook": {"url": endpoint.url, "secret": ORCHESTRATOR_SECRET}}, **overrides)
    created = await harness.client.post("/api/conversations", json={"background": True})
    return harness, created.json()["conversation_id"]


async def callback_items(harness: Harness) -> list[OutboxItem]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(OutboxItem).where(OutboxItem.purpose == "callback")
                                           .order_by(OutboxItem.id))).all())


async def test_a_background_task_tells_the_orchestrator(start_desk: StartDesk) -> None:
    """The orchestrator is briefly down (503): the event is retried when due, with the same
    delivery id, and every attempt is in the conversation's trail."""
    endpoint = await FakeEndpoint(ORCHESTRATOR_SECRET, Answer(503, retry_after="0"), default=Answer(204, None)).start()
    try:
        harness, cid = await background_desk(start_desk, endpoint)
        result = await ask(harness, cid)
        assert result["status"] == "USER_ACTION_REQUESTED"
        assert await texts(harness, cid) == []  # nobody is watching the chat
        await harness.client.post(f"/api/user_actions/{result['user_action_id']}/response", json={"outcome": "done"})
        await harness.desk.settle()
        assert [c.answered for c in endpoint.calls] == [503]  # 'resolved' waits behind the retry of 'requested'
        harness.desk.clock.advance(timedelta(seconds=2))  # type: ignore[attr-defined]
        await harness.desk.settle()
    finally:
        await endpoint.stop()
    received = endpoint.delivered()
    assert [r.body["type"] for r in received] == ["user_action_requested", "user_action_resolved"]
    assert received[0].body["user_action_id"] == result["user_action_id"]
    assert received[1].body["state"] == "done"
    requested, resolved = await callback_items(harness)
    assert [c.delivery for c in endpoint.calls] == [requested.delivery_key, requested.delivery_key, resolved.delivery_key]
    assert requested.delivery_key != resolved.delivery_key
    async with harness.desk.db.read() as session:
        trail = [(e.kind, e.detail.get("user_action_id")) for e in (await session.scalars(
            select(HandoffEvent).where(HandoffEvent.conversation_id == cid, col(HandoffEvent.kind).in_(
                ["delivery_retry_scheduled", "callback_delivered", "delivery_failed"])).order_by(HandoffEvent.id))).all()]
    assert trail == [("delivery_retry_scheduled", result["user_action_id"])] + [("callback_delivered", result["user_action_id"])] * 2


async def test_the_orchestrator_hears_an_action_s_events_in_order_even_while_one_is_retried(start_desk: StartDesk) -> None:
    """'requested' is refused once and its retry is held for as long as a 'resolved' posted
    beside it would take to arrive (bounded: 0.5 s). Posted independently, 'resolved' would
    overtake it; the desk holds it back until 'requested' is through."""
    received: list[str] = []
    resolved_arrived = asyncio.Event()
    refused = [True]

    async def hook(request: web.Request) -> web.Response:
        kind = json.loads(await request.read())["type"]
        if kind == "user_action_requested":
            if refused.pop() if refused else False:
                return web.Response(status=503, headers={"Retry-After": "0"})
            with contextlib.suppress(TimeoutError):  # overtaken: 'resolved' is in `received` first
                await asyncio.wait_for(resolved_arrived.wait(), timeout=0.5)
        else:
            resolved_arrived.set()
        received.append(kind)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    async with serving(app) as port:
        harness = await start_desk(user_actions={"webhook": {"url": f"http://127.0.0.1:{port}/hook", "secret": "s" * 32}})
        cid = (await harness.client.post("/api/conversations", json={"background": True})).json()["conversation_id"]
        result = await ask(harness, cid)
        await harness.client.post(f"/api/user_actions/{result['user_action_id']}/response", json={"outcome": "done"})
        await harness.desk.settle()
        harness.desk.clock.advance(timedelta(seconds=2))  # type: ignore[attr-defined]  # the retry is due
        await harness.desk.settle()
    assert received == ["user_action_requested", "user_action_resolved"]


async def test_an_event_the_orchestrator_missed_reaches_it_after_a_restart_with_the_same_delivery_id(
    start_desk: StartDesk, database_url: str,
) -> None:
    """Refused while the first desk ran, the event waits in the database; a new desk on the
    same database sends it when due, as the same delivery, and it is delivered once."""
    endpoint = await FakeEndpoint(ORCHESTRATOR_SECRET, Answer(503)).start()
    try:
        first, cid = await background_desk(start_desk, endpoint)
        uaid = (await ask(first, cid))["user_action_id"]
        await first.desk.settle()
        await first.desk.stop()
        again = await start_desk(url=database_url, clock=first.desk.clock,
                                 user_actions={"webhook": {"url": endpoint.url, "secret": ORCHESTRATOR_SECRET}})
        first.desk.clock.advance(timedelta(seconds=2))  # type: ignore[attr-defined]
        await again.desk.settle()
        await again.desk.settle()  # nothing is sent twice
    finally:
        await endpoint.stop()
    [item] = await callback_items(again)
    assert [(c.answered, c.delivery) for c in endpoint.calls] == [(503, item.delivery_key), (200, item.delivery_key)]
    assert endpoint.calls[1].body["user_action_id"] == uaid
    assert (item.state, item.attempts) == ("sent", 2)


async def test_an_event_the_orchestrator_refuses_is_failed_for_good_and_the_next_still_goes(start_desk: StartDesk) -> None:
    endpoint = await FakeEndpoint(ORCHESTRATOR_SECRET, Answer(422, {"error": "unknown task"})).start()
    try:
        harness, cid = await background_desk(start_desk, endpoint)
        uaid = (await ask(harness, cid))["user_action_id"]
        await harness.desk.settle()
        await harness.client.post(f"/api/user_actions/{uaid}/response", json={"outcome": "cancelled"})
        await harness.desk.settle()
    finally:
        await endpoint.stop()
    assert [(c.body["type"], c.answered) for c in endpoint.calls] == [("user_action_requested", 422),
                                                                        ("user_action_resolved", 200)]
    requested, resolved = await callback_items(harness)
    assert (requested.state, requested.attempts, resolved.state) == ("failed", 1, "sent")
    async with harness.desk.db.read() as session:
        failed = (await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == "delivery_failed"))).one()
    assert (failed.conversation_id, failed.detail["error_type"]) == (cid, "PermanentChannelError")
    assert "unknown task" in failed.detail["hint"]


async def test_two_requests_at_once_leave_one_pending(harness: Harness) -> None:
    cid = await harness.conversation()
    first, second = await asyncio.gather(ask(harness, cid), ask(harness, cid, reason="captcha",
                                                                   details="Please solve the picture puzzle on the page."))
    assert sorted(("user_action_id" in r and "status" in r, "error" in r) for r in (first, second)) == [(False, True), (True, False)]


async def test_done_after_the_deadline_is_a_timeout_even_before_the_sweep(harness: Harness) -> None:
    cid = await harness.conversation()
    aid = (await ask(harness, cid))["user_action_id"]
    harness.desk.clock.advance(timedelta(minutes=6))  # type: ignore[attr-defined]
    late = await harness.client.post(f"/api/user_actions/{aid}/response", json={"outcome": "done"})
    assert late.json()["error"] == "HANDOFF_TIMEOUT"


@pytest.mark.parametrize(("typed", "stored"), [
    ("A1B2C3", "[hidden]"),
    ("my code is abc123.", "my code is [hidden]."),
    ("S3cret", "[hidden]"),
    ("correcthorsebatterystaple", "[hidden]"),
    ("482-913", "[hidden]"),
    ("where do I type it?", "where do I type it?"),
    ("thanks!", "thanks!"),
])
async def test_what_counts_as_a_secret_while_one_is_asked_for(harness: Harness, typed: str, stored: str) -> None:
    cid = await harness.conversation()
    await ask(harness, cid, reason="authentication", details="Please sign in to your account on the bank's page.")
    await harness.say(cid, typed)
    assert (await texts(harness, cid, "subscriber"))[-1] == stored

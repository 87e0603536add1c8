"""The exact results the model reads, for the main paths of every tool, as whole values.

The services return typed results and raise typed errors; the tools turn them into these
dicts. Other tests check parts of a result; these pin every key, value and hint, so a
change in wording or shape is a decision, never a side effect of moving code."""

from __future__ import annotations

import re
from typing import Any

from bot.domain import conversations
from bot.domain.handoffs import HandoffRequestInput
from bot.store.models import HandoffEvent
from bot.tools.handoff import HandoffRequestTool
from channels.base import PermanentChannelError
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel

BRIEF = {"summary": "Ana's order #1234 is a week late and she wants a person.", "expected_action": "Tell Ana when it arrives."}
CODE = {"reason": "verification_code", "details": "We sent a 6-digit code to your phone ending in 42."}
_IDS = re.compile(r"\b(hs|ap|ua)_[A-Za-z0-9_-]+")


def plain(value: Any) -> Any:
    """The result with its generated ids and times replaced by what they are."""
    if isinstance(value, dict):
        return {key: "<time>" if key == "expires_at" else plain(item) for key, item in value.items()}
    if isinstance(value, str):
        return _IDS.sub(lambda found: f"<{found.group(1)}>", value)
    return value


async def test_handoff_request_results(start_desk: StartDesk, scripted: Any) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": 1, **BRIEF})
    assert plain(started) == {
        "ok": True, "action": "handoff_session_started", "channel_kind": "scripted", "channel_id": 1,
        "channel_label": "Owner inbox", "channel_message_id": "msg-1", "estimated_response": "within 1 business day",
        "handoff_event_id": started["handoff_event_id"], "handoff_session_id": "<hs>", "human_notified": True,
    }
    again = await harness.tool(cid, "handoff_request", {"channel_id": 1, **BRIEF})
    assert plain(again) == {"error": "handoff_already_active", "details": {
        "hint": "this conversation already has an open handoff (<hs>); the subscriber's messages already go to a "
                "person until it is released",
        "handoff_event_id": again["details"]["handoff_event_id"], "active_handoff_session_id": "<hs>",
    }}

    other = await harness.conversation()
    harness.desk.channels.get(1).fail_next(PermanentChannelError("chat not found", hint="the bot is not in chat -100"))  # type: ignore[union-attr]
    failed = await harness.tool(other, "handoff_request", {"channel_id": 1, **BRIEF})
    assert plain(failed) == {"error": "dispatch_failed", "details": {
        "hint": "could not notify Owner inbox: the bot is not in chat -100",
        "handoff_event_id": failed["details"]["handoff_event_id"], "handoff_session_id": "<hs>", "channel_id": 1,
        "attempts": 1, "human_notified": False,
    }}


async def approvals_desk(start_desk: StartDesk, **action: Any) -> tuple[Harness, str]:
    channels = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}, {"id": 2, "kind": "owner_inbox", "label": "Approvers"}]
    harness = await start_desk(channels=channels, actions=[refund_action(2, **action)], adapters={2: ScriptedChannel})
    return harness, await harness.conversation()


async def test_declared_action_results(start_desk: StartDesk, calls: list[dict[str, Any]]) -> None:
    harness, cid = await approvals_desk(start_desk)
    pending = await harness.tool(cid, "refund_order", {"order_id": "1234", "amount": 5})
    assert plain(pending) == {
        "status": "APPROVAL_PENDING", "approval_id": "<ap>", "action": "refund_order", "expires_at": "<time>",
        "hint": "A person has been asked to approve this exact call. Your turn ends here: tell the user you are "
                "waiting for approval. The outcome arrives as a system message starting with \"[Approval —\".",
    }

    harness, cid = await approvals_desk(start_desk, policy="none")
    ran = await harness.tool(cid, "refund_order", {"order_id": "1234", "amount": 5})
    assert ran == {"ok": True, "status": "done", "action": "refund_order", "result": {"refund_id": "rf_1", "amount": 5}}
    assert calls == [{"order_id": "1234", "amount": 5}]

    harness, cid = await approvals_desk(start_desk, policy="none", run={"callable": "tests.approval_actions:broken"})
    broken = await harness.tool(cid, "refund_order", {"order_id": "1234", "amount": 5})
    assert broken["error"] == "action_failed" and set(broken["details"]) == {"hint"}

    harness, cid = await approvals_desk(start_desk, approval_channels=[])
    unrouted = await harness.tool(cid, "refund_order", {"order_id": "1234", "amount": 5})
    assert plain(unrouted) == {"error": "PERMISSION_DENIED", "details": {
        "hint": "no approval channel is available to ask a person, so the action did not run (fail closed); tell the "
                "user it cannot be done right now",
        "approval_id": "<ap>",
    }}


async def test_user_action_results(harness: Harness) -> None:
    cid = await harness.conversation()
    asked = await harness.tool(cid, "request_user_action", CODE)
    assert plain(asked) == {
        "status": "HUMAN_HANDOFF_REQUESTED", "user_action_id": "<ua>", "reason": "verification_code",
        "details": CODE["details"], "suggested_action": None, "expires_at": "<time>",
    }
    same = await harness.tool(cid, "request_user_action", CODE)
    assert plain(same) == {"error": "user_action_pending", "details": {
        "hint": "the same request is already pending (<ua>); wait for the subscriber", "user_action_id": "<ua>",
    }}
    other = await harness.tool(cid, "request_user_action", {**CODE, "details": "Please log in on the bank's page."})
    assert plain(other) == {"error": "user_action_pending", "details": {
        "hint": "another user action is pending (<ua>); wait for it to end before asking for more", "user_action_id": "<ua>",
    }}
    uaid = asked["user_action_id"]
    cancelled = await harness.tool(cid, "response_user_action", {"user_action_id": uaid, "outcome": "cancelled"})
    assert plain(cancelled) == {"error": "HANDOFF_CANCELLED", "details": {
        "hint": "the subscriber cancelled; the page or account may still have changed — look before acting",
        "user_action_id": "<ua>",
    }}
    late = await harness.tool(cid, "response_user_action", {"user_action_id": uaid, "outcome": "done"})
    assert plain(late) == {**plain(cancelled), "already": True}

    asked = await harness.tool(cid, "request_user_action", CODE)
    done = await harness.client.post(f"/api/user_actions/{asked['user_action_id']}/response", json={"outcome": "done"})
    assert plain(done.json()) == {"status": "done", "user_action_id": "<ua>", "verified": False}

    created = await harness.client.post("/api/conversations", json={"background": True})
    background = created.json()["conversation_id"]
    queued = await harness.tool(background, "request_user_action", CODE)
    assert queued["status"] == "USER_ACTION_REQUESTED"


async def test_a_channel_gone_between_the_check_and_the_call_is_refused_and_audited(harness: Harness) -> None:
    cid = await harness.conversation()
    async with harness.desk.db.read() as session:
        conversation = await conversations.get(session, cid)
    # valid when checked without the channels of the moment, as when channel 9 stopped after the check
    args = HandoffRequestInput.model_validate({"channel_id": 9, **BRIEF})
    refused = await HandoffRequestTool().run(harness.desk.router.tool_context(conversation), args)
    event_id = refused["details"]["handoff_event_id"]
    assert refused == {"error": "invalid_input", "details": {
        "hint": "channel_id 9 is not an available handoff channel; use one of [1]", "handoff_event_id": event_id,
        "field": "channel_id",
    }}
    async with harness.desk.db.read() as session:
        event = await session.get(HandoffEvent, int(event_id))
    assert event is not None and (event.kind, event.detail["hint"]) == ("handoff_request_rejected", refused["details"]["hint"])

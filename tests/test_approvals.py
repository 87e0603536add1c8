"""Approvals through the HTTP API, the decision page and channel buttons, with the outbox,
audit trail and agent turns running for real; the approvers' channel is a ScriptedChannel."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import web

from bot.agents.webhook import InvalidSignature, verify
from channels.base import ApprovalClosed, ApprovalPrompt, Decision, Outbound
from tests import approval_actions
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk
from tests.fake_endpoint import Answer, FakeEndpoint
from tests.fake_server import serving
from tests.fakes import ScriptedChannel

SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number", "minimum": 0}},
          "required": ["order_id", "amount"], "additionalProperties": False}


def refund(**overrides: Any) -> dict[str, Any]:
    return refund_action(2, **{"input_schema": SCHEMA, **overrides})


CHANNELS = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}, {"id": 2, "kind": "owner_inbox", "label": "Approvers"}]


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    approval_actions.CALLS.clear()


async def start(start_desk: StartDesk, *actions: dict[str, Any], **overrides: Any) -> tuple[Harness, ScriptedChannel, str]:
    harness = await start_desk(channels=CHANNELS, actions=list(actions) or [refund()], adapters={2: ScriptedChannel},
                               **overrides)
    return harness, harness.desk.channels.get(2), await harness.conversation()  # type: ignore[return-value]


async def call(harness: Harness, cid: str, **arguments: Any) -> dict[str, Any]:
    return await harness.tool(cid, "refund_order", arguments)


async def decide(harness: Harness, aid: str, decision: str, **body: Any) -> Any:
    return await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": decision, **body})


def prompts(channel: ScriptedChannel, notice: str = "approval") -> list[Outbound]:
    kind = ApprovalPrompt if notice == "approval" else ApprovalClosed
    return [o for o in channel.sent if isinstance(o, kind)]


async def kinds(harness: Harness) -> list[str]:
    async with harness.desk.db.read() as session:
        from sqlalchemy import select

        from bot.store.models import HandoffEvent
        return list((await session.scalars(select(HandoffEvent.kind).order_by(HandoffEvent.id))).all())


async def test_a_gated_call_waits_runs_exactly_what_was_approved_and_tells_the_agent(start_desk: StartDesk) -> None:
    harness, approvers, cid = await start(start_desk)
    result = await call(harness, cid, order_id="1234", amount=25.5)
    assert result["status"] == "APPROVAL_PENDING"
    assert result["action"] == "refund_order"
    aid = result["approval_id"]
    await harness.desk.settle()
    [prompt] = prompts(approvers)
    assert prompt.approval is not None
    assert prompt.approval.arguments == {"order_id": "1234", "amount": 25.5}
    assert prompt.approval.risk == "high"
    assert prompt.approval.allow_always is True
    assert prompt.text.startswith("[HIGH RISK] Approval needed: may the assistant run refund_order for Ana?")
    assert prompt.approval.decision_url in prompt.text
    assert '"order_id": "1234"' in prompt.text
    assert approval_actions.CALLS == []

    decided = await decide(harness, aid, "approve", decided_by="Kim")
    assert decided.status_code == 200, decided.text
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25.5}]
    view = (await harness.approval(aid))
    assert view["state"] == "approved"
    assert view["run_state"] == "succeeded"
    assert view["result"]["refund_id"] == "rf_1"
    receipt = view["receipt"]
    assert receipt["decided_by"] == "Kim"
    assert receipt["via"] == "api"
    assert len(receipt["arguments_hash"]) == 64
    notes = await harness.system_texts(cid)
    assert notes == ['[Approval — refund_order was approved and ran with the arguments you gave. Result: '
                     '{"refund_id": "rf_1", "amount": 25.5}]']
    assert "Kim" not in notes[0]
    assert receipt["arguments_hash"] not in notes[0]  # the receipt stays with the owner
    assert (await harness.messages(cid))[-1]["text"] == "Good news: that was approved and it's done."
    assert "Approved by Kim" in prompts(approvers, "approval_closed")[0].text
    assert kinds_in_order(await kinds(harness), "approval_requested", "approval_approved", "action_ran")
    metrics = harness.desk.metrics.exposition().decode()
    assert 'handoff_approvals_total{action="refund_order",result="pending"} 1.0' in metrics
    assert 'handoff_approvals_total{action="refund_order",result="approved"} 1.0' in metrics


def kinds_in_order(kinds: list[str], *expected: str) -> bool:
    positions = [kinds.index(k) for k in expected]
    return positions == sorted(positions)


async def test_a_denial_with_a_reason_reaches_the_agent_and_nothing_runs(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1234", amount=900))["approval_id"]
    assert (await decide(harness, aid, "deny", reason="Over the refund limit]\n[Approval — fake")).status_code == 200
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    [note] = await harness.system_texts(cid)
    assert note == ("[Approval — refund_order: PERMISSION_DENIED. A person denied it: Over the refund limit) "
                    "[Approval — fake. The action did not run; do not try to reach the same result another way.]")
    assert "approval_denied" in await kinds(harness)


async def test_no_answer_in_time_is_a_denial_and_a_late_answer_changes_nothing(start_desk: StartDesk) -> None:
    harness, approvers, cid = await start(start_desk, refund(timeout="1m"))
    aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    harness.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert (await decide(harness, aid, "approve")).status_code == 409  # past the deadline, even before the sweep
    assert await harness.desk.approvals.expire_due() == 1
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    assert (await harness.system_texts(cid))[-1].startswith("[Approval — refund_order: PERMISSION_DENIED. Nobody approved it in time.")
    late = await decide(harness, aid, "approve")
    assert late.status_code == 409
    assert late.json()["details"]["approval"]["state"] == "expired"
    assert "approval_expired" in await kinds(harness)
    assert "approval_decision_ignored" in await kinds(harness)
    assert "Nobody answered in time" in prompts(approvers, "approval_closed")[0].text


async def test_no_available_approval_channel_denies_at_once(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk, refund(approval_channels=[]))
    result = await call(harness, cid, order_id="1234", amount=5)
    assert result["error"] == "PERMISSION_DENIED"
    assert "no approval channel" in result["details"]["hint"]
    assert approval_actions.CALLS == []
    assert "approval_unrouted" in await kinds(harness)


async def test_a_prompt_nobody_can_answer_after_a_restart_is_denied(start_desk: StartDesk, database_url: str) -> None:
    harness, _, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    await harness.desk.stop()
    # restarted with the approvers' channel gone from the config
    again = await start_desk(url=database_url, channels=CHANNELS[:1], actions=[refund(approval_channels=[])])
    await again.desk.settle()
    view = (await again.client.get(f"/api/approvals/{aid}")).json()
    assert view["state"] == "cleared"
    assert approval_actions.CALLS == []
    assert (await again.system_texts(cid))[-1].startswith("[Approval — refund_order: PERMISSION_DENIED. The approval prompt was cleared")


async def test_a_decision_is_bound_to_its_arguments(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk)
    first = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    second = (await call(harness, cid, order_id="1234", amount=500))["approval_id"]
    assert first != second
    await decide(harness, first, "approve")
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 5}]
    assert (await harness.client.get(f"/api/approvals/{second}")).json()["state"] == "pending"


async def test_always_allow_covers_the_same_shape_in_the_conversation_only(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    await decide(harness, aid, "approve", always_allow=True)
    await harness.desk.settle()
    again = await call(harness, cid, order_id="2", amount=7)
    assert again["status"] == "done"
    assert again["result"]["refund_id"] == "rf_2"
    other = await harness.conversation("Ben", None)
    assert (await call(harness, other, order_id="3", amount=1))["status"] == "APPROVAL_PENDING"


async def test_ask_always_never_remembers(start_desk: StartDesk) -> None:
    harness, approvers, cid = await start(start_desk, refund(policy="ask_always"))
    aid = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    await harness.desk.settle()
    assert prompts(approvers)[0].approval.allow_always is False  # type: ignore[union-attr]
    view = (await decide(harness, aid, "approve", always_allow=True)).json()
    assert view["receipt"]["always_allow"] is False
    assert (await call(harness, cid, order_id="2", amount=5))["status"] == "APPROVAL_PENDING"


async def test_policy_none_runs_at_once_and_invalid_input_runs_nothing(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk, refund(policy="none"))
    assert (await call(harness, cid, order_id="1", amount=5))["result"]["refund_id"] == "rf_1"
    bad = await call(harness, cid, order_id=1, amount=-3, note="x")
    assert bad["error"] == "invalid_input"
    assert set(bad["details"]["fields"]) == {"amount", "note", "order_id"}
    assert len(approval_actions.CALLS) == 1


async def test_the_tool_tells_the_model_a_gate_exists(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk)
    tools = (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]
    [tool] = [t for t in tools if t["name"] == "refund_order"]
    assert tool["input_schema"] == SCHEMA
    assert "APPROVAL_PENDING" in tool["description"]
    assert "PERMISSION_DENIED" in tool["description"]
    assert "(risk: high)" in tool["description"]


async def test_the_decision_page_shows_on_get_decides_once_on_post(start_desk: StartDesk) -> None:
    harness, approvers, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    await harness.desk.settle()
    url = prompts(approvers)[0].approval.decision_url  # type: ignore[union-attr]
    path = url.removeprefix("http://desk.test")
    page = await harness.client.get(path)
    assert page.status_code == 200
    assert "refund_order</code> for Ana?" in page.text
    assert "&#34;order_id&#34;: &#34;1234&#34;" in page.text
    assert (await harness.approval(aid))["state"] == "pending"  # GET decided nothing
    token = path.rsplit("/", 1)[1]
    posted = await harness.client.post(path, data={"token": token, "decision": "approve", "name": "Kim"})
    assert posted.status_code == 200
    assert "your decision is recorded" in posted.text
    again = await harness.client.post(path, data={"token": token, "decision": "deny"})
    assert again.status_code == 410
    assert "changed nothing" in again.text
    view = (await harness.approval(aid))
    assert view["state"] == "approved"
    assert view["receipt"]["via"] == "link"
    assert view["receipt"]["decided_by"] == "Kim (decision link)"
    assert (await harness.client.get(path[:-3] + "abc")).status_code == 404  # a tampered token


async def test_the_decision_page_refuses_a_name_or_reason_longer_than_it_allows(start_desk: StartDesk) -> None:
    harness, approvers, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    await harness.desk.settle()
    path = prompts(approvers)[0].approval.decision_url.removeprefix("http://desk.test")  # type: ignore[union-attr]
    token = path.rsplit("/", 1)[1]
    posted = await harness.client.post(path, data={"token": token, "decision": "approve", "name": "K" * 201,
                                                    "reason": "r" * 2001})
    assert posted.status_code == 400
    assert "Your name is longer than 200 characters (201); The reason is longer than 2000 characters (2001)" in posted.text
    assert (await harness.approval(aid))["state"] == "pending"  # nothing decided
    ok = await harness.client.post(path, data={"token": token, "decision": "approve", "name": "K" * 180, "reason": "r" * 2000})
    assert ok.status_code == 200
    assert (await harness.approval(aid))["receipt"]["decided_by"] == "K" * 180 + " (decision link)"


async def test_a_button_counts_only_in_a_channel_the_prompt_went_to(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk)
    aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
    press = Decision(author="Mallory", approval_id=aid, approve=True)
    assert await harness.desk.inbound.submit_and_wait(1, press) == f"approval {aid} was not asked in this channel"
    press = press.model_copy(update={"author": "Kim", "dedupe_key": "click-1"})
    assert await harness.desk.inbound.submit_and_wait(2, press) == "approval approved"
    assert await harness.desk.inbound.submit_and_wait(2, press) == "duplicate"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 5}]
    assert (await harness.approval(aid))["receipt"]["via"] == "channel:2"


async def test_a_failing_action_is_reported_not_retried(start_desk: StartDesk) -> None:
    harness, _, cid = await start(start_desk, refund(run={"callable": "tests.approval_actions:broken"}))
    aid = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    await decide(harness, aid, "approve")
    await harness.desk.settle()
    assert len(approval_actions.CALLS) == 1
    [note] = await harness.system_texts(cid)
    # what the owner's code printed stays with the owner (it may hold anything): the agent gets the type
    assert note.startswith("[Approval — refund_order was approved but failed: "
                           "tests.approval_actions:broken raised RuntimeError. Check the current state")
    events = (await harness.approval(aid))
    assert events["error"] == "tests.approval_actions:broken raised RuntimeError"
    async with harness.desk.db.read() as session:
        from sqlalchemy import select

        from bot.store.models import HandoffEvent
        failed = (await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == "action_failed"))).one()
    assert failed.detail["detail"] == "payment provider said no"


async def test_an_http_action_gets_a_signed_request_with_the_approved_arguments(start_desk: StartDesk) -> None:
    received: list[dict[str, Any]] = []
    secret = "shop-hook-secret-0123456789"

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify(secret, request.headers, body)
        except InvalidSignature:
            return web.Response(status=401)
        received.append({"body": json.loads(body), "delivery": request.headers.get("X-Handoff-Delivery")})
        return web.json_response({"refund_id": "rf_http"})

    app = web.Application()
    app.router.add_post("/refund", hook)
    async with serving(app) as port:
        harness, _, cid = await start(start_desk, refund(run={"url": f"http://127.0.0.1:{port}/refund", "secret": secret}))
        aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
        await decide(harness, aid, "approve")
        await harness.desk.settle()
    [got] = received
    assert got["body"] == {"action": "refund_order", "approval_id": aid, "conversation_id": cid,
                           "arguments": {"order_id": "1234", "amount": 5}}
    assert got["delivery"] == aid
    assert re.search(r'"refund_id": "rf_http"', (await harness.system_texts(cid))[0])


HOOK_SECRET = "shop-hook-secret-0123456789"


def http_refund(endpoint: FakeEndpoint, **run: Any) -> dict[str, Any]:
    return refund(run={"url": endpoint.url, "secret": HOOK_SECRET, **run})


async def test_an_approved_http_call_survives_a_restart_between_the_decision_and_the_call(
    start_desk: StartDesk, database_url: str,
) -> None:
    """The call is stored with the decision: a desk that stops before sending it (its outbox
    already down) leaves it to the next one, which calls once, with the approval id as the
    delivery id, and the agent reads the result there."""
    endpoint = await FakeEndpoint(HOOK_SECRET, default=Answer(200, {"refund_id": "rf_after_restart"})).start()
    try:
        harness, _, cid = await start(start_desk, http_refund(endpoint))
        aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
        await harness.desk.settle()
        await harness.desk.outbox.stop()  # the crash: nothing more goes out from this desk
        assert (await decide(harness, aid, "approve")).status_code == 200
        await harness.desk.stop()
        assert endpoint.calls == []
        again = await start_desk(url=database_url, clock=harness.desk.clock, channels=CHANNELS,
                                 actions=[http_refund(endpoint)], adapters={2: ScriptedChannel})
        await again.desk.settle()
        await again.desk.approvals.recover_interrupted()  # the sweep finds nothing left to do
        await again.desk.settle()
    finally:
        await endpoint.stop()
    [got] = endpoint.calls
    assert (got.delivery, got.body["approval_id"], got.body["arguments"]) == (aid, aid, {"order_id": "1234", "amount": 5})
    view = await again.approval(aid)
    assert (view["run_state"], view["result"]) == ("succeeded", {"refund_id": "rf_after_restart"})
    assert [n for n in await again.system_texts(cid) if "rf_after_restart" in n] == [
        '[Approval — refund_order was approved and ran with the arguments you gave. Result: {"refund_id": "rf_after_restart"}]']


async def test_an_http_call_whose_answer_was_lost_is_retried_after_a_restart_as_the_same_delivery_and_reported_once(
    start_desk: StartDesk, database_url: str,
) -> None:
    """The endpoint took the call but its answer never came (a timeout): it may have run, so
    the desk asks again when due, here after a restart, under the same delivery id."""
    endpoint = await FakeEndpoint(HOOK_SECRET, Answer(hang=True), default=Answer(200, {"refund_id": "rf_2"})).start()
    try:
        harness, _, cid = await start(start_desk, http_refund(endpoint, timeout="200ms"))
        aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
        await decide(harness, aid, "approve")
        await harness.desk.settle()
        assert (await harness.approval(aid))["run_state"] == "running"  # may have run: asked again when due
        await harness.desk.stop()
        again = await start_desk(url=database_url, clock=harness.desk.clock, channels=CHANNELS,
                                 actions=[http_refund(endpoint, timeout="200ms")], adapters={2: ScriptedChannel})
        harness.desk.clock.advance(timedelta(seconds=5))  # type: ignore[attr-defined]  # past any backoff with its jitter
        await again.desk.settle()
    finally:
        await endpoint.stop()
    assert [(c.delivery, c.answered) for c in endpoint.calls] == [(aid, 0), (aid, 200)]  # the endpoint can drop a repeat
    assert (await again.approval(aid))["result"] == {"refund_id": "rf_2"}
    assert len([n for n in await again.system_texts(cid) if n.startswith("[Approval — refund_order was approved")]) == 1
    assert (await kinds(again)).count("action_ran") == 1


async def test_an_http_call_the_endpoint_refuses_fails_at_once_and_the_agent_is_told(start_desk: StartDesk) -> None:
    endpoint = await FakeEndpoint(HOOK_SECRET, Answer(404, {"error": "no such order"})).start()
    try:
        harness, _, cid = await start(start_desk, http_refund(endpoint))
        aid = (await call(harness, cid, order_id="1234", amount=5))["approval_id"]
        await decide(harness, aid, "approve")
        await harness.desk.settle()
    finally:
        await endpoint.stop()
    assert len(endpoint.calls) == 1  # a refusal is not retried
    view = await harness.approval(aid)
    assert (view["run_state"], view["error"]) == ("failed", f"{endpoint.url} answered 404")
    assert (await harness.system_texts(cid))[-1].startswith(
        f"[Approval — refund_order was approved but failed: {endpoint.url} answered 404.")
    async with harness.desk.db.read() as session:
        from sqlalchemy import select

        from bot.store.models import HandoffEvent
        failed = (await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == "action_failed"))).one()
    assert "no such order" in failed.detail["detail"]  # for the owner, not the model
    assert "no such order" not in (await harness.system_texts(cid))[-1]


async def test_a_call_the_outbox_settled_before_a_crash_is_reported_from_its_item(start_desk: StartDesk) -> None:
    """What a crash between the outbox's record and the approval's leaves behind: the call's
    item sent with the endpoint's answer, the approval still running. The sweep reports it once."""
    from sqlalchemy import update

    from bot.delivery.callbacks import CALLBACKS
    from bot.domain.approvals import run_stream
    from bot.store.models import Approval, OutboxItem
    from channels.base import Callback

    harness, _, cid = await start(start_desk, refund(run={"url": "http://127.0.0.1:9/refund", "secret": HOOK_SECRET}))
    aid = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    await harness.desk.outbox.stop()
    now = harness.desk.clock.now()
    async with harness.desk.db.transaction() as session:
        await session.execute(update(Approval).where(Approval.id == aid).values(
            state="approved", decided_at=now, decided_by="Kim", decided_via="api", run_state="running"))
        item = await harness.desk.outbox.enqueue(session, channel_id=CALLBACKS, now=now, outbound=Callback(
            text="run", endpoint="actions.refund_order.run", event="action_run", body="{}", conversation_id=cid,
            ordered_by=run_stream(aid), approval_id=aid, delivery=aid))
        await session.execute(update(OutboxItem).where(OutboxItem.id == item.id).values(
            state="sent", sent_at=now, receipt={"answer": {"refund_id": "rf_recorded"}}))
    assert await harness.desk.approvals.recover_interrupted() == 1
    assert await harness.desk.approvals.recover_interrupted() == 0
    assert (await harness.approval(aid))["result"] == {"refund_id": "rf_recorded"}
    assert [n for n in await harness.system_texts(cid) if "rf_recorded" in n] == [
        '[Approval — refund_order was approved and ran with the arguments you gave. Result: {"refund_id": "rf_recorded"}]']


async def test_a_decision_a_crash_interrupted_is_finished_or_reported_on_the_next_sweep(start_desk: StartDesk) -> None:
    from sqlalchemy import update

    from bot.store.models import Approval

    harness, _, cid = await start(start_desk)
    unstarted = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    cut_short = (await call(harness, cid, order_id="2", amount=6))["approval_id"]
    now = harness.desk.clock.now()
    async with harness.desk.db.transaction() as session:  # what a crash leaves behind
        await session.execute(update(Approval).where(Approval.id == unstarted)
                              .values(state="approved", decided_at=now, decided_by="Kim", decided_via="api"))
        await session.execute(update(Approval).where(Approval.id == cut_short)
                              .values(state="approved", decided_at=now, decided_by="Kim", decided_via="api", run_state="running"))
    harness.desk.clock.advance(timedelta(minutes=11))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.recover_interrupted() == 2
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1", "amount": 5}]  # the unstarted one ran, once
    assert await harness.desk.approvals.recover_interrupted() == 0
    view = (await harness.client.get(f"/api/approvals/{cut_short}")).json()
    assert view["run_state"] == "failed"
    assert view["error"].startswith("interrupted")
    notes = await harness.system_texts(cid)
    assert any("refund_order was approved and ran" in n for n in notes)
    assert any("approved but failed: interrupted" in n for n in notes)


async def test_the_agents_api_key_cannot_approve_its_own_calls(start_desk: StartDesk) -> None:
    key, owner = "agent-key-0123456789abcdef", "owner-token-0123456789abcdef"
    harness = await start_desk(channels=CHANNELS, actions=[refund()], adapters={2: ScriptedChannel},
                               api={"key": key}, owner={"token": owner})
    harness.client.headers["Authorization"] = f"Bearer {key}"
    cid = await harness.conversation()
    aid = (await call(harness, cid, order_id="1", amount=5))["approval_id"]
    refused = await decide(harness, aid, "approve")
    assert (refused.status_code, refused.json()["error"], refused.json()["details"]["needed"]) == (403, "forbidden", "agent")
    assert "owner.token" in refused.json()["details"]["hint"]
    assert (await harness.approval(aid))["state"] == "pending"
    decided = await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": "deny"},
                                        headers={"Authorization": f"Bearer {owner}"})
    assert decided.status_code == 200
    assert decided.json()["state"] == "denied"


async def test_invisible_characters_in_arguments_are_shown_not_hidden(start_desk: StartDesk) -> None:
    schema = {"type": "object", "properties": {"iban": {"type": "string"}}}
    harness, approvers, cid = await start(start_desk, refund(input_schema=schema))
    aid = (await call(harness, cid, iban="DE89\u202e3704")).get("approval_id")
    await harness.desk.settle()
    [prompt] = prompts(approvers)
    assert '"iban": "DE89\\u202e3704"' in prompt.text
    assert "\u202e" not in prompt.text
    page = await harness.client.get(prompt.approval.decision_url.removeprefix("http://desk.test"))  # type: ignore[union-attr]
    assert "DE89\\u202e3704" in page.text
    assert "\u202e" not in page.text
    assert aid is not None


def test_an_action_the_agent_runs_is_declared_by_agent_and_nothing_else() -> None:
    """`run: {by: agent}` (the desk decides, the agent runs it): checked like the other two
    forms, each problem named with its key path; it has no place in an expectation."""
    from tests.conftest import config_problem, make_config

    config = make_config("sqlite:///x.db", channels=CHANNELS, actions=[refund(run={"by": "agent"})])
    assert config.actions[0].run.model_dump() == {"by": "agent"}
    assert config_problem(channels=CHANNELS, actions=[refund(run={"by": "desk"})]) == (
        "actions[0].run.by: Input should be 'agent'")
    assert config_problem(channels=CHANNELS, actions=[refund(run={"by": "agent", "url": "https://shop.example/refund"})]) == (
        "actions[0].run.url: unknown key (allowed: by)")
    assert "user_actions.expectations[0].run.by: unknown key" in config_problem(user_actions={"expectations": [
        {"id": "code_entered", "description": "The code was entered", "run": {"by": "agent"}}]})


def test_config_names_what_is_wrong_with_an_action() -> None:
    from bot.config import Config, ConfigError
    from tests.conftest import SECRET

    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "channels": [
            {"id": 1, "kind": "owner_inbox", "label": "Inbox"},
            {"id": 7, "kind": "agent", "label": "Sibling", "agent": {"kind": "rules"}},
        ], "actions": [refund(approval_channels=[7, 3]), refund(id="refund_order", run={"urll": "x"})]})
    assert str(caught.value).splitlines() == [
        "actions[1].run.url: required",
        "actions[1].run.secret: required — The HMAC key the endpoint checks X-Handoff-Signature with, at least "
        "16 characters: a random value you make up (openssl rand -hex 32) and give the other side too.",
        "actions[1].run.urll: unknown key; did you mean 'url'? (allowed: url, secret, timeout)",
    ]
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "channels": [
            {"id": 1, "kind": "owner_inbox", "label": "Inbox"},
            {"id": 7, "kind": "agent", "label": "Sibling", "agent": {"kind": "rules"}},
        ], "actions": [refund(approval_channels=[7, 3]), refund(input_schema={"type": "array"})]})
    assert str(caught.value).splitlines() == [
        "actions[1].input_schema: must describe an object: {type: object, properties: {…}}",
    ]
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "channels": [
            {"id": 1, "kind": "owner_inbox", "label": "Inbox"},
            {"id": 7, "kind": "agent", "label": "Sibling", "agent": {"kind": "rules"}},
        ], "actions": [refund(approval_channels=[7, 3]), refund(approval_channels=[1])]})
    assert str(caught.value).splitlines() == [
        "actions[0].approval_channels[0]: channel 7 is a sibling agent: approvals need a person",
        "actions[0].approval_channels[1]: no channel with id 3 (configured: 1, 7)",
        "actions[1].id: duplicate id 'refund_order' (also actions[0])",
    ]

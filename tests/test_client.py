"""The Python API client against the real app (in-process ASGI transport, or a real uvicorn
server for the blocking client): every call, the retries, and awaiting each kind of outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from bot.clients import Conflict, Forbidden, InvalidRequest, NotFound, SyncDeskClient, WaitTimedOut
from bot.clients.client import DeskApiError, DeskClient, RequestAppliedAnswerLost
from bot.clients.models import ApprovalOutcome, HandoffOutcome
from bot.desk import Desk
from bot.domain.idempotency import Claimed, KeyedRequest
from bot.web.app import create_app
from bot.web.idempotency import caller_scope, fingerprint
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel
from tests.test_cli import serving


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


def client_for(harness: Harness, api_key: str | None = None) -> DeskClient:
    transport = httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False))
    return DeskClient("http://desk.test", api_key=api_key, transport=transport)


async def test_tools_in_each_framework_format_and_a_call(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "k-123456789012345678901234"})
    async with client_for(harness, "k-123456789012345678901234") as desk:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        openai = (await desk.tools(cid, format="openai"))[0]
        assert openai["type"] == "function"
        assert openai["function"]["name"] == "handoff_request"
        assert openai["function"]["parameters"]["properties"]["channel_id"]["enum"] == [1]
        anthropic = (await desk.tools(cid, format="anthropic"))[0]
        assert anthropic["name"] == "handoff_request"
        assert "input_schema" in anthropic
        rejected = await desk.call_tool(cid, "handoff_request", {"channel_id": 9})
        assert rejected["error"] == "invalid_input"
        assert "channel_id" in rejected["details"]["fields"]
        started = await desk.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on the refund.",
        })
        assert (await desk.handoff(started["handoff_session_id"])).state == "active"
        assert (await desk.say(cid, "hello?")).routed_to == "human"


async def test_http_problems_raise_with_the_servers_hint(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "k-123456789012345678901234"})
    async with client_for(harness, "wrong") as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.create_conversation(name="Ana")
    assert caught.value.status == 401
    assert "Authorization: Bearer" in caught.value.hint
    async with client_for(harness, "k-123456789012345678901234") as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.tools("c_nope")
    assert caught.value.status == 404


async def test_ids_cannot_climb_to_another_route(start_desk: StartDesk) -> None:
    harness = await start_desk()
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana")
        with pytest.raises(DeskApiError) as caught:
            await desk.call_tool(cid, "../../handoffs/hs_x/release", {})
        assert caught.value.status == 404
        with pytest.raises(ValueError):
            await desk.handoff("..")


async def test_an_answer_that_is_not_a_json_object_is_an_invalid_response() -> None:
    """Every route answers an object; a proxy's JSON list (or a wrong base URL) is named as
    such instead of failing later on a missing key."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=["not", "an", "object"]))
    async with DeskClient("http://desk.test", transport=transport) as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.handoff("hs_1")
    assert caught.value.status == 200
    assert caught.value.code == "invalid_response"


class Network(httpx.AsyncBaseTransport):
    """The wire between the client and the real app, which fails as a network or a proxy does:
    `drop` answers lost on the way back (the server ran the request), `refuse` connections that
    never reached it, `gateway` 502s from a proxy that could not reach it; each a number of
    times, then the wire works. It records the key of every request that crossed it."""

    def __init__(self, app: httpx.ASGITransport, *, drop: int = 0, refuse: int = 0, gateway: int = 0) -> None:
        self.app, self.drop, self.refuse, self.gateway = app, drop, refuse, gateway
        self.keys: list[str | None] = []
        self.before_send: Callable[[httpx.Request], Awaitable[None]] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        if self.refuse:
            self.refuse -= 1
            raise httpx.ConnectError("connection refused", request=request)
        if self.gateway:
            self.gateway -= 1
            return httpx.Response(502, json={"error": "bad_gateway"}, request=request)
        if self.before_send is not None:
            await self.before_send(request)
        response = await self.app.handle_async_request(request)
        await response.aread()
        if self.drop:
            self.drop -= 1
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


def client_over(network: Network, **options: Any) -> DeskClient:
    return DeskClient("http://desk.test", transport=network, backoff=0, **options)


def network_to(harness: Harness, **failures: int) -> Network:
    return Network(httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False), raise_app_exceptions=False), **failures)


async def test_a_lost_answer_is_retried_with_the_same_key_and_stores_nothing_twice(harness: Harness) -> None:
    cid = await harness.conversation()
    network = network_to(harness, drop=1)
    async with client_over(network) as desk:
        said = await desk.say(cid, "Where is my order?")
    assert said.routed_to == "agent"
    assert len(network.keys) == 2 and network.keys[0] == network.keys[1] is not None
    texts = [(m["role"], m["text"]) for m in await harness.messages(cid)]
    assert texts[0] == ("subscriber", "Where is my order?")
    assert [role for role, _ in texts] == ["subscriber", "agent"]  # one message, one turn


async def test_refused_connections_and_bad_gateways_are_retried_a_bounded_number_of_times(harness: Harness) -> None:
    network = network_to(harness, refuse=1, gateway=2)
    async with client_over(network, retries=3) as desk:
        cid = await desk.create_conversation(name="Ana")
    assert len(network.keys) == 4 and len(set(network.keys)) == 1
    assert (await harness.desk.conversations.get(cid)).subscriber_name == "Ana"
    down = network_to(harness, refuse=10)
    async with client_over(down, retries=2) as desk:
        with pytest.raises(httpx.ConnectError):
            await desk.create_conversation(name="Bo")
    assert len(down.keys) == 3
    proxied = network_to(harness, gateway=10)
    async with client_over(proxied, retries=1) as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.create_conversation(name="Cy")
    assert (caught.value.status, len(proxied.keys)) == (502, 2)
    async with client_over(network_to(harness)) as desk:
        first = await desk.create_conversation(name="Di")
        assert await desk.create_conversation(name="Di") != first  # each call its own key: two conversations


async def test_a_request_still_running_is_waited_for(harness: Harness) -> None:
    """A copy of the request is still running when the retry arrives (played here by taking
    its key before the first send, and letting it go after the 409)."""
    cid = await harness.conversation()
    network = network_to(harness)
    held: list[Claimed] = []

    async def an_earlier_copy_runs(request: httpx.Request) -> None:
        if held:
            await harness.desk.idempotency.forget(held.pop())  # it failed before changing anything
            network.before_send = None
            return
        claim = await harness.desk.idempotency.begin(KeyedRequest(
            scope=caller_scope("POST /api/conversations/{cid}/messages", None), key=str(request.headers["idempotency-key"]),
            fingerprint=fingerprint("POST", request.url.path, b"", request.content)))
        assert isinstance(claim, Claimed)
        held.append(claim)

    network.before_send = an_earlier_copy_runs
    async with client_over(network) as desk:
        said = await desk.say(cid, "hi")
    assert said.routed_to == "agent"
    assert len(network.keys) == 2
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"] == ["hi"]


async def test_a_request_that_took_effect_without_an_answer_raises_a_typed_error_naming_what_changed(
    harness: Harness,
) -> None:
    """The message is stored, then the agent's reply can not be (the database refuses it): the
    server fails after the change. Sent again with the caller's own key, the client raises
    `RequestAppliedAnswerLost` with the conversation, and nothing is stored twice."""
    cid = await harness.conversation()
    async with harness.desk.db.transaction() as session:
        await session.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.role = 'agent' "
                                   "BEGIN SELECT RAISE(ABORT, 'disk full'); END"))
    async with client_over(network_to(harness)) as desk:
        with pytest.raises(DeskApiError) as failed:
            await desk.say(cid, "hi", idempotency_key="order-1234-hi")
        assert failed.value.status == 500
        with pytest.raises(RequestAppliedAnswerLost) as lost:
            await desk.say(cid, "hi", idempotency_key="order-1234-hi")
    assert lost.value.status == 409
    assert lost.value.ids == {"conversation_id": cid}
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"] == ["hi"]


# --------------------------------------------------------------------------- awaiting outcomes

OWNER = "owner-token-0123456789abcdef"
KEY = "k-123456789012345678901234"
APPROVERS = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}, {"id": 2, "kind": "owner_inbox", "label": "Approvers"}]


def agent_run_refund(**overrides: Any) -> dict[str, Any]:
    """`refund_order` run by the agent itself (a framework's tool): the desk only decides."""
    return {**refund_action(2, policy="ask_always"), "run": {"by": "agent"}, **overrides}


async def approvals_desk(start_desk: StartDesk, **action: Any) -> Harness:
    return await start_desk(channels=APPROVERS, actions=[agent_run_refund(**action)], adapters={2: ScriptedChannel},
                            owner={"token": OWNER}, api={"key": KEY})


async def test_waiting_for_a_handoff_returns_how_it_ended_with_the_resume_text(harness: Harness) -> None:
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        started = await desk.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on the refund.",
            "expected_return": [{"name": "decision", "type": "string", "required": True},
                                {"name": "eta_date", "type": "date", "required": True}],
        }, idempotency_key="thread-7:interrupt-1")
        sid = started["handoff_session_id"]
        waiting = asyncio.create_task(desk.wait_handoff(sid, timeout=10))
        released = await desk.release(sid, outcome="resolved", note="Refunded.", return_values={"decision": "refund"})
        outcome = await waiting
        handoff = await desk.handoff(sid)
        events = await desk.handoff_events(sid)
    assert (released.released, released.handoff.state) == (True, "released")
    assert outcome == HandoffOutcome(
        handoff_session_id=sid, status="released", reason="owner", outcome="resolved", returned={"decision": "refund"},
        missing_required=["eta_date"], note="Refunded.", resume_text=outcome.resume_text)
    assert outcome.resume_text.startswith("[Bot resumed — the owner released the conversation. Outcome: resolved. Refunded.]")
    assert "  • decision: refund" in outcome.resume_text and "Missing required: eta_date" in outcome.resume_text
    assert handoff.resume_message is not None and handoff.resume_message.id == released.resume_message_id
    assert [e.kind for e in events][-1] == "handoff_released"


async def test_a_handoff_nobody_answered_is_timed_out_and_a_client_timeout_changes_nothing(harness: Harness) -> None:
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana")
        sid = (await harness.start_handoff(cid))["handoff_session_id"]
        with pytest.raises(WaitTimedOut) as still_open:
            await desk.wait_handoff(sid, timeout=0.05)
        assert (await desk.handoff(sid)).state == "active"
        waiting = asyncio.create_task(desk.wait_handoff(sid))
        harness.desk.clock.advance(timedelta(minutes=31))  # type: ignore[attr-defined]
        await harness.desk.timers.sweep()
        outcome = await waiting
    assert (still_open.value.what, still_open.value.ident) == ("handoff", sid)
    assert (outcome.status, outcome.reason, outcome.outcome) == ("timed_out", "idle_timeout", "unresolved")
    assert outcome.resume_text.startswith("[Bot resumed —")


async def test_an_agent_run_action_approved_by_a_person_runs_nothing_on_the_desk(start_desk: StartDesk, calls: list[Any]) -> None:
    harness = await approvals_desk(start_desk)
    async with client_for(harness, KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        pending = await desk.call_tool(cid, "refund_order", {"order_id": "1234", "amount": 20}, idempotency_key="call-1")
        again = await desk.call_tool(cid, "refund_order", {"order_id": "1234", "amount": 20}, idempotency_key="call-1")
        assert pending["status"] == "APPROVAL_PENDING" and again == pending  # a re-run asks nobody twice
        aid = pending["approval_id"]
        assert [a.approval_id for a in await desk.approvals(state="pending")] == [aid]
        waiting = asyncio.create_task(desk.wait_approval(aid, timeout=10))
        with pytest.raises(Forbidden):  # the agent never approves its own call
            await desk.decide_approval(aid, "approve")
        decided = await desk.decide_approval(aid, "approve", token=OWNER, decided_by="Kim")
        outcome = await waiting
        approval = await desk.approval(aid)
    assert (decided.state, decided.run_state) == ("approved", "agent")
    assert outcome == ApprovalOutcome(approval_id=aid, status="approved", state="approved", decided_by="Kim", run_state="agent")
    assert approval.settled and approval.receipt.decided_by == "Kim"
    assert calls == []  # the desk ran nothing: the agent runs its own tool
    harness.client.headers["Authorization"] = f"Bearer {KEY}"
    assert (await harness.system_texts(cid))[-1].startswith("[Approval — refund_order was approved. Run it yourself now")


async def test_a_denial_carries_the_person_s_reason_and_a_timeout_is_never_a_denial(start_desk: StartDesk) -> None:
    harness = await approvals_desk(start_desk)
    async with client_for(harness, KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        denied_id = (await desk.call_tool(cid, "refund_order", {"order_id": "1", "amount": 5}))["approval_id"]
        expired_id = (await desk.call_tool(cid, "refund_order", {"order_id": "2", "amount": 5}))["approval_id"]
        await desk.decide_approval(denied_id, "deny", reason="Already refunded last week.", token=OWNER, decided_by="Kim")
        waiting = asyncio.create_task(desk.wait_approval(expired_id))
        harness.desk.clock.advance(timedelta(minutes=5, seconds=1))  # type: ignore[attr-defined]
        assert await harness.desk.approvals.expire_due() == 1
        timed_out = await waiting
        denied = await desk.wait_approval(denied_id, timeout=1)
    assert (denied.status, denied.reason, denied.decided_by) == ("denied", "Already refunded last week.", "Kim")
    assert (timed_out.status, timed_out.state, timed_out.reason, timed_out.decided_by) == ("timed_out", "expired", None, None)


async def test_an_agent_run_action_without_a_gate_is_answered_approved_for_the_agent_to_run(start_desk: StartDesk) -> None:
    harness = await approvals_desk(start_desk, policy="none")
    async with client_for(harness, KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        allowed = await desk.call_tool(cid, "refund_order", {"order_id": "1", "amount": 5})
    assert {k: allowed[k] for k in ("status", "action", "run_by", "why")} == {
        "status": "APPROVED", "action": "refund_order", "run_by": "agent", "why": "policy none"}


async def test_a_user_action_is_awaited_until_the_subscriber_answers_or_its_deadline(harness: Harness) -> None:
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana")
        code = {"reason": "verification_code", "details": "We sent a 6-digit code to your phone ending in 42."}
        first = (await desk.call_tool(cid, "request_user_action", code))["user_action_id"]
        waiting = asyncio.create_task(desk.wait_user_action(first, timeout=10))
        answer = await desk.respond_user_action(first, "done")
        done = await waiting
        second = (await desk.call_tool(cid, "request_user_action", code))["user_action_id"]
        assert (await desk.user_action(second)).state == "pending"
        waiting = asyncio.create_task(desk.wait_user_action(second))
        harness.desk.clock.advance(timedelta(minutes=5, seconds=1))  # type: ignore[attr-defined]
        assert await harness.desk.user_actions.expire_due() == 1
        timed_out = await waiting
    assert answer.status == "done"
    assert (done.status, done.resolved_via) == ("done", "api")
    assert timed_out.status == "timed_out"


async def test_a_wait_rides_out_a_desk_that_is_down_and_raises_what_is_not(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{sid}/release", json={})
    network = network_to(harness, refuse=4, gateway=3)
    async with client_over(network, retries=1) as desk:
        outcome = await desk.wait_handoff(sid, timeout=10)
        with pytest.raises(NotFound):
            await desk.wait_handoff("hs_nope", timeout=10)
    assert outcome.status == "released"
    assert len(network.keys) == 4 + 3 + 1 + 1  # every refusal and bad gateway tried again, then the answer


async def test_errors_are_typed_by_what_went_wrong(start_desk: StartDesk) -> None:
    harness = await start_desk()
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana")
        sid = (await harness.start_handoff(cid))["handoff_session_id"]
        await desk.release(sid)
        with pytest.raises(Conflict) as not_active:
            await desk.release(sid)
        with pytest.raises(NotFound):
            await desk.approval("ap_nope")
        with pytest.raises(InvalidRequest) as invalid:
            await desk.say(cid, "")
    assert not_active.value.code == "handoff_not_active"
    assert invalid.value.status == 422


async def test_the_sync_client_tells_the_same_story_against_a_served_desk(served: tuple[Desk, str]) -> None:
    """SyncDeskClient against a real uvicorn server (from a thread: the server runs on this loop)."""
    _, base = served

    def story() -> tuple[HandoffOutcome, list[str]]:
        with SyncDeskClient(base, backoff=0) as desk:
            cid = desk.create_conversation(name="Ana", idempotency_key="ana-1")
            assert desk.create_conversation(name="Ana", idempotency_key="ana-1") == cid  # replayed, not created twice
            assert "handoff_request" in [t["name"] for t in desk.tools(cid)]
            sid = desk.call_tool(cid, "handoff_request", {
                "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on it.",
                "expected_return": [{"name": "decision", "type": "string"}],
            })["handoff_session_id"]
            assert desk.say(cid, "Are you there?").routed_to == "human"
            desk.release(sid, return_values={"decision": "refund"})
            outcome = desk.wait_handoff(sid, timeout=10)
            return outcome, [m.role for m in desk.messages(cid, after=0, wait=1)]

    outcome, roles = await asyncio.to_thread(story)
    assert (outcome.status, outcome.returned) == ("released", {"decision": "refund"})
    assert {"subscriber", "system"} <= set(roles)


async def test_a_wait_outlives_a_killed_desk_and_gets_the_outcome_from_the_restarted_one(tmp_path: Path) -> None:
    """`handoff serve` as a real process, SIGKILLed while the client long-polls a handoff, then
    started again on its files and address: the same wait_handoff call returns the release."""
    with serving(tmp_path) as served:
        port = int(served.base_url.rsplit(":", 1)[1])
        desk = DeskClient(served.base_url, backoff=0.05, max_backoff=0.2)
        cid = await desk.create_conversation(name="Ana")
        sid = (await desk.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on the refund.",
            "expected_return": [{"name": "decision", "type": "string"}]}))["handoff_session_id"]
        waiting = asyncio.create_task(desk.wait_handoff(sid, timeout=120))
        async with httpx.AsyncClient(base_url=served.base_url) as probe, asyncio.timeout(20):
            while "handoff_long_polls_waiting 1.0" not in (await probe.get("/metrics")).text:
                await asyncio.sleep(0.05)  # until the wait is parked on the desk
        served.process.kill()
        served.process.wait(10)
    with serving(tmp_path, port) as restarted:
        async with DeskClient(restarted.base_url) as person:
            await person.release(sid, return_values={"decision": "refund"})
        async with asyncio.timeout(30):
            outcome = await waiting
    await desk.aclose()
    assert not waiting.cancelled()
    assert (outcome.status, outcome.reason, outcome.returned) == ("released", "owner", {"decision": "refund"})

"""The HTTP API contract: auth, error shapes, pagination, long-poll, health and metrics."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from channels.base import RecipientText
from tests.conftest import Harness, StartDesk
from tests.test_offers import MONDAY_NOON, later, people_desk, reply_in_dm, request


async def test_api_key_is_required_when_configured(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "k-123456"})
    missing = await harness.client.post("/api/conversations", json={})
    assert missing.status_code == 401
    assert missing.json()["error"] == "unauthorized"
    assert missing.headers["www-authenticate"] == "Bearer"
    wrong = await harness.client.post("/api/conversations", json={}, headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    ok = await harness.client.post("/api/conversations", json={}, headers={"Authorization": "Bearer k-123456"})
    assert ok.status_code == 201
    assert ok.json()["conversation_id"].startswith("c_")
    assert (await harness.client.get("/healthz")).status_code == 200  # liveness stays open for probes


async def test_the_key_is_checked_before_the_body_type(start_desk: StartDesk) -> None:
    """One guard per route checks both (bot/web/api.py `api_needs`): a caller without a key
    learns only that, whatever it sent; with one, a body that is not JSON is refused before
    anything runs. The agent's key may not decide approvals (403 naming the role needed)."""
    harness = await start_desk(api={"key": "k-123456"}, owner={"token": "owner-123456"})
    not_json = {"content-type": "text/plain"}
    for path in ("/api/conversations", "/api/approvals/ap_nope/decision"):
        anonymous = await harness.client.post(path, content=b"{}", headers=not_json)
        assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthorized"), path
    agent = {"Authorization": "Bearer k-123456"}
    refused = await harness.client.post("/api/conversations", content=b"{}", headers={**not_json, **agent})
    assert (refused.status_code, refused.json()["error"]) == (415, "unsupported_media_type")
    agent_deciding = await harness.client.post("/api/approvals/ap_nope/decision", json={"decision": "approve"}, headers=agent)
    assert (agent_deciding.status_code, agent_deciding.json()["error"]) == (403, "forbidden")
    assert agent_deciding.json()["details"]["needed"] == "agent"
    assert "owner.token" in agent_deciding.json()["details"]["hint"]
    owner = {"Authorization": "Bearer owner-123456"}
    owner_not_json = await harness.client.post("/api/approvals/ap_nope/decision", content=b"{}", headers={**not_json, **owner})
    assert (owner_not_json.status_code, owner_not_json.json()["error"]) == (415, "unsupported_media_type")
    assert (await harness.client.get("/api/handoffs", headers=agent)).status_code == 200  # a GET needs no body type


async def test_unknown_ids_are_json_404s(harness: Harness) -> None:
    for method, path in [
        ("post", "/api/conversations/c_nope/messages"), ("get", "/api/conversations/c_nope/messages"),
        ("get", "/api/conversations/c_nope/tools"), ("post", "/api/conversations/c_nope/tools/handoff_request"),
        ("get", "/api/handoffs/hs_nope"), ("get", "/api/handoffs/hs_nope/events"),
    ]:
        response = await harness.client.request(method, path, json={"text": "hi"})
        assert response.status_code == 404, path
        assert response.json()["error"] == "not_found"
        assert "not found" in response.json()["details"]["hint"]
    assert (await harness.client.get("/api/nothing-here")).json()["error"] == "not_found"


async def test_bad_bodies_name_the_field(harness: Harness) -> None:
    cid = await harness.conversation()
    empty = await harness.client.post(f"/api/conversations/{cid}/messages", json={"text": "   "})
    assert empty.status_code == 422
    assert empty.json()["error"] == "invalid_request"
    assert "text" in empty.json()["details"]["fields"]
    extra = await harness.client.post(f"/api/conversations/{cid}/messages", json={"text": "hi", "txt": "x"})
    assert extra.json()["details"]["fields"] == {"txt": "is not a known field"}
    email = await harness.client.post("/api/conversations", json={"subscriber": {"email": "nope"}})
    assert email.status_code == 422
    assert "subscriber.email" in email.json()["details"]["fields"]
    outcome = await harness.client.post("/api/handoffs/hs_x/release", json={"outcome": "great"})
    assert outcome.status_code == 422
    assert "outcome" in outcome.json()["details"]["fields"]


async def test_owner_release_refuses_wrong_types_and_unasked_fields_naming_each(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, expected_return=[
        {"name": "eta_date", "type": "date", "required": True}, {"name": "refund", "type": "number"},
    ]))["handoff_session_id"]
    refused = await harness.client.post(f"/api/handoffs/{sid}/release", json={
        "outcome": "resolved", "return_values": {"eta_date": "next week", "refund": "1,250", "colour": "red"},
    })
    assert refused.status_code == 422, refused.text
    body = refused.json()
    assert body["error"] == "invalid_return_values"
    assert body["details"]["fields"] == {
        "return_values.eta_date": 'must be a date as YYYY-MM-DD, such as 2026-06-10 (got "next week")',
        "return_values.refund": 'is ambiguous: "1,250" could mean 1250 or 1.25; write 1250 or 1.25, whichever you mean',
        "return_values.colour": "is not a field this handoff asked for (it asked for: eta_date, refund)",
    }
    assert (await harness.handoff(sid))["state"] == "active"  # nothing released, nothing stored
    assert [m for m in await harness.messages(cid) if m["role"] == "system"] == []
    [event] = [e for e in await harness.events(sid) if e["kind"] == "release_refused"]
    assert event["actor"] == "agent (api)"  # the agent's key (here: an open API) releases as the agent
    assert set(event["detail"]["invalid"]) == {"eta_date", "refund", "colour"}

    # corrected; a missing required field still never blocks
    fixed = await harness.client.post(f"/api/handoffs/{sid}/release", json={"return_values": {"refund": "12,50"}})
    assert fixed.status_code == 200, fixed.text
    assert (fixed.json()["handoff"]["returned"], fixed.json()["handoff"]["missing_required"]) == ({"refund": 12.5}, ["eta_date"])


async def test_messages_page_with_after(harness: Harness) -> None:
    cid = await harness.conversation()
    await harness.say(cid, "one")
    await harness.say(cid, "two")
    everything = await harness.messages(cid)
    assert [(m["role"], m["text"]) for m in everything][::2] == [("subscriber", "one"), ("subscriber", "two")]
    assert set(everything[0]) == {"id", "role", "text", "author", "handoff_session_id", "created_at"}
    later = await harness.messages(cid, after=everything[1]["id"])
    assert [m["id"] for m in later] == [m["id"] for m in everything[2:]]


async def test_long_poll_returns_when_a_human_replies(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    told = await harness.messages(cid)  # the desk told the subscriber who was asked
    assert [m["role"] for m in told] == ["agent"]
    assert told[0]["text"].startswith("I've asked our team to join")
    waiting = asyncio.create_task(harness.client.get(
        f"/api/conversations/{cid}/messages", params={"wait": 20, "after": told[-1]["id"]}))
    for _ in range(50):
        await asyncio.sleep(0)
    assert not waiting.done()
    await harness.desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text="Here now", author="Sam"))
    response = await asyncio.wait_for(waiting, timeout=10)
    assert [m["text"] for m in response.json()["messages"]] == ["Here now"]


async def test_handoff_list_and_view(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    listed = (await harness.client.get("/api/handoffs")).json()["handoffs"]
    assert [h["handoff_session_id"] for h in listed] == [sid]
    view = await harness.handoff(sid)
    for key in ("handoff_session_id", "conversation_id", "state", "channel_id", "release_reason", "returned",
                "missing_required", "form_url", "idle_deadline"):
        assert key in view
    assert (await harness.client.get("/api/handoffs", params={"state": "released"})).json()["handoffs"] == []


async def test_webhooks_of_a_channel_without_them_are_404(harness: Harness) -> None:
    response = await harness.client.post("/webhooks/1", content=b"{}")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"
    assert (await harness.client.post("/webhooks/99", content=b"{}")).status_code == 404


async def test_health_and_metrics(harness: Harness) -> None:
    health = (await harness.client.get("/healthz")).json()
    assert health["status"] == "ok"
    assert health["database"] == "ok"
    assert health["channels"] == [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox", "available": True, "problem": None,
                                  "serves": ["recipients"]}]
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.say(cid, "relayed")
    await harness.client.post(f"/api/handoffs/{sid}/release", json={})
    await harness.desk.settle()
    text = (await harness.client.get("/metrics")).text
    assert 'handoff_requests_total{channel_kind="owner_inbox",result="ok"} 1.0' in text
    assert 'handoff_releases_total{reason="owner"} 1.0' in text
    assert 'handoff_relayed_messages_total{direction="to_recipient"} 1.0' in text
    assert 'handoff_channel_available{channel_id="1",kind="owner_inbox"} 1.0' in text
    assert "handoff_dispatch_seconds_bucket" in text


async def test_metrics_can_require_a_bearer_token(start_desk: StartDesk) -> None:
    """With metrics.token set, /metrics answers only that token (the API key does not open it);
    without one it stays open, as the health check always is."""
    harness = await start_desk(api={"key": "k-123456"}, metrics={"token": "scrape-123456"})
    for headers in ({}, {"Authorization": "Bearer k-123456"}, {"Authorization": "Bearer scrape-1234567"}):
        refused = await harness.client.get("/metrics", headers=headers)
        assert (refused.status_code, refused.json()["error"]) == (401, "unauthorized"), headers
        assert refused.headers["www-authenticate"] == "Bearer"
        assert "metrics.token" in refused.json()["details"]["hint"]
    scraped = await harness.client.get("/metrics", headers={"Authorization": "Bearer scrape-123456"})
    assert scraped.status_code == 200
    assert "handoff_long_polls_waiting" in scraped.text
    assert (await harness.client.get("/healthz")).status_code == 200
    assert (await (await start_desk()).client.get("/metrics")).status_code == 200


async def test_openapi_document_is_served(harness: Harness) -> None:
    spec = (await harness.client.get("/api/openapi.json")).json()
    assert "/api/conversations/{cid}/messages" in spec["paths"]
    assert "/api/handoffs/{sid}/release" in spec["paths"]


async def test_foreign_host_headers_are_refused(harness: Harness) -> None:
    # DNS rebinding: a page on evil.example resolving to this server still sends its own Host.
    response = await harness.client.get("/inbox", headers={"Host": "evil.example:8000"})
    assert response.status_code == 400
    assert (await harness.client.get("/healthz", headers={"Host": "localhost:8000"})).status_code == 200


async def test_api_posts_must_be_json(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    # simple cross-site requests (no preflight) cannot carry application/json
    form = await harness.client.post(f"/api/handoffs/{sid}/release", content=b"", headers={"content-type": "application/x-www-form-urlencoded"})
    assert form.status_code == 415
    assert form.json()["error"] == "unsupported_media_type"
    text = await harness.client.post(f"/api/conversations/{cid}/tools/handoff_request", content=b"{}", headers={"content-type": "text/plain"})
    assert text.status_code == 415
    assert (await harness.handoff(sid))["state"] == "active"


async def test_nul_characters_and_huge_ids_are_clear_errors(harness: Harness) -> None:
    cid = await harness.conversation()
    nul = await harness.client.post(f"/api/conversations/{cid}/messages", json={"text": "hi\u0000there"})
    assert nul.status_code == 422
    assert nul.json()["details"]["fields"]["text"] == "must not contain NUL characters"
    huge = await harness.client.get(f"/api/conversations/{cid}/messages", params={"after": 10**20})
    assert huge.status_code == 422
    assert "after" in huge.json()["details"]["fields"]
    tool = await harness.tool(cid, "handoff_request", {
        "channel_id": True, "summary": "Null \u0000 byte in an otherwise long summary", "expected_action": "Do the thing now.",
    })
    assert set(tool["details"]["fields"]) == {"channel_id", "summary"}


async def test_a_channel_down_at_start_is_retried_by_the_sweep(start_desk: StartDesk) -> None:
    from channels.base import TransientChannelError
    from tests.fakes import ScriptedChannel

    class FlakyAtBoot(ScriptedChannel):
        starts = 0

        async def start(self, ctx: object) -> None:
            FlakyAtBoot.starts += 1
            if FlakyAtBoot.starts == 1:
                raise TransientChannelError("connection refused", hint="the provider could not be reached")

    harness = await start_desk(adapters={1: FlakyAtBoot})
    health = (await harness.client.get("/healthz")).json()["channels"][0]
    assert (health["available"], health["problem"]) == (False, "the provider could not be reached")
    cid = await harness.conversation()
    assert "handoff_request" not in await tool_names(harness, cid)
    await harness.desk.timers.sweep()
    assert (await harness.client.get("/healthz")).json()["channels"][0]["available"] is True
    assert "handoff_request" in await tool_names(harness, cid)


async def tool_names(harness: Harness, cid: str) -> list[str]:
    return [t["name"] for t in (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]]


async def test_a_body_that_is_not_json_is_a_400_in_the_usual_shape(start_desk: StartDesk) -> None:
    """Malformed JSON is not a wrong value (422) but no JSON at all: 400 `invalid_json` on
    every route that reads a body, the tool calls' own parsing and the decisions included."""
    harness = await start_desk(owner={"token": "owner-123456"})
    cid = await harness.conversation()
    as_json = {"content-type": "application/json"}
    for path, headers in [
        ("/api/conversations", as_json),
        (f"/api/conversations/{cid}/messages", as_json),
        (f"/api/conversations/{cid}/tools/handoff_request", as_json),
        ("/api/approvals/ap_nope/decision", {**as_json, "Authorization": "Bearer owner-123456"}),
        ("/chat/api/conversations", as_json),
    ]:
        for body in (b'{"text": "hi"', b"\xff\xfe{}", b'{"text": "\x80"}'):
            refused = await harness.client.post(path, content=body, headers=headers)
            assert refused.status_code == 400, (path, body, refused.text)
            assert refused.json()["error"] == "invalid_json", (path, body)
            assert refused.json()["details"]["hint"].startswith("the body is not valid JSON"), (path, body)
    assert [m["text"] for m in await harness.messages(cid)] == []


# --------------------------------------------------------------------------- who may call what

KEY, OWNER_KEY = "agent-key-0123456789abcdef", "owner-token-0123456789abcdef"
APPROVERS = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}, {"id": 2, "kind": "owner_inbox", "label": "Approvers"}]


def test_the_api_says_who_may_call_each_route() -> None:
    """The table of bot/web/api.py's routes: (the role a person or the owner token needs, or
    None for no person; whether the agent's key may; whether it may on a desk with neither
    owner.token nor people). tests/test_roles.py checks the server keeps to it."""
    from bot.config.people import Role
    from bot.web.api import api, declared_needs

    table = {f"{method} {route.path}": (needs.role, needs.agent, needs.agent_alone)
             for route in api.routes for needs in [declared_needs(route)] for method in route.methods}  # type: ignore[attr-defined]
    agent_only, reads = (None, True, False), (Role.VIEWER, True, False)
    assert table == {
        "POST /api/conversations": agent_only, "POST /api/conversations/{cid}/messages": agent_only,
        "GET /api/conversations/{cid}/messages": agent_only, "GET /api/conversations/{cid}/tools": agent_only,
        "POST /api/conversations/{cid}/tools/{name}": agent_only,
        "GET /api/handoffs": reads, "GET /api/handoffs/{sid}": reads, "GET /api/handoffs/{sid}/events": reads,
        "POST /api/handoffs/{sid}/release": (Role.AGENT, True, False),
        "GET /api/approvals": reads, "GET /api/approvals/{aid}": reads,
        "POST /api/approvals/{aid}/decision": (Role.AGENT, False, True),
        "GET /api/user_actions/{uaid}": agent_only, "POST /api/user_actions/{uaid}/step": agent_only,
        "POST /api/user_actions/{uaid}/response": agent_only,
    }


async def test_a_personal_token_releases_and_votes_as_its_person(start_desk: StartDesk) -> None:
    from bot.config.people import Role
    from tests.approval_actions import refund_action
    from tests.fakes import ScriptedChannel

    harness = await start_desk(api={"key": KEY}, owner={"token": OWNER_KEY}, channels=APPROVERS, adapters={2: ScriptedChannel},
                               actions=[refund_action(2, policy="ask_always", approvals_required=2)])
    harness.client.headers["Authorization"] = f"Bearer {KEY}"  # the agent's calls
    desk = harness.desk
    tokens = {}
    for pid, name in (("olga", "Olga Petrova"), ("ben", "Ben Okafor")):
        person = await desk.people.add(pid=pid, name=name, email=f"{pid}@example.com", role=Role.AGENT, source="cli", actor="test")
        tokens[pid] = {"Authorization": f"Bearer {(await desk.api_tokens.create(person, name='s', role=Role.AGENT, actor='test'))[0]}"}
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=25)
    decision = f"/api/approvals/{aid}/decision"

    named = await harness.client.post(decision, json={"decision": "approve", "decided_by": "Ben"}, headers=tokens["olga"])
    assert (named.status_code, named.json()["error"]) == (422, "invalid_request")
    assert "decided_by" in named.json()["details"]["fields"]
    first = await harness.client.post(decision, json={"decision": "approve"}, headers=tokens["olga"])
    assert first.status_code == 200, first.text
    assert [(v["voter"], v["name"], v["via"]) for v in first.json()["votes"]] == [("person:olga", "Olga Petrova (api)", "api")]
    again = await harness.client.post(decision, json={"decision": "approve"}, headers=tokens["olga"])
    assert (again.status_code, again.json()["error"]) == (409, "approval_already_counted")
    second = await harness.client.post(decision, json={"decision": "approve"}, headers=tokens["ben"])
    assert second.json()["state"] == "approved", second.text
    assert [v["voter"] for v in second.json()["votes"]] == ["person:olga", "person:ben"]

    sid = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    released = await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"}, headers=tokens["ben"])
    assert released.status_code == 200, released.text
    assert [e["actor"] for e in await harness.events(sid) if e["kind"] == "handoff_released"] == ["Ben Okafor (api)"]


async def test_the_owner_token_decides_as_the_owner_under_the_name_it_gives(start_desk: StartDesk) -> None:
    from tests.approval_actions import refund_action
    from tests.fakes import ScriptedChannel

    harness = await start_desk(api={"key": KEY}, owner={"token": OWNER_KEY}, channels=APPROVERS, adapters={2: ScriptedChannel},
                               actions=[refund_action(2)])
    harness.client.headers["Authorization"] = f"Bearer {KEY}"
    aid = await harness.ask_approval(await harness.conversation(), order_id="1234", amount=25)
    owner = {"Authorization": f"Bearer {OWNER_KEY}"}
    decided = await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": "deny", "decided_by": "Kim"}, headers=owner)
    assert decided.status_code == 200, decided.text
    assert (decided.json()["state"], decided.json()["receipt"]["decided_by"]) == ("denied", "Kim")
    conversations = await harness.client.post("/api/conversations", json={}, headers=owner)
    assert (conversations.status_code, conversations.json()["error"], conversations.json()["details"]["needed"]) == (
        403, "forbidden", "api.key")  # the agent's own routes are the agent's


async def test_without_owner_token_or_people_the_agents_key_still_decides_as_nobody(start_desk: StartDesk) -> None:
    """A one-operator desk, as before people: api.key is the only key there is, so it decides
    (counted as nobody where two people must approve). Once a person exists, it no longer may."""
    from bot.config.people import Role
    from tests.approval_actions import refund_action
    from tests.fakes import ScriptedChannel

    harness = await start_desk(api={"key": KEY}, channels=APPROVERS, adapters={2: ScriptedChannel}, actions=[refund_action(2)])
    harness.client.headers["Authorization"] = f"Bearer {KEY}"
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1", amount=5)
    decided = await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": "approve"})
    assert decided.status_code == 200, decided.text
    assert decided.json()["receipt"]["decided_by"] == "agent (api)"

    await harness.desk.people.add(pid="olga", name="Olga", email="olga@example.com", role=Role.ADMIN, source="cli", actor="test")
    later = await harness.ask_approval(cid, order_id="2", amount=5)
    refused = await harness.client.post(f"/api/approvals/{later}/decision", json={"decision": "approve"})
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")
    assert (await harness.approval(later))["state"] == "pending"
    anonymous = await harness.client.post(f"/api/approvals/{later}/decision", json={"decision": "approve"}, headers={"Authorization": ""})
    assert (anonymous.status_code, anonymous.headers["www-authenticate"]) == (401, "Bearer")


async def test_on_an_open_api_a_token_that_stopped_working_is_refused_not_taken_for_the_agent(start_desk: StartDesk) -> None:
    from bot.config.people import Role

    harness = await start_desk(owner={"token": OWNER_KEY})  # no api.key: the agent's routes are open, as they always were
    person = await harness.desk.people.add(pid="olga", name="Olga", email="olga@example.com", role=Role.AGENT,
                                           source="cli", actor="test")
    secret, row = await harness.desk.api_tokens.create(person, name="s", role=Role.AGENT, actor="test")
    assert (await harness.client.post("/api/conversations", json={}, headers={"Authorization": f"Bearer {secret}"})).status_code == 201
    await harness.desk.api_tokens.revoke(row.id, person_id="olga", actor="test")
    refused = await harness.client.post("/api/conversations", json={}, headers={"Authorization": f"Bearer {secret}"})
    assert (refused.status_code, refused.json()["error"]) == (401, "unauthorized")
    assert (await harness.client.post("/api/conversations", json={})).status_code == 201
    anonymous = await harness.client.post("/api/approvals/ap_nope/decision", json={"decision": "approve"})
    assert (anonymous.status_code, anonymous.json()["error"]) == (401, "unauthorized")  # deciding asks for someone
    assert "owner.token" in anonymous.json()["details"]["hint"]


async def test_a_route_s_recipients_name_each_offer_s_person_target_turn_and_result_but_no_address(start_desk: StartDesk) -> None:
    harness = await people_desk(
        start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"}, api={"key": "k-123456"},
        teams=[{"id": "support", "label": "Support desk", "members": ["olga", "ben"]}],
    )
    harness.client.headers["Authorization"] = "Bearer k-123456"  # everything below as the agent
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    await later(harness, timedelta(minutes=5))
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    recipients = (await harness.handoff(sid))["recipients"]
    olga, ben = recipients
    assert {k: olga[k] for k in ("person_id", "person_name", "target", "contact", "contact_index", "turn", "result")} == {
        "person_id": "olga", "person_name": "Olga Petrova", "target": "team:support", "contact": "slack",
        "contact_index": 0, "turn": 0, "result": "missed"}
    assert olga["ended_at"] == (MONDAY_NOON + timedelta(minutes=5)).isoformat()
    assert (ben["person_name"], ben["turn"], ben["result"]) == ("Ben Okoye", 1, "claimed")
    # the fields clients read before are all still there
    assert {"channel_id", "channel_kind", "channel_label", "step", "state", "channel_message_id", "notified_at",
            "failed_at", "error"} <= set(olga)
    assert "U-olga" not in str(recipients) and "address" not in olga

"""The web chat front's page and API, over the real app."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def chat(start_desk: StartDesk, **front: Any) -> Harness:
    return await start_desk(fronts=[{"kind": "web", "title": "Acme help", **front}], api={"key": "k-0123456789abcdef0123"})


async def begin(harness: Harness) -> dict[str, str]:
    started = await harness.client.post("/chat/api/conversations", json={})
    assert started.status_code == 201, started.text
    return {"X-Chat-Token": started.json()["token"]}


async def updates(harness: Harness, token: dict[str, str], after: int = 0) -> dict[str, Any]:
    response = await harness.client.get("/chat/api/messages", params={"after": after}, headers=token)
    assert response.status_code == 200, response.text
    return response.json()


async def test_the_page_carries_no_api_key_and_a_strict_policy(start_desk: StartDesk) -> None:
    harness = await chat(start_desk, greeting="Hi! Ask us anything.")
    page = await harness.client.get("/chat")
    assert page.status_code == 200 and "Acme help" in page.text and "Hi! Ask us anything." in page.text
    assert "k-0123456789abcdef0123" not in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"] and page.headers["x-frame-options"] == "DENY"


async def test_the_widget_may_be_framed_only_by_the_named_sites(start_desk: StartDesk) -> None:
    harness = await chat(start_desk, embed_origins=["https://shop.example.com"])
    framed = await harness.client.get("/chat", params={"embed": "1"})
    assert "frame-ancestors 'self' https://shop.example.com" in framed.headers["content-security-policy"]
    assert "x-frame-options" not in framed.headers
    script = await harness.client.get("/widget.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert '"http://desk.test/chat?embed=1"' in script.text and '"Acme help"' in script.text


async def test_a_conversation_through_the_chat_hides_what_is_for_the_agent(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    token = await begin(harness)
    said = await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=token)
    assert said.json()["routed_to"] == "agent"
    first = await updates(harness, token)
    assert [m["role"] for m in first["messages"]] == ["subscriber", "agent"] and first["person"] is None

    await harness.client.post("/chat/api/messages", json={"text": "Can I talk to a person?"}, headers=token)
    state = await updates(harness, token, first["last_id"])
    assert state["person"] == {"label": "Owner inbox"}
    [sid] = [h["handoff_session_id"] for h in (await harness.client.get(
        "/api/handoffs", headers={"Authorization": "Bearer k-0123456789abcdef0123"})).json()["handoffs"]]
    await harness.desk.handoffs.recipient_message(sid, "Hello, Sam here.", author="Sam", via="test")
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"},
                              headers={"Authorization": "Bearer k-0123456789abcdef0123"})
    await harness.desk.settle()
    everything = await updates(harness, token)
    assert {"role": "human", "text": "Hello, Sam here.", "author": "Sam"} in [
        {k: m[k] for k in ("role", "text", "author")} for m in everything["messages"]]
    assert not any(m["text"].startswith("[Bot resumed") for m in everything["messages"])  # for the agent only
    assert everything["person"] is None


async def test_a_pending_user_action_has_steps_and_done(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    token = await begin(harness)
    await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=token)
    async with harness.desk.db.read() as session:  # the page never learns its conversation id; the test looks it up
        from sqlalchemy import select

        from bot.models import Conversation
        cid = (await session.scalars(select(Conversation.id))).one()
    await harness.desk.call_tool(cid, "request_user_action", {
        "reason": "permission_confirmation", "details": "Your browser will ask to share your location.",
        "suggested_action": "Allow location", "steps": [{"instruction": "Click the lock icon"}, {"instruction": "Allow"}]})
    state = await updates(harness, token)
    action = state["user_action"]
    assert action["suggested_action"] == "Allow location" and action["step"] == 0
    moved = await harness.client.post(f"/chat/api/user_actions/{action['id']}/step", json={"move": "next"}, headers=token)
    assert moved.json() == {"step": 1}
    done = await harness.client.post(f"/chat/api/user_actions/{action['id']}/response", json={"outcome": "done"},
                                     headers=token)
    assert done.json()["status"] == "done"
    assert (await updates(harness, token))["user_action"] is None


async def test_tokens_are_checked_and_the_chat_can_be_off(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    forged = await harness.client.post("/chat/api/messages", json={"text": "hi"}, headers={"X-Chat-Token": "c_x.forged"})
    assert forged.status_code == 401 and "start a conversation" in forged.json()["details"]["hint"]
    plain = await harness.client.post("/chat/api/conversations", content=b"{}", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415  # a cross-site form cannot start conversations without a preflight
    other = await begin(harness)
    await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=other)
    mine = await begin(harness)
    assert (await updates(harness, mine))["messages"] == []  # another visitor's conversation is not visible

    off = await start_desk()
    assert (await off.client.get("/chat")).status_code == 404
    assert (await off.client.post("/chat/api/conversations", json={})).status_code == 404

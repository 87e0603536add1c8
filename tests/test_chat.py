"""The web chat front's page and API, over the real app."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def chat(start_desk: StartDesk, *, server: dict[str, Any] | None = None, **front: Any) -> Harness:
    return await start_desk(fronts=[{"kind": "web", "title": "Acme help", **front}], api={"key": "k-0123456789abcdef0123"},
                            **({"server": server} if server is not None else {}))


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
    assert page.status_code == 200
    assert "Acme help" in page.text
    assert "Hi! Ask us anything." in page.text
    assert "k-0123456789abcdef0123" not in page.text
    # the on-screen keyboard shrinks the page instead of covering its composer
    assert '<meta name="viewport" content="width=device-width, initial-scale=1, interactive-widget=resizes-content">' in page.text
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY"


async def test_the_widget_may_be_framed_only_by_the_named_sites(start_desk: StartDesk) -> None:
    harness = await chat(start_desk, embed_origins=["https://shop.example.com"])
    framed = await harness.client.get("/chat", params={"embed": "1"})
    assert "frame-ancestors 'self' https://shop.example.com" in framed.headers["content-security-policy"]
    assert "x-frame-options" not in framed.headers
    script = await harness.client.get("/widget.js")
    assert script.headers["content-type"].startswith("text/javascript")
    assert '"http://desk.test/chat?embed=1"' in script.text
    assert '"Acme help"' in script.text


async def test_a_conversation_through_the_chat_hides_what_is_for_the_agent(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    token = await begin(harness)
    said = await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=token)
    assert said.json()["routed_to"] == "agent"
    first = await updates(harness, token)
    assert [m["role"] for m in first["messages"]] == ["subscriber", "agent"]
    assert first["person"] is None

    await harness.client.post("/chat/api/messages", json={"text": "Can I talk to a person?"}, headers=token)
    state = await updates(harness, token, first["last_id"])
    # asked, not joined: nobody has written yet, so the banner says who is awaited and how soon
    assert state["person"] == {"joined": False, "name": "our team",
                               "text": "Waiting for our team to join — usually within 1 business day."}
    [sid] = [h["handoff_session_id"] for h in (await harness.client.get(
        "/api/handoffs", headers={"Authorization": "Bearer k-0123456789abcdef0123"})).json()["handoffs"]]
    await harness.desk.handoffs.recipient_message(sid, "Hello, Sam here.", author="Sam", via="test")
    await harness.desk.handoffs.recipient_message(sid, "Looking into it.", author="Kim", via="test")
    # joined once a person wrote, named by the first reply's author
    assert (await updates(harness, token))["person"] == {"joined": True, "name": "Sam",
                                                         "text": "Sam has joined the conversation."}
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"},
                              headers={"Authorization": "Bearer k-0123456789abcdef0123"})
    await harness.desk.settle()
    everything = await updates(harness, token)
    assert {"role": "human", "text": "Hello, Sam here.", "author": "Sam"} in [
        {k: m[k] for k in ("role", "text", "author")} for m in everything["messages"]]
    assert not any(m["text"].startswith("[Bot resumed") for m in everything["messages"])  # for the agent only
    assert everything["person"] is None
    told = [m["text"] for m in everything["messages"] if m["role"] == "agent"]
    assert "I've asked our team to join — usually within 1 business day. Your messages now go straight to them." in told
    assert "Our team has handed the conversation back to the assistant." in told
    assert (await harness.desk.conversations.get((await harness.desk.handoffs.get(sid)).conversation_id)).front == "web"


async def test_the_subscriber_is_told_the_public_name_never_the_label(start_desk: StartDesk) -> None:
    harness = await start_desk(fronts=[{"kind": "web"}], api={"key": "k-0123456789abcdef0123"}, channels=[{
        "id": 1, "kind": "owner_inbox", "label": "Owner inbox", "public_name": "the Acme support team",
        "estimated_response": "within the hour"}])
    token = await begin(harness)
    await harness.client.post("/chat/api/messages", json={"text": "Can I talk to a person?"}, headers=token)
    state = await updates(harness, token)
    assert state["person"]["text"] == "Waiting for the Acme support team to join — usually within the hour."
    [sid] = [h["handoff_session_id"] for h in (await harness.client.get(
        "/api/handoffs", headers={"Authorization": "Bearer k-0123456789abcdef0123"})).json()["handoffs"]]
    await harness.desk.handoffs.release(sid, reason="owner", actor="test")
    told = [m["text"] for m in (await updates(harness, token))["messages"] if m["role"] == "agent"]
    assert "I've asked the Acme support team to join — usually within the hour. Your messages now go straight to them." in told
    assert "The Acme support team has handed the conversation back to the assistant." in told
    assert not any("Owner inbox" in text for text in told)  # the label is the owner's name for it


async def test_a_pending_user_action_has_steps_and_done(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    token = await begin(harness)
    await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=token)
    async with harness.desk.db.read() as session:  # the page never learns its conversation id; the test looks it up
        from sqlalchemy import select

        from bot.store.models import Conversation
        cid = (await session.scalars(select(Conversation.id))).one()
    await harness.desk.router.call_tool(cid, "request_user_action", {
        "reason": "permission_confirmation", "details": "Your browser will ask to share your location.",
        "suggested_action": "Allow location", "steps": [{"instruction": "Click the lock icon"}, {"instruction": "Allow"}]})
    state = await updates(harness, token)
    action = state["user_action"]
    assert action["suggested_action"] == "Allow location"
    assert action["step"] == 0
    moved = await harness.client.post(f"/chat/api/user_actions/{action['id']}/step", json={"move": "next"}, headers=token)
    assert moved.json() == {"step": 1}
    done = await harness.client.post(f"/chat/api/user_actions/{action['id']}/response", json={"outcome": "done"},
                                     headers=token)
    assert done.json()["status"] == "done"
    assert (await updates(harness, token))["user_action"] is None


async def test_tokens_are_checked_and_the_chat_can_be_off(start_desk: StartDesk) -> None:
    harness = await chat(start_desk)
    forged = await harness.client.post("/chat/api/messages", json={"text": "hi"}, headers={"X-Chat-Token": "c_x.forged"})
    assert forged.status_code == 401
    assert "start a conversation" in forged.json()["details"]["hint"]
    plain = await harness.client.post("/chat/api/conversations", content=b"{}", headers={"Content-Type": "text/plain"})
    assert plain.status_code == 415  # a cross-site form cannot start conversations without a preflight
    other = await begin(harness)
    await harness.client.post("/chat/api/messages", json={"text": "Hi!"}, headers=other)
    mine = await begin(harness)
    assert (await updates(harness, mine))["messages"] == []  # another visitor's conversation is not visible

    off = await start_desk()
    assert (await off.client.get("/chat")).status_code == 404
    assert (await off.client.post("/chat/api/conversations", json={})).status_code == 404


# --------------------------------------------------------------------------- rate limits


async def test_new_conversations_are_limited_per_client_address(start_desk: StartDesk) -> None:
    from datetime import timedelta

    # the test client's peer is 127.0.0.1, a trusted proxy by default: here it is not one
    harness = await chat(start_desk, max_new_conversations_per_minute=3, server={"trusted_proxies": []})
    clock = harness.desk.clock
    for _ in range(3):
        await begin(harness)
    over = await harness.client.post("/chat/api/conversations", json={})
    assert over.status_code == 429
    assert over.headers["retry-after"] == "20"  # one every 60/3 s
    assert over.json() == {"error": "rate_limited", "details": {
        "hint": "too many new conversations from your address; try again in 20 s", "retry_after": 20}}
    # a made-up X-Forwarded-For changes nothing: the peer is not a trusted proxy
    spoofed = await harness.client.post("/chat/api/conversations", json={}, headers={"X-Forwarded-For": "203.0.113.9"})
    assert spoofed.status_code == 429

    clock.advance(timedelta(seconds=19))
    assert (await harness.client.post("/chat/api/conversations", json={})).headers["retry-after"] == "1"
    clock.advance(timedelta(seconds=1))
    await begin(harness)  # refilled: one more
    assert (await harness.client.post("/chat/api/conversations", json={})).status_code == 429
    clock.advance(timedelta(minutes=1))
    for _ in range(3):  # a full minute later the whole allowance is back (no more than that)
        await begin(harness)
    assert (await harness.client.post("/chat/api/conversations", json={})).status_code == 429


async def test_messages_are_limited_per_conversation(start_desk: StartDesk) -> None:
    from datetime import timedelta

    harness = await chat(start_desk, max_messages_per_minute=2)
    mine, other = await begin(harness), await begin(harness)
    for text in ("one", "two"):
        assert (await harness.client.post("/chat/api/messages", json={"text": text}, headers=mine)).status_code == 200
    over = await harness.client.post("/chat/api/messages", json={"text": "three"}, headers=mine)
    assert over.status_code == 429
    assert over.headers["retry-after"] == "30"
    assert over.json()["error"] == "rate_limited"
    assert over.json()["details"]["retry_after"] == 30
    assert (await harness.client.post("/chat/api/messages", json={"text": "hi"}, headers=other)).status_code == 200
    assert [m["text"] for m in (await updates(harness, mine))["messages"] if m["role"] == "subscriber"] == ["one", "two"]
    forged = await harness.client.post("/chat/api/messages", json={"text": "x"}, headers={"X-Chat-Token": "forged"})
    assert forged.status_code == 401  # the token is checked first; a stranger cannot use up someone's allowance
    harness.desk.clock.advance(timedelta(seconds=30))
    assert (await harness.client.post("/chat/api/messages", json={"text": "three"}, headers=mine)).status_code == 200


async def test_the_limits_default_to_ten_conversations_and_thirty_messages(start_desk: StartDesk) -> None:
    from bot.config import ConfigError, WebFrontConfig

    front = WebFrontConfig(kind="web")
    assert (front.max_new_conversations_per_minute, front.max_messages_per_minute) == (10, 30)
    with pytest.raises(ConfigError) as problems:
        await chat(start_desk, max_messages_per_minute=0)
    assert "max_messages_per_minute" in str(problems.value)

"""The owner inbox: login, the live view, reply and release, CSRF and escaping."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import httpx
import pytest

from bot.runtime.clock import ManualClock
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """Page and schema behaviour does not depend on the database: SQLite only."""
    return sqlite_url


def csrf_of(html: str) -> str:
    match = re.search(r'name="csrf" value="([^"]+)"', html)
    assert match, "no CSRF token in the page"
    return match.group(1)


def nonce_of(html: str) -> str:
    match = re.search(r'name="nonce" value="([^"]+)"', html)
    assert match
    return match.group(1)


async def login(client: httpx.AsyncClient, token: str = "owner-secret") -> None:
    response = await client.post("/inbox/login", data={"token": token, "next": "/inbox"})
    assert response.status_code == 303
    assert response.headers["location"] == "/inbox"


async def test_the_inbox_needs_the_owner_token(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    client = harness.client
    page = await client.get("/inbox")
    assert page.status_code == 303
    assert page.headers["location"] == "/inbox/login?next=/inbox"
    wrong = await client.post("/inbox/login", data={"token": "guess", "next": "/inbox"})
    assert wrong.headers["location"].startswith("/inbox/login?failed=1")
    assert (await client.get(wrong.headers["location"])).status_code == 401
    await login(client)
    cookie = client.cookies.get("handoff_session")
    assert cookie
    assert "owner-secret" not in cookie
    assert (await client.get("/inbox")).status_code == 200
    updates = await httpx.AsyncClient(transport=client._transport, base_url="http://desk.test").get("/inbox/handoffs/x/updates")
    assert updates.status_code == 401


async def test_login_redirects_stay_on_this_site(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    response = await harness.client.post("/inbox/login", data={"token": "owner-secret", "next": "//evil.example/inbox"})
    assert response.headers["location"] == "/inbox"


async def test_active_handoffs_are_listed_with_what_to_do(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, urgency="high"))["handoff_session_id"]
    page = await harness.client.get("/inbox")
    assert page.status_code == 200
    html = page.text
    assert "Active handoffs" in html
    assert f"/inbox/handoffs/{sid}" in html
    assert "Ana&#39;s order #1234 is a week late" in html
    assert "Look up order #1234 and tell Ana when it will arrive." in html
    assert "30 min left" in html
    assert "pill-high" in html
    assert "This inbox has no owner token" in html  # open inboxes say so


async def test_hostile_text_renders_inert(harness: Harness) -> None:
    cid = await harness.conversation(name='<img src=x onerror="alert(1)">')
    sid = (await harness.start_handoff(cid, summary="<script>alert('summary')</script> needs help right now")) ["handoff_session_id"]
    await harness.say(cid, "<b>bold</b> & </textarea><script>alert(2)</script>")
    for path in ("/inbox", f"/inbox/handoffs/{sid}"):
        html = (await harness.client.get(path)).text
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "&lt;script&gt;alert(&#39;summary&#39;)&lt;/script&gt;" in html
    detail = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;/textarea&gt;" in detail


async def test_pages_carry_security_headers(harness: Harness) -> None:
    page = await harness.client.get("/inbox")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "script-src 'nonce-" in csp
    nonce = re.search(r"'nonce-([^']+)'", csp).group(1)
    assert f'<script nonce="{nonce}">' in page.text
    assert page.headers["referrer-policy"] == "no-referrer"
    assert page.headers["cache-control"] == "no-store"
    assert page.headers["x-content-type-options"] == "nosniff"
    set_cookie = page.headers["set-cookie"].lower()
    assert "httponly" in set_cookie
    assert "samesite=strict" in set_cookie


async def test_owner_replies_and_releases_from_the_inbox(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.say(cid, "Hello? Anyone?")
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "Hello? Anyone?" in page
    assert 'id="reply-text"' in page
    assert "Release" in page
    csrf, nonce = csrf_of(page), nonce_of(page)
    sent = await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf, "nonce": nonce, "text": "Hi Ana, Sam here."})
    assert sent.status_code == 303
    assert sent.headers["location"] == f"/inbox/handoffs/{sid}"
    # a double submit of the same form relays once
    await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf, "nonce": nonce, "text": "Hi Ana, Sam here."})
    humans = [m for m in await harness.messages(cid) if m["role"] == "human"]
    assert [(m["author"], m["text"]) for m in humans] == [("Support", "Hi Ana, Sam here.")]  # until the owner names themself

    released = await harness.client.post(
        f"/inbox/handoffs/{sid}/release", data={"csrf": csrf, "outcome": "needs_followup", "note": "Call on Monday"}
    )
    assert released.status_code == 303
    assert "Released" in released.headers["location"].replace("%20", " ")
    handoff = await harness.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"], handoff["note"]) == (
        "released", "owner", "needs_followup", "Call on Monday")
    detail = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "Released by owner (inbox)" in detail
    assert 'id="reply-text"' not in detail


async def test_release_typed_into_the_reply_box(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": "n1", "text": "/release resolved all done"})
    handoff = await harness.handoff(sid)
    assert (handoff["release_reason"], handoff["outcome"], handoff["note"]) == ("release_token", "resolved", "all done")


async def test_posts_without_csrf_or_from_another_site_are_refused(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    no_token = await harness.client.post(f"/inbox/handoffs/{sid}/release", data={"outcome": "resolved"})
    assert no_token.status_code == 403
    forged = await harness.client.post(f"/inbox/handoffs/{sid}/release", data={"csrf": "forged", "outcome": "resolved"})
    assert forged.status_code == 403
    cross = await harness.client.post(
        f"/inbox/handoffs/{sid}/release", data={"csrf": csrf_of(page)}, headers={"Origin": "https://evil.example"}
    )
    assert cross.status_code == 403
    cross_site = await harness.client.post(
        f"/inbox/handoffs/{sid}/release", data={"csrf": csrf_of(page)}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert cross_site.status_code == 403
    assert (await harness.handoff(sid))["state"] == "active"
    same = await harness.client.post(
        f"/inbox/handoffs/{sid}/release", data={"csrf": csrf_of(page)}, headers={"Origin": "http://desk.test"}
    )
    assert same.status_code == 303
    assert (await harness.handoff(sid))["state"] == "released"


async def test_get_never_changes_state(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    for path in (f"/inbox/handoffs/{sid}/release", f"/inbox/handoffs/{sid}/reply"):
        assert (await harness.client.get(path)).status_code == 405
    assert (await harness.handoff(sid))["state"] == "active"


async def test_live_updates_long_poll(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.client.get("/inbox")  # receive the owner cookie
    await harness.say(cid, "new message")
    body = (await harness.client.get(f"/inbox/handoffs/{sid}/updates", params={"after": 0, "wait": 0})).json()
    [said] = [m for m in body["messages"] if m["role"] == "subscriber"]
    assert said["text"] == "new message"
    assert said["speaker"] == "Ana"
    assert body["state"] == "active"
    assert body["time_left"] == "30 min left"


async def test_replies_to_other_channels_go_through_that_channel(start_desk: StartDesk, scripted) -> None:
    harness = await start_desk(adapters={1: scripted})
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert 'id="reply-text"' not in page
    assert "Replies to this handoff go through Owner inbox" in page
    assert "Release" in page  # the owner can still end it


# --------------------------------------------------------------------------- approvals in the inbox

APPROVAL_SCHEMA = {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                   "required": ["order_id", "amount"]}


def refund_action(**overrides: object) -> dict[str, object]:
    return shared_refund_action(1, **{"input_schema": APPROVAL_SCHEMA, **overrides})


async def approval_desk(start_desk: StartDesk, *actions: dict[str, object]) -> Harness:
    from tests import approval_actions

    approval_actions.CALLS.clear()
    return await start_desk(actions=list(actions) or [refund_action()])


async def decide_in_inbox(harness: Harness, aid: str, decision: str, **form: str) -> httpx.Response:
    page = (await harness.client.get("/inbox")).text
    return await harness.client.post(f"/inbox/approvals/{aid}/decision", data={"csrf": csrf_of(page), "decision": decision, **form})


async def test_pending_approvals_wait_in_the_inbox_with_escaped_arguments(start_desk: StartDesk) -> None:
    from sqlalchemy import select

    from bot.store.models import OutboxItem

    harness = await approval_desk(start_desk)
    cid = await harness.conversation(name="Ana <img src=x onerror=alert(1)>")
    aid = await harness.ask_approval(cid, order_id="<script>alert(1)</script>", amount=25.5)
    # the owner inbox took the prompt (the inbox reads approvals from the database)
    async with harness.desk.db.read() as session:
        items = (await session.scalars(select(OutboxItem).where(OutboxItem.handoff_session_id == aid))).all()
    assert [(i.channel_id, i.state) for i in items] == [(1, "sent")]
    html = (await harness.client.get("/inbox")).text
    assert "Waiting for approval" in html
    assert f'id="approval-{aid}"' in html
    assert "<code class=\"action\">refund_order</code>" in html
    assert "high risk" in html
    assert "Refund an order to the original payment method" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "<img src=x" not in html
    assert "&#34;order_id&#34;: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;,\n  &#34;amount&#34;: 25.5" in html
    assert "<script>alert" not in html
    assert "5 min left" in html  # the default timeout is 5 minutes (the test clock stands still)
    assert 'name="always" value="yes"' in html
    assert "Asked in Owner inbox" in html
    assert f'action="/inbox/approvals/{aid}/decision"' in html
    assert "No approval decided yet." in html
    assert 'id="decided-empty">' in html  # shown, not hidden


async def test_approving_in_the_inbox_runs_the_action_and_shows_the_receipt(start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=25.5)
    response = await decide_in_inbox(harness, aid, "approve")
    assert response.status_code == 303
    # the action runs in the background, after the decision is stored
    assert response.headers["location"] == "/inbox?notice=Approved%3A%20refund_order%20is%20running.#approvals"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25.5}]
    view = (await harness.approval(aid))
    assert (view["state"], view["receipt"]["decided_by"], view["receipt"]["via"]) == ("approved", "owner (inbox)", "inbox")
    system = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert system[0].startswith("[Approval — refund_order was approved and ran")
    html = (await harness.client.get("/inbox?notice=Approved%3A%20refund_order%20ran.")).text
    assert "data-approval=" not in html
    assert '<section id="approvals" class="approvals" hidden>' in html
    assert '<p class="banner" role="status">Approved: refund_order ran.</p>' in html
    assert "Recent approvals" in html
    assert "owner (inbox)" in html
    assert "via inbox" in html
    assert f"args {view['receipt']['arguments_hash'][:12]}…" in html
    assert "ran: {&#34;refund_id&#34;: &#34;rf_1&#34;" in html
    # a second press (another tab, a double click) changes nothing
    again = await decide_in_inbox(harness, aid, "deny")
    assert "changed%20nothing" in again.headers["location"]
    assert len(approval_actions.CALLS) == 1


async def test_denying_in_the_inbox_with_a_reason_is_permission_denied(start_desk: StartDesk) -> None:
    from tests import approval_actions

    harness = await approval_desk(start_desk, refund_action(policy="ask_always"))
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=900)
    html = (await harness.client.get("/inbox")).text
    assert "asks every time" in html
    assert 'name="always"' not in html  # never offered for ask_always
    response = await decide_in_inbox(harness, aid, "deny", reason="Over the refund limit", always="yes")
    assert "Denied%3A%20refund_order%20did%20not%20run." in response.headers["location"]
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    [note] = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert note.startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it: Over the refund limit.")
    html = (await harness.client.get("/inbox")).text
    assert "“Over the refund limit”" in html
    assert "did not run" in html


async def test_always_allow_from_the_inbox_covers_the_same_shape(start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1", amount=5)
    await decide_in_inbox(harness, aid, "approve", always="yes")
    assert (await harness.approval(aid))["receipt"]["always_allow"] is True
    assert (await harness.tool(cid, "refund_order", {"order_id": "2", "amount": 7}))["status"] == "done"


async def test_approval_posts_need_the_csrf_token_and_this_site(start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1", amount=5)
    page = (await harness.client.get("/inbox")).text
    path = f"/inbox/approvals/{aid}/decision"
    assert (await harness.client.post(path, data={"decision": "approve"})).status_code == 403
    assert (await harness.client.post(path, data={"csrf": "forged", "decision": "approve"})).status_code == 403
    cross = await harness.client.post(path, data={"csrf": csrf_of(page), "decision": "approve"},
                                      headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    assert (await harness.client.get(path)).status_code == 405  # GET never decides
    assert (await harness.client.post(path, data={"csrf": csrf_of(page), "decision": "maybe"})).status_code == 303
    assert (await harness.approval(aid))["state"] == "pending"
    missing = await harness.client.post("/inbox/approvals/ap_nope/decision", data={"csrf": csrf_of(page), "decision": "approve"})
    assert missing.status_code == 404
    assert "Could not decide" in missing.text


async def test_an_owner_token_inbox_decides_only_after_login(start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1", amount=5)
    locked = await start_desk(owner={"token": "owner-secret"}, actions=[refund_action()])  # the same database
    response = await locked.client.post(f"/inbox/approvals/{aid}/decision", data={"decision": "approve"})
    assert response.status_code == 401
    assert (await harness.approval(aid))["state"] == "pending"


async def test_the_handoff_page_shows_the_conversations_approvals(start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    first = await harness.ask_approval(cid, order_id="1", amount=5)
    await harness.ask_approval(cid, order_id="2", amount=6)
    await decide_in_inbox(harness, first, "approve")
    html = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "Approvals in this conversation" in html
    assert "approved</strong> by owner (inbox)" in html
    assert "via inbox" in html
    assert "waiting</strong>" in html
    assert 'href="/inbox#approval-' in html


# --------------------------------------------------------------------------- the live list


async def list_updates(client: httpx.AsyncClient, since: str = "", wait: float = 0) -> dict[str, object]:
    response = await client.get("/inbox/updates", params={"since": since, "wait": wait})
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    assert "default-src 'none'" in response.headers["content-security-policy"]
    return response.json()


async def test_the_list_updates_need_the_owner_and_are_get_only(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    anonymous = await harness.client.get("/inbox/updates", params={"wait": 0})
    assert anonymous.status_code == 401
    assert anonymous.json()["error"] == "unauthorized"  # JSON, not a login redirect
    await login(harness.client)
    assert (await list_updates(harness.client))["changed"] is True
    assert (await harness.client.post("/inbox/updates")).status_code == 405
    too_long = await harness.client.get("/inbox/updates", params={"wait": 26})
    assert too_long.status_code == 422  # at most 25 s


async def test_the_list_updates_carry_what_the_list_shows(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, urgency="high"))["handoff_session_id"]
    await harness.say(cid, "Hello?   Is anyone\nthere? " + "x" * 300)
    body = await list_updates(harness.client)
    assert body["changed"] is True
    assert body["approvals"] == []
    assert body["recent"] == []
    assert body["decided"] == []
    [card] = body["handoffs"]
    assert (card["id"], card["state"], card["urgency"], card["channel"], card["subscriber"]) == (
        sid, "active", "high", "Owner inbox", "Ana")
    assert card["summary"].startswith("Ana's order #1234")
    assert card["expected_action"].startswith("Look up order")
    assert card["said"]["text"].startswith("Hello? Is anyone there? xxx")
    assert card["said"]["text"].endswith("…")
    assert len(card["said"]["text"]) == 160
    assert card["said"]["id"] == card["last_id"]
    assert card["last_who"] == "Ana"
    assert card["last_ago"] == "just now"
    assert card["time_left"] == "30 min left"
    assert card["last_at"]
    assert card["deadline"]

    # nothing new: the same version, no list
    again = await list_updates(harness.client, body["version"])
    assert again == {"version": body["version"], "changed": False}

    # the owner answers: the last message is theirs, the preview stays the subscriber's words
    handoff_page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(handoff_page), "nonce": "n", "text": "Hi!"})
    answered = await list_updates(harness.client, body["version"])
    [card] = answered["handoffs"]
    assert answered["changed"] is True
    assert card["last_who"] == "Support"
    assert card["said"]["text"].startswith("Hello?")
    assert card["last_id"] > card["said"]["id"]

    # released: it leaves the list and shows under "recently ended"
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    released = await list_updates(harness.client, answered["version"])
    assert released["changed"] is True
    assert released["handoffs"] == []
    assert [(r["id"], r["ended"]) for r in released["recent"]] == [(sid, "owner · resolved")]


async def test_the_list_version_follows_handoffs_and_approvals(start_desk: StartDesk) -> None:
    from datetime import timedelta

    harness = await approval_desk(start_desk)
    empty = await list_updates(harness.client)
    assert empty["handoffs"] == []
    assert empty["approvals"] == []
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    with_handoff = await list_updates(harness.client, empty["version"])
    assert with_handoff["changed"] is True
    assert len(with_handoff["handoffs"]) == 1  # a new handoff appears

    other = await harness.conversation(name="Ben", email=None)
    aid = await harness.ask_approval(other, order_id="<b>9</b>", amount=5)
    asked = await list_updates(harness.client, with_handoff["version"])
    [approval] = asked["approvals"]
    assert (approval["id"], approval["action_id"], approval["subscriber"], approval["policy"]) == (aid, "refund_order", "Ben", "ask")
    assert '"order_id": "<b>9</b>"' in approval["arguments"]  # data, for textContent; the page never parses it as HTML

    harness.desk.clock.advance(timedelta(minutes=6))  # past its deadline, before any sweep: it leaves the list
    expired = await list_updates(harness.client, asked["version"])
    assert expired["changed"] is True
    assert expired["approvals"] == []


async def test_a_waiting_list_request_returns_as_soon_as_a_message_arrives(
    harness: Harness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bot.web.inbox import view

    monkeypatch.setattr(view, "RECHECK_SECONDS", 60.0)  # so only the bus can wake it within the test
    cid = await harness.conversation()
    await harness.start_handoff(cid)
    version = (await list_updates(harness.client))["version"]
    waiting = asyncio.create_task(list_updates(harness.client, version, wait=20))
    async with asyncio.timeout(5):
        while not harness.desk.bus._any:  # the request is parked on the bus
            await asyncio.sleep(0)
    await harness.say(cid, "Still there?")
    body = await asyncio.wait_for(waiting, timeout=10)
    assert body["changed"] is True
    assert body["handoffs"][0]["said"]["text"] == "Still there?"

    # a handoff starting in a conversation the list did not show wakes it too
    waiting = asyncio.create_task(list_updates(harness.client, body["version"], wait=20))
    async with asyncio.timeout(5):
        while not harness.desk.bus._any:
            await asyncio.sleep(0)
    other = await harness.conversation(name="Ben")
    sid = (await harness.start_handoff(other))["handoff_session_id"]
    body = await asyncio.wait_for(waiting, timeout=10)
    assert body["changed"] is True
    assert sid in [h["id"] for h in body["handoffs"]]


async def test_a_waiting_list_request_sees_what_another_instance_wrote(start_desk: StartDesk) -> None:
    first = await start_desk()
    second = await start_desk()  # the same database, its own process-local bus
    cid = await first.conversation()
    await first.start_handoff(cid)
    version = (await list_updates(first.client))["version"]
    waiting = asyncio.create_task(list_updates(first.client, version, wait=20))
    await second.say(cid, "Written elsewhere")
    body = await asyncio.wait_for(waiting, timeout=8)  # the 2 s re-read finds it
    assert body["changed"] is True
    assert body["handoffs"][0]["said"]["text"] == "Written elsewhere"


# --------------------------------------------------------------------------- who is speaking


async def set_name(client: httpx.AsyncClient, name: str, next: str = "/inbox") -> httpx.Response:
    page = (await client.get("/inbox/name", params={"next": next})).text
    return await client.post("/inbox/name", data={"csrf": csrf_of(page), "name": name, "next": next})


async def reply_in_inbox(harness: Harness, sid: str, text: str) -> None:
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    sent = await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": nonce_of(page), "text": text})
    assert sent.status_code == 303, sent.headers["location"]
    assert "notice" not in sent.headers["location"], sent.headers["location"]


async def test_replies_carry_the_name_the_owner_chose(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "Subscribers see <strong>Support</strong>" in page
    assert f'href="/inbox/name?next=/inbox/handoffs/{sid}"' in page
    saved = await set_name(harness.client, "  Sam from Acme ", next=f"/inbox/handoffs/{sid}")
    assert saved.status_code == 303
    assert saved.headers["location"] == f"/inbox/handoffs/{sid}?notice=Subscribers%20now%20see%20your%20replies%20as%20Sam%20from%20Acme."
    cookie = saved.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/inbox" in cookie
    assert "max-age=34560000" in cookie
    await reply_in_inbox(harness, sid, "Hi Ana, I'm looking at it now.")
    [reply] = [m for m in await harness.messages(cid) if m["role"] == "human"]
    assert (reply["author"], reply["text"]) == ("Sam from Acme", "Hi Ana, I'm looking at it now.")
    detail = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert "Replying as <strong>Sam from Acme</strong>" in detail
    assert '<span class="who">Sam from Acme</span>' in detail


async def test_the_name_is_remembered_across_logins_in_this_browser_only(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    await login(harness.client)
    assert (await set_name(harness.client, "Kim")).status_code == 303
    page = (await harness.client.get("/inbox")).text
    await harness.client.post("/inbox/logout", data={"csrf": csrf_of(page)})
    assert (await harness.client.get("/inbox")).status_code == 303  # signed out ...
    await login(harness.client)
    assert "Replying as <strong>Kim</strong>" in (await harness.client.get("/inbox")).text  # ... and still Kim

    colleague = httpx.AsyncClient(transport=harness.client._transport, base_url="http://desk.test")
    await login(colleague)  # the same token in another browser speaks under its own name
    assert "Replying as <strong>Support</strong>" in (await colleague.get("/inbox")).text
    await colleague.aclose()


@pytest.mark.parametrize(("name", "problem"), [
    ("", "name: expected 1–40 characters, got an empty name"),
    ("   ", "name: expected 1–40 characters, got an empty name"),
    ("S" * 41, "name: expected at most 40 characters, got 41"),
    ("Sam\nOwner", "name: expected letters, digits, spaces or punctuation, got the control character U+000A"),
    ("Sam\u202eemoS", "name: expected letters, digits, spaces or punctuation, got the control character U+202E"),
])
async def test_a_bad_name_is_refused_and_nothing_changes(harness: Harness, name: str, problem: str) -> None:
    assert (await set_name(harness.client, "Kim")).status_code == 303
    refused = await set_name(harness.client, name)
    assert refused.status_code == 400
    assert "set-cookie" not in refused.headers
    assert f'<p class="error" id="name-problem" role="alert">{problem}</p>' in refused.text
    assert "Replying as <strong>Kim</strong>" in (await harness.client.get("/inbox")).text


async def test_a_hostile_name_is_text_everywhere(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    assert (await set_name(harness.client, '<img src=x onerror="alert(1)">')).status_code == 303
    await reply_in_inbox(harness, sid, "Hello")
    for path in ("/inbox", f"/inbox/handoffs/{sid}", "/inbox/name"):
        html = (await harness.client.get(path)).text
        assert "<img src=x" not in html, path
        assert "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html, path
    assert [m["author"] for m in await harness.messages(cid) if m["role"] == "human"] == ['<img src=x onerror="alert(1)">']


async def test_setting_the_name_is_a_protected_post(harness: Harness) -> None:
    assert (await harness.client.get("/inbox/name", params={"name": "Eve"})).status_code == 200  # GET only shows the form
    assert "Replying as <strong>Support</strong>" in (await harness.client.get("/inbox")).text
    assert (await harness.client.post("/inbox/name", data={"name": "Eve"})).status_code == 403
    page = (await harness.client.get("/inbox/name")).text
    cross = await harness.client.post("/inbox/name", data={"csrf": csrf_of(page), "name": "Eve"}, headers={"Sec-Fetch-Site": "cross-site"})
    assert cross.status_code == 403
    assert "set-cookie" not in cross.headers
    away = await harness.client.post("/inbox/name", data={"csrf": csrf_of(page), "name": "Sam", "next": "//evil.example/"})
    assert away.headers["location"].startswith("/inbox?notice=")


# --------------------------------------------------------------------------- the return-form link


def form_link_of(html: str) -> str | None:
    match = re.search(r'<a class="button secondary" href="([^"]+)">Fill return form</a>', html)
    return match.group(1) if match else None


async def test_an_expired_form_link_is_shown_as_expired_and_replaced_in_one_click(start_desk: StartDesk) -> None:
    from datetime import timedelta

    harness = await start_desk(handoff={"form_link_ttl": "10m"})
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    first = form_link_of(page)
    assert first
    assert "Link valid until" in page
    assert "(10 min left)" in page
    assert ">New form link</button>" in page

    harness.desk.clock.advance(timedelta(minutes=11))
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert form_link_of(page) is None
    assert first not in page  # no way to open the dead link from the inbox
    assert "The return-form link is expired (since " in page
    assert ">Make a fresh link</button>" in page
    assert (await harness.handoff(sid))["state"] == "active"  # reading the page changed nothing

    fresh = await harness.client.post(f"/inbox/handoffs/{sid}/form-link", data={"csrf": csrf_of(page)})
    assert fresh.status_code == 303
    assert "older%20links%20no%20longer%20work" in fresh.headers["location"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    second = form_link_of(page)
    assert second
    assert second != first
    assert "(10 min left)" in page
    assert (await harness.client.get(second.removeprefix("http://desk.test"))).status_code == 200
    assert (await harness.client.get(first.removeprefix("http://desk.test"))).status_code == 410  # the old one stays dead
    assert "form_link_issued" in await harness.kinds(sid)


# --------------------------------------------------------------------------- ended handoffs


async def test_recently_ended_has_column_headers(harness: Harness) -> None:
    empty = (await harness.client.get("/inbox")).text
    assert 'id="recent-table" hidden' in empty
    assert "Nothing yet." in empty
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    html = (await harness.client.get("/inbox")).text
    assert "<thead><tr><th>Handoff</th><th>Summary</th><th>Channel</th><th>How it ended</th></tr></thead>" in html
    assert 'id="recent-table" hidden' not in html


async def test_a_released_handoff_shows_field_labels_not_keys(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, expected_return=[
        {"name": "resolution", "type": "multiline", "label": "What was done", "required": True},
        {"name": "follow_up_needed", "type": "boolean"},
        {"name": "eta_date", "type": "date", "required": True},
    ]))["handoff_session_id"]
    await harness.client.post(f"/api/handoffs/{sid}/release", json={
        "return_values": {"resolution": "Re-shipped <b>express</b>", "follow_up_needed": False}})
    html = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert ("<dt>What was done</dt><dd>Re-shipped &lt;b&gt;express&lt;/b&gt;</dd>"
            "<dt>Follow up needed</dt><dd>no</dd>") in html
    assert "Missing required: Eta date" in html
    assert "<dt>resolution</dt>" not in html


async def test_the_inbox_refuses_an_unknown_outcome_or_an_over_long_note_and_releases_nothing(harness: Harness) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    csrf = csrf_of(page)

    unknown = await harness.client.post(f"/inbox/handoffs/{sid}/release", data={"csrf": csrf, "outcome": "fixed"})
    assert unknown.status_code == 400
    assert "outcome: expected one of resolved, unresolved, needs_followup, got &#39;fixed&#39;" in unknown.text
    long_note = await harness.client.post(
        f"/inbox/handoffs/{sid}/release", data={"csrf": csrf, "outcome": "resolved", "note": "x" * 2001})
    assert long_note.status_code == 400
    assert "note: at most 2000 characters, got 2001" in long_note.text
    long_reply = await harness.client.post(
        f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf, "nonce": nonce_of(page), "text": "y" * 10_001})
    assert long_reply.status_code == 400
    assert "text: at most 10000 characters, got 10001" in long_reply.text

    handoff = await harness.handoff(sid)
    assert handoff["state"] == "active"
    assert [m for m in await harness.messages(cid) if m["role"] == "human"] == []


async def test_an_over_long_denial_reason_is_refused_and_decides_nothing(start_desk: StartDesk) -> None:
    harness = await approval_desk(start_desk)
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=25.5)
    refused = await decide_in_inbox(harness, aid, "deny", reason="x" * 2001)
    assert refused.status_code == 400
    assert "reason: at most 2000 characters, got 2001; nothing was decided." in refused.text
    view = (await harness.approval(aid))
    assert view["state"] == "pending"


async def test_wrong_tokens_lock_the_address_out_for_a_while(start_desk: StartDesk) -> None:
    """owner.max_login_failures_per_minute wrong tokens from one address, then 429 with
    Retry-After and a page that says when to try again, the right token included; other
    addresses still log in, and once the wait is over a success resets the count."""
    clock = ManualClock()
    harness = await start_desk(clock=clock, owner={"token": "owner-secret", "max_login_failures_per_minute": 3})
    guesser = {"X-Forwarded-For": "198.51.100.7"}  # the test client's peer is loopback, a trusted proxy
    for _ in range(3):
        wrong = await harness.client.post("/inbox/login", data={"token": "guess", "next": "/inbox"}, headers=guesser)
        assert wrong.headers["location"].startswith("/inbox/login?failed=1")
    for token in ("guess", "owner-secret"):
        locked = await harness.client.post("/inbox/login", data={"token": token, "next": "/inbox"}, headers=guesser)
        assert locked.status_code == 429
        assert locked.headers["retry-after"] == "20"
        assert "Too many wrong tokens came from your address. Try again in 20 s" in locked.text
        assert "handoff_session" not in locked.cookies
    other = await harness.client.post("/inbox/login", data={"token": "owner-secret", "next": "/inbox"},
                                      headers={"X-Forwarded-For": "203.0.113.9"})
    assert other.status_code == 303
    clock.advance(timedelta(seconds=20))
    again = await harness.client.post("/inbox/login", data={"token": "owner-secret", "next": "/inbox"}, headers=guesser)
    assert (again.status_code, again.headers["location"]) == (303, "/inbox")
    for _ in range(3):  # the success gave the address its whole allowance back
        wrong = await harness.client.post("/inbox/login", data={"token": "guess", "next": "/inbox"}, headers=guesser)
        assert wrong.status_code == 303


async def test_logging_out_revokes_the_session_even_for_a_replayed_cookie(start_desk: StartDesk) -> None:
    """The cookie is signed and still unexpired after a logout; the server refuses it anyway,
    on pages, on the live updates and on posts (its CSRF token is bound to the dead session)."""
    harness = await start_desk(owner={"token": "owner-secret"})
    await login(harness.client)
    replay = httpx.AsyncClient(transport=harness.client._transport, base_url="http://desk.test",
                               cookies={"handoff_session": harness.client.cookies["handoff_session"]})
    assert (await replay.get("/inbox")).status_code == 200  # a copy of the cookie works while signed in
    csrf = csrf_of((await harness.client.get("/inbox")).text)
    assert (await harness.client.post("/inbox/logout", data={"csrf": csrf})).headers["location"] == "/inbox/login"

    page = await replay.get("/inbox")
    assert (page.status_code, page.headers["location"]) == (303, "/inbox/login?next=/inbox")
    assert (await replay.get("/inbox/updates", params={"wait": 0})).status_code == 401
    assert (await replay.post("/inbox/name", data={"csrf": csrf, "name": "Mallory"})).status_code == 401
    assert (await replay.get("/inbox/name")).status_code == 303  # still a login, not the page
    await replay.aclose()

    await login(harness.client)  # a new login is a new session
    assert (await harness.client.get("/inbox")).status_code == 200


async def test_a_person_signed_in_replies_claims_and_releases_as_themselves(start_desk: StartDesk) -> None:
    """From the inbox a person's reply, claim and release carry their id, not only their name."""
    from sqlalchemy import select

    from bot.store.models import HandoffSession, Message

    route = {"id": 20, "label": "Support", "steps": [{"notify": [1], "claim_within": "5m"}]}
    harness = await start_desk(owner={"token": "owner-secret"}, routes=[route])
    olga = await harness.desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", source="cli", actor="test")
    token, _ = await harness.desk.sessions.open(olga, via="password")
    harness.client.cookies.set("handoff_session", token)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid, channel_id=20))["handoff_session_id"]
    await harness.desk.settle()
    page = (await harness.client.get(f"/inbox/handoffs/{sid}")).text
    assert (await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": csrf_of(page)})).status_code == 303
    await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": "n1", "text": "Hi Ana"})
    await harness.client.post(f"/inbox/handoffs/{sid}/release", data={"csrf": csrf_of(page), "outcome": "resolved"})
    async with harness.desk.db.read() as session:
        handoff = await session.get(HandoffSession, sid)
        assert handoff is not None
        assert (handoff.claimed_by, handoff.claimed_person_id) == ("Olga Petrova", "olga")
        assert (handoff.released_by, handoff.released_person_id) == ("Olga Petrova (inbox)", "olga")
        [reply] = (await session.scalars(select(Message).where(Message.conversation_id == cid, Message.role == "human"))).all()
    assert (reply.author, reply.person_id, reply.text) == ("Olga Petrova", "olga", "Hi Ana")

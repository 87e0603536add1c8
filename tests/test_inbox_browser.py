"""The owner inbox in a real browser (Chromium through Playwright) against a real server.

What only a browser can show: the live transcript script runs under the strict CSP (no
violations), new messages appear without a reload, and reply/release work from the page.
Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh the docs' screenshots in docs/screenshots/.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from bot.desk import Desk
from channels.base import RecipientText
from tests import approval_actions
from tests.conftest import CHROMIUM, desk_served, shot

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)


async def test_owner_works_a_handoff_in_the_browser(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        cid = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana", "email": "ana@example.com"}})).json()["conversation_id"]
        await api.post(f"/api/conversations/{cid}/messages", json={"text": "Hi! My order #1234 hasn't arrived."})
        body = (await api.post(f"/api/conversations/{cid}/messages", json={"text": "Can I talk to a person?"})).json()
        sid = body["handoff_session_id"]
        other = (await api.post("/api/conversations", json={"subscriber": {"name": "Ben"}})).json()["conversation_id"]
        await api.post(f"/api/conversations/{other}/tools/handoff_request", json={
            "channel_id": 1, "urgency": "high",
            "summary": "Ben was charged twice for invoice INV-2231 and wants the duplicate refunded today.",
            "expected_action": "Check the payment provider and refund the duplicate charge.",
        })

        await page.goto(f"{base}/inbox")
        await page.wait_for_selector("text=Active handoffs")
        assert await page.locator(".card").count() == 2
        await shot(page, "inbox-list")

        await page.click(f"a[href='/inbox/handoffs/{sid}']")
        await page.wait_for_selector("#transcript")
        assert "Can I talk to a person?" in await page.inner_text("#transcript")

        # a subscriber message arrives while the page is open: it appears without a reload
        await api.post(f"/api/conversations/{cid}/messages", json={"text": "It was due on Monday."})
        await page.wait_for_selector("#transcript >> text=It was due on Monday.", timeout=10_000)

        # the owner says who is speaking before answering; the browser remembers it
        assert "Subscribers see Support" in await page.inner_text(".reply")
        await page.click(".reply a[href^='/inbox/name']")
        await page.fill("#reply-name", "Sam")
        await page.click("button[type=submit] >> text=Save")
        await page.wait_for_selector("text=Subscribers now see your replies as Sam.")
        assert "Subscribers see Sam" in await page.inner_text(".reply")

        await page.fill("#reply-text", "Hi Ana, it was re-shipped today by express.")
        await page.click(".reply button[type=submit]")
        await page.wait_for_selector("#transcript >> text=re-shipped today", timeout=10_000)
        messages = (await api.get(f"/api/conversations/{cid}/messages")).json()["messages"]
        assert messages[-1]["role"] == "human"
        assert messages[-1]["author"] == "Sam"
        assert await page.locator("#transcript .role-human .who").last.inner_text() == "Sam"
        await shot(page, "inbox-handoff")

        # a human message from another path (a channel) also shows up live
        await desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text="Tracking: https://carrier.example/abc", author="Kim"))
        await page.wait_for_selector("#transcript >> text=carrier.example", timeout=10_000)

        await page.select_option("#outcome", "resolved")
        await page.fill("#note", "Re-shipped express")
        await page.click(".release button[type=submit]")
        await page.wait_for_selector("text=Released; the assistant has the conversation again.")
        assert (await api.get(f"/api/handoffs/{sid}")).json()["release_reason"] == "owner"
        await desk.settle()
        await page.reload()
        await page.wait_for_selector("#transcript >> text=[Bot resumed")
        await shot(page, "inbox-released")

    assert page.problems == []  # no CSP violations, no script errors


# --------------------------------------------------------------------------- approvals

REFUND = {"id": "refund_order", "description": "Refund an order to the original payment method", "risk": "high",
          "policy": "ask", "approval_channels": [1], "timeout": "15m",
          "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"},
                                                            "reason": {"type": "string"}},
                           "required": ["order_id", "amount"]},
          "run": {"callable": "tests.approval_actions:refund"}}


@pytest.fixture
async def served_with_actions(sqlite_url: str) -> AsyncIterator[tuple[Desk, str]]:
    """Like conftest's `served`, with a gated action whose approval channel is the owner inbox."""
    async with desk_served(sqlite_url, actions=[REFUND]) as pair:
        yield pair


async def test_owner_approves_from_the_inbox_and_a_phone_denies_on_the_signed_page(
    served_with_actions: tuple[Desk, str], page: Any,
) -> None:
    desk, base = served_with_actions
    approval_actions.CALLS.clear()
    async with httpx.AsyncClient(base_url=base) as api:
        ana = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana García"}})).json()["conversation_id"]
        ben = (await api.post("/api/conversations", json={"subscriber": {"name": "Ben"}})).json()["conversation_id"]
        first = (await api.post(f"/api/conversations/{ana}/tools/refund_order", json={
            "order_id": "1234", "amount": 25.5, "reason": "Parcel lost by the carrier"})).json()
        second = (await api.post(f"/api/conversations/{ben}/tools/refund_order", json={
            "order_id": "5678", "amount": 480})).json()
        assert first["status"] == second["status"] == "APPROVAL_PENDING"
        await desk.settle()

        await page.goto(f"{base}/inbox")
        await page.wait_for_selector("text=Waiting for approval")
        assert await page.locator(".approval-card").count() == 2
        card = page.locator(f"#approval-{first['approval_id']}")
        assert "Ana García" in await card.inner_text()
        assert '"amount": 25.5' in await card.inner_text()
        await shot(page, "inbox-approvals")

        await card.locator("button[value=approve]").click()
        # it runs after the decision is stored: the notice says "is running" or, if it was quick, "ran"
        await page.wait_for_selector("text=/Approved: refund_order (is running|ran)\\./")
        await desk.settle()
        assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25.5, "reason": "Parcel lost by the carrier"}]
        await page.goto(page.url.split("?", 1)[0])  # the list again, now with the result
        view = (await api.get(f"/api/approvals/{first['approval_id']}")).json()
        assert (view["state"], view["receipt"]["via"], view["receipt"]["decided_by"]) == ("approved", "inbox", "owner (inbox)")
        assert await page.locator(".approval-card").count() == 1
        assert "owner (inbox)" in await page.inner_text(".approvals-recent")

        # the other approver opens the decision link on a phone and denies with a reason
        await page.set_viewport_size({"width": 390, "height": 844})
        await page.goto(desk.approvals.decision_url(second["approval_id"]))
        await page.wait_for_selector("text=May the assistant run")
        await shot(page, "approval-page-phone")
        await page.fill("#in-name", "Kim")
        await page.fill("#in-reason", "Over the refund limit; ask for the receipt first")
        await page.click("button[value=deny]")
        await page.wait_for_selector("text=your decision is recorded")
        await shot(page, "approval-page-done")
        view = (await api.get(f"/api/approvals/{second['approval_id']}")).json()
        assert (view["state"], view["receipt"]["via"], view["receipt"]["decided_by"]) == ("denied", "link", "Kim (decision link)")
        await desk.settle()

        await page.set_viewport_size({"width": 1200, "height": 820})
        await page.goto(f"{base}/inbox")
        await page.wait_for_selector(".approvals-recent")
        assert await page.locator(".approval-card").count() == 0
        recent = await page.inner_text(".approvals-recent")
        assert "Kim (decision link)" in recent
        assert "via link" in recent
        assert "Over the refund limit" in recent
        await shot(page, "inbox-approvals-decided")
    assert len(approval_actions.CALLS) == 1
    assert page.problems == []  # no CSP violations, no script errors


# --------------------------------------------------------------------------- the live list


async def test_the_list_updates_in_place(served: tuple[Desk, str], page: Any) -> None:
    from playwright.async_api import expect

    desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        ana = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana"}})).json()["conversation_id"]
        await api.post(f"/api/conversations/{ana}/messages", json={"text": "Can I talk to a person?"})
        sid = (await api.get(f"/api/conversations/{ana}/messages")).json()["messages"][-1]["handoff_session_id"]
        assert sid

        await page.goto(f"{base}/inbox")
        card = page.locator(f"[data-handoff='{sid}']")
        await expect(card.locator("[data-f=said]")).to_have_text("Can I talk to a person?")
        await expect(card.locator("[data-f=new]")).to_be_visible()  # never opened: new
        await page.evaluate("window.stillTheSamePage = true")

        # a subscriber message arrives: the preview changes without a reload
        await api.post(f"/api/conversations/{ana}/messages", json={"text": "It was due on <b>Monday</b>."})
        await expect(card.locator("[data-f=said]")).to_have_text("It was due on <b>Monday</b>.", timeout=10_000)
        await expect(card.locator("[data-f=last-at]")).to_have_text("Last message just now, from Ana")
        assert await card.locator("[data-f=said] b").count() == 0  # text, never markup

        # a new handoff appears at the top, with its urgency
        ben = (await api.post("/api/conversations", json={"subscriber": {"name": "Ben"}})).json()["conversation_id"]
        started = (await api.post(f"/api/conversations/{ben}/tools/handoff_request", json={
            "channel_id": 1, "urgency": "high",
            "summary": "Ben was charged twice for invoice INV-2231 and wants the duplicate refunded today.",
            "expected_action": "Check the payment provider and refund the duplicate charge.",
        })).json()
        ben_card = page.locator(f"[data-handoff='{started['handoff_session_id']}']")
        await expect(ben_card).to_be_visible(timeout=10_000)
        await expect(page.locator("#handoff-cards > li").first).to_have_attribute("data-handoff", started["handoff_session_id"])
        await expect(ben_card).to_have_class("card urgency-high")  # Ben has said nothing yet: not "new"
        await expect(page.locator("#active-count")).to_have_text("2")

        # released elsewhere: it goes, and shows under "Recently ended"
        await api.post(f"/api/handoffs/{started['handoff_session_id']}/release", json={"outcome": "resolved"})
        await expect(ben_card).to_have_count(0, timeout=10_000)
        await expect(page.locator("#recent-rows")).to_contain_text("owner · resolved")
        await expect(page.locator("#active-count")).to_have_text("1")
        assert await page.evaluate("window.stillTheSamePage") is True  # all of it without a reload

        # reading the handoff clears "new" on the list
        await page.click(f"a[href='/inbox/handoffs/{sid}']")
        await page.wait_for_selector("#transcript >> text=It was due on")
        await page.go_back()
        await expect(page.locator(f"[data-handoff='{sid}'] [data-f=new]")).to_be_hidden()
    assert page.problems == []  # no CSP violations, no script errors


async def test_a_form_being_filled_in_survives_live_updates(
    served_with_actions: tuple[Desk, str], page: Any,
) -> None:
    from playwright.async_api import expect

    desk, base = served_with_actions
    async with httpx.AsyncClient(base_url=base) as api:
        ana = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana"}})).json()["conversation_id"]
        first = (await api.post(f"/api/conversations/{ana}/tools/refund_order", json={"order_id": "1", "amount": 5})).json()
        await desk.settle()
        await page.goto(f"{base}/inbox")
        await page.evaluate("window.stillTheSamePage = true")
        reason = page.locator(f"#reason-{first['approval_id']}")
        await reason.fill("Checking with the warehouse")
        await reason.focus()

        ben = (await api.post("/api/conversations", json={"subscriber": {"name": "Ben <i>x</i>"}})).json()["conversation_id"]
        second = (await api.post(f"/api/conversations/{ben}/tools/refund_order", json={"order_id": "2", "amount": 7})).json()
        new_card = page.locator(f"#approval-{second['approval_id']}")
        await expect(new_card).to_be_visible(timeout=10_000)  # built by the page, with its own working form
        await expect(new_card.locator(".question strong")).to_have_text("Ben <i>x</i>")
        await expect(page.locator("#approvals-count")).to_have_text("2")
        assert await reason.input_value() == "Checking with the warehouse"
        assert await page.evaluate(f"document.activeElement.id === 'reason-{first['approval_id']}'")

        # the first one is decided elsewhere while the owner is still in its form: it stays, marked
        await desk.approvals.decide(first["approval_id"], approve=False, by="Kim", via="test")
        await expect(page.locator(f"#approval-{first['approval_id']}.settled")).to_be_visible(timeout=10_000)
        await expect(page.locator("#decided-rows")).to_contain_text("Kim")
        assert await reason.input_value() == "Checking with the warehouse"

        # the page-built form posts like the server-rendered one
        await new_card.locator("button[value=approve]").click()
        await page.wait_for_selector("text=Approved: refund_order is running.")
        await desk.settle()
        view = (await api.get(f"/api/approvals/{second['approval_id']}")).json()
        assert (view["state"], view["receipt"]["via"]) == ("approved", "inbox")
    assert page.problems == []


# --------------------------------------------------------------------------- phone width

PHONE = {"width": 375, "height": 812}

# Every element whose box reaches past the right edge of the viewport, for the failure message.
WIDER_THAN_THE_VIEWPORT = """() => Array.from(document.querySelectorAll("body *"))
  .filter((node) => node.getBoundingClientRect().right > innerWidth + 0.5)
  .slice(0, 8).map((node) => node.tagName.toLowerCase() + (node.className ? "." + node.className : "")
    + " right=" + Math.round(node.getBoundingClientRect().right))"""

# Is the field inside the viewport, and does its placeholder fit without being cut? The
# placeholder's own text is typed in as the value for a moment: a value that needs no
# scrolling in the field is a placeholder the field shows whole (an input shows one line,
# a textarea wraps it into its rows).
FIELD_SHOWS_ITS_PLACEHOLDER = """(selector) => {
  const field = document.querySelector(selector);
  const box = field.getBoundingClientRect();
  const typed = field.value;
  field.value = field.placeholder;
  const result = {placeholder: field.placeholder, left: box.left, right: box.right, viewport: innerWidth,
                  scrollWidth: field.scrollWidth, clientWidth: field.clientWidth,
                  scrollHeight: field.scrollHeight, clientHeight: field.clientHeight};
  field.value = typed;
  return result;
}"""


async def assert_fits_the_phone(page: Any, what: str) -> None:
    wide, viewport = await page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    assert wide <= viewport, f"{what} is {wide} px wide in a {viewport} px viewport: {await page.evaluate(WIDER_THAN_THE_VIEWPORT)}"


async def assert_field_shows_its_placeholder(page: Any, selector: str) -> None:
    field = await page.evaluate(FIELD_SHOWS_ITS_PLACEHOLDER, selector)
    assert field["placeholder"], f"{selector} has no placeholder"
    assert 0 <= field["left"], f"{selector} is not fully on screen: {field}"
    assert field["right"] <= field["viewport"], f"{selector} is not fully on screen: {field}"
    assert field["scrollWidth"] <= field["clientWidth"], f"{selector} cuts its placeholder off: {field}"
    assert field["scrollHeight"] <= field["clientHeight"], f"{selector} cuts its placeholder off: {field}"


async def test_the_inbox_fits_a_phone(served_with_actions: tuple[Desk, str], page: Any) -> None:
    desk, base = served_with_actions
    await page.set_viewport_size(PHONE)
    async with httpx.AsyncClient(base_url=base) as api:
        ana = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana García"}})).json()["conversation_id"]
        await api.post(f"/api/conversations/{ana}/messages", json={"text": "Can I talk to a person?"})
        await api.post(f"/api/conversations/{ana}/messages", json={
            "text": "My order #1234 was due on Monday and the tracking page has said 'label created' for nine days now, "
                    "https://carrier.example/track/ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789ABCDEFGHIJ"})
        sid = (await api.get(f"/api/conversations/{ana}/messages")).json()["messages"][-1]["handoff_session_id"]
        ben = (await api.post("/api/conversations", json={"subscriber": {"name": "Ben"}})).json()["conversation_id"]
        approval = (await api.post(f"/api/conversations/{ben}/tools/refund_order", json={
            "order_id": "INV-2231-DUPLICATE-CHARGE-0000000000", "amount": 480,
            "reason": "Charged twice for the same invoice; the bank statement shows both"})).json()
        assert approval["status"] == "APPROVAL_PENDING"
        for name in ("Cleo", "Dev"):
            other = (await api.post("/api/conversations", json={"subscriber": {"name": name}})).json()["conversation_id"]
            ended = (await api.post(f"/api/conversations/{other}/tools/handoff_request", json={
                "channel_id": 1,
                "summary": f"{name} asked why the invoice for the annual plan shows the monthly price and wants a corrected copy.",
                "expected_action": "Send a corrected invoice."})).json()
            await api.post(f"/api/handoffs/{ended['handoff_session_id']}/release", json={"outcome": "resolved"})
        await desk.settle()

        await page.goto(f"{base}/inbox")
        await page.wait_for_selector(f"[data-handoff='{sid}'] [data-f=said]")
        assert await page.locator(".approval-card").count() == 1
        assert await page.locator("#recent-rows tr").count() == 2
        await assert_fits_the_phone(page, "the inbox list")
        await assert_field_shows_its_placeholder(page, f"#reason-{approval['approval_id']}")
        await shot(page, "inbox-list-phone")

        await page.goto(f"{base}/inbox/handoffs/{sid}")
        await page.wait_for_selector("#transcript >> text=label created")
        await assert_fits_the_phone(page, "the handoff page")
        await assert_field_shows_its_placeholder(page, "#reply-text")
        await assert_field_shows_its_placeholder(page, "#note")
        await shot(page, "inbox-handoff-phone")
    assert page.problems == []


# --------------------------------------------------------------------------- the handoff's timeline

async def test_the_handoff_page_shows_its_timeline_at_desktop_and_on_a_phone(served: tuple[Desk, str], page: Any) -> None:
    """Requested, notified, the relays (many in a row fold into one row that opens), released,
    each with its time and the gap since the step before; nothing wider than a phone."""
    desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        cid = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana"}})).json()["conversation_id"]
        sid = (await api.post(f"/api/conversations/{cid}/tools/handoff_request", json={
            "channel_id": 1, "summary": "Ana's order #1234 is a week late.", "expected_action": "Check order #1234."})).json()["handoff_session_id"]
        for n in range(3):
            await api.post(f"/api/conversations/{cid}/messages", json={"text": f"Are you there? ({n})"})
            await desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text=f"Looking into it ({n})", author="Kim"))
        await api.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
        await desk.settle()

        await page.goto(f"{base}/inbox/handoffs/{sid}")
        await page.wait_for_selector("#timeline")
        steps = page.locator("#timeline > li")
        assert [await steps.nth(i).locator(".step-what").first.inner_text() for i in range(await steps.count())] == [
            "Requested", "Notified", "6 messages relayed: 3 to the person, 3 to the subscriber", "Released"]
        assert await page.locator("#timeline > .step-released .step-detail").inner_text() == "by agent (api) · Resolved"
        assert re.fullmatch(r"\+\d+ s", await page.locator("#timeline > .step-released .step-since").inner_text())
        relays = page.locator("#timeline details.relays")
        assert not await relays.locator(".step").first.is_visible()  # folded until opened
        await relays.locator("summary").click()
        inner = relays.locator(".step .step-what")
        assert await inner.count() == 6 and await inner.first.is_visible()
        assert await inner.nth(1).inner_text() == "Person → subscriber"

        await page.set_viewport_size(PHONE)
        await page.reload()
        await page.wait_for_selector("#timeline")
        await page.locator("#timeline details.relays summary").click()
        await assert_fits_the_phone(page, "the handoff page with its timeline")
    assert page.problems == []

"""A route's handoff in the owner inbox, in a real browser (Chromium through Playwright)
against a real server: the owner inbox and a Slack channel (the real SDK against
tests/fake_slack.py) notified at once, one dispatch failing with Slack's error, the ladder's
countdown ticking under the strict CSP, Claim from the page, a claim made in Slack showing
up live on the open page and list, and the page at phone width; and a handoff a team's round
robin offered to people one at a time (scripted channels that reach one person directly).
Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh the screenshots in docs/screenshots/.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update
from sqlmodel import col

from bot.desk import Desk
from bot.store.models import HandoffSession, Person
from channels.base import PermanentChannelError
from tests.conftest import CHROMIUM, desk_served, shot
from tests.fake_slack import FakeSlack, Fault, message_event, signed_headers
from tests.test_inbox_browser import PHONE, assert_fits_the_phone
from tests.test_offers import EMAIL as OFFER_EMAIL
from tests.test_offers import PEOPLE, DirectEmail, DirectSlack
from tests.test_offers import SLACK as OFFER_SLACK

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
SALES, ON_CALL = "C0SALES", "C0ONCALL"
BRIEF = {
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack(token=TOKEN, channels=(SALES, ON_CALL), users={"U0TOM": "Tom"}).start()
    yield fake
    await fake.stop()


def slack_channel(fake: FakeSlack, cid: int, label: str, channel: str) -> dict[str, Any]:
    return {"id": cid, "kind": "slack", "label": label, "estimated_response": "within 10 minutes", "bot_token": TOKEN,
            "signing_secret": SIGNING_SECRET, "channel": channel, "api_base_url": fake.url}


@pytest.fixture
def served_config(slack: FakeSlack) -> dict[str, Any]:
    """conftest's `served` with a route: the owner inbox and Sales support at once, then on-call."""
    return {
        "channels": [
            {"id": 1, "kind": "owner_inbox", "label": "Owner inbox", "estimated_response": "within 1 business day"},
            slack_channel(slack, 2, "Sales support", SALES),
            slack_channel(slack, 3, "On-call", ON_CALL),
        ],
        "routes": [{"id": 20, "label": "Support", "public_name": "our support team", "estimated_response": "within 10 minutes",
                    "steps": [{"notify": [1, 2], "claim_within": "5m"}, {"notify": [3], "claim_within": "10m"}]}],
        "delivery": {"base_backoff": "10ms"},
    }


async def route_handoff(api: httpx.AsyncClient, desk: Desk, name: str = "Ana") -> tuple[str, str]:
    cid = (await api.post("/api/conversations", json={"subscriber": {"name": name}})).json()["conversation_id"]
    await api.post(f"/api/conversations/{cid}/messages", json={"text": "Hi! My order #1234 hasn't arrived."})
    started = (await api.post(f"/api/conversations/{cid}/tools/handoff_request", json={"channel_id": 20, **BRIEF})).json()
    assert started["ok"] is True, started
    await desk.settle()
    return cid, started["handoff_session_id"]


async def tom_answers_in_slack(api: httpx.AsyncClient, slack: FakeSlack, text: str) -> None:
    """Tom writes in the thread of Sales support's dispatch, as Slack's Events API posts it."""
    [dispatch] = slack.top_level(SALES)
    body = message_event(channel=SALES, text=text, user="U0TOM", thread_ts=dispatch["ts"])
    answered = await api.post("/webhooks/2", content=body, headers=signed_headers(SIGNING_SECRET, body))
    assert answered.status_code == 200, answered.text


ESCALATES = re.compile(r"^Escalates in [45] min$")


async def test_a_route_handoff_in_the_browser_from_who_was_asked_to_a_claim(
    served: tuple[Desk, str], slack: FakeSlack, page: Any,
) -> None:
    from playwright.async_api import expect

    desk, base = served
    slack.fail_next("chat.postMessage", Fault(error="not_in_channel"))  # Sales support's dispatch is refused
    async with httpx.AsyncClient(base_url=base) as api:
        cid, sid = await route_handoff(api, desk)
        await page.goto(f"{base}/inbox")
        card = page.locator(f"[data-handoff='{sid}']")
        await expect(card.locator("[data-f=channel]")).to_have_text("Support")
        await expect(card.locator("[data-f=step]")).to_have_text("step 1 of 2")
        await expect(card.locator("[data-f=escalates]")).to_have_text(ESCALATES)
        await expect(card.locator("[data-f=route]")).to_have_text("Asked: Owner inbox (notified), Sales support (failed)")
        await expect(card.locator("[data-f=time-left]")).to_have_text("")

        await page.click(f"a[href='/inbox/handoffs/{sid}']")
        await page.wait_for_selector("#transcript >> text=hasn't arrived")
        await expect(page.locator("#route-step")).to_have_text("step 1 of 2")
        await expect(page.locator("#escalates")).to_have_text(ESCALATES)
        recipients = page.locator("#recipients li")
        await expect(recipients).to_have_count(2)
        await expect(recipients.nth(0)).to_have_text("Owner inbox step 1 notified just now")
        await expect(recipients.nth(1)).to_contain_text("Sales support step 1 failed just now: the bot is not a member of C0SALES")
        assert await page.locator("#time-left").inner_text() == ""
        await shot(page, "inbox-route-handoff")

        await page.set_viewport_size(PHONE)
        await page.reload()
        await page.wait_for_selector("#recipients")
        await assert_fits_the_phone(page, "a route's handoff page")
        await shot(page, "inbox-route-handoff-phone")
        await page.goto(f"{base}/inbox")
        await expect(page.locator(f"[data-handoff='{sid}'] [data-f=route]")).to_be_visible()
        await assert_fits_the_phone(page, "the inbox list with a route's handoff")
        await page.set_viewport_size({"width": 1200, "height": 820})

        # the owner names themself, then claims it: the page says who has it and the idle timer runs
        await page.goto(f"{base}/inbox/name?next=/inbox/handoffs/{sid}")
        await page.fill("#reply-name", "Sam")
        await page.click("button[type=submit] >> text=Save")
        await page.wait_for_selector("text=Subscribers now see your replies as Sam.")
        await page.click(".claim button[type=submit]")
        await page.wait_for_selector("text=You have it now; everyone else asked was told.")
        await expect(page.locator("#taken")).to_have_text("Taken by Sam (Owner inbox) just now")
        await expect(page.locator(".claim")).to_have_count(0)
        await expect(page.locator("#escalates")).to_have_count(0)
        await expect(page.locator("#time-left")).to_have_text(re.compile(r"^(30|29) min left$"))
        handoff = (await api.get(f"/api/handoffs/{sid}")).json()
        assert (handoff["claimed_by"], handoff["claimed_via"]) == ("Sam", "inbox")

        await page.fill("#reply-text", "Hi Ana, Sam here: I'm looking at your order now.")
        await page.click(".reply button[type=submit]")
        await page.wait_for_selector("#transcript >> text=looking at your order", timeout=10_000)
        messages = (await api.get(f"/api/conversations/{cid}/messages")).json()["messages"]
        assert (messages[-1]["role"], messages[-1]["author"]) == ("human", "Sam")
        await shot(page, "inbox-route-claimed")
    assert page.problems == []  # no CSP violations, no script errors


async def test_a_claim_made_in_slack_shows_up_on_the_open_list_and_page(
    served: tuple[Desk, str], slack: FakeSlack, page: Any,
) -> None:
    from playwright.async_api import expect

    desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        _, sid = await route_handoff(api, desk)
        await page.goto(f"{base}/inbox")
        card = page.locator(f"[data-handoff='{sid}']")
        await expect(card.locator("[data-f=route]")).to_have_text("Asked: Owner inbox (notified), Sales support (notified)")
        await page.evaluate("window.stillTheSamePage = true")
        handoff_tab = await page.context.new_page()  # the same owner has the handoff open in another tab
        handoff_tab.on("pageerror", lambda exc: page.problems.append(str(exc)))
        await handoff_tab.goto(f"{base}/inbox/handoffs/{sid}")
        await expect(handoff_tab.locator(".claim button")).to_be_visible()

        # Tom answers in the Slack thread: he has it, on the list without a reload
        await tom_answers_in_slack(api, slack, "Hi Ana, Tom here.")
        await expect(card.locator("[data-f=route]")).to_have_text(re.compile(r"^Taken by Tom \(Sales support\)"), timeout=10_000)
        await expect(card.locator("[data-f=escalates]")).to_be_hidden()
        await expect(card.locator("[data-f=time-left]")).to_have_text(re.compile(r"min left$"))
        assert await page.evaluate("window.stillTheSamePage") is True

        # … and the open handoff page reloads into who has it: no Claim, no reply box
        await expect(handoff_tab.locator("#taken")).to_have_text(re.compile(r"^Taken by Tom \(Sales support\)"), timeout=10_000)
        await expect(handoff_tab.locator(".claim")).to_have_count(0)
        await expect(handoff_tab.locator("#transcript")).to_contain_text("Hi Ana, Tom here.")
        await expect(handoff_tab.locator("#no-reply")).to_have_text("Tom has this handoff; replies go through Sales support.")
        await expect(handoff_tab.locator("#recipients li").nth(1)).to_contain_text("· has it")
    assert page.problems == []


async def test_a_handoff_offered_to_people_in_the_browser_at_desktop_and_phone_width(sqlite_url: str, page: Any) -> None:
    """A team's round robin: Olga's Slack refuses, her e-mail reaches her (its address masked),
    she lets her turn pass and Ben is asked 2nd; Ines is away and passed over."""
    from playwright.async_api import expect

    async with desk_served(
        sqlite_url, adapters={5: DirectSlack, 6: DirectEmail}, channels=[OFFER_SLACK, OFFER_EMAIL], people=PEOPLE,
        teams=[{"id": "support", "label": "Support", "members": ["olga", "ben", "ines"]}],
        routes=[{"id": 20, "label": "Support", "public_name": "our support team", "steps": [
            {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"}]}],
    ) as (desk, base):
        for person in await desk.people.all():
            await desk.people.link(person.id, "slack", f"U-{person.id}", verified_via="cli", actor="test")
        async with desk.db.transaction() as session:
            await session.execute(update(Person).where(col(Person.id) == "ines").values(away_since=desk.clock.now()))
        slack = desk.channels.get(5)
        assert isinstance(slack, DirectSlack)
        slack.fail_next(PermanentChannelError("cannot_dm_user", hint="Slack refused the direct message to U-olga"))
        async with httpx.AsyncClient(base_url=base) as api:
            _, sid = await route_handoff(api, desk)
        async with desk.db.transaction() as session:  # her five minutes are up (rather than waiting them out)
            past = desk.clock.now() - timedelta(seconds=1)
            await session.execute(update(HandoffSession).where(col(HandoffSession.id) == sid)
                                  .values(escalate_at=past, offer_until=past))
        await desk.timers.sweep()
        await desk.settle()

        await page.goto(f"{base}/inbox/handoffs/{sid}")
        recipients = page.locator("#recipients li")
        await expect(recipients).to_have_count(3)
        await expect(recipients.nth(0)).to_contain_text("Olga Petrova")
        await expect(recipients.nth(0)).to_contain_text("failed")
        await expect(recipients.nth(0)).to_contain_text("Slack refused the direct message")
        await expect(recipients.nth(1)).to_contain_text("missed")
        await expect(recipients.nth(1).locator(".recipient-detail")).to_have_text(
            "team Support · asked 1st · E-mail o•••@example.com (their 2nd method)")
        await expect(recipients.nth(2).locator(".recipient-label")).to_have_text("Ben Okoye")
        await expect(recipients.nth(2).locator(".recipient-detail")).to_have_text("team Support · asked 2nd · Slack U-ben")
        await expect(page.locator("#passed-over")).to_have_text("Passed over: Ines Duarte (away)")
        await expect(page.locator("#escalates")).to_have_text(re.compile(r"^Back to the assistant in [45] min$"))
        assert "olga@example.com" not in await page.content()
        await shot(page, "inbox-offers")

        await page.set_viewport_size(PHONE)
        await page.reload()
        await page.wait_for_selector("#recipients")
        await assert_fits_the_phone(page, "a handoff offered to people")
        await shot(page, "inbox-offers-phone")
        assert page.problems == []  # before the server stops under the page's open long-poll
        await page.goto("about:blank")

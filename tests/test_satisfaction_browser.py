"""The satisfaction question on the web chat, in a real browser: after the owner releases the
handoff, the page offers 👍 / 👎 as quick replies, then a comment box; the answer is stored
with the handoff and shown on the inbox's handoff page, never as a message in the chat."""

from __future__ import annotations

import os
from typing import Any

import pytest
from sqlalchemy import select

from bot.desk import Desk
from bot.store.models import HandoffSatisfaction, HandoffSession
from bot.store.vocabulary import ReleaseReason
from tests.conftest import CHROMIUM

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)

OWNER_TOKEN = "owner-browser-token-0123456789"


@pytest.fixture
def served_config() -> dict[str, Any]:
    return {"fronts": [{"kind": "web", "title": "Acme help"}], "csat": {"enabled": True},
            "owner": {"token": OWNER_TOKEN}}


async def test_the_subscriber_answers_thumbs_up_with_a_comment(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    await page.goto(f"{base}/chat")
    await page.fill("#text", "Can I talk to a person?")
    await page.press("#text", "Enter")
    await page.wait_for_selector(".msg.agent >> text=I've asked our team to join")
    assert await page.locator("#csat").is_hidden()  # nothing asked during the handoff

    async with desk.db.read() as session:
        handoff = (await session.scalars(select(HandoffSession))).one()
    await desk.handoffs.release(handoff.id, reason=ReleaseReason.OWNER, actor="owner")
    await desk.settle()
    await page.wait_for_selector(".msg.agent >> text=Did that solve it?", timeout=15_000)
    await page.wait_for_selector("#csat-yes", state="visible")
    await page.click("#csat-yes")
    await page.wait_for_selector("#csat-text", state="visible")
    assert await page.locator("#csat-answer").is_hidden()
    await page.fill("#csat-text", "Sam was quick, thanks!")
    await page.click("#csat-send")
    await page.wait_for_selector("#csat", state="hidden")
    await page.wait_for_selector(".msg.agent >> text=Thanks for your answer!")

    async with desk.db.read() as session:
        row = await session.get(HandoffSatisfaction, handoff.id)
    assert row is not None
    assert (row.answer, row.comment, row.answered_via, row.asked_on) == ("yes", "Sam was quick, thanks!", "web", "web")
    # the answer is no message of the conversation: the chat shows only what the visitor typed before
    assert await page.locator(".msg.subscriber").count() == 1
    assert await page.locator(".msg >> text=Sam was quick").count() == 0

    await page.goto(f"{base}/inbox/login")
    await page.fill("input[name=token]", OWNER_TOKEN)
    await page.press("input[name=token]", "Enter")
    await page.goto(f"{base}/inbox/handoffs/{handoff.id}")
    assert await page.inner_text("#satisfaction-answer") == "👍 solved"
    assert await page.inner_text("#satisfaction-comment") == "Sam was quick, thanks!"
    assert page.problems == []

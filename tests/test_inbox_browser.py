"""The owner inbox in a real browser (Chromium through Playwright) against a real server.

What only a browser can show: the live transcript script runs under the strict CSP (no
violations), new messages appear without a reload, and reply/release work from the page.
Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh the README screenshots in docs/screenshots/.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from bot.desk import Desk
from channels.base import InboundMessage
from tests.conftest import CHROMIUM, shot

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

        await page.fill("#reply-text", "Hi Ana, Sam here. It was re-shipped today by express.")
        await page.click(".reply button[type=submit]")
        await page.wait_for_selector("#transcript >> text=Sam here", timeout=10_000)
        messages = (await api.get(f"/api/conversations/{cid}/messages")).json()["messages"]
        assert messages[-1]["role"] == "human" and messages[-1]["author"] == "Owner"
        await shot(page, "inbox-handoff")

        # a human message from another path (a channel) also shows up live
        await desk.inbound.submit_and_wait(1, InboundMessage(thread_key=sid, text="Tracking: https://carrier.example/abc", author="Owner"))
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

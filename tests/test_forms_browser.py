"""The return form in Chromium: all seven field types filled and submitted, on desktop and phone.

Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh the docs' screenshots in docs/screenshots/.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from bot.desk import Desk
from tests.conftest import CHROMIUM, shot

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)

FIELDS = [
    {"name": "order_status", "type": "enum", "enum_values": ["shipped", "delayed", "lost", "not_found"], "required": True,
     "label": "Order status", "description": "Where the order is now."},
    {"name": "tracking_url", "type": "url", "label": "Tracking link", "placeholder": "https://carrier.example/track/…"},
    {"name": "eta_date", "type": "date", "label": "Expected delivery", "required": True},
    {"name": "parcels", "type": "number", "label": "Parcels"},
    {"name": "refunded", "type": "boolean", "label": "Shipping refunded?"},
    {"name": "carrier", "type": "string", "label": "Carrier", "placeholder": "DHL"},
    {"name": "notes", "type": "multiline", "label": "Notes for the customer"},
]


async def start(api: httpx.AsyncClient, fields: list[dict[str, Any]] = FIELDS) -> tuple[str, str]:
    cid = (await api.post("/api/conversations", json={"subscriber": {"name": "Ana", "email": "ana@example.com"}})).json()["conversation_id"]
    result = (await api.post(f"/api/conversations/{cid}/tools/handoff_request", json={
        "channel_id": 1, "urgency": "high",
        "summary": "Ana (ana@example.com) says order #1234 was due Monday and has not arrived.",
        "expected_action": "Check the carrier, then tell us where the parcel is and when it arrives.",
        "expected_return": fields,
    })).json()
    sid = result["handoff_session_id"]
    return sid, (await api.get(f"/api/handoffs/{sid}")).json()["form_url"]


async def test_recipient_fills_every_field_type(served: tuple[Desk, str], page: Any) -> None:
    _desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        sid, url = await start(api)
        await page.goto(url)
        await page.wait_for_selector("h1:has-text('Hand the conversation back')")
        await shot(page, "form-desktop")

        await page.check("input[name=f_order_status][value=shipped]")
        await page.fill("#in-tracking_url", "https://carrier.example/track/abc")
        await page.fill("#in-eta_date", "2026-06-10")  # the date input takes ISO text
        await page.fill("#in-parcels", "2")
        await page.check("input[name=f_refunded][value=yes]")
        await page.fill("#in-carrier", "DHL Express")
        await page.fill("#in-notes", "Stuck at the depot.\nRe-routed today.")
        await page.check("input[name=outcome][value=resolved]")
        await page.fill("#in-note", "Carrier confirmed by phone.")
        await page.fill("#in-filled-by", "Sam")
        await page.click("button[type=submit]")
        await page.wait_for_selector("h1:has-text('Thank you, handed back')")
        assert "DHL Express" in await page.inner_text("main")
        await shot(page, "form-done")

        handoff = (await api.get(f"/api/handoffs/{sid}")).json()
        assert (handoff["state"], handoff["release_reason"], handoff["released_by"]) == ("released", "form", "Sam")
        assert handoff["returned"] == {
            "order_status": "shipped", "tracking_url": "https://carrier.example/track/abc", "eta_date": "2026-06-10",
            "parcels": 2, "refunded": True, "carrier": "DHL Express", "notes": "Stuck at the depot.\nRe-routed today.",
        }
        await page.goto(url)  # the link is used up now
        await page.wait_for_selector("h1:has-text('This form was already submitted')")
    # the only console line allowed is Chromium noting the final page's 410 status
    assert all("status of 410" in problem for problem in page.problems), page.problems


async def test_wrong_values_are_shown_for_correction_on_a_phone(served: tuple[Desk, str], page: Any) -> None:
    _desk, base = served
    await page.set_viewport_size({"width": 375, "height": 740})
    async with httpx.AsyncClient(base_url=base) as api:
        sid, url = await start(api)
        await page.goto(url)
        width = await page.evaluate("document.documentElement.scrollWidth")
        assert width <= 375  # no sideways scrolling at phone width
        await shot(page, "form-phone")
        await page.fill("#in-tracking_url", "not a link")  # the form is novalidate: the server answers
        await page.click("button[type=submit]")
        await page.wait_for_selector("text=Please check 1 answer")
        assert await page.get_attribute("#in-tracking_url", "aria-invalid") == "true"
        assert await page.input_value("#in-tracking_url") == "not a link"
        await shot(page, "form-phone-error")
        assert (await api.get(f"/api/handoffs/{sid}")).json()["state"] == "active"


async def test_a_decimal_comma_typed_in_the_page_comes_back_as_a_decimal(served: tuple[Desk, str], page: Any) -> None:
    _desk, base = served
    async with httpx.AsyncClient(base_url=base) as api:
        sid, url = await start(api, [{"name": "refund", "type": "number", "label": "Refund"},
                                     {"name": "eta_date", "type": "date", "label": "Expected delivery"}])
        await page.goto(url)
        await page.type("#in-refund", "1,250")  # typed key by key, as a person does
        await page.click("button[type=submit]")
        await page.wait_for_selector("text=Please check 1 answer")
        assert await page.inner_text("#err-refund") == (
            'Refund is ambiguous: "1,250" could mean 1250 or 1.25; write 1250 or 1.25, whichever you mean.')
        assert await page.input_value("#in-refund") == "1,250"  # what was typed is still there

        await page.fill("#in-refund", "")
        await page.type("#in-refund", "12,50")
        await page.focus("#in-eta_date")
        await page.keyboard.type("06")  # the month only: a picker left half-filled submits as empty
        await page.click("button[type=submit]")
        assert await page.inner_text("#err-eta_date") == (
            "Expected delivery is not a whole date: fill in its day, month and year, or clear it.")
        assert await page.get_attribute("#in-eta_date", "aria-invalid") == "true"
        assert (await api.get(f"/api/handoffs/{sid}")).json()["state"] == "active"  # nothing was sent

        await page.fill("#in-eta_date", "2026-06-10")
        await page.click("button[type=submit]")
        await page.wait_for_selector("h1:has-text('Thank you, handed back')")
        handoff = (await api.get(f"/api/handoffs/{sid}")).json()
        assert handoff["returned"] == {"refund": 12.5, "eta_date": "2026-06-10"}
        cid = handoff["conversation_id"]
        [resume] = [m["text"] for m in (await api.get(f"/api/conversations/{cid}/messages")).json()["messages"]
                    if m["role"] == "system"]
        assert "  • refund: 12.5\n" in resume
    # the only console line allowed is Chromium noting the corrected page's 422 status
    assert all("status of 422" in problem for problem in page.problems), page.problems

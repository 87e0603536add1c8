"""The on-call page in a real browser (Chromium through Playwright) against a real server: who
is on call now and next, the fortnight with its gaps marked, an override added through the
form (typed on the schedule's clock) and removed again, and the page at phone width.
Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh docs/screenshots/inbox-oncall*.png.
"""

from __future__ import annotations

import os
from datetime import date, timedelta
from typing import Any

import pytest

from bot.desk import Desk
from tests.conftest import CHROMIUM, shot
from tests.test_inbox_browser import PHONE, assert_fits_the_phone

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)

TOMORROW = date.today() + timedelta(days=1)


@pytest.fixture
def served_config() -> dict[str, Any]:
    """Two layers in Berlin: office days in turns and a nights-only layer, which leave the
    hours between to nobody (08:00-09:00 and 17:00-18:00 on weekdays, the weekends' days)."""
    start = (date.today() - timedelta(days=3)).isoformat()
    return {
        "people": [{"id": pid, "name": name, "email": f"{pid}@example.com"}
                   for pid, name in (("ana", "Ana Lima"), ("ben", "Ben Okafor"), ("olga", "Olga Petrova"), ("kim", "Kim Berg"))],
        "hours": {"nights": {"timezone": "Europe/Berlin", "weekly": {"mon-sun": "00:00-08:00, 18:00-24:00"}},
                  "office": {"timezone": "Europe/Berlin", "weekly": {"mon-fri": "09:00-17:00"}}},
        "oncall": [{
            "id": "support", "label": "Support on call", "timezone": "Europe/Berlin",
            "layers": [
                {"name": "days", "people": ["ana", "ben"], "shift": "1d", "handover": "09:00", "start": start,
                 "hours": "office"},
                {"name": "nights", "people": ["kim"], "shift": "7d", "handover": "09:00", "start": start, "hours": "nights"},
            ],
            "overrides": [{"person": "olga", "covers": "ben", "from": f"{TOMORROW + timedelta(days=5)} 18:00",
                           "to": f"{TOMORROW + timedelta(days=6)} 08:00", "note": "Ben's holiday"}],
        }],
    }


async def test_the_oncall_page_in_the_browser_with_an_override_added_and_removed(served: tuple[Desk, str], page: Any) -> None:
    from playwright.async_api import expect

    desk, base = served
    await page.goto(f"{base}/inbox")
    await page.click("a.top-link[href='/inbox/oncall']")
    panel = page.locator("#schedule-support")
    await expect(panel.locator("h2")).to_contain_text("Support on call")
    await expect(panel.locator("[data-f=next] li")).to_have_count(2)
    await expect(panel.locator("[data-f=gaps]")).to_contain_text("08:00 – ")
    assert await panel.locator("tr.oncall-gap").count() >= 14  # two hours each weekday, each weekend's day
    await expect(panel.locator("[data-f=overrides]")).to_contain_text("Olga Petrova covers Ben Okafor")
    await expect(panel.locator("[data-f=overrides]")).to_contain_text("from the config")

    await page.select_option("#support-person", "olga")
    await page.select_option("#support-covers", "")
    await page.fill("#support-from", f"{TOMORROW}T08:00")
    await page.fill("#support-to", f"{TOMORROW}T20:00")
    await page.fill("#support-note", "Ana's dentist")
    await page.click("#schedule-support form.oncall-form button[type=submit]")
    await expect(page.locator(".banner")).to_have_text(
        f"Added: Olga Petrova on call {TOMORROW:%a %d %b} 08:00 – {TOMORROW:%a %d %b} 20:00 (Europe/Berlin).")
    [added] = [o for o in await desk.oncall.overrides("support", desk.clock.now(), desk.clock.now() + timedelta(days=3))
               if o.source == "inbox"]
    assert (added.person_id, added.covers, added.note) == ("olga", None, "Ana's dentist")
    await expect(panel.locator(f"#override-{added.id}")).to_contain_text("Olga Petrova takes the first layer")
    assert page.problems == []
    await shot(page, "inbox-oncall")

    await page.set_viewport_size(PHONE)
    await page.reload()
    await expect(panel.locator("h2")).to_be_visible()
    await assert_fits_the_phone(page, "the on-call page")
    await shot(page, "inbox-oncall-phone")
    await page.set_viewport_size({"width": 1200, "height": 820})

    await panel.locator(f"#override-{added.id} button").click()
    await expect(page.locator(".banner")).to_have_text("Removed the override of Olga Petrova.")
    await expect(panel.locator(f"#override-{added.id}")).to_have_count(0)
    assert page.problems == []

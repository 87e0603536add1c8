"""Signing in with a password in a real browser (Chromium through Playwright) against a
real server: the forms work under the strict CSP and the inbox names who signed in."""

from __future__ import annotations

import os
from typing import Any

import pytest

from bot.desk import Desk
from tests.accounts import OWNER_TOKEN, PASSWORD, add_person
from tests.conftest import CHROMIUM

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)


@pytest.fixture
def served_config() -> dict[str, Any]:
    return {"owner": {"token": OWNER_TOKEN}}


async def test_a_person_signs_in_with_a_password_and_sees_the_inbox_with_their_name(served: tuple[Desk, str], page: Any) -> None:
    desk, base = served
    await add_person(desk)
    await page.goto(f"{base}/inbox")
    await page.wait_for_selector("text=Sign in")
    assert page.url == f"{base}/inbox/login?next=/inbox"
    await page.fill("#email", "olga@example.com")
    await page.fill("#password", "not the password at all")
    await page.click("button[type=submit] >> text=Sign in")
    await page.wait_for_selector("text=That e-mail and password do not match an account that may sign in.")
    assert await page.input_value("#email") == "olga@example.com"
    # the refusal is a 401 page, which Chromium reports; nothing else may be
    assert page.problems == ["Failed to load resource: the server responded with a status of 401 (Unauthorized)"]
    page.problems.clear()
    await page.fill("#password", PASSWORD)
    await page.click("button[type=submit] >> text=Sign in")
    await page.wait_for_selector("text=Active handoffs")
    assert page.url == f"{base}/inbox"
    assert await page.inner_text(".account-link") == "Olga Petrova · agent"
    await page.click(".account-link")
    await page.wait_for_selector("#account-name")
    assert await page.inner_text("#account-name") == "Olga Petrova"
    assert "You are signed in in 1 place" in await page.inner_text("#open-sessions")
    await page.click("button >> text=Sign out everywhere")
    await page.wait_for_selector("#email")
    assert page.url == f"{base}/inbox/login"
    assert page.problems == []

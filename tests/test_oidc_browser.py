"""Single sign-on in Chromium: a person signs in on the provider's login page (the one
tests/oidc_provider.py posts with httpx), and the redirect back to the desk finishes as them.
The desk's callback is caught by the browser (it is not served here), so nothing leaves the
machine; the page loads nothing from elsewhere either."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import pytest

from bot.config.people import Role
from bot.domain.people.oidc import OidcSignIn
from tests.conftest import CHROMIUM
from tests.oidc_provider import OidcProvider

if not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"):
    pytest.skip("Chromium is not installed (apt-get install -y chromium; .ci/run does)", allow_module_level=True)


async def test_a_person_signs_in_on_the_providers_login_page(oidc_provider: OidcProvider, page: Any) -> None:
    sign_in = OidcSignIn(oidc_provider.sso_config())
    start = await sign_in.begin(oidc_provider.redirect_uri)
    callbacks: list[str] = []
    elsewhere: list[str] = []

    async def desk(route: Any) -> None:
        callbacks.append(route.request.url)
        await route.fulfill(status=200, content_type="text/html", body="<h1>Back at the desk</h1>")

    async def only_loopback(route: Any) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    await page.route("**/*", only_loopback)
    await page.route(oidc_provider.redirect_uri + "*", desk)  # routes added later are asked first

    await page.goto(start.url)
    await page.wait_for_selector("h1:has-text('Test provider sign-in')")
    await page.fill("#login", "wrong-account")
    await page.click("button:has-text('Sign in')")
    await page.wait_for_selector("[role=alert]:has-text('Unknown account or wrong password.')")
    page.problems.clear()  # Chromium logs the refused login's 401 as a console error
    await page.fill("#login", "olga@example.com")
    await page.click("button:has-text('Sign in')")
    await page.wait_for_selector("h1:has-text('Back at the desk')")

    [callback] = callbacks
    identity = await sign_in.finish(start, redirect_uri=oidc_provider.redirect_uri, params=dict(parse_qsl(urlsplit(callback).query)))
    assert (identity.subject, identity.email, identity.role) == ("olga", "olga@example.com", Role.ADMIN)
    assert elsewhere == [] and page.problems == []

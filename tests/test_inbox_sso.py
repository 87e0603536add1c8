"""The inbox's single sign-on pages against a real OpenID provider (node-oidc-provider,
tests/oidc_provider.py): a first sign-in creates the person with the role their groups map
to, a later one finds them, an address already in the directory is linked; every refusal is
a page and creates nobody."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from bot.runtime.clock import Clock
from tests.conftest import CHROMIUM, Harness, StartDesk
from tests.oidc_provider import OidcProvider


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def desk_with_sso(start_desk: StartDesk, provider: OidcProvider, **sso: Any) -> Harness:
    config = provider.sso_config(**sso).model_dump(mode="json")
    config["client_secret"] = provider.client_secret
    # The provider's tokens carry the real time: the desk checks them on the real clock.
    return await start_desk(clock=Clock(), owner={"token": "owner-secret"}, sign_in={"sso": config})


async def sso_sign_in(harness: Harness, provider: OidcProvider, login: str) -> httpx.Response:
    """Press the sign-in button, sign in at the provider as `login`, follow it back."""
    started = await harness.client.get("/inbox/sso?next=/inbox")
    assert started.status_code == 303
    back = await provider.sign_in(started.headers["location"], login)
    return await harness.client.get(back.url.replace("http://desk.test", ""))


async def test_a_first_sign_in_creates_the_person_and_a_later_one_finds_them(
        start_desk: StartDesk, oidc_provider: OidcProvider) -> None:
    harness = await desk_with_sso(start_desk, oidc_provider)
    login_page = await harness.client.get("/inbox/login")
    assert 'href="/inbox/sso?next=/inbox"' in login_page.text
    answer = await sso_sign_in(harness, oidc_provider, "olga")
    assert (answer.status_code, answer.headers["location"]) == (303, "/inbox")
    inbox = await harness.client.get("/inbox")
    assert inbox.status_code == 200
    (olga,) = await harness.desk.people.all()
    assert (olga.id, olga.name, olga.email, olga.role, olga.source) == ("olga", "Olga Admin", "olga@example.com", "admin", "sso")
    assert [(i.kind, i.verified_via) for i in await harness.desk.people.identities("olga")] == [("sso", "sso")]
    harness.client.cookies.clear()
    await sso_sign_in(harness, oidc_provider, "olga")
    assert [p.id for p in await harness.desk.people.all()] == ["olga"]  # found again, not created twice


async def test_an_address_in_the_directory_is_linked_and_its_role_follows_the_claims(
        start_desk: StartDesk, oidc_provider: OidcProvider) -> None:
    harness = await desk_with_sso(start_desk, oidc_provider, create_people=False)
    await harness.desk.people.add(pid="ben", name="Ben from Billing", email="ben@example.com", role="viewer",
                                  source="cli", actor="cli")
    answer = await sso_sign_in(harness, oidc_provider, "ben")
    assert answer.status_code == 303
    ben = await harness.desk.people.get("ben")
    assert (ben.name, ben.role) == ("Ben from Billing", "agent")  # desk-agents → agent; the name is the desk's


@pytest.mark.parametrize(("login", "sso", "says"), [
    ("una", {}, "verified"),
    ("otto", {}, "other.example"),
    ("vera", {"default_role": "none"}, "role"),
    ("ben", {"create_people": False}, "not a person of this desk"),
])
async def test_refusals_are_pages_and_create_nobody(start_desk: StartDesk, oidc_provider: OidcProvider,
                                                    login: str, sso: dict[str, Any], says: str) -> None:
    harness = await desk_with_sso(start_desk, oidc_provider, **sso)
    answer = await sso_sign_in(harness, oidc_provider, login)
    assert answer.status_code == 403
    assert says in answer.text and "Nobody was signed in." in answer.text
    assert await harness.desk.people.count() == 0
    assert (await harness.client.get("/inbox")).status_code == 303  # still signed out


async def test_an_answer_for_another_browser_or_state_is_refused(start_desk: StartDesk, oidc_provider: OidcProvider) -> None:
    harness = await desk_with_sso(start_desk, oidc_provider)
    started = await harness.client.get("/inbox/sso")
    back = await oidc_provider.sign_in(started.headers["location"], "olga")
    wrong_state = back.url.replace(back.params["state"], "not-the-state")
    answer = await harness.client.get(wrong_state.replace("http://desk.test", ""))
    assert answer.status_code == 403 and "Nobody was signed in." in answer.text
    # The start cookie is gone with the refusal: the right answer, replayed now, is refused too.
    replayed = await harness.client.get(back.url.replace("http://desk.test", ""))
    assert replayed.status_code == 403 and "not started in this browser" in replayed.text
    assert await harness.desk.people.count() == 0


async def test_a_disabled_person_cannot_sign_in(start_desk: StartDesk, oidc_provider: OidcProvider) -> None:
    harness = await desk_with_sso(start_desk, oidc_provider)
    await sso_sign_in(harness, oidc_provider, "olga")
    assert (await harness.client.get("/inbox")).status_code == 200
    await harness.desk.people.set_disabled("olga", True, actor="test")
    assert (await harness.client.get("/inbox")).status_code == 303  # the session ended at once
    answer = await sso_sign_in(harness, oidc_provider, "olga")
    assert answer.status_code == 403 and "disabled" in answer.text


async def test_sign_in_through_the_provider_in_chromium(sqlite_url: str) -> None:
    """End to end in a real browser: the inbox's button, the provider's login page, back
    to the inbox signed in as the person."""
    import socket

    from playwright.async_api import async_playwright

    from tests.conftest import CHROMIUM_FLAGS, desk_served
    from tests.oidc_provider import start_oidc_provider

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    with start_oidc_provider(redirect_uris=[f"{base}/inbox/sso/callback"]) as provider:
        sso = provider.sso_config().model_dump(mode="json")
        sso["client_secret"] = provider.client_secret
        async with desk_served(sqlite_url, port=port, owner={"token": "owner-secret"}, sign_in={"sso": sso}) as (desk, url):
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
                page = await browser.new_page()
                await page.goto(f"{url}/inbox")
                await page.click("text=Sign in with single sign-on")
                await page.fill("input[name=login]", "olga")
                await page.click("button[type=submit]")
                consent = page.locator("button[type=submit]")  # the provider's consent page, when it asks
                if "/inbox" not in page.url and await consent.count():
                    await consent.first.click()
                await page.wait_for_url(f"{url}/inbox")
                assert "Olga Admin" in await page.content()
                await browser.close()
            assert [p.id for p in await desk.people.all()] == ["olga"]

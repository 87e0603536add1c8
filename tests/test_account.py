"""The account page (bot/web/inbox/account.py): who you are, your password, TOTP, your
sessions and "sign out everywhere"; a disabled person's session ends at their next request."""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import unquote
from zoneinfo import ZoneInfo

import httpx
import pyotp
from sqlalchemy import select
from sqlmodel import col

from bot.config.people import Role
from bot.domain.people import totp_on
from bot.domain.people.credentials import hash_password, verify_password
from bot.store.models import HandoffEvent
from tests.accounts import (
    OWNER_TOKEN,
    PASSWORD,
    add_person,
    browser,
    code_at,
    desk_with_people,
    form_token,
    sign_in,
    turn_on_totp,
)
from tests.conftest import TELEGRAM_TOKEN, StartDesk
from tests.fakes import DirectScriptedChannel

NEW_PASSWORD = "a much better passphrase"


async def signed_in(client: httpx.AsyncClient, email: str = "olga@example.com", password: str = PASSWORD) -> str:
    """Sign in and return the account page's CSRF token."""
    assert (await sign_in(client, email, password)).status_code == 303
    return form_token((await client.get("/inbox/account")).text)


async def test_the_account_page_shows_who_you_are(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk, role=Role.VIEWER)
    await harness.desk.people.update("olga", actor="test", timezone="Europe/Berlin")
    client = harness.client
    assert (await client.get("/inbox/account")).headers["location"] == "/inbox/login?next=/inbox/account"
    await signed_in(client)
    page = (await client.get("/inbox/account")).text
    for shown in ('<dd id="account-name">Olga Petrova</dd>', "<dd>olga@example.com</dd>", '<dd id="account-role">viewer</dd>',
                  "<dd>Europe/Berlin</dd>", "You are signed in in 1 place (this browser included).",
                  'action="/inbox/account/password"', 'action="/inbox/account/totp"', "Sign out everywhere",
                  "Olga Petrova · viewer"):
        assert shown in page, shown


async def test_the_owner_token_is_the_service_identity_with_only_sign_out(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    client = harness.client
    await client.post("/inbox/login", data={"token": OWNER_TOKEN})
    page = (await client.get("/inbox/account")).text
    assert "You are signed in with the owner token: the desk's service identity" in page
    assert 'action="/inbox/logout"' in page and "/inbox/account/password" not in page and "Sign out everywhere" not in page
    assert "Service · admin" in page
    refused = await client.post("/inbox/account/sign-out-everywhere", data={"csrf": form_token(page)})
    assert refused.status_code == 409  # not a refusal of the role: there is no account to change
    assert "it has no password, TOTP or sessions of its own to change" in refused.text


async def test_changing_the_password_needs_the_current_one_and_signs_out_the_others(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    here, elsewhere = harness.client, browser(harness)
    csrf = await signed_in(here)
    await signed_in(elsewhere)
    assert "You are signed in in 2 places" in (await here.get("/inbox/account")).text
    cases = [
        ({"current": "not my password, sorry", "password": NEW_PASSWORD, "repeated": NEW_PASSWORD},
         "current: that is not your current password"),
        ({"current": PASSWORD, "password": "short", "repeated": "short"}, "password: at least 12 characters, got 5"),
        ({"current": PASSWORD, "password": NEW_PASSWORD, "repeated": NEW_PASSWORD + "!"},
         "repeated: the two new passwords differ; type the same password twice"),
    ]
    for form, problem in cases:
        refused = await here.post("/inbox/account/password", data={"csrf": csrf, **form})
        assert refused.status_code == 400
        assert problem in refused.text
    assert (await here.post("/inbox/account/password", data={"current": PASSWORD, "password": NEW_PASSWORD,
                                                              "repeated": NEW_PASSWORD})).status_code == 403  # no CSRF token
    changed = await here.post("/inbox/account/password", data={"csrf": csrf, "current": PASSWORD, "password": NEW_PASSWORD,
                                                                "repeated": NEW_PASSWORD})
    assert changed.status_code == 303
    notice = (await here.get(changed.headers["location"])).text
    assert "Your password is changed. 1 other session(s) were signed out." in notice  # this browser stays in
    assert (await elsewhere.get("/inbox")).status_code == 303
    olga = await harness.desk.people.get("olga")
    assert olga.password_hash is not None and verify_password(olga.password_hash, NEW_PASSWORD)
    assert (await sign_in(browser(harness), password=PASSWORD)).status_code == 401
    assert (await sign_in(browser(harness), password=NEW_PASSWORD)).status_code == 303


async def test_totp_is_turned_on_only_by_a_code_from_its_secret(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    client = harness.client
    csrf = await signed_in(client)
    assert (await client.get("/inbox/account")).text.count("otpauth://") == 0  # GET makes no secret
    assert (await client.post("/inbox/account/totp", data={"csrf": csrf})).status_code == 303
    page = (await client.get("/inbox/account")).text
    secret = (await harness.desk.people.get("olga")).totp_secret
    assert secret is not None and f'<code class="totp-secret">{secret}</code>' in page
    assert "otpauth://totp/Handoff%20Desk:olga%40example.com?secret=" + secret in page
    app = pyotp.TOTP(secret)
    wrong = "000000" if code_at(app, clock) != "000000" else "111111"
    refused = await client.post("/inbox/account/totp/confirm", data={"csrf": csrf, "code": wrong})
    assert refused.status_code == 400
    assert "code: not the current 6-digit code of your authenticator app" in refused.text
    assert (await harness.desk.people.get("olga")).totp_confirmed_at is None
    assert (await sign_in(browser(harness))).headers["location"] == "/inbox"  # an unconfirmed secret asks nothing
    on = await client.post("/inbox/account/totp/confirm", data={"csrf": csrf, "code": code_at(app, clock)})
    assert on.status_code == 303
    assert "TOTP is on" in (await client.get(on.headers["location"])).text
    assert (await sign_in(browser(harness))).headers["location"] == "/inbox/login/code"
    # turning it off needs a current code, not the one just used
    replay = await client.post("/inbox/account/totp/off", data={"csrf": csrf, "code": code_at(app, clock)})
    assert replay.status_code == 400 and "this code was used already" in replay.text
    clock.advance(timedelta(seconds=30))
    off = await client.post("/inbox/account/totp/off", data={"csrf": csrf, "code": code_at(app, clock)})
    assert off.status_code == 303
    olga = await harness.desk.people.get("olga")
    assert (olga.totp_secret, olga.totp_confirmed_at) == (None, None)


async def test_wrong_codes_to_turn_totp_off_count_against_the_account(start_desk: StartDesk) -> None:
    """A borrowed session cannot guess its way past the second factor either."""
    harness, clock = await desk_with_people(start_desk, sign_in={"max_failures_per_account": 2})
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    client = harness.client
    await sign_in(client)
    await client.post("/inbox/login/code", data={"csrf": form_token((await client.get("/inbox/login/code")).text),
                                                 "code": code_at(app, clock)})
    csrf = form_token((await client.get("/inbox/account")).text)
    clock.advance(timedelta(seconds=30))
    wrong = "000000" if code_at(app, clock) != "000000" else "111111"
    for _ in range(2):
        assert (await client.post("/inbox/account/totp/off", data={"csrf": csrf, "code": wrong})).status_code == 400
    locked = await client.post("/inbox/account/totp/off", data={"csrf": csrf, "code": code_at(app, clock)})
    assert (locked.status_code, locked.headers["retry-after"]) == (429, "450")
    assert totp_on(await harness.desk.people.get("olga"))


async def test_a_desk_that_requires_totp_keeps_it_on(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk, sign_in={"require_totp": True})
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    client = harness.client
    await sign_in(client)
    step = (await client.get("/inbox/login/code")).text
    await client.post("/inbox/login/code", data={"csrf": form_token(step), "code": code_at(app, clock)})
    page = (await client.get("/inbox/account")).text
    assert "This desk requires it, so it stays on." in page and "/inbox/account/totp/off" not in page
    clock.advance(timedelta(seconds=30))
    refused = await client.post("/inbox/account/totp/off", data={"csrf": form_token(page), "code": code_at(app, clock)})
    assert refused.status_code == 409
    assert "totp: this desk requires it (sign_in.require_totp)" in refused.text


async def test_sign_out_everywhere_ends_the_other_browsers_too(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    await add_person(harness.desk, "ben", name="Ben", email="ben@example.com")
    here, elsewhere, ben = harness.client, browser(harness), browser(harness, "203.0.113.8")
    csrf = await signed_in(here)
    await signed_in(elsewhere)
    await signed_in(ben, "ben@example.com")
    out = await here.post("/inbox/account/sign-out-everywhere", data={"csrf": csrf})
    assert (out.status_code, out.headers["location"]) == (303, "/inbox/login")
    for client in (here, elsewhere):
        assert (await client.get("/inbox")).headers["location"] == "/inbox/login?next=/inbox"
    assert (await ben.get("/inbox")).status_code == 200  # someone else's sessions are theirs


async def test_a_disabled_person_is_signed_out_at_their_next_request(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    client = harness.client
    csrf = await signed_in(client)
    assert (await client.get("/inbox")).status_code == 200
    await harness.desk.people.set_disabled("olga", True, actor="test")
    assert (await client.get("/inbox")).headers["location"] == "/inbox/login?next=/inbox"
    assert (await client.post("/inbox/account/sign-out-everywhere", data={"csrf": csrf})).status_code == 401
    assert (await sign_in(browser(harness))).status_code == 401


# --------------------------------------------------------------------------- available or away, and how the desk reaches you

DIRECT = [
    {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
    {"id": 2, "kind": "telegram", "label": "Telegram staff", "bot_token": TELEGRAM_TOKEN, "chat_id": -100123,
     "api_base_url": "http://127.0.0.1:9", "mode": "webhook", "webhook_secret": "test_webhook-secret-1"},
    {"id": 3, "kind": "slack", "label": "Slack support", "bot_token": "xoxb-test-token", "channel": "C0HANDOFF",
     "signing_secret": "slack-signing-secret-for-tests", "api_base_url": "http://127.0.0.1:9"},
]


def words(html: str) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


async def test_the_availability_switch_sets_away_with_a_note_and_until_then_available(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    await harness.desk.people.update("olga", actor="test", timezone="Europe/Berlin")
    client = harness.client
    csrf = await signed_in(client)
    until = (clock.now() + timedelta(days=1)).astimezone(ZoneInfo("Europe/Berlin")).replace(second=0, microsecond=0)
    typed = until.strftime("%Y-%m-%dT%H:%M")
    assert "Available" in words((await client.get("/inbox/account")).text)
    refused = await client.post("/inbox/account/availability", data={"away": "1"})  # no form token
    assert refused.status_code == 403
    bad = await client.post("/inbox/account/availability", data={"csrf": csrf, "away": "1", "until": "tomorrow"})
    assert bad.status_code == 422
    assert "until: expected a date and time such as 2026-12-24T18:00, got &#39;tomorrow&#39;" in bad.text
    assert re.search(r'id="away-until" name="until" type="datetime-local"\s+aria-invalid="true"', bad.text)
    went = await client.post("/inbox/account/availability", data={"csrf": csrf, "away": "1", "note": "dentist", "until": typed})
    assert went.status_code == 303
    assert unquote(went.headers["location"]) == (
        f"/inbox/account?notice=Olga Petrova is away until {until.strftime('%Y-%m-%d %H:%M')} (Europe/Berlin).#availability")
    page = words((await client.get("/inbox/account")).text)
    since = clock.now().astimezone(ZoneInfo("Europe/Berlin")).strftime("%Y-%m-%d %H:%M")
    assert f"Away since {since}, until {until.strftime('%Y-%m-%d %H:%M')} (Europe/Berlin): dentist." in page
    olga = await harness.desk.people.get("olga")
    assert (olga.away_until, olga.away_note) == (until, "dentist")
    back = await client.post("/inbox/account/availability", data={"csrf": csrf, "away": "0"})
    assert unquote(back.headers["location"]).startswith("/inbox/account?notice=Olga Petrova is available.")
    assert (await harness.desk.people.get("olga")).away_since is None
    async with harness.desk.db.read() as session:
        rows = (await session.scalars(select(HandoffEvent).where(
            col(HandoffEvent.kind).in_(("person_away", "person_available"))).order_by(col(HandoffEvent.id)))).all()
    assert [(r.kind, r.detail["via"]) for r in rows] == [("person_away", "inbox"), ("person_available", "inbox")]


async def test_a_viewer_has_no_switch(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk, role=Role.VIEWER)
    csrf = await signed_in(harness.client)
    assert "Available or away" not in (await harness.client.get("/inbox/account")).text
    refused = await harness.client.post("/inbox/account/availability", data={"csrf": csrf, "away": "1"})
    assert refused.status_code == 403


async def test_how_the_desk_reaches_you_in_order_and_moved(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk, channels=DIRECT,
                                             adapters={2: DirectScriptedChannel, 3: DirectScriptedChannel})
    await add_person(harness.desk)
    people = harness.desk.people
    await people.link("olga", "telegram", "501", verified_via="code", actor="test")
    client = harness.client
    csrf = await signed_in(client)
    page = words((await client.get("/inbox/account")).text)
    assert "How the desk reaches you" in page and "telegram through Telegram staff at 501 verified: linked by code" in page
    assert "No slack identity of yours is linked, so Slack support cannot reach you: link it ." in page
    assert 'href="/inbox/account/linking"' in (await client.get("/inbox/account")).text
    await people.link("olga", "slack", "U0OLGA", verified_via="cli", actor="test")
    html = (await client.get("/inbox/account")).text
    assert words(html).index("telegram through") < words(html).index("slack through")
    assert 'aria-label="Move slack up"' in html and 'aria-label="Move telegram up"' not in html
    moved = await client.post("/inbox/account/contact", data={"csrf": csrf, "kind": "slack", "move": "up"})
    assert unquote(moved.headers["location"]) == "/inbox/account?notice=Your contact order is saved.#contact"
    assert (await people.get("olga")).contact_order == ["slack", "telegram", "email", "discord", "whatsapp"]
    page = words((await client.get("/inbox/account")).text)
    assert page.index("slack through Slack support at U0OLGA verified: linked from the command line") < page.index(
        "telegram through")
    nothing = await client.post("/inbox/account/contact", data={"csrf": csrf, "kind": "slack", "move": "up"})  # first already
    assert "Nothing to move there." in unquote(nothing.headers["location"])
    bad = await client.post("/inbox/account/contact", data={"csrf": csrf, "kind": "slack", "move": "sideways"})
    assert bad.status_code == 422 and "move: expected up or down, got &#39;sideways&#39;" in bad.text


async def test_an_order_the_file_sets_is_read_only(start_desk: StartDesk) -> None:
    declared = {"id": "olga", "name": "Olga Petrova", "email": "olga@example.com", "contact": ["telegram", "slack"]}
    harness, _clock = await desk_with_people(start_desk, channels=DIRECT, people=[declared],
                                             adapters={2: DirectScriptedChannel, 3: DirectScriptedChannel})
    await harness.desk.people.set_password_hash("olga", hash_password(PASSWORD), actor="test")
    await harness.desk.people.link("olga", "telegram", "501", verified_via="code", actor="test")
    csrf = await signed_in(harness.client)
    html = (await harness.client.get("/inbox/account")).text
    assert "Your order is set in the desk's configuration file" in html and "Move up" not in html
    refused = await harness.client.post("/inbox/account/contact", data={"csrf": csrf, "kind": "telegram", "move": "down"})
    assert refused.status_code == 400 and "contact: the desk&#39;s configuration file sets your order" in refused.text
    assert (await harness.desk.people.get("olga")).contact_order == ["telegram", "slack"]


def test_a_phone_number_is_shown_masked() -> None:
    from bot.domain.people.contact import ShownMethod
    from bot.domain.people.reach import ContactMethod

    shown = ShownMethod(ContactMethod("whatsapp", 4, "WhatsApp", "+4915112345678", 0), "linked by code")
    assert shown.masked == "+49•••••••5678"
    assert ShownMethod(ContactMethod("slack", 3, "Slack", "U0OLGA", 1), "linked by code").masked == "U0OLGA"

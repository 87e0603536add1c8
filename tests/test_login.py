"""Password sign-in at /inbox/login (bot/web/inbox/login.py), its limits per address and per
account, and the TOTP step (bot/web/inbox/second_step.py, pending.py)."""

from __future__ import annotations

from datetime import timedelta

from argon2 import PasswordHasher
from sqlalchemy import select

from bot.domain.people.credentials import hash_password, needs_rehash
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
    without_nonce,
)
from tests.conftest import Harness, StartDesk


async def audit_rows(harness: Harness, kind: str) -> list[HandoffEvent]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == kind)
                                           .order_by(HandoffEvent.id))).all())


async def test_a_person_signs_in_with_their_password_and_the_inbox_names_them(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    olga = await add_person(harness.desk)
    assert olga.password_hash is not None and olga.password_hash.startswith("$argon2id$")
    client = harness.client
    login = await client.get("/inbox/login")
    assert 'name="email"' in login.text and 'name="password"' in login.text
    assert 'name="token"' in login.text  # the owner token stays, as the service login
    signed = await sign_in(client, "Olga@Example.com", next="/inbox/reports")  # addresses match in any case
    assert (signed.status_code, signed.headers["location"]) == (303, "/inbox/reports")
    inbox = await client.get("/inbox")
    assert inbox.status_code == 200
    assert '<a class="top-link account-link" href="/inbox/account" title="Your account">Olga Petrova · agent</a>' in inbox.text
    [opened] = await audit_rows(harness, "signed_in")
    assert (opened.actor, opened.person_id, opened.detail["via"]) == ("Olga Petrova", "olga", "password")


async def test_every_refusal_answers_alike(start_desk: StartDesk) -> None:
    """An unknown address, a wrong password, a disabled person and one with no password yet:
    the same status and page (but for the nonce and the address typed, shown back), and none
    signs anyone in."""
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    await add_person(harness.desk, "ben", name="Ben", email="ben@example.com")
    await harness.desk.people.set_disabled("ben", True, actor="test")
    await add_person(harness.desk, "cy", name="Cy", email="cy@example.com", password=None)
    answers = []
    for email, password in (("nobody@example.com", PASSWORD), ("olga@example.com", "not the password at all"),
                            ("ben@example.com", PASSWORD), ("cy@example.com", PASSWORD)):
        response = await sign_in(browser(harness), email, password)
        assert response.status_code == 401
        assert "handoff_session" not in response.cookies
        assert "That e-mail and password do not match an account that may sign in." in response.text
        assert f'value="{email}"' in response.text
        answers.append(without_nonce(response.text).replace(email, "EMAIL"))
    assert len(set(answers)) == 1
    assert [(row.person_id, row.detail["reason"]) for row in await audit_rows(harness, "sign_in_failed")] == [
        (None, "unknown_account"), ("olga", "wrong_password"), ("ben", "disabled"), ("cy", "no_password")]
    failed = (await audit_rows(harness, "sign_in_failed"))[0]
    assert failed.detail == {"client": "203.0.113.5", "step": "password", "reason": "unknown_account"}  # never the password
    assert await audit_rows(harness, "signed_in") == []


async def test_an_account_waits_after_its_failures_whichever_address_they_came_from(start_desk: StartDesk) -> None:
    """sign_in.max_failures_per_account wrong passwords per 15 minutes, from five addresses:
    then 429 for the account (the right password too), whether or not the address is anyone's;
    other accounts still sign in, and the wait ends by the desk's clock."""
    harness, clock = await desk_with_people(start_desk, sign_in={"max_failures_per_account": 5})
    await add_person(harness.desk)
    await add_person(harness.desk, "ben", name="Ben", email="ben@example.com")
    for n, email in ((n, e) for e in ("olga@example.com", "nobody@example.com") for n in range(5)):
        wrong = await sign_in(browser(harness, f"198.51.100.{n}"), email, "a wrong guess of a password")
        assert wrong.status_code == 401
    for email in ("OLGA@example.com", "nobody@example.com"):
        locked = await sign_in(browser(harness, "192.0.2.77"), email, PASSWORD)
        assert locked.status_code == 429
        assert locked.headers["retry-after"] == "180"  # one more try every 15/5 minutes
        assert "Too many failed sign-ins came from your address or for this account. Try again in 180 s" in locked.text
        assert "handoff_session" not in locked.cookies
    assert (await sign_in(browser(harness, "192.0.2.77"), "ben@example.com")).status_code == 303
    clock.advance(timedelta(seconds=180))
    assert (await sign_in(browser(harness, "192.0.2.78"), "olga@example.com")).status_code == 303


async def test_an_address_waits_after_its_failures_whichever_accounts_it_tried(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk, owner={"token": OWNER_TOKEN, "max_login_failures_per_minute": 3})
    await add_person(harness.desk)
    guesser = browser(harness, "198.51.100.7")
    for email in ("a@example.com", "b@example.com", "c@example.com"):
        assert (await sign_in(guesser, email, "a wrong guess of a password")).status_code == 401
    locked = await sign_in(guesser, "olga@example.com")
    assert (locked.status_code, locked.headers["retry-after"]) == (429, "20")
    # the owner token from that address waits too: one allowance per address
    assert (await guesser.post("/inbox/login", data={"token": OWNER_TOKEN})).status_code == 429
    assert (await sign_in(browser(harness, "203.0.113.9"), "olga@example.com")).status_code == 303
    clock.advance(timedelta(seconds=20))
    assert (await sign_in(guesser, "olga@example.com")).status_code == 303


async def test_an_older_hash_is_rehashed_on_a_good_sign_in(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk, password=None)
    weak = PasswordHasher(time_cost=1, memory_cost=8 * 1024, parallelism=1).hash(PASSWORD)
    await harness.desk.people.set_password_hash("olga", weak, actor="test")
    assert needs_rehash(weak)
    assert (await sign_in(harness.client)).status_code == 303
    stored = (await harness.desk.people.get("olga")).password_hash
    assert stored is not None and stored != weak and stored.startswith("$argon2id$") and not needs_rehash(stored)
    assert [row.kind for row in await audit_rows(harness, "password_rehashed")] == ["password_rehashed"]


async def test_with_passwords_off_only_the_owner_token_signs_in(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk, sign_in={"passwords": False})
    await add_person(harness.desk)
    page = await harness.client.get("/inbox/login")
    assert 'name="email"' not in page.text and 'name="token"' in page.text
    refused = await sign_in(harness.client)
    assert refused.status_code == 403
    assert "Signing in with a password is turned off on this desk (sign_in.passwords)." in refused.text


async def test_a_cross_site_login_is_refused(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    await add_person(harness.desk)
    forged = await harness.client.post("/inbox/login", data={"email": "olga@example.com", "password": PASSWORD},
                                       headers={"Sec-Fetch-Site": "cross-site"})
    assert forged.status_code == 403
    assert "handoff_session" not in forged.cookies


async def test_totp_is_a_second_step_with_no_session_until_the_code_is_right(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk)
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    client = harness.client
    halfway = await sign_in(client)
    assert (halfway.status_code, halfway.headers["location"]) == (303, "/inbox/login/code")
    assert "handoff_session" not in halfway.cookies
    assert (await client.get("/inbox")).status_code == 303  # no session yet
    step = await client.get("/inbox/login/code")
    assert "Type the 6-digit code your authenticator app shows" in step.text
    csrf = form_token(step.text)
    assert (await client.post("/inbox/login/code", data={"code": code_at(app, clock)})).status_code == 403  # no CSRF token
    wrong = await client.post("/inbox/login/code", data={"csrf": csrf, "code": "000000" if code_at(app, clock) != "000000" else "111111"})
    assert wrong.status_code == 401
    assert "code: not the current 6-digit code of your authenticator app" in wrong.text
    signed = await client.post("/inbox/login/code", data={"csrf": csrf, "code": code_at(app, clock)})
    assert (signed.status_code, signed.headers["location"]) == (303, "/inbox")
    assert "Olga Petrova · agent" in (await client.get("/inbox")).text
    [opened] = await audit_rows(harness, "signed_in")
    assert opened.detail["via"] == "password+totp"
    assert [row.detail["step"] for row in await audit_rows(harness, "sign_in_failed")] == ["totp"]


async def test_a_totp_code_is_accepted_once(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk)
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    code = code_at(app, clock)
    first, second = browser(harness), browser(harness, "203.0.113.6")
    for client in (first, second):
        await sign_in(client)
    csrf_second = form_token((await second.get("/inbox/login/code")).text)
    assert (await first.post("/inbox/login/code", data={"csrf": form_token((await first.get("/inbox/login/code")).text),
                                                         "code": code})).status_code == 303
    clock.advance(timedelta(seconds=20))  # still inside the code's window
    replayed = await second.post("/inbox/login/code", data={"csrf": csrf_second, "code": code})
    assert replayed.status_code == 401
    assert "code: this code was used already; wait for the next one" in replayed.text
    assert "handoff_session" not in replayed.cookies
    clock.advance(timedelta(seconds=30))
    assert (await second.post("/inbox/login/code", data={"csrf": csrf_second, "code": code_at(app, clock)})).status_code == 303


async def test_wrong_codes_count_against_the_account(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk, sign_in={"max_failures_per_account": 3})
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    client = harness.client
    await sign_in(client)
    csrf = form_token((await client.get("/inbox/login/code")).text)
    wrong = "000000" if code_at(app, clock) != "000000" else "111111"
    for _ in range(3):
        assert (await client.post("/inbox/login/code", data={"csrf": csrf, "code": wrong})).status_code == 401
    locked = await client.post("/inbox/login/code", data={"csrf": csrf, "code": code_at(app, clock)})
    assert (locked.status_code, locked.headers["retry-after"]) == (429, "300")
    assert (await sign_in(browser(harness, "192.0.2.1"))).status_code == 429  # the password step of that account too


async def test_the_halfway_cookie_lasts_five_minutes_and_dies_with_a_new_password(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk)
    app = await turn_on_totp(harness.desk, await add_person(harness.desk))
    client = harness.client
    await sign_in(client)
    csrf = form_token((await client.get("/inbox/login/code")).text)
    clock.advance(timedelta(minutes=5, seconds=1))
    late = await client.post("/inbox/login/code", data={"csrf": csrf, "code": code_at(app, clock)})
    assert late.status_code == 401
    assert "This sign-in expired or is no longer valid" in late.text
    await sign_in(client)
    csrf = form_token((await client.get("/inbox/login/code")).text)
    await harness.desk.people.set_password_hash("olga", hash_password("a new password, set meanwhile"), actor="test")
    assert (await client.post("/inbox/login/code", data={"csrf": csrf, "code": code_at(app, clock)})).status_code == 401


async def test_a_desk_that_requires_totp_has_it_set_up_before_the_first_session(start_desk: StartDesk) -> None:
    import pyotp

    harness, clock = await desk_with_people(start_desk, sign_in={"require_totp": True})
    await add_person(harness.desk)
    client = harness.client
    halfway = await sign_in(client)
    assert (halfway.status_code, halfway.headers["location"]) == (303, "/inbox/login/code")
    step = await client.get("/inbox/login/code")
    assert "Set up your authenticator app" in step.text
    secret = (await harness.desk.people.get("olga")).totp_secret
    assert secret is not None and f'<code class="totp-secret">{secret}</code>' in step.text
    assert "otpauth://totp/Handoff%20Desk:olga%40example.com?secret=" in step.text
    assert (await client.get("/inbox")).status_code == 303
    signed = await client.post("/inbox/login/code", data={"csrf": form_token(step.text),
                                                           "code": pyotp.TOTP(secret).at(clock.now())})
    assert (signed.status_code, signed.headers["location"]) == (303, "/inbox")
    olga = await harness.desk.people.get("olga")
    assert olga.totp_confirmed_at is not None
    clock.advance(timedelta(seconds=30))
    assert (await sign_in(browser(harness))).headers["location"] == "/inbox/login/code"  # from now on, a code each time

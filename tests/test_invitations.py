"""Invitation and password-reset links (bot/domain/people/invitations.py) and their pages
(bot/web/inbox/welcome.py): signed, expiring, single-use, dead once the person is disabled."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from bot.desk import Desk
from bot.domain.people import LinkKind, LinkNotValid, LinkRefused
from bot.domain.people.credentials import verify_password
from bot.store.models import HandoffEvent
from tests.accounts import PASSWORD, add_person, browser, desk_with_people, form_token, sign_in
from tests.conftest import StartDesk

CHOSEN = "my own long password"


def path_of(url: str) -> str:
    assert url.startswith("http://desk.test/inbox/")
    return url.removeprefix("http://desk.test")


async def refusal(desk: Desk, token: str, kind: LinkKind) -> str:
    with pytest.raises(LinkNotValid) as refused:
        await desk.invitations.person_for(token, kind)
    return refused.value.reason


async def test_an_invitation_link_names_its_person_until_it_expires(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk, sign_in={"invitation_ttl": "1h"})
    desk = harness.desk
    olga = await add_person(desk, password=None)
    url = desk.invitations.link_for(olga)
    assert url.startswith("http://desk.test/inbox/welcome/")
    token = url.rsplit("/", 1)[1]
    assert (await desk.invitations.person_for(token, LinkKind.INVITE)).id == "olga"
    assert await refusal(desk, token, LinkKind.RESET) == "invalid"  # one kind is never read as the other
    assert await refusal(desk, token[:-2] + ("AA" if not token.endswith("AA") else "BB"), LinkKind.INVITE) == "invalid"
    clock.advance(timedelta(hours=1, seconds=1))
    assert await refusal(desk, token, LinkKind.INVITE) == "expired"


async def test_links_are_refused_for_whom_they_cannot_serve(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    desk = harness.desk
    olga = await add_person(desk)
    with pytest.raises(LinkRefused, match="kind: olga has a password already; issue a reset link instead"):
        desk.invitations.link_for(olga, "invite")
    token = desk.invitations.link_for(olga, "reset").rsplit("/", 1)[1]
    ben = await add_person(desk, "ben", name="Ben", email="ben@example.com", password=None)
    ben_token = desk.invitations.link_for(ben).rsplit("/", 1)[1]
    await desk.people.set_disabled("olga", True, actor="test")
    await desk.people.set_disabled("ben", True, actor="test")
    assert await refusal(desk, token, LinkKind.RESET) == "disabled"
    assert await refusal(desk, ben_token, LinkKind.INVITE) == "disabled"
    with pytest.raises(LinkRefused, match="person: ben is disabled"):
        desk.invitations.link_for(await desk.people.get("ben"))


async def test_the_welcome_page_sets_the_password_once_and_signs_in(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    desk = harness.desk
    path = path_of(desk.invitations.link_for(await add_person(desk, password=None)))
    client = harness.client
    shown = await client.get(path)
    assert shown.status_code == 200
    assert "Welcome, Olga Petrova" in shown.text and "olga@example.com" in shown.text
    assert (await desk.people.get("olga")).password_hash is None  # opening the link changes nothing
    csrf = form_token(shown.text)
    assert (await client.post(path, data={"password": CHOSEN, "repeated": CHOSEN})).status_code == 403  # no CSRF token
    assert (await client.post(path, data={"csrf": csrf, "password": CHOSEN, "repeated": CHOSEN},
                              headers={"Sec-Fetch-Site": "cross-site"})).status_code == 403
    for password, repeated, problem in (("too short", "too short", "password: at least 12 characters, got 9"),
                                        (" " + CHOSEN, " " + CHOSEN, "password: no spaces at its start or end"),
                                        (CHOSEN, CHOSEN + "?", "repeated: the two passwords differ")):
        refused = await client.post(path, data={"csrf": csrf, "password": password, "repeated": repeated})
        assert refused.status_code == 400
        assert problem in refused.text
    assert (await desk.people.get("olga")).password_hash is None
    done = await client.post(path, data={"csrf": csrf, "password": CHOSEN, "repeated": CHOSEN})
    assert (done.status_code, done.headers["location"]) == (303, "/inbox")
    assert "Olga Petrova · agent" in (await client.get("/inbox")).text
    stored = (await desk.people.get("olga")).password_hash
    assert stored is not None and stored.startswith("$argon2id$") and verify_password(stored, CHOSEN)
    again = await browser(harness).post(path, data={"csrf": csrf, "password": "someone else's password", "repeated": "someone else's password"})
    assert again.status_code == 410
    assert "This link was used already" in again.text
    assert (await browser(harness).get(path)).status_code == 410
    assert verify_password((await desk.people.get("olga")).password_hash, CHOSEN)
    assert (await sign_in(browser(harness), password=CHOSEN)).status_code == 303


async def test_an_expired_invitation_sets_nothing(start_desk: StartDesk) -> None:
    harness, clock = await desk_with_people(start_desk, sign_in={"invitation_ttl": "10m"})
    path = path_of(harness.desk.invitations.link_for(await add_person(harness.desk, password=None)))
    csrf = form_token((await harness.client.get(path)).text)
    clock.advance(timedelta(minutes=10, seconds=1))
    late = await harness.client.post(path, data={"csrf": csrf, "password": CHOSEN, "repeated": CHOSEN})
    assert late.status_code == 410
    assert "This link has expired. Ask an admin of the desk for a new one." in late.text
    assert (await harness.desk.people.get("olga")).password_hash is None
    assert (await harness.client.get("/inbox/welcome/not-a-token")).status_code == 404


async def test_a_reset_link_replaces_the_password_once_and_ends_the_old_sessions(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk)
    desk = harness.desk
    olga = await add_person(desk)
    old_browser = browser(harness)
    assert (await sign_in(old_browser)).status_code == 303
    path = path_of(desk.invitations.link_for(olga, LinkKind.RESET))
    assert path.startswith("/inbox/reset/")
    assert (await harness.client.get(path.replace("/reset/", "/welcome/"))).status_code == 404
    shown = await harness.client.get(path)
    assert "A new password for Olga Petrova" in shown.text
    done = await harness.client.post(path, data={"csrf": form_token(shown.text), "password": CHOSEN, "repeated": CHOSEN})
    assert (done.status_code, done.headers["location"]) == (303, "/inbox")
    assert (await old_browser.get("/inbox")).status_code == 303  # the old session ended
    assert (await harness.client.get("/inbox")).status_code == 200
    assert (await harness.client.get(path)).status_code == 410  # used
    async with desk.db.read() as session:
        kinds = list((await session.scalars(select(HandoffEvent.kind).where(HandoffEvent.person_id == "olga")
                                            .order_by(HandoffEvent.id))).all())
    assert kinds[-3:] == ["password_reset", "signed_out_everywhere", "signed_in"]
    assert (await sign_in(browser(harness), password=PASSWORD)).status_code == 401
    # a link issued before the password changes another way dies with it
    stale = path_of(desk.invitations.link_for(await desk.people.get("olga"), "reset"))
    assert (await harness.client.get(stale)).status_code == 200
    page = (await harness.client.get("/inbox/account")).text
    changed = await harness.client.post("/inbox/account/password", data={
        "csrf": form_token(page), "current": CHOSEN, "password": CHOSEN + "2", "repeated": CHOSEN + "2"})
    assert changed.status_code == 303
    assert (await harness.client.get(stale)).status_code == 410


async def test_a_link_does_not_skip_the_second_factor(start_desk: StartDesk) -> None:
    harness, _clock = await desk_with_people(start_desk, sign_in={"require_totp": True})
    path = path_of(harness.desk.invitations.link_for(await add_person(harness.desk, password=None)))
    shown = await harness.client.get(path)
    done = await harness.client.post(path, data={"csrf": form_token(shown.text), "password": CHOSEN, "repeated": CHOSEN})
    assert (done.status_code, done.headers["location"]) == (303, "/inbox/login/code")
    assert "handoff_session" not in done.cookies
    assert "Set up your authenticator app" in (await harness.client.get("/inbox/login/code")).text

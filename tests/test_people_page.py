"""The admin's people pages (bot/web/inbox/people_page.py): admins only, the directory with
who holds what, adding a person (the field named, what was typed kept), changing one,
disabling (their sessions end at once), unlinking, the rules about the last admin and
oneself, and the sign-in links to pass on."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlmodel import col

from bot.config.people import Role
from bot.store.models import HandoffEvent, HandoffSession, Person
from tests.conftest import Harness, StartDesk
from tests.test_inbox import csrf_of, login


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """Pages do not depend on the database (the roster's reads run on both in tests/test_roster.py)."""
    return sqlite_url


async def person(harness: Harness, pid: str, role: Role = Role.AGENT, **fields: Any) -> Person:
    values: dict[str, Any] = {"name": pid.capitalize(), "email": f"{pid}@example.com", "source": "cli", "actor": "cli"}
    return await harness.desk.people.add(pid=pid, role=role, **{**values, **fields})


@asynccontextmanager
async def signed_in(harness: Harness, who: Person) -> AsyncIterator[httpx.AsyncClient]:
    """A browser signed in as `who`: a real server-side session, its cookie set."""
    token, _ = await harness.desk.sessions.open(who, via="password")
    client = httpx.AsyncClient(transport=harness.client._transport, base_url="http://desk.test",
                               cookies={"handoff_session": token})
    try:
        yield client
    finally:
        await client.aclose()


async def csrf(client: httpx.AsyncClient, path: str = "/inbox/people") -> str:
    page = await client.get(path)
    assert page.status_code == 200, page.text
    return csrf_of(page.text)


def text(html: str) -> str:
    """The page's words, tags and runs of spaces collapsed."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def notice(response: httpx.Response) -> str:
    from urllib.parse import unquote

    assert response.status_code == 303, response.text
    return unquote(response.headers["location"].partition("notice=")[2])


async def test_only_admins_reach_the_people_pages(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga, ben = await person(harness, "olga", Role.ADMIN), await person(harness, "ben")
    nobody = await harness.client.get("/inbox/people")
    assert (nobody.status_code, nobody.headers["location"]) == (303, "/inbox/login?next=/inbox/people")
    async with signed_in(harness, ben) as agent:
        refused = await agent.get("/inbox/people")
        assert refused.status_code == 403
        assert "This needs the admin role; you are signed in as agent." in refused.text
        assert (await agent.get("/inbox/people/olga")).status_code == 403
        assert 'href="/inbox/people"' not in (await agent.get("/inbox")).text  # no People link for an agent
        posted = await agent.post("/inbox/people/olga/disable", data={"csrf": csrf_of((await agent.get("/inbox")).text)})
        assert posted.status_code == 403
    assert (await harness.desk.people.get("olga")).disabled_at is None
    async with signed_in(harness, olga) as admin:
        assert 'href="/inbox/people"' in (await admin.get("/inbox")).text
        assert (await admin.get("/inbox/people")).status_code == 200
    await login(harness.client)  # the owner token signs in as admin too
    assert (await harness.client.get("/inbox/people")).status_code == 200


async def test_the_directory_shows_each_person_and_who_holds_what(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    people = harness.desk.people
    olga = await person(harness, "olga", Role.ADMIN, name="Olga from Support", source="config", timezone="Europe/Berlin")
    ben = await person(harness, "ben", name="<b>Ben</b>")
    await person(harness, "carol", Role.VIEWER, name="Carol")
    await people.set_disabled("carol", True, actor="cli")
    await people.link("ben", "slack", "U024BE7LH", verified_via="code", actor="cli")
    await people.link("ben", "slack", "U999", verified_via="cli", actor="cli")
    await people.link("ben", "telegram", "501", verified_via="code", actor="cli")
    await harness.desk.sessions.open(ben, via="password")
    sid = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    # What a claim by Ben writes once claims know their person (the identity side of the desk)
    async with harness.desk.db.transaction() as session:
        await session.execute(update(HandoffSession).where(col(HandoffSession.id) == sid).values(claimed_person_id="ben"))
    code = (await harness.desk.handoffs.get(sid)).short_code
    async with signed_in(harness, olga) as admin:
        html = (await admin.get("/inbox/people")).text
        words = text(html)
        assert "<b>Ben</b>" not in html and "&lt;b&gt;Ben&lt;/b&gt;" in html
        row = words[words.index("&lt;b&gt;Ben&lt;/b&gt; ben"):]
        assert row.startswith(f"&lt;b&gt;Ben&lt;/b&gt; ben ben@example.com agent UTC slack: U024BE7LH, U999 telegram: 501 cli enabled available "
                              f"{harness.desk.clock.now().strftime('%Y-%m-%d %H:%M')} UTC 1: #{code}")
        assert f'href="/inbox/handoffs/{sid}"' in html
        assert "Carol carol carol@example.com viewer UTC none cli disabled disabled never 0" in words
        assert "Olga from Support olga olga@example.com admin Europe/Berlin none config (YAML) enabled available" in words
        assert "the file wins for the fields it declares" in words
        detail = text((await admin.get("/inbox/people/olga")).text)
        assert "is declared in the config's people: . What you change here lasts until the next start" in detail
        assert "You cannot disable yourself" in detail
        held = text((await admin.get("/inbox/people/ben")).text)
        assert f"Holds now 1 #{code} Ana's order #1234" in held.replace("&#39;", "'")
        assert (await admin.get("/inbox/people/nobody")).status_code == 404


async def test_adding_a_person_names_a_wrong_field_and_keeps_what_was_typed(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin)
        form = {"csrf": token, "id": "ben", "name": "Ben from Billing", "email": "ben.example.com", "role": "viewer",
                "timezone": "Europe/Paris"}
        wrong = await admin.post("/inbox/people", data=form)
        assert wrong.status_code == 422
        assert re.search(r'id="person-email-problem" role="alert">email: must be an e-mail address', wrong.text)
        for kept in ('value="ben"', 'value="Ben from Billing"', 'value="ben.example.com"', 'value="Europe/Paris"',
                     '<option value="viewer" selected>'):
            assert kept in wrong.text
        taken = await admin.post("/inbox/people", data={**form, "id": "olga", "email": "ben@example.com"})
        assert taken.status_code == 409
        assert "id: a person &#39;olga&#39; exists already" in taken.text
        no_role = await admin.post("/inbox/people", data={**form, "email": "ben@example.com", "role": "boss"})
        assert 'id="person-role-problem" role="alert">role: expected viewer, agent or admin, got &#39;boss&#39;' in no_role.text
        assert await harness.desk.people.find("ben") is None
        added = await admin.post("/inbox/people", data={**form, "email": "ben@example.com"})
        assert added.headers["location"].startswith("/inbox/people/ben?notice=")
        assert notice(added) == "Added Ben from Billing. Give them an invitation link so they can set a password."
    ben = await harness.desk.people.get("ben")
    assert (ben.name, ben.email, ben.role, ben.timezone, ben.source) == ("Ben from Billing", "ben@example.com", "viewer", "Europe/Paris", "inbox")
    async with harness.desk.db.read() as session:
        event = (await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind) == "person_added"
                                                                  , col(HandoffEvent.person_id) == "ben"))).one()
    assert event.actor == "Olga (inbox)"


async def test_changing_a_person_and_the_refusals_keep_the_form(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    await person(harness, "ben")
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin, "/inbox/people/ben")
        saved = await admin.post("/inbox/people/ben", data={"csrf": token, "name": "Ben K", "role": "admin", "timezone": "Asia/Tokyo"})
        assert notice(saved) == "Saved."
        ben = await harness.desk.people.get("ben")
        assert (ben.name, ben.role, ben.timezone) == ("Ben K", "admin", "Asia/Tokyo")
        wrong = await admin.post("/inbox/people/ben", data={"csrf": token, "name": "Ben Kay", "role": "agent", "timezone": "Mars/Base"})
        assert wrong.status_code == 422
        assert 'id="person-timezone-problem" role="alert">timezone: unknown timezone &#39;Mars/Base&#39;' in wrong.text
        assert 'value="Ben Kay"' in wrong.text and 'value="Mars/Base"' in wrong.text and '<option value="agent" selected>' in wrong.text
        empty = await admin.post("/inbox/people/ben", data={"csrf": token, "name": "", "role": "agent", "timezone": "UTC"})
        assert 'id="person-name-problem" role="alert">name: 1-80 characters' in empty.text  # empty is wrong, not "unchanged"
        assert (await harness.desk.people.get("ben")).role == "admin"  # nothing changed


async def test_the_last_enabled_admin_stays_one_without_an_owner_token(start_desk: StartDesk) -> None:
    harness = await start_desk()  # an open inbox: no owner token to fall back on
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    await person(harness, "ben", Role.ADMIN)
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin)
        own = await admin.post("/inbox/people/olga/disable", data={"csrf": token})
        assert own.status_code == 409
        assert "person: you cannot disable yourself; another admin can" in own.text
        assert notice(await admin.post("/inbox/people/ben/disable", data={"csrf": token})).startswith("Disabled Ben")
        demote = await admin.post("/inbox/people/olga", data={"csrf": token, "name": "Olga", "role": "agent", "timezone": "UTC"})
        assert demote.status_code == 409
        assert ("role: olga is the last enabled admin, and no owner.token is set: demote them and nobody could manage people "
                "any more. Make someone else admin first, or set owner.token in the config.") in text(demote.text)
        assert (await harness.desk.people.get("olga")).role == "admin"


async def test_with_an_owner_token_the_last_admin_may_go(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    await person(harness, "olga", Role.ADMIN, name="Olga")
    await login(harness.client)
    token = await csrf(harness.client, "/inbox/people/olga")
    assert notice(await harness.client.post("/inbox/people/olga/disable", data={"csrf": token})).startswith("Disabled Olga")
    assert notice(await harness.client.post("/inbox/people/olga/enable", data={"csrf": token})).startswith("Enabled Olga")
    demoted = await harness.client.post("/inbox/people/olga", data={"csrf": token, "name": "Olga", "role": "viewer", "timezone": "UTC"})
    assert notice(demoted) == "Saved."


async def test_disabling_signs_them_out_at_once_and_unlinking_frees_the_identity(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga, ben = await person(harness, "olga", Role.ADMIN, name="Olga"), await person(harness, "ben")
    identity = await harness.desk.people.link("ben", "telegram", "501", verified_via="code", actor="cli")
    async with signed_in(harness, ben) as agent, signed_in(harness, olga) as admin:
        assert (await agent.get("/inbox")).status_code == 200
        token = await csrf(admin, "/inbox/people/ben")
        disabled = await admin.post("/inbox/people/ben/disable", data={"csrf": token})
        assert notice(disabled) == "Disabled Ben: their sessions and API tokens ended."
        assert (await agent.get("/inbox")).headers["location"] == "/inbox/login?next=/inbox"
        page = text((await admin.get("/inbox/people/ben")).text)
        assert "Ben ben disabled" in page and "Enable Ben" in page and "Enable Ben to make a sign-in link" in page
        unlinked = await admin.post(f"/inbox/people/ben/identities/{identity.id}/unlink", data={"csrf": token})
        assert notice(unlinked) == "Unlinked."
        again = await admin.post(f"/inbox/people/ben/identities/{identity.id}/unlink", data={"csrf": token})
        assert notice(again) == "That identity is not linked to them (any more); nothing changed."
    assert await harness.desk.people.identities("ben") == []


async def test_every_change_needs_the_forms_token_and_this_site(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    await person(harness, "ben")
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin)
        assert (await admin.post("/inbox/people/ben/disable", data={"csrf": "forged"})).status_code == 403
        cross = await admin.post("/inbox/people/ben/disable", data={"csrf": token}, headers={"Sec-Fetch-Site": "cross-site"})
        assert cross.status_code == 403
        added = await admin.post("/inbox/people", data={"id": "eve", "name": "Eve", "email": "eve@example.com", "role": "admin",
                                                        "timezone": "UTC"})
        assert added.status_code == 403
    assert (await harness.desk.people.get("ben")).disabled_at is None
    assert await harness.desk.people.find("eve") is None


async def test_sign_in_links_to_pass_on(start_desk: StartDesk) -> None:
    pytest.importorskip("bot.domain.people.invitations")  # the sign-in side's module; merged beside this page
    harness = await start_desk(owner={"token": "owner-secret"})
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    await person(harness, "ben")
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin, "/inbox/people/ben")
        invited = await admin.post("/inbox/people/ben/link", data={"csrf": token, "kind": "invite"})
        assert invited.status_code == 200
        link = re.search(r'id="issued-link" class="issued-link" readonly value="([^"]+)"', invited.text)
        assert link and link.group(1).startswith("http://desk.test/inbox/welcome/")
        assert "Invitation link for Ben" in invited.text
        wrong = await admin.post("/inbox/people/ben/link", data={"csrf": token, "kind": "master-key"})
        assert wrong.status_code == 400 and "kind: expected invite or reset" in wrong.text


async def test_an_admin_sees_presence_and_workload_and_sets_someone_away_and_back(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    olga = await person(harness, "olga", Role.ADMIN, name="Olga")
    await person(harness, "ben", name="Ben")
    async with harness.desk.db.transaction() as session:  # as the YAML's max_concurrent sets it
        await session.execute(update(Person).where(col(Person.id) == "ben").values(max_concurrent=2))
    async with signed_in(harness, olga) as admin:
        token = await csrf(admin, "/inbox/people/ben")
        went = await admin.post("/inbox/people/ben/availability",
                                data={"csrf": token, "away": "1", "note": "on leave", "until": "2099-01-02T09:00"})
        assert notice(went).startswith("Ben is away until 2099-01-02 09:00 (UTC).")
        words = text((await admin.get("/inbox/people")).text)
        since = harness.desk.clock.now().strftime("%Y-%m-%d %H:%M")
        assert f"cli enabled away since {since} UTC, until 2099-01-02 09:00 UTC: on leave" in words
        assert "0 of 2" in words
        detail = text((await admin.get("/inbox/people/ben")).text)
        assert "Presence away since" in detail and "Set available" in detail and "Holds now 0 of 2" in detail
        bad = await admin.post("/inbox/people/ben/availability", data={"csrf": token, "away": "maybe"})
        assert notice(bad) == "away: expected 1 (away) or 0 (available), got 'maybe'#availability"
        back = await admin.post("/inbox/people/ben/availability", data={"csrf": token, "away": "0"})
        assert notice(back).startswith("Ben is available.")
        assert (await admin.post("/inbox/people/nobody/availability", data={"csrf": token, "away": "0"})).status_code == 404
    async with harness.desk.db.read() as session:
        rows = (await session.scalars(select(HandoffEvent).where(
            col(HandoffEvent.kind).in_(("person_away", "person_available"))).order_by(col(HandoffEvent.id)))).all()
    assert [(r.kind, r.person_id, r.actor) for r in rows] == [
        ("person_away", "ben", "Olga (inbox)"), ("person_available", "ben", "Olga (inbox)")]

"""The directory of people (bot/domain/people/directory.py): adding, changing, disabling,
resolving a provider identity, linking (never moving another's), and the config's roster
applied on start. Against a real database, SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from bot.config.people import PersonConfig, Role, SignInConfig
from bot.domain.people import ApiTokens, IdentityTaken, InvalidPerson, People, Sessions
from bot.errors import Conflict, NotFound
from bot.runtime.clock import ManualClock
from bot.store.db import Database
from bot.store.models import HandoffEvent
from tests.conftest import StartDesk


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def people(db: Database, clock: ManualClock) -> People:
    return People(db, clock)


async def add(people: People, pid: str = "olga", **fields: Any) -> Any:
    values: dict[str, Any] = {"name": "Olga from Support", "email": f"{pid}@example.com", "source": "cli", "actor": "cli"}
    return await people.add(pid=pid, **{**values, **fields})


async def events(db: Database, kind: str) -> list[HandoffEvent]:
    async with db.read() as session:
        return list((await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind) == kind))).all())


async def test_a_person_is_added_with_their_fields_and_an_audit_row(people: People, db: Database) -> None:
    person = await add(people, email="Olga@Example.com", role=Role.ADMIN, timezone="Europe/Berlin")
    assert (person.id, person.name, person.email, person.email_key, person.role, person.timezone, person.source) == (
        "olga", "Olga from Support", "Olga@Example.com", "olga@example.com", "admin", "Europe/Berlin", "cli")
    assert person.password_hash is None and person.disabled_at is None
    assert await people.by_email("OLGA@example.COM") == person
    assert await people.count() == 1
    [added] = await events(db, "person_added")
    assert (added.actor, added.person_id, added.detail) == ("cli", "olga", {"name": "Olga from Support", "role": "admin", "source": "cli"})


@pytest.mark.parametrize(("fields", "message"), [
    ({"pid": "Olga"}, "id: must be 1-40 lower-case letters"),
    ({"email": "olga.example.com"}, "email: must be an e-mail address such as olga@example.com"),
    ({"email": " olga@example.com"}, "email: must be an e-mail address"),
    ({"timezone": "Mars/Olympus"}, "timezone: unknown timezone 'Mars/Olympus'"),
    ({"name": ""}, "name: 1-80 characters"),
    ({"name": "Olga "}, "name: 1-80 characters with no spaces at its start or end"),
])
async def test_a_wrong_field_is_named_and_nothing_is_added(people: People, fields: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPerson) as refused:
        await add(people, **fields)
    assert refused.value.message.startswith(message)
    assert await people.count() == 0


async def test_an_id_or_an_address_taken_is_a_conflict_naming_it(people: People) -> None:
    await add(people)
    with pytest.raises(Conflict, match="^id: a person 'olga' exists already"):
        await add(people, email="other@example.com")
    with pytest.raises(Conflict, match="^email: 'OLGA@example.com' is already someone's address"):
        await add(people, "olga2", email="OLGA@example.com")
    assert await people.count() == 1


async def test_update_changes_what_is_given_and_refuses_an_empty_value(people: People, db: Database, clock: ManualClock) -> None:
    await add(people)
    await add(people, "ben", name="Ben")
    clock.advance(timedelta(minutes=1))
    changed = await people.update("olga", actor="Ben (inbox)", role=Role.VIEWER, timezone="Asia/Tokyo")
    assert (changed.name, changed.role, changed.timezone, changed.updated_at) == ("Olga from Support", "viewer", "Asia/Tokyo", clock.now())
    [updated] = await events(db, "person_updated")
    assert (updated.actor, updated.detail["changed"]) == ("Ben (inbox)", ["role", "timezone"])
    with pytest.raises(InvalidPerson, match="^name: "):  # an empty name is a wrong name, not "unchanged"
        await people.update("olga", actor="cli", name="")
    with pytest.raises(InvalidPerson, match="^timezone: "):
        await people.update("olga", actor="cli", timezone="")
    with pytest.raises(Conflict, match="^email: "):
        await people.update("olga", actor="cli", email="BEN@example.com")
    assert await people.update("olga", actor="cli", name="Olga from Support") == changed  # nothing changed: no row
    assert len(await events(db, "person_updated")) == 1
    with pytest.raises(NotFound):
        await people.update("nobody", actor="cli", name="Nobody")


async def test_disabling_ends_their_sessions_and_tokens_at_once(db: Database, people: People, clock: ManualClock) -> None:
    sessions, tokens = Sessions(db, clock, SignInConfig()), ApiTokens(db, clock)
    olga = await add(people)
    cookie, _ = await sessions.open(olga, via="password")
    secret, _ = await tokens.create(olga, name="nightly-report", role=Role.AGENT, actor="cli")
    assert await sessions.current(cookie) is not None and await tokens.authenticate(secret) is not None
    disabled = await people.set_disabled("olga", True, actor="cli")
    assert disabled.disabled_at == clock.now()
    assert await sessions.current(cookie) is None
    assert await tokens.authenticate(secret) is None
    assert await people.all(include_disabled=False) == []
    enabled = await people.set_disabled("olga", False, actor="cli")
    assert enabled.disabled_at is None
    assert await sessions.current(cookie) is None  # what ended stays ended
    assert await tokens.authenticate(secret) is None
    assert [e.kind for e in await events(db, "person_disabled")] == ["person_disabled"]
    assert [e.kind for e in await events(db, "person_enabled")] == ["person_enabled"]


async def test_resolve_finds_the_enabled_person_of_an_identity(people: People) -> None:
    await add(people)
    await people.link("olga", "slack", "U024BE7LH", verified_via="code", actor="Olga (slack)")
    assert (await people.resolve("slack", "U024BE7LH")).id == "olga"
    assert await people.resolve("slack", "u024be7lh") is None  # provider ids are compared exactly
    assert await people.resolve("telegram", "U024BE7LH") is None  # the same value on another provider is nobody
    assert (await people.resolve("email", "OLGA@example.com")).id == "olga"  # their own address counts as an identity
    await people.set_disabled("olga", True, actor="cli")
    assert await people.resolve("slack", "U024BE7LH") is None
    assert await people.resolve("email", "olga@example.com") is None


async def test_an_identity_is_one_persons_and_never_moves(people: People, db: Database) -> None:
    await add(people)
    await add(people, "ben", name="Ben")
    first = await people.link("olga", "telegram", "501", verified_via="code", actor="Olga (telegram)")
    again = await people.link("olga", "telegram", "501", verified_via="cli", actor="cli")
    assert again.id == first.id and again.verified_via == "code"  # linking it again changes nothing
    with pytest.raises(IdentityTaken, match="telegram identity 501 is already linked to someone else"):
        await people.link("ben", "telegram", "501", verified_via="cli", actor="cli")
    mail = await people.link("ben", "email", "Ben.K@Example.com", verified_via="cli", actor="cli")
    assert mail.value == "ben.k@example.com"
    assert [(i.kind, i.value) for i in await people.identities("olga")] == [("telegram", "501")]
    assert len(await events(db, "identity_linked")) == 2
    assert not await people.unlink("ben", first.id or 0, actor="cli")  # not Ben's to unlink
    assert await people.unlink("olga", first.id or 0, actor="cli")
    assert await people.resolve("telegram", "501") is None
    await people.link("ben", "telegram", "501", verified_via="cli", actor="cli")  # free again: anyone may link it
    assert (await people.resolve("telegram", "501")).id == "ben"


async def test_the_config_roster_adds_brings_in_line_and_disables(people: People, db: Database) -> None:
    await add(people, "kept", name="Kept", source="inbox")  # not in the file: never touched
    roster = [PersonConfig(id="olga", name="Olga", email="olga@example.com", role=Role.ADMIN),
              PersonConfig(id="ben", name="Ben", email="ben@example.com")]
    applied = await people.apply_config(roster)
    assert (applied.added, applied.updated) == (("olga", "ben"), ())
    assert (await people.get("olga")).source == "config"
    again = await people.apply_config(roster)
    assert (again.added, again.updated) == ((), ())
    await people.update("olga", actor="Ben (inbox)", name="Olga Petrova", role=Role.AGENT)  # changed in the inbox …
    changed = [roster[0], PersonConfig(id="ben", name="Ben", email="ben@example.com", timezone="Europe/Berlin", disabled=True)]
    applied = await people.apply_config(changed)
    assert (applied.added, applied.updated) == ((), ("olga", "ben"))
    olga, ben, kept = await people.get("olga"), await people.get("ben"), await people.get("kept")
    assert (olga.name, olga.role) == ("Olga", "admin")  # … the file wins on the next start
    assert (ben.timezone, ben.disabled_at is not None) == ("Europe/Berlin", True)
    assert (kept.name, kept.disabled_at) == ("Kept", None)
    assert [e.actor for e in await events(db, "person_disabled")] == ["config"]
    await people.apply_config([roster[0], roster[1]])  # `disabled:` left out (false): enabled again
    assert (await people.get("ben")).disabled_at is None


async def test_the_config_roster_sets_how_people_are_reached(people: People, db: Database) -> None:
    """What the file declares wins; left out, working hours and capacity of a person the file
    added are cleared, a person added elsewhere keeps theirs, and nobody's own contact order
    is cleared by a file that declares none."""
    await add(people, "kim", name="Kim", source="inbox")
    declared = {"working_hours": "office", "max_concurrent": 3, "contact": ["telegram", "email"]}
    roster = [PersonConfig(id="olga", name="Olga", email="olga@example.com", **declared),
              PersonConfig(id="kim", name="Kim", email="kim@example.com", **declared)]
    await people.apply_config(roster)
    for pid in ("olga", "kim"):
        person = await people.get(pid)
        assert (person.working_hours, person.max_concurrent, person.contact_order) == ("office", 3, ["telegram", "email"])
    await people.set_contact_order("kim", ["email", "telegram"], actor="Kim (inbox)")  # … overruled on the next start
    again = await people.apply_config(roster)
    assert (again.updated, (await people.get("kim")).contact_order) == (("kim",), ["telegram", "email"])
    bare = [PersonConfig(id="olga", name="Olga", email="olga@example.com"), PersonConfig(id="kim", name="Kim", email="kim@example.com")]
    await people.set_contact_order("olga", ["email"], actor="Olga (inbox)")
    applied = await people.apply_config(bare)
    olga, kim = await people.get("olga"), await people.get("kim")
    assert (olga.working_hours, olga.max_concurrent, olga.contact_order) == (None, None, ["email"])
    assert (kim.working_hours, kim.max_concurrent, kim.contact_order) == ("office", 3, ["telegram", "email"])
    assert applied.updated == ("olga",)
    assert (await people.apply_config(bare)).updated == ()
    with pytest.raises(InvalidPerson, match="contact: expected each of slack, telegram, discord, whatsapp, email"):
        await people.set_contact_order("olga", ["email", "email"], actor="test")
    with pytest.raises(InvalidPerson, match="'pager'"):
        await people.set_contact_order("olga", ["pager"], actor="test")
    assert [e.detail["contact"] for e in await events(db, "contact_order_set")] == [["email", "telegram"], ["email"]]


async def test_the_roster_is_applied_when_the_desk_starts(start_desk: StartDesk, database_url: str) -> None:
    declared = {"id": "olga", "name": "Olga", "email": "olga@example.com", "role": "admin", "timezone": "Europe/Berlin"}
    first = await start_desk(people=[declared])
    olga = await first.desk.people.get("olga")
    assert (olga.name, olga.role, olga.timezone, olga.source, olga.disabled_at) == ("Olga", "admin", "Europe/Berlin", "config", None)
    await first.desk.stop()
    second = await start_desk(people=[{**declared, "name": "Olga Petrova", "disabled": True}])
    olga = await second.desk.people.get("olga")
    assert (olga.name, olga.disabled_at is not None) == ("Olga Petrova", True)
    assert await second.desk.people.resolve("email", "olga@example.com") is None

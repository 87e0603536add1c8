"""The admin's view of the directory and its rules (bot/domain/people/roster.py): each person
with identities, last sign-in and the open handoffs they hold; nobody disables themselves;
the last enabled admin stays one unless the owner token is set. SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import update
from sqlmodel import col

from bot.config.people import Role
from bot.domain.people.reach import Presence
from bot.domain.people.roster import ChangeRefused, LinksUnavailable, Roster
from bot.errors import DeskError, NotFound
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffSession, Person
from bot.store.vocabulary import HandoffState, ReleaseReason
from tests.conftest import Harness, StartDesk


def roster(harness: Harness, *, owner_token: bool = False) -> Roster:
    return Roster(harness.desk.people, harness.desk.db, owner_token=owner_token)


async def add(harness: Harness, pid: str, role: Role = Role.AGENT) -> None:
    await harness.desk.people.add(pid=pid, name=pid.capitalize(), email=f"{pid}@example.com", role=role, source="cli", actor="cli")


async def claimed_by(harness: Harness, pid: str) -> str:
    """A handoff that `pid` holds: started for real, its claimer written as a claim by a known
    person writes it (the identity side of the desk)."""
    sid = str((await harness.start_handoff(await harness.conversation()))["handoff_session_id"])
    async with harness.desk.db.transaction() as session:
        await session.execute(update(HandoffSession).where(col(HandoffSession.id) == sid).values(claimed_person_id=pid))
    return sid


async def test_entries_carry_identities_last_sign_in_and_what_each_holds(start_desk: StartDesk) -> None:
    clock = ManualClock()
    harness = await start_desk(clock=clock)
    for pid in ("olga", "ben", "carol"):
        await add(harness, pid)
    people, sessions = harness.desk.people, harness.desk.sessions
    await people.link("ben", "telegram", "501", verified_via="code", actor="cli")
    await people.link("ben", "slack", "U1", verified_via="cli", actor="cli")
    ben = await people.get("ben")
    await sessions.open(ben, via="password")
    clock.advance(timedelta(hours=1))
    await sessions.open(ben, via="password")
    await sessions.open(None, via="owner_token")  # the owner token's sessions are nobody's
    first, second = await claimed_by(harness, "ben"), await claimed_by(harness, "ben")
    released = await claimed_by(harness, "olga")
    await harness.desk.handoffs.release(released, reason=ReleaseReason.OWNER, actor="cli")
    assert (await harness.desk.handoffs.get(released)).state == HandoffState.RELEASED

    entries = {e.person.id: e for e in await roster(harness).entries()}
    assert [e.person.id for e in await roster(harness).entries()] == ["ben", "carol", "olga"]  # by name
    assert [(i.kind, i.value) for i in entries["ben"].identities] == [("slack", "U1"), ("telegram", "501")]
    assert entries["ben"].last_sign_in == clock.now()
    assert {h.id for h in entries["ben"].holding} == {first, second}
    assert entries["olga"].holding == ()  # released: held no more
    assert (entries["carol"].identities, entries["carol"].last_sign_in) == ((), None)
    only = await roster(harness).entry("ben")
    assert (only.person.id, len(only.holding), only.state, only.from_config) == ("ben", 2, "enabled", False)
    with pytest.raises(NotFound):
        await roster(harness).entry("nobody")


async def test_the_last_enabled_admin_stays_one(start_desk: StartDesk) -> None:
    harness = await start_desk()
    await add(harness, "olga", Role.ADMIN)
    await add(harness, "ben", Role.ADMIN)
    rules = roster(harness)
    await rules.set_disabled("ben", True, actor="cli")
    with pytest.raises(ChangeRefused, match="^role: olga is the last enabled admin, and no owner.token is set: demote them"):
        await rules.update("olga", role=Role.AGENT, actor="cli")
    with pytest.raises(ChangeRefused, match="^person: olga is the last enabled admin, and no owner.token is set: disable them"):
        await rules.set_disabled("olga", True, actor="cli")
    assert (await rules.update("olga", name="Olga P", role=Role.ADMIN, actor="cli")).name == "Olga P"  # staying admin is fine
    await rules.set_disabled("ben", False, actor="cli")  # a second admin again: now olga may go
    assert (await rules.update("olga", role=Role.VIEWER, actor="cli")).role == "viewer"
    assert (await rules.update("olga", role=Role.ADMIN, actor="cli")).role == "admin"  # promoting is never refused


async def test_the_owner_token_lets_the_last_admin_go_but_nobody_disables_themselves(start_desk: StartDesk) -> None:
    harness = await start_desk()
    await add(harness, "olga", Role.ADMIN)
    rules = roster(harness, owner_token=True)
    with pytest.raises(ChangeRefused, match="^person: you cannot disable yourself; another admin can"):
        await rules.set_disabled("olga", True, actor="Olga (inbox)", by_person_id="olga")
    assert (await rules.set_disabled("olga", True, actor="owner (inbox)")).disabled_at is not None
    assert (await rules.set_disabled("olga", False, actor="owner (inbox)")).disabled_at is None
    assert (await rules.update("olga", role=Role.AGENT, actor="owner (inbox)")).role == "agent"


async def test_links_need_the_sign_in_side_and_a_known_kind(start_desk: StartDesk) -> None:
    harness = await start_desk()
    await add(harness, "olga")
    olga = await harness.desk.people.get("olga")
    with pytest.raises(DeskError, match="^kind: expected invite or reset, got 'welcome'"):
        roster(harness).link(olga, "welcome")
    with pytest.raises(LinksUnavailable, match="need the sign-in module"):
        roster(harness).link(olga, "invite")


async def test_entries_carry_presence_now_and_the_workload_against_their_limit(start_desk: StartDesk) -> None:
    clock = ManualClock()
    harness = await start_desk(clock=clock)
    for pid in ("olga", "ben"):
        await add(harness, pid)
    async with harness.desk.db.transaction() as session:  # as the YAML's max_concurrent sets it
        await session.execute(update(Person).where(col(Person.id) == "ben").values(max_concurrent=3))
    await claimed_by(harness, "ben")
    await harness.desk.availability.set_away("olga", until=clock.now() + timedelta(hours=1), via="inbox", actor="test")
    with_presence = Roster(harness.desk.people, harness.desk.db, owner_token=False, availability=harness.desk.availability)
    entries = {e.person.id: e for e in await with_presence.entries()}
    assert (entries["olga"].presence, entries["olga"].workload) == (Presence.AWAY, "0")
    assert (entries["ben"].presence, entries["ben"].workload) == (Presence.AVAILABLE, "1 of 3")
    clock.advance(timedelta(hours=1))  # her until has come: available again, nothing written
    assert (await with_presence.entry("olga")).presence is Presence.AVAILABLE
    assert (await roster(harness).entry("olga")).presence is None  # a roster without the service says nothing

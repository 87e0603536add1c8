"""`handoff people …` (bot/cli.py), run as an operator runs it: a subprocess on the config's
database, SQLite and PostgreSQL. Wrong values exit 2 naming the field, refusals exit 1."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select
from sqlmodel import col

from bot.config.people import SignInConfig
from bot.domain.people import People, Sessions
from bot.runtime.clock import Clock
from bot.store.db import Database
from bot.store.models import HandoffEvent
from tests.test_cli import handoff


def write_config(tmp_path: Path, database_url: str, *, owner_token: str | None = None) -> str:
    path = tmp_path / f"desk-{owner_token or 'open'}.yaml"
    owner = f"owner: {{token: {owner_token}}}\n" if owner_token else ""
    path.write_text(f"database_url: '{database_url}'\nsecret_key: test-secret-key-0123456789\n{owner}"
                    "channels: [{id: 1, kind: owner_inbox, label: Inbox}]\n")
    return str(path)


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Database]:
    """The database the commands write, read back by the test (the commands upgrade it themselves)."""
    database = Database(database_url)
    try:
        yield database
    finally:
        await database.dispose()


def people(*args: str) -> tuple[int, str, str]:
    result = handoff("people", *args)
    return result.returncode, result.stdout, result.stderr


async def test_add_list_and_the_audit_trail(tmp_path: Path, database_url: str, store: Database) -> None:
    config = write_config(tmp_path, database_url)
    code, out, err = people("add", "olga", "--name", "Olga from Support", "--email", "olga@example.com", "--admin",
                            "--timezone", "Europe/Berlin", "-c", config)
    assert code == 0, err
    assert out.splitlines()[0] == "added olga (Olga from Support, admin)"
    assert people("add", "ben", "--name", "Ben", "--email", "ben@example.com", "-c", config)[0] == 0
    assert people("link", "ben", "telegram", "501", "-c", config)[0] == 0
    code, out, err = people("list", "-c", config)
    assert code == 0, err
    assert out.splitlines() == [
        "ID    NAME               EMAIL             ROLE   STATE    IDENTITIES",
        "ben   Ben                ben@example.com   agent  enabled  telegram:501",
        "olga  Olga from Support  olga@example.com  admin  enabled  -",
    ]
    listed = json.loads(people("list", "--json", "-c", config)[1])["people"]
    assert [(p["id"], p["role"], p["timezone"], p["source"], p["identities"]) for p in listed] == [
        ("ben", "agent", "UTC", "cli", [{"kind": "telegram", "value": "501", "verified_via": "cli"}]),
        ("olga", "admin", "Europe/Berlin", "cli", []),
    ]
    async with store.read() as session:
        rows = (await session.scalars(select(HandoffEvent).where(col(HandoffEvent.person_id).in_(["olga", "ben"]))
                                      .order_by(col(HandoffEvent.id)))).all()
    assert [(e.kind, e.actor, e.person_id) for e in rows] == [
        ("person_added", "cli", "olga"), ("person_added", "cli", "ben"), ("identity_linked", "cli", "ben")]
    assert rows[2].detail["verified_via"] == "cli"


@pytest.mark.parametrize(("args", "message"), [
    (("add", "Olga", "--name", "Olga", "--email", "olga@example.com"), "error: id: must be 1-40 lower-case letters"),
    (("add", "olga", "--name", "Olga", "--email", "olga.example.com"), "error: email: must be an e-mail address"),
    (("add", "olga", "--name", "Olga", "--email", "olga@example.com", "--timezone", "Mars/Base"), "error: timezone: unknown timezone"),
    (("add", "olga", "--name", "Olga", "--email", "olga@example.com", "--admin", "--role", "viewer"),
     "error: role: --admin means the admin role, but --role viewer was given too"),
    (("link", "olga", "myspace", "olga1"), "error: kind: expected one of "),
    (("link", "olga", "email", "not-an-address"), "error: value: must be an e-mail address"),
    (("link", "olga", "slack", " U1"), "error: value: 1-320 characters with no spaces at its start or end"),
])
def test_a_wrong_value_exits_2_naming_the_field(tmp_path: Path, sqlite_url: str, args: tuple[str, ...], message: str) -> None:
    code, out, err = people(*args, "-c", write_config(tmp_path, sqlite_url))
    assert code == 2, (out, err)
    assert err.startswith(message), err


def test_a_bad_role_is_refused_by_the_command_line_itself(tmp_path: Path, sqlite_url: str) -> None:
    code, _out, err = people("set-role", "olga", "boss", "-c", write_config(tmp_path, sqlite_url))
    assert code == 2
    assert "Invalid value for 'ROLE': Value error, 'boss' is not one of 'viewer', 'agent', 'admin'." in err


async def test_refusals_exit_1_and_say_why(tmp_path: Path, database_url: str) -> None:
    config = write_config(tmp_path, database_url)
    assert people("add", "olga", "--name", "Olga", "--email", "olga@example.com", "--admin", "-c", config)[0] == 0
    assert people("add", "ben", "--name", "Ben", "--email", "ben@example.com", "-c", config)[0] == 0
    assert people("link", "olga", "slack", "U024BE7LH", "-c", config)[0] == 0
    refusals = {
        ("add", "ben", "--name", "Ben", "--email", "other@example.com"): "error: id: a person 'ben' exists already",
        ("add", "ben2", "--name", "Ben", "--email", "BEN@example.com"): "error: email: 'BEN@example.com' is already someone's address",
        ("link", "ben", "slack", "U024BE7LH"): "error: value: the slack identity U024BE7LH is already linked to olga (Olga); "
                                               "unlink it from them first (the admin page, People)",
        ("link", "nobody", "slack", "U1"): "error: person 'nobody' not found",
        ("set-role", "olga", "agent"): "error: role: olga is the last enabled admin, and no owner.token is set: demote them "
                                       "and nobody could manage people any more. Make someone else admin first, or set owner.token in the config.",
        ("disable", "olga"): "error: person: olga is the last enabled admin, and no owner.token is set: disable them",
    }
    for args, message in refusals.items():
        code, _out, err = people(*args, "-c", config)
        assert code == 1, (args, err)
        assert err.startswith(message), (args, err)


async def test_disable_enable_and_set_role(tmp_path: Path, database_url: str, store: Database) -> None:
    config = write_config(tmp_path, database_url, owner_token="owner-secret")
    assert people("add", "olga", "--name", "Olga", "--email", "olga@example.com", "--admin", "-c", config)[0] == 0
    directory, sessions = People(store, Clock()), Sessions(store, Clock(), SignInConfig())
    cookie, _ = await sessions.open(await directory.get("olga"), via="password")
    code, out, err = people("disable", "olga", "-c", config)  # the owner token remains an admin's way in
    assert (code, out) == (0, "disabled olga (Olga): their sessions and API tokens ended\n"), err
    assert await sessions.current(cookie) is None
    assert people("enable", "olga", "-c", config)[1] == "enabled olga (Olga)\n"
    assert people("set-role", "olga", "viewer", "-c", config)[1] == "olga (Olga) is viewer now\n"
    olga = await directory.get("olga")
    assert (olga.role, olga.disabled_at) == ("viewer", None)
    assert await sessions.current(cookie) is None  # what ended stays ended


def test_link_help_says_people_normally_link_themselves() -> None:
    result = handoff("people", "link", "--help")
    assert result.returncode == 0
    words = " ".join(result.stdout.split())
    assert result.stdout.startswith("Usage: python -m bot.cli people link [OPTIONS] {ID} {KIND} {VALUE}")
    assert "People normally link themselves: signed in to the inbox they get a one-time code" in words


def test_add_prints_the_invitation_link(tmp_path: Path, sqlite_url: str) -> None:
    pytest.importorskip("bot.domain.people.invitations")  # the sign-in side's module; merged beside these commands
    code, out, err = people("add", "olga", "--name", "Olga", "--email", "olga@example.com", "--admin",
                            "-c", write_config(tmp_path, sqlite_url))
    assert code == 0, err
    assert out.splitlines()[1].startswith("invitation link (pass it on; it works once): http://127.0.0.1:8000/inbox/welcome/")


async def test_away_and_back(tmp_path: Path, database_url: str, store: Database) -> None:
    config = write_config(tmp_path, database_url, owner_token="owner-secret")
    assert people("add", "olga", "--name", "Olga", "--email", "olga@example.com", "-c", config)[0] == 0
    code, out, err = people("away", "olga", "--note", "on leave", "--until", "2099-01-02T09:00+01:00", "-c", config)
    assert (code, out) == (0, "olga (Olga) is away until 2099-01-02T08:00:00+00:00\n"), err
    olga = await People(store, Clock()).get("olga")
    assert (olga.away_note, olga.away_until is not None) == ("on leave", True)
    code, _out, err = people("away", "olga", "--until", "next week", "-c", config)
    assert (code, err) == (2, "error: until: expected ISO 8601 with a timezone such as 2026-12-24T18:00+01:00, got 'next week'\n")
    assert people("away", "olga", "--until", "2099-01-02T09:00", "-c", config)[2].startswith("error: until: give a timezone")
    assert people("back", "olga", "-c", config)[1] == "olga (Olga) is available\n"
    assert (await People(store, Clock()).get("olga")).away_since is None
    async with store.read() as session:
        rows = (await session.scalars(select(HandoffEvent).where(
            col(HandoffEvent.kind).in_(("person_away", "person_available"))).order_by(col(HandoffEvent.id)))).all()
    assert [(r.kind, r.actor, r.detail["via"]) for r in rows] == [("person_away", "cli", "cli"), ("person_available", "cli", "cli")]

"""The people API (bot/web/people_api.py): the directory as JSON behind the owner's bearer
token, never a credential in it."""

from __future__ import annotations

import json

import httpx
import pytest

from bot.config.people import Role
from bot.domain.people.credentials import hash_password, new_totp_secret
from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The views do not depend on the database (the roster's reads run on both in tests/test_roster.py)."""
    return sqlite_url


def as_owner(token: str = "owner-secret") -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def olga_with_credentials(harness: Harness) -> None:
    people = harness.desk.people
    await people.add(pid="olga", name="Olga", email="olga@example.com", role=Role.ADMIN, timezone="Europe/Berlin",
                     source="cli", actor="cli")
    await people.set_password_hash("olga", hash_password("correct horse battery staple"), actor="cli")
    await people.set_totp("olga", new_totp_secret(), confirmed=True, actor="cli")
    await people.link("olga", "slack", "U024BE7LH", verified_via="code", actor="cli")


async def test_people_are_listed_and_shown_without_credentials(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"}, api={"key": "agent-key"})
    await olga_with_credentials(harness)
    await harness.desk.people.add(pid="ben", name="Ben", email="ben@example.com", source="inbox", actor="cli")
    await harness.desk.people.set_disabled("ben", True, actor="cli")
    await harness.desk.sessions.open(await harness.desk.people.get("olga"), via="password")
    listed = await harness.client.get("/api/people", headers=as_owner())
    assert listed.status_code == 200, listed.text
    assert [(p["id"], p["state"]) for p in listed.json()["people"]] == [("ben", "disabled"), ("olga", "enabled")]
    shown = await harness.client.get("/api/people/olga", headers=as_owner())
    olga = shown.json()
    now = harness.desk.clock.now().isoformat()
    assert olga == {
        "id": "olga", "name": "Olga", "email": "olga@example.com", "role": "admin", "timezone": "Europe/Berlin",
        "source": "cli", "state": "enabled", "disabled_at": None, "password_set": True, "totp_enabled": True,
        "identities": [{"kind": "slack", "value": "U024BE7LH", "verified_via": "code"}],
        "last_sign_in_at": now, "holding": [], "created_at": now, "updated_at": now,
    }
    stored = await harness.desk.people.get("olga")
    raw = json.dumps(listed.json()) + shown.text
    assert stored.password_hash and stored.password_hash not in raw and "$argon2id$" not in raw
    assert stored.totp_secret and stored.totp_secret not in raw
    missing = await harness.client.get("/api/people/nobody", headers=as_owner())
    assert (missing.status_code, missing.json()["error"]) == (404, "not_found")


@pytest.mark.parametrize(("headers", "status"), [
    ({}, 401), ({"Authorization": "Bearer owner-secreT"}, 401), ({"Authorization": "Basic owner-secret"}, 401),
    ({"Authorization": "Bearer agent-key"}, 403),  # the agent's key: the directory is no business of the AI's
])
async def test_only_admins_read_people(start_desk: StartDesk, headers: dict[str, str], status: int) -> None:
    harness = await start_desk(owner={"token": "owner-secret"}, api={"key": "agent-key"})
    for path in ("/api/people", "/api/people/olga"):
        refused = await harness.client.get(path, headers=headers)
        assert refused.status_code == status
        assert refused.json()["error"] == ("unauthorized" if status == 401 else "forbidden")


async def test_a_personal_token_reads_people_only_with_the_admin_role(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"}, api={"key": "agent-key"})
    people = harness.desk.people
    olga = await people.add(pid="olga", name="Olga", email="olga@example.com", role="admin", source="cli", actor="cli")
    ben = await people.add(pid="ben", name="Ben", email="ben@example.com", role="viewer", source="cli", actor="cli")
    admin_token, _ = await harness.desk.api_tokens.create(olga, name="sync", role=olga.role, actor="test")
    viewer_token, _ = await harness.desk.api_tokens.create(ben, name="look", role=ben.role, actor="test")
    listed = await harness.client.get("/api/people", headers=as_owner(admin_token))
    assert [p["id"] for p in listed.json()["people"]] == ["ben", "olga"]
    refused = await harness.client.get("/api/people", headers=as_owner(viewer_token))
    assert (refused.status_code, refused.json()["error"]) == (403, "forbidden")


async def test_the_routes_are_in_the_api_schema(harness: Harness) -> None:
    async with httpx.AsyncClient(transport=harness.client._transport, base_url="http://desk.test") as client:
        paths = (await client.get("/api/openapi.json")).json()["paths"]
    assert set(paths["/api/people"]) == {"get"} and set(paths["/api/people/{pid}"]) == {"get"}

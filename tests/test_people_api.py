"""The people API (bot/web/people_api.py): the directory as JSON behind the owner's bearer
token, never a credential in it."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from sqlmodel import col

from bot.config.people import Role
from bot.domain.people.credentials import hash_password, new_totp_secret
from bot.store.models import HandoffEvent
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fakes import DirectScriptedChannel


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
        "open_handoffs": 0, "max_concurrent": None, "presence": "available", "away_since": None, "away_until": None,
        "away_note": None, "working_hours": None, "contact": [],  # no channel here sends to one person
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
    assert set(paths["/api/people/{pid}/availability"]) == {"post"}


# --------------------------------------------------------------------------- presence and availability

DIRECT = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
          {"id": 2, "kind": "telegram", "label": "Telegram staff", "bot_token": TELEGRAM_TOKEN, "chat_id": -100123,
           "api_base_url": "http://127.0.0.1:9", "mode": "webhook", "webhook_secret": "test_webhook-secret-1"}]


async def two_people(start_desk: StartDesk) -> tuple[Harness, str, str]:
    """Olga (agent, Telegram linked, a personal token) and Ben (agent, a token), a channel
    that sends to one person; returns the harness and their tokens."""
    harness = await start_desk(owner={"token": "owner-secret"}, api={"key": "agent-key"}, channels=DIRECT,
                               adapters={2: DirectScriptedChannel})
    people, tokens = harness.desk.people, harness.desk.api_tokens
    olga = await people.add(pid="olga", name="Olga", email="olga@example.com", source="cli", actor="cli")
    ben = await people.add(pid="ben", name="Ben", email="ben@example.com", source="cli", actor="cli")
    await people.link("olga", "telegram", "501", verified_via="code", actor="cli")
    olga_token, _ = await tokens.create(olga, name="me", role=Role.AGENT, actor="test")
    ben_token, _ = await tokens.create(ben, name="me", role=Role.AGENT, actor="test")
    return harness, olga_token, ben_token


async def test_a_person_sets_themselves_away_and_reads_themselves_without_addresses(start_desk: StartDesk) -> None:
    harness, olga_token, ben_token = await two_people(start_desk)
    client = harness.client
    until = (harness.desk.clock.now() + timedelta(hours=3)).isoformat()
    away = await client.post("/api/people/olga/availability", headers=as_owner(olga_token),
                             json={"away": True, "note": "dentist", "until": until})
    assert away.status_code == 200, away.text
    body = away.json()
    assert (body["presence"], body["away_until"], body["away_note"]) == ("away", until, "dentist")
    assert body["contact"] == [{"kind": "telegram", "channel_id": 2, "position": 0}]  # her own view: no address
    as_admin = (await client.get("/api/people/olga", headers=as_owner())).json()
    assert as_admin["contact"] == [{"kind": "telegram", "channel_id": 2, "position": 0, "address": "501"}]
    for path, payload in (("/api/people/olga", None), ("/api/people/olga/availability", {"away": False})):
        refused = await client.request("POST" if payload else "GET", path, headers=as_owner(ben_token), json=payload)
        assert (refused.status_code, refused.json()["error"]) == (403, "forbidden"), path
    back = await client.post("/api/people/olga/availability", headers=as_owner(), json={"away": False})
    assert (back.json()["presence"], back.json()["away_note"]) == ("available", None)
    async with harness.desk.db.read() as session:
        rows = (await session.scalars(select(HandoffEvent).where(
            col(HandoffEvent.kind).in_(("person_away", "person_available"))).order_by(col(HandoffEvent.id)))).all()
    assert [(r.kind, r.actor, r.detail["via"]) for r in rows] == [
        ("person_away", "Olga (api)", "api"), ("person_available", "owner (api)", "api")]


@pytest.mark.parametrize(("payload", "field"), [
    ({}, "away"),
    ({"away": "soon"}, "away"),
    ({"away": True, "until": "2026-12-24T18:00"}, "until"),  # no timezone: refused, never guessed
    ({"away": True, "until": "2020-01-01T00:00:00Z"}, "until"),  # passed
    ({"away": True, "note": "x" * 201}, "note"),
    ({"away": False, "note": "back at last"}, "note"),
    ({"away": True, "mood": "tired"}, "mood"),
])
async def test_bad_availability_is_refused_naming_the_field(start_desk: StartDesk, payload: dict[str, Any],
                                                            field: str) -> None:
    harness, olga_token, _ = await two_people(start_desk)
    refused = await harness.client.post("/api/people/olga/availability", headers=as_owner(olga_token), json=payload)
    assert refused.status_code == 422, refused.text
    assert field in refused.text
    assert (await harness.desk.people.get("olga")).away_since is None

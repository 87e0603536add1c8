"""The people API: `GET /api/people` and `GET /api/people/{id}`, the directory as JSON for
scripts (a roster check, a sync to a staffing sheet).

A view carries what the admin page shows — id, name, e-mail, role, timezone, source, state,
the linked identities as `{kind, value, verified_via}`, the last sign-in and the open
handoffs the person holds — and never a credential: no password hash, no TOTP secret (only
whether each is set).

Who may call: admins (a personal token of an admin, or the owner token), declared on each
route with `api_needs` as every route of the API (bot/web/api.py); the agent's key may not:
the directory is no business of the AI's.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends

from bot.config.roles import Role
from bot.domain.people.roster import RosterEntry
from bot.runtime.text import iso
from bot.web.api import api_needs, api_router
from bot.web.deps import RosterDep

people_api = api_router()
ADMINS = api_needs(Role.ADMIN)


def person_view(entry: RosterEntry) -> dict[str, Any]:
    person = entry.person
    return {
        "id": person.id, "name": person.name, "email": person.email, "role": person.role, "timezone": person.timezone,
        "source": person.source, "state": entry.state, "disabled_at": iso(person.disabled_at),
        "password_set": person.password_hash is not None, "totp_enabled": person.totp_confirmed_at is not None,
        "identities": [{"kind": i.kind, "value": i.value, "verified_via": i.verified_via} for i in entry.identities],
        "last_sign_in_at": iso(entry.last_sign_in),
        "holding": [{"handoff_session_id": h.id, "code": h.short_code} for h in entry.holding],
        "created_at": iso(person.created_at), "updated_at": iso(person.updated_at),
    }


@people_api.get("/people", dependencies=[Depends(ADMINS)])
async def list_people(roster: RosterDep) -> dict[str, Any]:
    """Everyone in the directory, by name, disabled people too (`state`)."""
    return {"people": [person_view(entry) for entry in await roster.entries()]}


@people_api.get("/people/{pid}", dependencies=[Depends(ADMINS)])
async def get_person(pid: str, roster: RosterDep) -> dict[str, Any]:
    return person_view(await roster.entry(pid))

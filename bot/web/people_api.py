"""The people API: `GET /api/people` and `GET /api/people/{id}`, the directory as JSON for
scripts (a roster check, a sync to a staffing sheet).

A view carries what the admin page shows — id, name, e-mail, role, timezone, source, state,
the linked identities as `{kind, value, verified_via}`, the last sign-in and the open
handoffs the person holds — and never a credential: no password hash, no TOTP secret (only
whether each is set).

Who may call: `people_caller`, the one dependency of this router, so a role-aware caller can
replace it in one place. For now it is the owner's bearer token (`owner.token`, compared in
constant time), the key approval decisions take too; without an owner token, `api.key`, as
every other route of the API.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Depends, Request

from bot.domain.people.roster import RosterEntry
from bot.runtime.text import iso
from bot.web.api import ApiError
from bot.web.deps import ConfigDep, RosterDep


async def people_caller(request: Request, config: ConfigDep) -> None:
    """The guard of the people API: `Authorization: Bearer <owner.token>` (api.key without one)."""
    key, name = (config.owner.token, "owner.token") if config.owner.token is not None else (config.api.key, "api.key")
    if key is None:
        return  # an open desk (loopback only, see the config's checks), as the rest of the API
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.get_secret_value().encode()):
        raise ApiError(401, "unauthorized", f"send the header Authorization: Bearer <{name}>")


people_api = APIRouter(prefix="/api", dependencies=[Depends(people_caller)])


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


@people_api.get("/people")
async def list_people(roster: RosterDep) -> dict[str, Any]:
    """Everyone in the directory, by name, disabled people too (`state`)."""
    return {"people": [person_view(entry) for entry in await roster.entries()]}


@people_api.get("/people/{pid}")
async def get_person(pid: str, roster: RosterDep) -> dict[str, Any]:
    return person_view(await roster.entry(pid))

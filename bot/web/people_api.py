"""The people API: `GET /api/people` and `GET /api/people/{id}`, the directory as JSON for
scripts (a roster check, a sync to a staffing sheet), and `POST /api/people/{id}/availability`
to set someone away or available.

A view carries what the admin page shows — id, name, e-mail, role, timezone, source, state,
the linked identities as `{kind, value, verified_via}`, the last sign-in, the open handoffs
the person holds against their `max_concurrent`, their presence now (available, away,
off_hours, disabled) with `away_until` and `away_note`, and how the desk reaches them
(`contact`: kind, channel_id, position, and the address for admins only) — and never a
credential: no password hash, no TOTP secret (only whether each is set).

Who may call: the list, admins (a personal token of an admin, or the owner token); one
person and their availability, admins and the person themselves through their personal
token (anyone else's is refused, 403). Each route declares it with `api_needs` as every
route of the API (bot/web/api.py); the agent's key may not: the directory is no business of
the AI's.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Depends, Request
from pydantic import AwareDatetime, Field

from bot.config.roles import Role
from bot.domain.people.contact import contact_view
from bot.domain.people.roster import RosterEntry
from bot.runtime.text import iso
from bot.web.answers import PeopleList, PersonAnswer, answer
from bot.web.api import ApiCaller, ApiError, _Body, api_needs, api_router
from bot.web.deps import RosterDep, app_desk, desk_direct_channels
from bot.web.inbox.reach_page import order_from_file

people_api = api_router()
ADMINS = api_needs(Role.ADMIN)
ONESELF = api_needs(Role.AGENT)  # a person for themselves (the route refuses anyone else's), admins for anyone
READS_ONESELF = api_needs(Role.VIEWER)


def person_view(entry: RosterEntry) -> dict[str, Any]:
    person = entry.person
    return {
        "id": person.id, "name": person.name, "email": person.email, "role": person.role, "timezone": person.timezone,
        "source": person.source, "state": entry.state, "disabled_at": iso(person.disabled_at),
        "password_set": person.password_hash is not None, "totp_enabled": person.totp_confirmed_at is not None,
        "identities": [{"kind": i.kind, "value": i.value, "verified_via": i.verified_via} for i in entry.identities],
        "last_sign_in_at": iso(entry.last_sign_in),
        "holding": [{"handoff_session_id": h.id, "code": h.short_code} for h in entry.holding],
        "open_handoffs": len(entry.holding), "max_concurrent": person.max_concurrent,
        "presence": str(entry.presence) if entry.presence else None,
        "away_since": iso(person.away_since) if entry.presence == "away" else None,
        "away_until": iso(person.away_until) if entry.presence == "away" else None,
        "away_note": person.away_note if entry.presence == "away" else None,
        "working_hours": person.working_hours,
        "created_at": iso(person.created_at), "updated_at": iso(person.updated_at),
    }


def _contact(request: Request, entry: RosterEntry, *, addresses: bool) -> list[dict[str, Any]]:
    desk = app_desk(request)
    view = contact_view(entry.person, entry.identities, desk_direct_channels(desk),
                        from_file=order_from_file(desk, entry.person.id))
    return [{"kind": s.method.kind, "channel_id": s.method.channel_id, "position": s.method.position,
             **({"address": s.method.address} if addresses else {})} for s in view.methods]


def _full_view(request: Request, entry: RosterEntry, *, admin: bool) -> dict[str, Any]:
    return {**person_view(entry), "contact": _contact(request, entry, addresses=admin)}


def _is_admin(caller: ApiCaller) -> bool:
    return caller.role is not None and caller.role.allows(Role.ADMIN)


def _only_oneself(caller: ApiCaller, pid: str) -> None:
    if not _is_admin(caller) and caller.actor.person_id != pid:
        raise ApiError(403, "forbidden", f"{caller.actor.name} may only see and change their own availability here; "
                                         "someone else's needs the admin role", needed=Role.ADMIN)


@people_api.get("/people", dependencies=[Depends(ADMINS)], responses=answer(PeopleList))
async def list_people(request: Request, roster: RosterDep) -> dict[str, Any]:
    """Everyone in the directory, by name, disabled people too (`state`)."""
    return {"people": [_full_view(request, entry, admin=True) for entry in await roster.entries()]}


@people_api.get("/people/{pid}", responses=answer(PersonAnswer))
async def get_person(pid: str, request: Request, roster: RosterDep,
                     caller: Annotated[ApiCaller, Depends(READS_ONESELF)]) -> dict[str, Any]:
    """One person: for admins anyone, for a person themselves (contact addresses left out)."""
    entry = await roster.entry(pid)
    _only_oneself(caller, pid)
    return _full_view(request, entry, admin=_is_admin(caller))


class AvailabilityBody(_Body):
    away: bool
    note: str | None = Field(default=None, max_length=200)
    until: AwareDatetime | None = Field(default=None, description="Away until (ISO 8601 with a timezone); only with away.")


@people_api.post("/people/{pid}/availability", responses=answer(PersonAnswer))
async def set_availability(pid: str, body: AvailabilityBody, request: Request, roster: RosterDep,
                           caller: Annotated[ApiCaller, Depends(ONESELF)]) -> dict[str, Any]:
    """Away (with an optional note, until an optional moment ahead) or available; audited
    with the caller as the actor, via "api"."""
    await roster.people.get(pid)
    _only_oneself(caller, pid)
    if not body.away and (body.note is not None or body.until is not None):
        raise ApiError(422, "invalid_request", "note, until: only with away: true; leave them out to be available",
                       fields={"until" if body.until is not None else "note": "only with away: true"})
    availability = app_desk(request).availability
    if body.away:
        until: datetime | None = body.until
        await availability.set_away(pid, until=until, note=body.note, via="api", actor=caller.actor.label)
    else:
        await availability.set_available(pid, via="api", actor=caller.actor.label)
    return _full_view(request, await roster.entry(pid), admin=_is_admin(caller))

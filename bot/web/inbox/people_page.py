"""The admin's people pages (`/inbox/people`): the directory as a table with who holds what,
a form to add a person, and each person's page to change their name, role and timezone,
disable or enable them, unlink an identity, and make an invitation or password-reset link to
pass on.

Admins only: every route declares `Role.ADMIN`, every change is a CSRF-checked post
(bot/web/inbox/owner.py). Roles and disabling go through `Roster`, which keeps the rules the
command line keeps too (bot/domain/people/roster.py): nobody disables themselves, and the last
enabled admin stays one unless `owner.token` is set. A refused form answers with the page
again, the field named beside it and what was typed kept. A link is shown on the page a post
answers with, never put in a URL (it would end up in logs and the browser's history).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.people.directory import InvalidPerson
from bot.domain.people.roster import Roster
from bot.domain.rendering import Renderer
from bot.errors import DeskError
from bot.web.deps import RendererDep, RosterDep
from bot.web.inbox.owner import SignedIn, needs, page, posts, redirect

FIELDS = ("id", "name", "email", "role", "timezone")

router = APIRouter()


def parse_role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise InvalidPerson(f"role: expected viewer, agent or admin, got {value[:20]!r}") from None


def problem_of(exc: DeskError) -> dict[str, str]:
    """An error as `{field: message}` when its message starts with a field's name ("email: …"),
    else under "" (shown above the form)."""
    head = exc.message.split(":", 1)[0]
    return {head if head in FIELDS else "": exc.message}


def _back(pid: str, notice: str) -> Response:
    return redirect(f"/inbox/people/{quote(pid)}?notice={quote(notice[:300])}")


# --------------------------------------------------------------------------- the list, and adding


async def _list_page(renderer: Renderer, roster: Roster, who: SignedIn, *, status: int = 200, notice: str = "",
                     typed: dict[str, str] | None = None, problems: dict[str, str] | None = None) -> HTMLResponse:
    return page(renderer, "inbox/people.html", who, status=status, entries=await roster.entries(), notice=notice[:300],
                typed=typed or {"role": Role.AGENT, "timezone": "UTC"}, problems=problems or {}, roles=list(Role))


@router.get("/inbox/people", response_class=HTMLResponse, include_in_schema=False)
async def people_list(renderer: RendererDep, roster: RosterDep, notice: str = "",
                      who: SignedIn = Depends(needs(Role.ADMIN))) -> HTMLResponse:
    return await _list_page(renderer, roster, who, notice=notice)


@router.post("/inbox/people", include_in_schema=False)
async def add_person(
    renderer: RendererDep, roster: RosterDep,
    pid: str = Form(default="", alias="id"), name: str = Form(default=""), email: str = Form(default=""),
    role: str = Form(default=""), timezone: str = Form(default=""), who: SignedIn = Depends(posts(Role.ADMIN)),
) -> Response:
    """Add a person (source "inbox"). They set their password through an invitation link,
    made on their page."""
    typed = {"id": pid, "name": name, "email": email, "role": role, "timezone": timezone}
    try:
        person = await roster.people.add(pid=pid, name=name, email=email, role=parse_role(role), timezone=timezone,
                                         source="inbox", actor=who.actor().label)
    except DeskError as exc:
        return await _list_page(renderer, roster, who, status=exc.status, typed={k: v[:320] for k, v in typed.items()},
                                problems=problem_of(exc))
    return _back(person.id, f"Added {person.name}. Give them an invitation link so they can set a password.")


# --------------------------------------------------------------------------- one person


async def _person_page(renderer: Renderer, roster: Roster, who: SignedIn, pid: str, *, status: int = 200,
                       **context: Any) -> HTMLResponse:
    entry = await roster.entry(pid)
    context.setdefault("typed", {"name": entry.person.name, "role": entry.person.role, "timezone": entry.person.timezone})
    context.setdefault("problems", {})
    context.setdefault("notice", "")
    context.setdefault("issued", None)
    return page(renderer, "inbox/person.html", who, status=status, entry=entry, roles=list(Role),
                links_available=roster.links is not None, itself=who.person is not None and who.person.id == pid, **context)


@router.get("/inbox/people/{pid}", response_class=HTMLResponse, include_in_schema=False)
async def person_page(pid: str, renderer: RendererDep, roster: RosterDep, notice: str = "",
                      who: SignedIn = Depends(needs(Role.ADMIN))) -> HTMLResponse:
    return await _person_page(renderer, roster, who, pid, notice=notice[:300])


@router.post("/inbox/people/{pid}", include_in_schema=False)
async def change_person(
    pid: str, renderer: RendererDep, roster: RosterDep,
    name: str = Form(default=""), role: str = Form(default=""), timezone: str = Form(default=""),
    who: SignedIn = Depends(posts(Role.ADMIN)),
) -> Response:
    """Change the name, role and timezone (roles under the admin rules)."""
    try:
        await roster.update(pid, name=name, role=parse_role(role), timezone=timezone, actor=who.actor().label)
    except DeskError as exc:
        if exc.status == 404:
            raise
        typed = {"name": name[:80], "role": role[:20], "timezone": timezone[:64]}
        return await _person_page(renderer, roster, who, pid, status=exc.status, typed=typed, problems=problem_of(exc))
    return _back(pid, "Saved.")


@router.post("/inbox/people/{pid}/disable", include_in_schema=False)
async def disable_person(pid: str, renderer: RendererDep, roster: RosterDep,
                         who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    """Disable: their sessions and API tokens end at once; their history stays theirs."""
    return await _set_disabled(renderer, roster, who, pid, True)


@router.post("/inbox/people/{pid}/enable", include_in_schema=False)
async def enable_person(pid: str, renderer: RendererDep, roster: RosterDep,
                        who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    return await _set_disabled(renderer, roster, who, pid, False)


async def _set_disabled(renderer: Renderer, roster: Roster, who: SignedIn, pid: str, disabled: bool) -> Response:
    try:
        person = await roster.set_disabled(pid, disabled, actor=who.actor().label,
                                           by_person_id=who.person.id if who.person else None)
    except DeskError as exc:
        if exc.status == 404:
            raise
        return await _person_page(renderer, roster, who, pid, status=exc.status, problems={"": exc.message})
    if disabled:
        return _back(pid, f"Disabled {person.name}: their sessions and API tokens ended.")
    return _back(pid, f"Enabled {person.name}: they can sign in again (old sessions and tokens stay ended).")


@router.post("/inbox/people/{pid}/identities/{iid}/unlink", include_in_schema=False)
async def unlink_identity(pid: str, iid: int, roster: RosterDep, who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    """Unlink an identity: what comes from it is nobody's again, until someone links it."""
    await roster.people.get(pid)
    if await roster.people.unlink(pid, iid, actor=who.actor().label):
        return _back(pid, "Unlinked.")
    return _back(pid, "That identity is not linked to them (any more); nothing changed.")


@router.post("/inbox/people/{pid}/link", include_in_schema=False)
async def sign_in_link(pid: str, renderer: RendererDep, roster: RosterDep, kind: str = Form(default=""),
                       who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    """An invitation or password-reset link, shown on the answer to pass on (it works once)."""
    entry = await roster.entry(pid)
    try:
        link = roster.link(entry.person, kind)
    except DeskError as exc:
        return await _person_page(renderer, roster, who, pid, status=exc.status, problems={"": exc.message})
    return await _person_page(renderer, roster, who, pid, issued={"kind": kind, "link": link})

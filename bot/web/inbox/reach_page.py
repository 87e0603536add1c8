"""Being reached, in the inbox: the account page's "Available / Away" switch and "How the desk
reaches you" (bot/domain/people/contact.py), and the admin's switch on a person's page.

Every change is a CSRF-checked post (`posts(Role.AGENT)` for one's own: viewers are never
offered handoffs; `posts(Role.ADMIN)` for someone else's, audited with the admin as the
actor) through `Availability` (bot/domain/people/availability.py) or
`People.set_contact_order`. "Until" is typed in the person's own timezone (their directory
timezone, which the form says); a value that cannot be read is refused naming the field,
never guessed. A contact order the config file declares (`people[].contact`) is shown
read-only: the file wins on every start, so a change here would be undone by the next one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote
from zoneinfo import ZoneInfo

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import Response

from bot.config.people import Role
from bot.desk import Desk
from bot.domain.people.availability import InvalidAvailability
from bot.domain.people.contact import ContactView, contact_view, moved
from bot.domain.people.reach import Presence
from bot.errors import DeskError
from bot.store.models import Person
from bot.web.deps import app_desk, desk_direct_channels
from bot.web.inbox.owner import SignedIn, posts, redirect

router = APIRouter()
ACCOUNT = "/inbox/account"


def order_from_file(desk: Desk, pid: str) -> bool:
    """Whether the config's `people:` declares this person's `contact:` (the file wins)."""
    return any(p.id == pid and p.contact is not None for p in desk.config.people)


async def contact_of(desk: Desk, person: Person) -> ContactView:
    return contact_view(person, await desk.people.identities(person.id), desk_direct_channels(desk),
                        from_file=order_from_file(desk, person.id))


def local(moment: datetime | None, timezone: str) -> str | None:
    """A moment as the person reads it: in their timezone, to the minute."""
    if moment is None:
        return None
    return moment.astimezone(ZoneInfo(timezone)).strftime("%Y-%m-%d %H:%M")


def presence_facts(desk: Desk, person: Person) -> dict[str, Any]:
    """What a page says about someone's presence now (the template words it)."""
    presence = desk.availability.presence_of(person)
    away = presence is Presence.AWAY
    return {"presence": str(presence), "away": away, "away_note": person.away_note if away else None,
            "away_since": local(person.away_since, person.timezone) if away else None,
            "away_until": local(person.away_until, person.timezone) if away else None, "timezone": person.timezone}


async def reach_context(desk: Desk, person: Person) -> dict[str, Any]:
    """The account page's sections on being reached (an agent or admin only)."""
    if not Role(person.role).allows(Role.AGENT):
        return {}
    return {"reach": presence_facts(desk, person), "contact": await contact_of(desk, person)}


def parse_until(typed: str, timezone: str) -> datetime | None:
    """The form's "until" (a datetime-local value: 2026-12-24T18:00) in `timezone`; empty is none."""
    typed = typed.strip()
    if not typed:
        return None
    try:
        moment = datetime.fromisoformat(typed)
    except ValueError:
        raise InvalidAvailability(f"until: expected a date and time such as 2026-12-24T18:00, got {typed[:40]!r}") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=ZoneInfo(timezone))


async def change_availability(desk: Desk, person: Person, *, away: str, note: str, until: str, actor: str) -> str:
    """Apply the switch's post; what to tell the person who pressed it. InvalidAvailability
    names a wrong field."""
    if away not in ("1", "0"):
        raise InvalidAvailability(f"away: expected 1 (away) or 0 (available), got {away[:10]!r}")
    if away == "0":
        await desk.availability.set_available(person.id, via="inbox", actor=actor)
        return f"{person.name} is available."
    changed = await desk.availability.set_away(person.id, note=note, until=parse_until(until, person.timezone),
                                               via="inbox", actor=actor)
    until_text = local(changed.away_until, changed.timezone)
    return f"{person.name} is away" + (f" until {until_text} ({changed.timezone})." if until_text else ".")


async def _account_problem(request: Request, who: SignedIn, exc: DeskError) -> Response:
    from bot.web.inbox.account import account_page  # the account page imports this module for its sections

    field = exc.message.split(":", 1)[0]
    return await account_page(request, who, status=exc.status, problem=exc.message, field=field)


@router.post(f"{ACCOUNT}/availability", include_in_schema=False)
async def my_availability(request: Request, away: str = Form(default=""), note: str = Form(default=""),
                          until: str = Form(default=""), who: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    """Available / Away for the signed-in person (an optional note, and until when)."""
    if who.person is None:
        return redirect(ACCOUNT)
    desk = app_desk(request)
    try:
        said = await change_availability(desk, await desk.people.get(who.person.id), away=away, note=note, until=until,
                                         actor=who.actor().label)
    except DeskError as exc:
        return await _account_problem(request, who, exc)
    return redirect(f"{ACCOUNT}?notice={quote(said)}#availability")


@router.post(f"{ACCOUNT}/contact", include_in_schema=False)
async def move_contact(request: Request, kind: str = Form(default=""), move: str = Form(default=""),
                       who: SignedIn = Depends(posts(Role.AGENT))) -> Response:
    """Move one of the signed-in person's contact methods up or down (refused while the
    config file sets their order)."""
    if who.person is None:
        return redirect(ACCOUNT)
    desk = app_desk(request)
    person = await desk.people.get(who.person.id)
    if move not in ("up", "down"):
        return await _account_problem(request, who, InvalidAvailability(f"move: expected up or down, got {move[:10]!r}"))
    if order_from_file(desk, person.id):
        return await _account_problem(request, who, DeskError(
            "contact: the desk's configuration file sets your order (people[].contact); ask an admin to change it there"))
    order = moved(person, await desk.people.identities(person.id), desk_direct_channels(desk), kind, up=move == "up")
    if order is None:
        return redirect(f"{ACCOUNT}?notice={quote('Nothing to move there.')}#contact")
    await desk.people.set_contact_order(person.id, order, actor=who.actor().label)
    return redirect(f"{ACCOUNT}?notice={quote('Your contact order is saved.')}#contact")


@router.post("/inbox/people/{pid}/availability", include_in_schema=False)
async def their_availability(request: Request, pid: str, away: str = Form(default=""), note: str = Form(default=""),
                             until: str = Form(default=""), who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    """An admin sets someone away or available (audited with the admin as the actor)."""
    desk = app_desk(request)
    person = await desk.people.get(pid)
    try:
        said = await change_availability(desk, person, away=away, note=note, until=until, actor=who.actor().label)
    except DeskError as exc:
        said = exc.message
    return redirect(f"/inbox/people/{quote(pid)}?notice={quote(said[:300])}#availability")

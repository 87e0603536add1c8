"""The admin's view of the directory, and the rules for changing who may manage it.

The inbox's people page, `handoff people list` and `GET /api/people` show the same thing: each
person with their linked identities, when they last signed in, and the open handoffs they
hold ("who holds what") against their own `max_concurrent`, and their presence now (available,
away, outside their working hours: bot/domain/people/availability.py). `entries()` builds it in four reads whatever the number of people:
the people, every identity, each person's newest sign-in (person_sessions' person index) and
the open handoffs someone claimed (open handoffs are few; the state index finds them).

Roles and disabling change through `Roster`, not straight through `People`, so the page and
the command line keep the same rules:
- an admin cannot disable themselves (they would be signed out mid-page, and nobody may be
  left unable to undo it);
- while people exist, at least one enabled admin remains, unless `owner.token` is set: the
  token signs in as admin whatever the directory says, so it can always repair it.
The rules read before the write, as any form does: two admins demoting each other in the
same instant could both pass. Nothing is lost then: `handoff people set-role ID admin` on
the server makes an admin again (promoting is never refused).

Invitation and password-reset links are made by the sign-in side (`LinkIssuer`, the desk's
`invitations`); a build without it says so instead of showing a link that cannot work.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from sqlalchemy import func, select
from sqlmodel import col

from bot.config.people import Role
from bot.domain.people.availability import Availability
from bot.domain.people.directory import People
from bot.domain.people.reach import Presence
from bot.errors import Conflict, DeskError
from bot.store.db import Database
from bot.store.models import HandoffSession, Person, PersonIdentity, PersonSession
from bot.store.vocabulary import OPEN_STATES

LINK_KINDS = ("invite", "reset")


class LinkIssuer(Protocol):
    """What makes a person's invitation or password-reset link (bot/domain/people/invitations.py)."""

    def link_for(self, person: Person, kind: str) -> str: ...


class ChangeRefused(Conflict):
    """A change the admin rules refuse (the message says which rule and what to do)."""

    code = "change_refused"


class LinksUnavailable(DeskError):
    code = "links_unavailable"
    status = 501


@dataclass(frozen=True)
class RosterEntry:
    """One person as the admin sees them."""

    person: Person
    identities: tuple[PersonIdentity, ...]
    last_sign_in: datetime | None
    holding: tuple[HandoffSession, ...]  # the open handoffs they claimed, oldest first
    presence: Presence | None = None  # now (None: a roster built without the availability service)

    @property
    def enabled(self) -> bool:
        return self.person.disabled_at is None

    @property
    def state(self) -> str:
        return "enabled" if self.enabled else "disabled"

    @property
    def workload(self) -> str:
        """The open handoffs they hold against their own limit: "2 of 3", or "2" with none."""
        held = len(self.holding)
        return f"{held} of {self.person.max_concurrent}" if self.person.max_concurrent else str(held)

    @property
    def from_config(self) -> bool:
        """Declared in the YAML's `people:`: the file wins on the next start for what it declares."""
        return self.person.source == "config"


class Roster:
    def __init__(self, people: People, db: Database, *, owner_token: bool, links: LinkIssuer | None = None,
                 availability: Availability | None = None) -> None:
        self.people, self.db, self.availability = people, db, availability
        self.owner_token = owner_token  # whether `owner.token` is set: an admin sign-in outside the directory
        self.links = links

    # ------------------------------------------------------------------ reads

    async def entries(self, only: str | None = None) -> list[RosterEntry]:
        """Everyone (by name), or only the person `only` (NotFound when there is none)."""
        people = [await self.people.get(only)] if only is not None else await self.people.all()
        ids = [p.id for p in people]
        if not ids:
            return []
        async with self.db.read() as session:
            identities = (await session.scalars(select(PersonIdentity).where(col(PersonIdentity.person_id).in_(ids))
                                                .order_by(col(PersonIdentity.kind), col(PersonIdentity.id)))).all()
            signed_in = (await session.execute(
                select(col(PersonSession.person_id), func.max(col(PersonSession.created_at)))
                .where(col(PersonSession.person_id).in_(ids)).group_by(col(PersonSession.person_id)))).all()
            held = (await session.scalars(select(HandoffSession).where(
                col(HandoffSession.state).in_(OPEN_STATES), col(HandoffSession.claimed_person_id).in_(ids))
                .order_by(col(HandoffSession.claimed_at)))).all()
        last = {pid: at for pid, at in signed_in}
        linked: dict[str, list[PersonIdentity]] = defaultdict(list)
        for identity in identities:
            linked[identity.person_id].append(identity)
        holding: dict[str, list[HandoffSession]] = defaultdict(list)
        for handoff in held:
            holding[handoff.claimed_person_id or ""].append(handoff)
        now = self.availability.clock.now() if self.availability else None
        return [RosterEntry(p, tuple(linked[p.id]), last.get(p.id), tuple(holding[p.id]),
                            self.availability.presence_of(p, now) if self.availability else None) for p in people]

    async def entry(self, pid: str) -> RosterEntry:
        return (await self.entries(only=pid))[0]

    # ------------------------------------------------------------------ changes under the admin rules

    async def update(self, pid: str, *, actor: str, name: str | None = None, role: Role | None = None,
                     timezone: str | None = None) -> Person:
        """Change a person's name, role or timezone (None: unchanged); demoting the last
        enabled admin is refused (ChangeRefused)."""
        person = await self.people.get(pid)
        if role is not None and role is not Role.ADMIN and Role(person.role) is Role.ADMIN and person.disabled_at is None:
            await self._keep_an_admin(person, "role", "demote")
        return await self.people.update(pid, actor=actor, name=name, role=role, timezone=timezone)

    async def set_disabled(self, pid: str, disabled: bool, *, actor: str, by_person_id: str | None = None) -> Person:
        """Disable (ending their sessions and tokens at once) or enable. `by_person_id` is the
        person asking, who may not disable themselves."""
        person = await self.people.get(pid)
        if disabled and by_person_id == pid:
            raise ChangeRefused("person: you cannot disable yourself; another admin can")
        if disabled and Role(person.role) is Role.ADMIN and person.disabled_at is None:
            await self._keep_an_admin(person, "person", "disable")
        return await self.people.set_disabled(pid, disabled, actor=actor)

    async def _keep_an_admin(self, person: Person, field: str, doing: str) -> None:
        if self.owner_token:
            return
        admins = [p for p in await self.people.all(include_disabled=False) if Role(p.role) is Role.ADMIN]
        if [p.id for p in admins] == [person.id]:
            raise ChangeRefused(
                f"{field}: {person.id} is the last enabled admin, and no owner.token is set: {doing} them and nobody could "
                "manage people any more. Make someone else admin first, or set owner.token in the config.")

    # ------------------------------------------------------------------ links to pass on

    def link(self, person: Person, kind: str) -> str:
        """The invitation ("invite") or password-reset ("reset") link for `person`, to pass on."""
        if kind not in LINK_KINDS:
            raise DeskError(f"kind: expected invite or reset, got {kind[:20]!r}")
        if self.links is None:
            raise LinksUnavailable("invitation and reset links need the sign-in module (bot/domain/people/invitations.py)")
        return self.links.link_for(person, kind)


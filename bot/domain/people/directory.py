"""The directory of people: who they are, their role, and the provider identities that are
theirs.

Rows come from three places — the config's `people:` (applied on every start), the command
line and the inbox's admin page — and single sign-on may add a person on their first sign-in.
Nobody is ever deleted: `disable` keeps their history pointing at them and ends their
sessions and tokens at once (bot/domain/people/sessions.py, tokens.py check `disabled_at` on
every request too).

An identity (`PersonIdentity`) is a provider's id of a person. It belongs to at most one
person: linking one that is someone else's is refused, never moved. `resolve` answers "who is
Slack user U024…?" with one indexed read; `identify` is what the channels' inbound path asks
on every reply, claim and press: the same answer through a small per-process cache, kept
`IDENTIFY_TTL` at most. A link, an unlink, a rename or disabling done through this process
empties it at once; one done by another instance (or by the command line, a process of its
own) is seen here within `IDENTIFY_TTL`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config.people import CONTACT_KINDS, PersonConfig, Role, email_address, person_id, timezone_name
from bot.domain.people.credentials import password_fingerprint
from bot.errors import Conflict, DeskError, found
from bot.runtime.bounded import BoundedDict
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database
from bot.store.models import ApiToken, Person, PersonIdentity, PersonSession


class InvalidPerson(DeskError):
    code = "invalid_person"
    status = 422


class IdentityTaken(Conflict):
    """The identity is already another person's."""


class PasswordChanged(Conflict):
    """The password was changed (or first set) since the caller read it."""


@dataclass(frozen=True)
class Applied:
    """What applying the config's roster did."""

    added: tuple[str, ...]
    updated: tuple[str, ...]


# How long `identify` trusts what it read: the most another instance's link, unlink or
# disabling takes to be seen here (this process's own changes are seen at once).
IDENTIFY_TTL = timedelta(seconds=30)
IDENTIFY_CACHE_SIZE = 5000


def email_key(email: str) -> str:
    return email.strip().lower()


class People:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock
        # (kind, value) -> (the person or None, when it was read): `identify`'s cache
        self._identified: BoundedDict[tuple[str, str], tuple[Person | None, datetime]] = BoundedDict(IDENTIFY_CACHE_SIZE)

    # ------------------------------------------------------------------ reads

    async def get(self, pid: str) -> Person:
        async with self.db.read() as session:
            return found(await session.get(Person, pid), "person", pid)

    async def find(self, pid: str) -> Person | None:
        async with self.db.read() as session:
            return await session.get(Person, pid)

    async def by_email(self, email: str) -> Person | None:
        async with self.db.read() as session:
            return (await session.scalars(select(Person).where(col(Person.email_key) == email_key(email)))).first()

    async def all(self, *, include_disabled: bool = True) -> list[Person]:
        statement = select(Person).order_by(col(Person.name))
        if not include_disabled:
            statement = statement.where(col(Person.disabled_at).is_(None))
        async with self.db.read() as session:
            return list((await session.scalars(statement)).all())

    async def count(self) -> int:
        async with self.db.read() as session:
            return int((await session.execute(select(func.count()).select_from(Person))).scalar_one())

    async def identities(self, pid: str) -> list[PersonIdentity]:
        async with self.db.read() as session:
            return list((await session.scalars(
                select(PersonIdentity).where(col(PersonIdentity.person_id) == pid).order_by(col(PersonIdentity.id)))).all())

    async def owner_of(self, kind: str, value: str) -> Person | None:
        """The person `kind:value` is linked to, enabled or not."""
        value = email_key(value) if kind == "email" else value
        async with self.db.read() as session:
            return (await session.scalars(
                select(Person).join(PersonIdentity, col(PersonIdentity.person_id) == col(Person.id))
                .where(col(PersonIdentity.kind) == kind, col(PersonIdentity.value) == value))).first()

    async def resolve(self, kind: str, value: str) -> Person | None:
        """The enabled person whose `kind` identity is `value` ("slack", "U024BE7LH"), or None.
        E-mail identities also match the person's own address."""
        value = email_key(value) if kind == "email" else value
        async with self.db.read() as session:
            person = (await session.scalars(
                select(Person).join(PersonIdentity, col(PersonIdentity.person_id) == col(Person.id))
                .where(col(PersonIdentity.kind) == kind, col(PersonIdentity.value) == value))).first()
            if person is None and kind == "email":
                person = (await session.scalars(select(Person).where(col(Person.email_key) == value))).first()
        return person if person is not None and person.disabled_at is None else None

    async def identify(self, kind: str, value: str) -> Person | None:
        """`resolve`, through the per-process cache: the inbound path asks it on every act
        from a channel, so a busy thread costs no read per reply (see `IDENTIFY_TTL`)."""
        key, now = (kind, value), self.clock.now()
        cached = self._identified.get(key)
        if cached is not None and now - cached[1] < IDENTIFY_TTL:
            return cached[0]
        person = await self.resolve(kind, value)
        self._identified[key] = (person, now)
        return person

    def forget(self) -> None:
        """A person or an identity changed here (and committed): `identify` reads afresh."""
        self._identified.clear()

    # ------------------------------------------------------------------ writes

    async def add(self, *, pid: str, name: str, email: str, role: Role = Role.AGENT, timezone: str = "UTC",
                  source: str, actor: str) -> Person:
        """A new person; InvalidPerson names the field that is wrong, Conflict the id or
        address already taken."""
        fields = _checked(pid=pid, name=name, email=email, timezone=timezone)
        now = self.clock.now()
        person = Person(id=fields["id"], name=fields["name"], email=fields["email"], email_key=email_key(email),
                        role=Role(role), timezone=fields["timezone"], source=source, created_at=now, updated_at=now)
        try:
            async with self.db.transaction() as session:
                if await session.get(Person, person.id) is not None:
                    raise Conflict(f"id: a person {person.id!r} exists already")
                session.add(person)
                await session.flush()
                await audit.note(session, "person_added", at=now, actor=actor, person_id=person.id,
                                 name=person.name, role=person.role, source=source)
        except IntegrityError:
            raise Conflict(f"email: {email!r} is already someone's address") from None
        return await self.get(person.id)

    async def update(self, pid: str, *, actor: str, name: str | None = None, email: str | None = None,
                     role: Role | None = None, timezone: str | None = None) -> Person:
        """Change the fields given (None: unchanged). An empty one is checked like any value,
        never taken for "unchanged"."""
        current = await self.get(pid)
        fields = _checked(pid=pid, name=current.name if name is None else name, email=current.email if email is None else email,
                          timezone=current.timezone if timezone is None else timezone)
        values = {"name": fields["name"], "email": fields["email"], "email_key": email_key(fields["email"]),
                  "role": Role(current.role if role is None else role), "timezone": fields["timezone"]}
        changed = {k: v for k, v in values.items() if getattr(current, k) != v}
        if not changed:
            return current
        now = self.clock.now()
        try:
            async with self.db.transaction() as session:
                await session.execute(update(Person).where(col(Person.id) == pid).values(**changed, updated_at=now))
                await audit.note(session, "person_updated", at=now, actor=actor, person_id=pid,
                                 changed=sorted(k for k in changed if k != "email_key"))
        except IntegrityError:
            raise Conflict(f"email: {email!r} is already someone's address") from None
        self.forget()  # a new name is what the next reply is signed with
        return await self.get(pid)

    async def set_disabled(self, pid: str, disabled: bool, *, actor: str) -> Person:
        """Disable (or enable again) a person. Disabling ends every session and API token of
        theirs in the same transaction: the next request they make is refused."""
        await self.get(pid)
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(update(Person).where(col(Person.id) == pid)
                                  .values(disabled_at=now if disabled else None, updated_at=now))
            if disabled:
                await session.execute(update(PersonSession).where(col(PersonSession.person_id) == pid,
                                                                  col(PersonSession.revoked_at).is_(None)).values(revoked_at=now))
                await session.execute(update(ApiToken).where(col(ApiToken.person_id) == pid,
                                                             col(ApiToken.revoked_at).is_(None)).values(revoked_at=now))
            await audit.note(session, "person_disabled" if disabled else "person_enabled", at=now, actor=actor, person_id=pid)
        self.forget()
        return await self.get(pid)

    async def set_password_hash(self, pid: str, password_hash: str, *, actor: str, event: str = "password_set",
                                if_fingerprint: str | None = None) -> None:
        """Store a new password hash. With `if_fingerprint` (credentials.password_fingerprint),
        only if the current hash still has it, checked and written in one statement: a
        single-use link or a password change raced by another is PasswordChanged, not both."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            current = found(await session.get(Person, pid), "person", pid).password_hash
            statement = update(Person).where(col(Person.id) == pid)
            if if_fingerprint is not None:
                if password_fingerprint(current) != if_fingerprint:
                    raise PasswordChanged("password: it was changed meanwhile")
                statement = statement.where(col(Person.password_hash).is_(None) if current is None
                                            else col(Person.password_hash) == current)
            written = await session.execute(statement.values(password_hash=password_hash, updated_at=now))
            if not written.rowcount:  # type: ignore[attr-defined]  # changed between the read and the write
                raise PasswordChanged("password: it was changed meanwhile")
            await audit.note(session, event, at=now, actor=actor, person_id=pid)

    async def set_totp(self, pid: str, secret: str | None, *, confirmed: bool, actor: str) -> None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(update(Person).where(col(Person.id) == pid).values(
                totp_secret=secret, totp_confirmed_at=now if confirmed and secret else None, updated_at=now))
            if confirmed or secret is None:
                await audit.note(session, "totp_enabled" if secret else "totp_removed", at=now, actor=actor, person_id=pid)

    async def link(self, pid: str, kind: str, value: str, *, verified_via: str, actor: str) -> PersonIdentity:
        """Make `kind:value` this person's. Linking it again to the same person changes
        nothing; another person's is refused (IdentityTaken), never moved."""
        async with self.db.transaction() as session:
            identity = await self.link_in(session, pid, kind, value, verified_via=verified_via, actor=actor)
        self.forget()
        return identity

    async def link_in(self, session: AsyncSession, pid: str, kind: str, value: str, *, verified_via: str,
                      actor: str) -> PersonIdentity:
        """`link` in the caller's transaction (a redeemed code links in the transaction that
        uses it up), who calls `forget` once it commits. IdentityTaken leaves the transaction
        usable: the insert that finds the identity taken by another instance meanwhile runs
        in a savepoint."""
        value = email_key(value) if kind == "email" else value
        now = self.clock.now()
        existing = (await session.scalars(select(PersonIdentity).where(
            col(PersonIdentity.kind) == kind, col(PersonIdentity.value) == value))).first()
        if existing is not None:
            if existing.person_id != pid:
                raise IdentityTaken(f"{kind} identity {value} is already linked to someone else")
            return existing
        identity = PersonIdentity(person_id=pid, kind=kind, value=value, verified_via=verified_via, created_at=now)
        try:
            async with session.begin_nested():
                session.add(identity)
        except IntegrityError:  # linked meanwhile by another instance
            raise IdentityTaken(f"{kind} identity {value} is already linked to someone else") from None
        await audit.note(session, "identity_linked", at=now, actor=actor, person_id=pid, identity_kind=kind,
                         identity=value, verified_via=verified_via)
        return identity

    async def unlink(self, pid: str, identity_id: int, *, actor: str) -> bool:
        now = self.clock.now()
        async with self.db.transaction() as session:
            identity = await session.get(PersonIdentity, identity_id)
            if identity is None or identity.person_id != pid:
                return False
            await session.execute(delete(PersonIdentity).where(col(PersonIdentity.id) == identity_id))
            await audit.note(session, "identity_unlinked", at=now, actor=actor, person_id=pid,
                             identity_kind=identity.kind, identity=identity.value)
        self.forget()
        return True

    async def set_contact_order(self, pid: str, order: Sequence[str], *, actor: str) -> Person:
        """Store the kinds to reach them in, in order (the account page's Move up / Move
        down); each a contact kind, once. InvalidPerson names the one that is not."""
        seen: list[str] = []
        for kind in order:
            if kind not in CONTACT_KINDS or kind in seen:
                raise InvalidPerson(f"contact: expected each of {', '.join(CONTACT_KINDS)} at most once, got {kind[:20]!r}")
            seen.append(kind)
        await self.get(pid)
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(update(Person).where(col(Person.id) == pid).values(contact_order=seen, updated_at=now))
            await audit.note(session, "contact_order_set", at=now, actor=actor, person_id=pid, contact=seen)
        self.forget()
        return await self.get(pid)

    async def apply_config(self, roster: Sequence[PersonConfig]) -> Applied:
        """The config's `people:` on start: new ids added, declared fields of existing ones
        brought in line (and `disabled:` applied); nobody left out of the file is touched.

        How they are reached (`_apply_reach`): `contact:`, `working_hours:` and
        `max_concurrent:` win when the file declares them. Left out, `working_hours` and
        `max_concurrent` of a person the file added are cleared (the file is where they are
        set: deleting the line undoes it), and a person added elsewhere keeps theirs. A
        left-out `contact:` never clears anything: the order is the person's own choice on
        their account page, which the file only overrules while it declares one (the page
        shows it read-only then); once the line is gone, the last order stays until they
        change it."""
        added: list[str] = []
        updated: list[str] = []
        for declared in roster:
            current = await self.find(declared.id)
            if current is None:
                await self.add(pid=declared.id, name=declared.name, email=declared.email, role=declared.role,
                               timezone=declared.timezone, source="config", actor="config")
                added.append(declared.id)
            else:
                before = (current.name, current.email, current.role, current.timezone)
                await self.update(declared.id, actor="config", name=declared.name, email=declared.email,
                                  role=declared.role, timezone=declared.timezone)
                if before != (declared.name, declared.email, declared.role, declared.timezone):
                    updated.append(declared.id)
            if await self._apply_reach(await self.get(declared.id), declared) and declared.id not in added + updated:
                updated.append(declared.id)
            if declared.disabled != ((current.disabled_at is not None) if current else False):
                await self.set_disabled(declared.id, declared.disabled, actor="config")
        return Applied(tuple(added), tuple(updated))

    async def _apply_reach(self, person: Person, declared: PersonConfig) -> bool:
        """`contact:`, `working_hours:` and `max_concurrent:` as `apply_config` says; whether
        anything changed."""
        from_file = person.source == "config"
        wanted: dict[str, object] = {}
        if declared.contact is not None:
            wanted["contact_order"] = list(declared.contact)
        for field in ("working_hours", "max_concurrent"):
            value = getattr(declared, field)
            if value is not None or from_file:
                wanted[field] = value
        changed = {k: v for k, v in wanted.items() if getattr(person, k) != v}
        if not changed:
            return False
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(update(Person).where(col(Person.id) == person.id).values(**changed, updated_at=now))
            await audit.note(session, "person_updated", at=now, actor="config", person_id=person.id, changed=sorted(changed))
        self.forget()
        return True


def _checked(*, pid: str, name: str, email: str, timezone: str) -> dict[str, str]:
    """The fields of a person, each checked with the config's own rules; InvalidPerson
    names the first one that is wrong."""
    checks = (("id", person_id, pid), ("email", email_address, email), ("timezone", timezone_name, timezone))
    for field, check, value in checks:
        try:
            check(value)
        except ValueError as exc:
            raise InvalidPerson(f"{field}: {exc}") from None
    if not 1 <= len(name) <= 80 or name != name.strip():
        raise InvalidPerson("name: 1-80 characters with no spaces at its start or end, such as Olga from Support")
    return {"id": pid, "name": name, "email": email, "timezone": timezone}

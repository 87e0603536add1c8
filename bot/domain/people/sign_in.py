"""Checking a password sign-in, so that every refusal looks and costs the same.

An unknown address, a wrong password, a disabled person and a person with no password yet
are one refusal (`SignInRefused`, one message), and each costs one argon2id verification: an
address nobody has, or a person without a password, is checked against the dummy hash
(credentials.verify_password). What did happen is for the audit trail alone
(`sign_in_failed`, with the client's address key and, when the account exists, its person;
never the password, and never the address typed, which is sometimes a password typed in the
wrong box).

A good sign-in whose hash was made with older argon2 parameters is re-hashed on the spot.
Opening the session is the caller's (bot/web/inbox/login.py), since a second step may come
first.
"""

from __future__ import annotations

from bot.domain.people.credentials import WeakPassword, hash_password, needs_rehash, verify_password
from bot.domain.people.directory import People
from bot.errors import DeskError
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database
from bot.store.models import Person

MAX_EMAIL = 320


class SignInRefused(DeskError):
    code = "sign_in_refused"
    status = 401

    def __init__(self) -> None:
        super().__init__("That e-mail and password do not match an account that may sign in.")


class PasswordSignIn:
    def __init__(self, db: Database, clock: Clock, people: People) -> None:
        self.db, self.clock, self.people = db, clock, people

    async def check(self, email: str, password: str, *, client: str) -> Person:
        """The person whose e-mail and password these are, if they may sign in; SignInRefused
        (after the same work) otherwise."""
        person = await self.people.by_email(email) if len(email) <= MAX_EMAIL else None
        stored = person.password_hash if person is not None else None
        if not verify_password(stored, password):
            reason = "unknown_account" if person is None else "no_password" if stored is None else "wrong_password"
            await self.failed(person, client=client, step="password", reason=reason)
            raise SignInRefused()
        assert person is not None and stored is not None
        if person.disabled_at is not None:
            await self.failed(person, client=client, step="password", reason="disabled")
            raise SignInRefused()
        if needs_rehash(stored):
            person = await self._rehashed(person, password)
        return person

    async def failed(self, person: Person | None, *, client: str, step: str, reason: str) -> None:
        """Record a refused sign-in step (password or totp) in the audit trail."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            await audit.note(session, "sign_in_failed", at=now, actor=person.name if person else "unknown account",
                             person_id=person.id if person else None, client=client, step=step, reason=reason)

    async def _rehashed(self, person: Person, password: str) -> Person:
        try:
            new_hash = hash_password(password)
        except WeakPassword:  # a password older rules allowed: keep its hash rather than lock them out
            return person
        await self.people.set_password_hash(person.id, new_hash, actor=f"{person.name} (sign-in)", event="password_rehashed")
        return await self.people.get(person.id)

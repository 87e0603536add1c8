"""A person's TOTP second factor: setting it up, checking its codes, each code once.

Setting up is two steps, so a typo in an authenticator app cannot lock anyone out: `begin`
stores a fresh secret, unconfirmed (it does not count yet), and the person sees it as an
otpauth:// URI and as base32 text; `confirm` turns it on only once a code from it is typed.
With it on, a password sign-in also needs a code (bot/web/inbox/second_step.py).

A code is good for its 30-second step and one step either side (clock drift), so someone who
watched it being typed could use it again within that minute and a half. The step of every
accepted code is stored (`people.totp_last_step`, migration 0022) and only a code of a later
step is accepted afterwards; the check and the write are one conditional UPDATE, so two
sign-ins racing with one code get one session.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import or_, update
from sqlmodel import col

from bot.domain.people.credentials import new_totp_secret, totp_step, totp_uri
from bot.domain.people.directory import People
from bot.errors import DeskError
from bot.runtime.clock import Clock
from bot.store.db import Database, execute_dml
from bot.store.models import Person


class CodeRefused(DeskError):
    """The code typed is not one to accept now; the message says why."""

    code = "invalid_totp_code"
    status = 401


@dataclass(frozen=True)
class TotpSetup:
    """A secret waiting for its first code: what the person copies into their app."""

    secret: str
    uri: str


def totp_on(person: Person) -> bool:
    """Whether this person's sign-ins need a code (a secret they confirmed)."""
    return person.totp_secret is not None and person.totp_confirmed_at is not None


class SecondFactor:
    def __init__(self, db: Database, clock: Clock, people: People) -> None:
        self.db, self.clock, self.people = db, clock, people

    async def begin(self, person: Person, *, actor: str) -> TotpSetup:
        """A fresh secret for `person`, stored unconfirmed: their sign-ins do not need it until
        `confirm`. A secret shown before and never confirmed is replaced."""
        if totp_on(person):
            raise CodeRefused("totp: it is on already; turn it off first to set up another app")
        secret = new_totp_secret()
        await self.people.set_totp(person.id, secret, confirmed=False, actor=actor)
        return TotpSetup(secret, totp_uri(secret, account=person.email))

    def setup_of(self, person: Person) -> TotpSetup | None:
        """The secret `person` is setting up (shown until they confirm it), if any."""
        if person.totp_secret is None or person.totp_confirmed_at is not None:
            return None
        return TotpSetup(person.totp_secret, totp_uri(person.totp_secret, account=person.email))

    async def confirm(self, person: Person, code: str, *, actor: str) -> None:
        """Turn TOTP on, if `code` is the current code of the secret being set up."""
        if self.setup_of(person) is None:
            raise CodeRefused("totp: nothing is being set up; start again from your account page")
        await self._use(person, code)
        await self.people.set_totp(person.id, person.totp_secret, confirmed=True, actor=actor)

    async def check(self, person: Person, code: str) -> None:
        """Accept `code` for this person's sign-in, once; CodeRefused otherwise."""
        if not totp_on(person):
            raise CodeRefused("code: this account has no TOTP app set up")
        await self._use(person, code)

    async def turn_off(self, person: Person, *, actor: str) -> None:
        await self.people.set_totp(person.id, None, confirmed=False, actor=actor)

    async def _use(self, person: Person, code: str) -> None:
        assert person.totp_secret is not None
        step = totp_step(person.totp_secret, code, at=self.clock.now().timestamp())
        if step is None:
            raise CodeRefused("code: not the current 6-digit code of your authenticator app")
        async with self.db.transaction() as session:
            used = await execute_dml(session, update(Person).where(
                col(Person.id) == person.id,
                or_(col(Person.totp_last_step).is_(None), col(Person.totp_last_step) < step),
            ).values(totp_last_step=step))
        if not used.rowcount:
            raise CodeRefused("code: this code was used already; wait for the next one")

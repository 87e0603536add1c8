"""Linking a provider identity to a person, verified: the person, signed in, asks for a
one-time code, and sends it from the channel (`/link 7H3K9QXW`). Whoever can write from that
provider account holds it, so the identity the message carries becomes theirs.

Codes are 8 characters from an alphabet without look-alikes (channels/linking.py holds the
shape, since adapters recognise `/link` too), valid 10 minutes, used once; only their hash
is stored. A code sent from an identity that is already someone else's is refused, never
moved, and stays unused: the person may send it again from their own account.

A redemption is one transaction: the code used up, the identity linked, the audit row and
the desk's answer to the sender (`answer`, queued in the outbox by the caller) commit
together or not at all, so a crash never leaves a linked identity nobody was told of, nor a
spent code that linked nothing.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.domain.people.directory import IdentityTaken, People
from bot.domain.people.sessions import token_hash
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database
from bot.store.models import LinkCode, Person
from channels.linking import LINK_CODE_ALPHABET, LINK_CODE_LENGTH

CODE_ALPHABET = LINK_CODE_ALPHABET
CODE_LENGTH = LINK_CODE_LENGTH
CODE_LIFETIME = timedelta(minutes=10)


def normalise_code(typed: str) -> str:
    """A code as typed ("7h3k-9qxw", "7H3K 9QXW"): upper-cased, spaces and dashes dropped."""
    return "".join(c for c in typed.upper() if c.isalnum())


class LinkOutcome(StrEnum):
    LINKED = "linked"  # the identity is the code's person's now (or was already)
    UNKNOWN = "unknown"  # no such code, or used, or expired, or its person is disabled
    TAKEN = "taken"  # the identity is someone else's: nothing changed, the code stays unused


@dataclass(frozen=True)
class Redeemed:
    """What sending a code did; `person` is the code's person when it linked."""

    outcome: LinkOutcome
    person: Person | None = None


Answer = Callable[[AsyncSession, Redeemed], Awaitable[None]]
"""Queues the desk's answer to the sender, in the redemption's transaction."""


class LinkCodes:
    def __init__(self, db: Database, clock: Clock, people: People) -> None:
        self.db, self.clock, self.people = db, clock, people

    async def issue(self, person: Person) -> str:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        now = self.clock.now()
        async with self.db.transaction() as session:
            session.add(LinkCode(code_hash=token_hash(code), person_id=person.id, created_at=now, expires_at=now + CODE_LIFETIME))
            await audit.note(session, "link_code_issued", at=now, actor=person.name, person_id=person.id,
                             expires_at=(now + CODE_LIFETIME).isoformat())
        return code

    async def redeem(self, typed: str, *, kind: str, value: str, actor: str, answer: Answer | None = None) -> Redeemed:
        """Link `kind:value` to the person whose unused, unexpired code was typed, in one
        transaction with `answer` (which the caller uses to tell the sender). The transaction
        is the effect of the caller's event (bot/runtime/effects.py): a redelivered `/link`
        is worked once."""
        code = normalise_code(typed)
        now = self.clock.now()
        async with self.db.transaction(effect=True) as session:
            row = await session.get(LinkCode, token_hash(code)) if len(code) == CODE_LENGTH else None
            person = await session.get(Person, row.person_id) if row is not None else None
            if row is None or person is None or row.used_at is not None or now >= row.expires_at or person.disabled_at:
                redeemed = Redeemed(LinkOutcome.UNKNOWN)
                await audit.note(session, "link_code_refused", at=now, actor=actor, identity_kind=kind, identity=value,
                                 why="unknown, used or expired")
            else:
                redeemed = await self._link(session, row, person, kind=kind, value=value, actor=actor)
            if answer is not None:
                await answer(session, redeemed)
        if redeemed.outcome is LinkOutcome.LINKED:
            self.people.forget()
        return redeemed

    async def _link(self, session: AsyncSession, row: LinkCode, person: Person, *, kind: str, value: str,
                    actor: str) -> Redeemed:
        """A good code: used up (a compare-and-set, so two instances given it at once link
        once) and the identity linked; when the identity is someone else's, the code is
        given back unused and the refusal recorded."""
        now = self.clock.now()
        code = col(LinkCode.code_hash) == row.code_hash
        used = await session.execute(update(LinkCode).where(code, col(LinkCode.used_at).is_(None)).values(used_at=now))
        if not used.rowcount:  # type: ignore[attr-defined]  # used meanwhile by another instance
            return Redeemed(LinkOutcome.UNKNOWN)
        try:
            await self.people.link_in(session, person.id, kind, value, verified_via="code", actor=actor)
        except IdentityTaken:
            await session.execute(update(LinkCode).where(code).values(used_at=None))
            await audit.note(session, "link_code_refused", at=now, actor=actor, person_id=person.id, identity_kind=kind,
                             identity=value, why="the identity is already linked to someone else")
            return Redeemed(LinkOutcome.TAKEN)
        return Redeemed(LinkOutcome.LINKED, person)

"""Linking a provider identity to a person, verified: the person, signed in, asks for a
one-time code, and sends it from the channel (`/link 7H3K9QXW`). Whoever can write from that
provider account holds it, so the identity the message carries becomes theirs.

Codes are 8 characters from an alphabet without look-alikes, valid 10 minutes, used once;
only their hash is stored. A code sent from an identity that is already someone else's is
refused, never moved.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from sqlalchemy import update
from sqlmodel import col

from bot.domain.people.directory import People
from bot.domain.people.sessions import token_hash
from bot.runtime.clock import Clock
from bot.store.db import Database, execute_dml
from bot.store.models import LinkCode, Person, PersonIdentity

CODE_ALPHABET = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH = 8
CODE_LIFETIME = timedelta(minutes=10)


def normalise_code(typed: str) -> str:
    return "".join(c for c in typed.upper() if c.isalnum())


class LinkCodes:
    def __init__(self, db: Database, clock: Clock, people: People) -> None:
        self.db, self.clock, self.people = db, clock, people

    async def issue(self, person: Person) -> str:
        code = "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))
        now = self.clock.now()
        async with self.db.transaction() as session:
            session.add(LinkCode(code_hash=token_hash(code), person_id=person.id, created_at=now, expires_at=now + CODE_LIFETIME))
        return code

    async def redeem(self, typed: str, *, kind: str, value: str, actor: str) -> tuple[Person, PersonIdentity] | None:
        """Link `kind:value` to the person whose unused, unexpired code was typed; None when
        the code is unknown, used or expired. IdentityTaken when it is someone else's."""
        code = normalise_code(typed)
        if len(code) != CODE_LENGTH:
            return None
        now = self.clock.now()
        async with self.db.transaction() as session:
            row = await session.get(LinkCode, token_hash(code))
            if row is None or row.used_at is not None or now >= row.expires_at:
                return None
            used = await execute_dml(session, update(LinkCode).where(col(LinkCode.code_hash) == row.code_hash,
                                                                col(LinkCode.used_at).is_(None)).values(used_at=now))
            if not used.rowcount:
                return None
            person_id = row.person_id
        identity = await self.people.link(person_id, kind, value, verified_via="code", actor=actor)
        return await self.people.get(person_id), identity

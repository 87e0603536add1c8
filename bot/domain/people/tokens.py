"""Personal API tokens: a script acting as its person, with a role no higher than theirs.

A token is `hdp_` and 32 random bytes, shown once when it is made; only its SHA-256 is kept.
It stops working when revoked, when its person is disabled (every token of theirs is revoked
then, and checked on each use too), and its role is capped by the person's current role, so
demoting someone demotes their scripts. A use moves `last_used_at` at most once a minute (as a
session's `last_seen_at`), so a busy script writes little and its person still sees it is alive.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlmodel import col

from bot.config.people import Role
from bot.domain.people.sessions import TOUCH_EVERY, token_hash
from bot.errors import DeskError
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import ApiToken, Person, new_id

PREFIX = "hdp_"


class InvalidToken(DeskError):
    code = "invalid_token"
    status = 422


@dataclass(frozen=True)
class TokenUse:
    """A token that authenticated: its row, its person, and the role it acts with now."""

    token: ApiToken
    person: Person
    role: Role


class ApiTokens:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    async def create(self, person: Person, *, name: str, role: Role, actor: str) -> tuple[str, ApiToken]:
        """A new token of `person`: its secret (shown once) and its row."""
        if not 1 <= len(name) <= 80 or name != name.strip():
            raise InvalidToken("name: 1-80 characters with no spaces at its start or end, such as nightly-report")
        role = Role(role)
        if not Role(person.role).allows(role):
            raise InvalidToken(f"role: at most {person.role}, the role of {person.name}; got {role}")
        secret = PREFIX + secrets.token_urlsafe(32)
        now = self.clock.now()
        row = ApiToken(id=new_id("tok"), person_id=person.id, name=name, token_hash=token_hash(secret), role=role, created_at=now)
        async with self.db.transaction() as session:
            session.add(row)
            await audit.note(session, "api_token_created", at=now, actor=actor, person_id=person.id, token_id=row.id,
                             name=name, role=role)
        return secret, row

    async def authenticate(self, secret: str) -> TokenUse | None:
        """The token `secret` is, if it works now (not revoked, its person enabled)."""
        if not secret.startswith(PREFIX) or len(secret) > 100:
            return None
        async with self.db.read() as session:
            row = (await session.scalars(select(ApiToken).where(col(ApiToken.token_hash) == token_hash(secret)))).first()
            person = await session.get(Person, row.person_id) if row is not None else None
        if row is None or row.revoked_at is not None or person is None or person.disabled_at is not None:
            return None
        role = min(Role(row.role), Role(person.role), key=lambda r: r.rank)
        now = self.clock.now()
        if row.last_used_at is None or now - row.last_used_at >= TOUCH_EVERY:
            async with self.db.transaction() as session:
                await session.execute(update(ApiToken).where(col(ApiToken.id) == row.id).values(last_used_at=now))
            row.last_used_at = now
        return TokenUse(row, person, role)

    async def of_person(self, person_id: str) -> list[ApiToken]:
        async with self.db.read() as session:
            return list((await session.scalars(select(ApiToken).where(col(ApiToken.person_id) == person_id)
                                               .order_by(col(ApiToken.created_at)))).all())

    async def revoke(self, token_id: str, *, person_id: str, actor: str) -> bool:
        now = self.clock.now()
        async with self.db.transaction() as session:
            result = await execute_dml(session, update(ApiToken).where(
                col(ApiToken.id) == token_id, col(ApiToken.person_id) == person_id, col(ApiToken.revoked_at).is_(None),
            ).values(revoked_at=now))
            changed = bool(result.rowcount)
            if changed:
                await audit.note(session, "api_token_revoked", at=now, actor=actor, person_id=person_id, token_id=token_id)
        return changed

"""Server-side sign-in sessions: a random token in an HttpOnly cookie, only its SHA-256 kept.

A session is over when it is revoked (signing out, "sign out everywhere", the person being
disabled), when it was not used for `sign_in.session_idle`, or `sign_in.session_max` after it
began, whichever comes first. Every inbox request reads its row (one primary-key read) and
moves `last_seen_at` at most once a minute, so a busy inbox writes little.

The owner token's sessions are rows too, with no person: a service identity with the admin
role (bot/domain/people/actor.py).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update
from sqlmodel import col

from bot.config.people import Role, SignInConfig
from bot.domain.people.actor import OWNER_TOKEN
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import Person, PersonSession

TOUCH_EVERY = timedelta(minutes=1)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class OpenSession:
    """A session that is still good, and the person it signs in (None: the owner token)."""

    token_hash: str
    person: Person | None
    via: str
    expires_at: datetime

    @property
    def role(self) -> Role:
        return Role(self.person.role) if self.person is not None else Role.ADMIN

    def csrf(self, key: str) -> str:
        """The CSRF token of this session's forms: bound to it, useless without its cookie."""
        return hmac.new(key.encode(), f"csrf:{self.token_hash}".encode(), hashlib.sha256).hexdigest()


class Sessions:
    def __init__(self, db: Database, clock: Clock, settings: SignInConfig) -> None:
        self.db, self.clock, self.settings = db, clock, settings

    async def open(self, person: Person | None, *, via: str) -> tuple[str, OpenSession]:
        """A new session: the token for the cookie (shown once, never stored), and the session."""
        token = secrets.token_urlsafe(32)
        now = self.clock.now()
        row = PersonSession(token_hash=token_hash(token), person_id=person.id if person else None, via=via,
                            created_at=now, last_seen_at=now, expires_at=now + self.settings.session_max)
        async with self.db.transaction() as session:
            session.add(row)
            await audit.note(session, "signed_in", at=now, actor=person.name if person else OWNER_TOKEN,
                             person_id=person.id if person else None, via=via)
        return token, OpenSession(row.token_hash, person, via, self.cookie_expiry(row))

    def cookie_expiry(self, row: PersonSession) -> datetime:
        return min(row.expires_at, row.last_seen_at + self.settings.session_idle)

    async def current(self, token: str | None) -> OpenSession | None:
        """The session `token` opens, if it is still good (and its person still enabled)."""
        if not token or len(token) > 100:
            return None
        digest = token_hash(token)
        now = self.clock.now()
        async with self.db.read() as session:
            row = await session.get(PersonSession, digest)
            person = await session.get(Person, row.person_id) if row is not None and row.person_id else None
        if row is None or row.revoked_at is not None or now >= self.cookie_expiry(row):
            return None
        if row.person_id is not None and (person is None or person.disabled_at is not None):
            return None
        if now - row.last_seen_at >= TOUCH_EVERY:
            async with self.db.transaction() as session:
                await execute_dml(session, update(PersonSession).where(col(PersonSession.token_hash) == digest).values(last_seen_at=now))
            row.last_seen_at = now
        return OpenSession(digest, person, row.via, self.cookie_expiry(row))

    async def revoke(self, digest: str, *, actor: str, person_id: str | None) -> None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            await execute_dml(session, update(PersonSession).where(col(PersonSession.token_hash) == digest,
                                                              col(PersonSession.revoked_at).is_(None)).values(revoked_at=now))
            await audit.note(session, "signed_out", at=now, actor=actor, person_id=person_id)

    async def revoke_everywhere(self, person_id: str, *, actor: str) -> int:
        """End every session of this person (all browsers); returns how many were open."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            result = await execute_dml(session, update(PersonSession).where(
                col(PersonSession.person_id) == person_id, col(PersonSession.revoked_at).is_(None)).values(revoked_at=now))
            await audit.note(session, "signed_out_everywhere", at=now, actor=actor, person_id=person_id)
        return int(result.rowcount or 0)

    async def open_count(self, person_id: str) -> int:
        """How many sessions of this person are still good (the account page shows it before
        "sign out everywhere")."""
        now = self.clock.now()
        async with self.db.read() as session:
            rows = (await session.scalars(select(PersonSession).where(
                col(PersonSession.person_id) == person_id, col(PersonSession.revoked_at).is_(None),
                col(PersonSession.expires_at) > now))).all()
        return sum(1 for row in rows if now < self.cookie_expiry(row))

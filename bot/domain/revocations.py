"""Owner-inbox sessions signed out before their cookies expired.

The inbox's session is a signed cookie: the server keeps no session table, so without this
a copied cookie would keep working after "Log out" until it expired (12 hours). Logging out
records the session's id here, kept in the database so every instance refuses it, until the
cookie would have expired anyway; then retention prunes the row (bot/delivery/retention.py).

Only the inbox's pages ask (one primary-key read per inbox request); the API, the chat and
the webhooks never do.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from bot.runtime.clock import Clock
from bot.store import prepared
from bot.store.db import Database
from bot.store.models import RevokedSession
from bot.store.rows import Rows

_TABLE = Rows(RevokedSession).table
_REVOKED = prepared.Prepared(select(_TABLE.c.session_id).where(_TABLE.c.session_id == bindparam("sid")))
_REVOKE = prepared.Prepared(insert(_TABLE).values(
    session_id=bindparam("sid"), revoked_at=bindparam("now"), expires_at=bindparam("expires_at")))


class Revocations:
    def __init__(self, db: Database, clock: Clock) -> None:
        self.db, self.clock = db, clock

    async def revoke(self, session_id: str, *, expires_at: datetime) -> None:
        """Refuse this session from now until `expires_at` (its cookie's own expiry). Revoking
        it again (a second logout, another instance) changes nothing."""
        try:
            async with self.db.transaction() as session:
                await prepared.execute(session, _REVOKE, {"sid": session_id, "now": self.clock.now(), "expires_at": expires_at})
        except IntegrityError:
            pass  # already revoked

    async def is_revoked(self, session_id: str) -> bool:
        return await self.db.fetch_one(_REVOKED, {"sid": session_id}) is not None

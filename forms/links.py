"""Signed return-form links: `{public_url}/f/{token}`.

Threat model. The link travels through email, chat and phones, so:
- it is unguessable and unforgeable: the token is a random link id signed with `secret_key`
  (itsdangerous, a salt for this purpose only; `previous_secret_keys` keep links signed
  before a key rotation working);
- it expires: the link row holds `expires_at` (`handoff.form_link_ttl`), checked against the
  desk's clock on every use;
- it can be forwarded: whoever holds it may fill the form, as the seed intends (a recipient
  hands the task to a colleague);
- mail scanners and link previews open links before people do, so GET only shows the form;
  only a POST consumes, and only once: consumption is a conditional UPDATE on the stored
  link id, committed in the same transaction as the release it causes, so two racing
  submissions produce one release and one resume message;
- re-issuing a link (owner inbox) supersedes the older unused ones.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.errors import DeskError
from bot.store.db import execute_dml
from bot.store.models import FormLink, HandoffSession
from bot.store.vocabulary import HandoffState

SALT = "handoff-desk.return-form.v1"


class LinkUnavailable(DeskError):
    """The link cannot be used (any more); `reason` says why, for the page to explain."""

    code = "form_link_unavailable"
    status = 410

    def __init__(self, reason: str) -> None:
        super().__init__(f"the form link is {reason}")
        self.reason = reason


class FormLinks:
    def __init__(self, *, secret_keys: list[str], public_url: str, ttl: timedelta) -> None:
        # itsdangerous signs with the last key and accepts any of them.
        self._serializer = URLSafeSerializer(secret_keys, salt=SALT)
        self.public_url = public_url.rstrip("/")
        self.ttl = ttl

    def token(self, link_id: str) -> str:
        return self._serializer.dumps(link_id)

    def url(self, link_id: str | None) -> str | None:
        return f"{self.public_url}/f/{self.token(link_id)}" if link_id else None

    def url_for(self, handoff: HandoffSession) -> str | None:
        return self.url(handoff.form_link_id) if handoff.state == HandoffState.ACTIVE else None

    def link_id(self, token: str) -> str | None:
        """The link id inside a token, or None when it was not signed by us."""
        try:
            value = self._serializer.loads(token)
        except BadSignature:
            return None
        return value if isinstance(value, str) else None

    async def issue(self, session: AsyncSession, handoff: HandoffSession, now: datetime) -> FormLink:
        """A fresh link for the handoff (inside the caller's transaction); older unused
        links stop working."""
        await session.execute(
            update(FormLink)
            .where(
                col(FormLink.handoff_session_id) == handoff.id,
                col(FormLink.consumed_at).is_(None),
                col(FormLink.superseded_at).is_(None),
            )
            .values(superseded_at=now)
        )
        link = self.new_link(handoff, now)
        session.add(link)
        await session.flush()
        return link

    def new_link(self, handoff: HandoffSession, now: datetime) -> FormLink:
        """A link named on the handoff, for the caller to add. A handoff not stored yet gets
        its first one this way, with nothing to supersede: the handoff row is inserted
        already naming its link instead of being updated to it afterwards. The link's row
        must be flushed after the handoff's (its foreign key; no ORM relationship orders them)."""
        link = FormLink(id=secrets.token_urlsafe(16), handoff_session_id=handoff.id, created_at=now, expires_at=now + self.ttl)
        handoff.form_link_id = link.id
        return link

    @staticmethod
    def check(link: FormLink, now: datetime) -> None:
        """Raise LinkUnavailable unless the link may be used now."""
        if link.consumed_at is not None:
            raise LinkUnavailable("already used")
        if link.superseded_at is not None:
            raise LinkUnavailable("replaced by a newer link")
        if link.expires_at <= now:
            raise LinkUnavailable("expired")

    @staticmethod
    async def consume(session: AsyncSession, link_id: str, now: datetime, by: str) -> None:
        """Use the link up, once, in the caller's transaction; raise LinkUnavailable when a
        concurrent submission (or expiry, or a re-issue) got there first."""
        used = await execute_dml(
            session,
            update(FormLink)
            .where(
                col(FormLink.id) == link_id,
                col(FormLink.consumed_at).is_(None),
                col(FormLink.superseded_at).is_(None),
                col(FormLink.expires_at) > now,
            )
            .values(consumed_at=now, consumed_by=by)
        )
        if used.rowcount != 1:
            link = await session.get(FormLink, link_id)
            if link is None:
                raise LinkUnavailable("not valid")
            FormLinks.check(link, now)
            raise LinkUnavailable("already used")

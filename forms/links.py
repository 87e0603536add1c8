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

from sqlalchemy import Table, bindparam, insert, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.errors import DeskError
from bot.runtime.signed_ids import SignedIds
from bot.store import prepared
from bot.store.models import FormLink, HandoffSession
from bot.store.prepared import Prepared
from bot.store.vocabulary import HandoffState

SALT = "handoff-desk.return-form.v1"

_LINKS: Table = FormLink.__table__  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models; SQLModel does not declare it
_INSERT_LINK = Prepared(insert(_LINKS))
_CONSUME = Prepared(
    update(_LINKS)
    .where(
        _LINKS.c.id == bindparam("link_id"),
        _LINKS.c.consumed_at.is_(None),
        _LINKS.c.superseded_at.is_(None),
        _LINKS.c.expires_at > bindparam("now"),
    )
    .values(consumed_at=bindparam("now"), consumed_by=bindparam("by"))
)


def new_link_id() -> str:
    """A fresh link id: random and unguessable, though only its signed token leaves the desk."""
    return secrets.token_urlsafe(16)


class LinkUnavailable(DeskError):
    """The link cannot be used (any more); `reason` says why, for the page to explain."""

    code = "form_link_unavailable"
    status = 410

    def __init__(self, reason: str) -> None:
        super().__init__(f"the form link is {reason}")
        self.reason = reason


class FormLinks:
    def __init__(self, *, secret_keys: list[str], public_url: str, ttl: timedelta) -> None:
        self._ids = SignedIds(secret_keys, SALT)  # the last key signs, any of them verifies
        self.public_url = public_url.rstrip("/")
        self.ttl = ttl

    def token(self, link_id: str) -> str:
        return self._ids.token(link_id)

    def url(self, link_id: str | None) -> str | None:
        return f"{self.public_url}/f/{self.token(link_id)}" if link_id else None

    def url_for(self, handoff: HandoffSession) -> str | None:
        return self.url(handoff.form_link_id) if handoff.state == HandoffState.ACTIVE else None

    def link_id(self, token: str) -> str | None:
        """The link id inside a token, or None when it was not signed by us."""
        return self._ids.ident(token)

    async def issue(self, session: AsyncSession, handoff: HandoffSession, now: datetime) -> FormLink:
        """A fresh link for the handoff (inside the caller's transaction), which the handoff
        row names from now on; older unused links stop working."""
        await session.execute(
            update(FormLink)
            .where(
                col(FormLink.handoff_session_id) == handoff.id,
                col(FormLink.consumed_at).is_(None),
                col(FormLink.superseded_at).is_(None),
            )
            .values(superseded_at=now)
        )
        link_id = new_link_id()
        await self.store(session, link_id, handoff.id, now)
        await session.execute(update(HandoffSession).where(col(HandoffSession.id) == handoff.id).values(form_link_id=link_id))
        handoff.form_link_id = link_id
        return FormLink(id=link_id, handoff_session_id=handoff.id, created_at=now, expires_at=now + self.ttl)

    async def store(self, session: AsyncSession, link_id: str, handoff_id: str, now: datetime) -> None:
        """Store a link (inside the caller's transaction) with nothing to supersede. A new
        handoff's first link comes this way: its row, inserted just before, already names
        `link_id`, so it is never updated to it afterwards."""
        await prepared.execute(session, _INSERT_LINK, {
            "id": link_id, "handoff_session_id": handoff_id, "created_at": now, "expires_at": now + self.ttl,
            "consumed_at": None, "consumed_by": None, "superseded_at": None,
        })

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
        if await prepared.execute(session, _CONSUME, {"link_id": link_id, "now": now, "by": by}) != 1:
            link = await session.get(FormLink, link_id)
            if link is None:
                raise LinkUnavailable("not valid")
            FormLinks.check(link, now)
            raise LinkUnavailable("already used")

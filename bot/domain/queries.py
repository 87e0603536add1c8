"""The read side: what the API and the pages list and show, as typed rows.

Every change goes through a service (handoffs, approvals, user actions), each a single
conditional update. The pages also need reads that cut across those services: the newest
open handoffs, each conversation's last words, the approvals of one conversation, a
return-form link with its handoff, and the short version the owner inbox polls on. They
live here rather than in the routes, so web code holds no SQL and every query is tested
against a real database (tests/test_queries.py).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, literal_column, or_, select
from sqlmodel import col

from bot.domain import handoff_rows
from bot.domain.approvals import PENDING
from bot.errors import NotFound
from bot.store.db import Database
from bot.store.models import Approval, Conversation, FormLink, HandoffEvent, HandoffRecipient, HandoffSession, Message, Person
from bot.store.prepared import Prepared
from bot.store.vocabulary import OPEN_STATES, HandoffState, RecipientState

_PING = Prepared(select(literal_column("1")))


@dataclass(frozen=True)
class ConversationPreview:
    """One conversation as a list card shows it: its newest message and the subscriber's
    newest one (either may be missing)."""

    conversation: Conversation
    last: Message | None
    said: Message | None


@dataclass(frozen=True)
class LinkedHandoff:
    """A return-form link together with the handoff it hands back."""

    link: FormLink
    handoff: HandoffSession


class Queries:
    """Read-only queries over the store. Each opens its own read session, which never waits
    for (or holds up) a writer."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def ping(self) -> None:
        """Raise when the database cannot answer (the health check reports why)."""
        await self.db.fetch_one(_PING)

    async def handoffs(self, *, states: tuple[HandoffState, ...], limit: int = 100) -> list[HandoffSession]:
        """Newest first. One indexed query per state, merged: an IN over states would make
        SQLite sort every matching row before taking the first `limit`."""
        found: list[HandoffSession] = []
        async with self.db.read() as session:
            for state in states:
                found.extend(await handoff_rows.newest_in_state(session, state, limit))
        return sorted(found, key=lambda h: h.created_at, reverse=True)[:limit]

    async def resume_message(self, handoff: HandoffSession) -> Message | None:
        """The `[Bot resumed — …]` message a released handoff wrote: the one system message
        that carries the handoff's id (None before the release, or for a failed dispatch)."""
        async with self.db.read() as session:
            query = (select(Message).where(col(Message.conversation_id) == handoff.conversation_id,
                                           col(Message.handoff_session_id) == handoff.id, col(Message.role) == "system")
                     .order_by(col(Message.id).desc()).limit(1))
            found: Message | None = await session.scalar(query)
            return found

    async def events(self, handoff_session_id: str) -> list[HandoffEvent]:
        """A handoff's audit trail, oldest first; NotFound when there is no such handoff."""
        async with self.db.read() as session:
            if await handoff_rows.handoff(session, handoff_session_id) is None:
                raise NotFound("handoff session", handoff_session_id)
            query = (select(HandoffEvent).where(col(HandoffEvent.handoff_session_id) == handoff_session_id)
                     .order_by(col(HandoffEvent.id)))
            return list((await session.scalars(query)).all())

    async def previews(self, conversation_ids: Collection[str]) -> dict[str, ConversationPreview]:
        """Per conversation: its newest message and its subscriber's newest one. Two reads,
        each a backwards walk of the (conversation_id, id) index per conversation."""
        if not conversation_ids:
            return {}
        last_id = (select(func.max(col(Message.id))).where(col(Message.conversation_id) == col(Conversation.id))
                   .correlate(Conversation).scalar_subquery())
        said_id = (select(col(Message.id)).where(col(Message.conversation_id) == col(Conversation.id), col(Message.role) == "subscriber")
                   .order_by(col(Message.id).desc()).limit(1).correlate(Conversation).scalar_subquery())
        async with self.db.read() as session:
            rows = (await session.execute(
                select(Conversation, last_id, said_id).where(col(Conversation.id).in_(conversation_ids)))).all()
            wanted = {i for _c, a, b in rows for i in (a, b) if i is not None}
            found = {m.id: m for m in (await session.scalars(select(Message).where(col(Message.id).in_(wanted)))).all()} if wanted else {}
        return {
            c.id: ConversationPreview(c, found.get(a) if a else None, found.get(b) if b else None)
            for c, a, b in rows
        }

    async def subscriber_names(self, conversation_ids: Collection[str]) -> dict[str, str | None]:
        """The subscriber's name (None when unknown) per conversation that exists."""
        if not conversation_ids:
            return {}
        async with self.db.read() as session:
            rows = await session.execute(
                select(col(Conversation.id), col(Conversation.subscriber_name)).where(col(Conversation.id).in_(conversation_ids))
            )
            return {cid: name for cid, name in rows.all()}

    async def person_names(self, person_ids: Collection[str]) -> dict[str, str]:
        """The directory's name per person that exists (the pages show who was offered a
        handoff by name; one read for a whole page or list)."""
        if not person_ids:
            return {}
        async with self.db.read() as session:
            rows = await session.execute(select(col(Person.id), col(Person.name)).where(col(Person.id).in_(list(person_ids))))
            return {pid: name for pid, name in rows.all()}

    async def conversation_approvals(self, conversation_id: str) -> list[Approval]:
        """Every approval asked for in one conversation, oldest first."""
        async with self.db.read() as session:
            query = select(Approval).where(col(Approval.conversation_id) == conversation_id).order_by(col(Approval.created_at))
            return list((await session.scalars(query)).all())

    async def form_link(self, link_id: str) -> FormLink | None:
        async with self.db.read() as session:
            return await session.get(FormLink, link_id)

    async def linked_handoff(self, link_id: str) -> LinkedHandoff | None:
        """The link and its handoff, or None when either is gone: one joined query, since the
        return form asks this on every GET and POST."""
        row = await self.db.fetch_one(handoff_rows.SELECT_LINKED, {"link_id": link_id})
        return LinkedHandoff(*handoff_rows.linked_of(row)) if row is not None else None

    async def inbox_version(self, now: datetime, *, limit: int) -> str:
        """A short hash of what decides the owner inbox's list.

        Indexed reads only: the newest `limit` open handoffs per state (with their deadline
        and their conversation's newest message id, one index seek each), the pending
        approvals, and the approved ones of the last day whose action has not finished (its
        result shows up on the list). Anything the list shows changes one of these."""
        newest = (select(func.max(col(Message.id))).where(col(Message.conversation_id) == col(HandoffSession.conversation_id))
                  .correlate(HandoffSession).scalar_subquery())
        # On a route the card also shows each recipient's state: a count per state moves with it
        settled = [
            select(func.count()).where(col(HandoffRecipient.handoff_session_id) == col(HandoffSession.id),
                                       col(HandoffRecipient.state) == state)
            .correlate(HandoffSession).scalar_subquery()
            for state in (RecipientState.NOTIFIED, RecipientState.FAILED)
        ]
        parts: list[Any] = []
        async with self.db.read() as session:
            for state in OPEN_STATES:
                rows = (await session.execute(
                    select(col(HandoffSession.id), col(HandoffSession.idle_deadline), newest, col(HandoffSession.step),
                           col(HandoffSession.escalate_at), col(HandoffSession.claimed_at), *settled)
                    .where(col(HandoffSession.state) == state).order_by(col(HandoffSession.created_at).desc()).limit(limit)
                )).all()
                parts.append([tuple(map(str, row)) for row in rows])
            pending = (await session.execute(
                select(col(Approval.id), col(Approval.deadline)).where(col(Approval.state) == PENDING)
                .order_by(col(Approval.deadline)).limit(limit)
            )).all()
            parts.append(sorted(aid for aid, deadline in pending if deadline > now))
            running = (await session.execute(
                select(col(Approval.id), col(Approval.run_state)).where(
                    col(Approval.state) == "approved", col(Approval.deadline) > now - timedelta(days=1),
                    or_(col(Approval.run_state).is_(None), col(Approval.run_state) == "running"))
            )).all()
            parts.append(sorted((aid, run_state or "") for aid, run_state in running))
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:20]

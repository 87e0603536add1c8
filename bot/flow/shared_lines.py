"""Recipients on a channel without threads share one line for all their handoffs.

A recipient reached by a phone number has a single chat with the bot: when two subscribers
are handed to the same person, both handoffs live in that one chat, and a plain reply cannot say which
subscriber it is for. The rules, for any channel whose adapter declares no threads:

- a reply goes to the *focused* handoff: the one the recipient addressed last, or the
  newest one if it arrived later;
- `#A7F3 text` addresses handoff A7F3 (its short code) and focuses it; `#A7F3` alone only
  focuses; `#A7F3 /release` releases that one, a plain `/release` the focused one;
- `/list` answers with the open handoffs on the line;
- when several are open, every unaddressed message is acknowledged with where it went, so a
  reply can never silently reach the wrong subscriber;
- a code of a handoff that has ended is answered, not relayed to someone else.

Answers to the recipient are notices in the outbox of a handoff on the line, so they are
stored, retried and audited like every other delivery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import Select, and_, select, union, update
from sqlmodel import col

from bot.delivery.outbox import Outbox
from bot.domain.rendering import Renderer
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database
from bot.store.models import Conversation, HandoffRecipient, HandoffSession
from bot.store.vocabulary import HandoffState
from channels.base import Notice

# "#A7F3 text", "#a7f3: text", "#A7F3" — short codes are 4 letters or digits (channels.base.short_code_of).
_ADDRESS = re.compile(r"^\s*#([A-Za-z0-9]{4})(?=[\s:,]|$)[:,]?\s*", re.S)
_LIST = re.compile(r"^\s*/list\s*$", re.I)
_RECENTLY_ENDED = timedelta(days=2)


@dataclass(frozen=True)
class OpenHandoff:
    id: str
    short_code: str
    subscriber: str
    summary: str
    thread: dict[str, Any]
    routed: bool = False  # on a route (config `routes:`): whose it is depends on its claim


@dataclass(frozen=True)
class Route:
    """Where one recipient message goes. `to` None: nothing to relay (`result` says why;
    `answered` when the recipient was already told). `others` are the other open handoffs
    on the line."""

    to: OpenHandoff | None
    text: str
    result: str
    others: list[OpenHandoff] = field(default_factory=list)
    addressed: bool = False
    answered: bool = False

    @property
    def ambiguous(self) -> bool:
        return self.to is not None and not self.addressed and bool(self.others)


class SharedLines:
    def __init__(self, *, db: Database, clock: Clock, outbox: Outbox, renderer: Renderer) -> None:
        self.db, self.clock, self.outbox, self.renderer = db, clock, outbox, renderer

    async def route(self, channel_id: int, thread_key: str, text: str) -> Route:
        line = await self._open(channel_id, thread_key)
        if _LIST.match(text):
            if not line:
                return Route(None, text, "no active handoff on this line")
            await self._answer(channel_id, line[0], "messages/line_list.txt", handoffs=line)
            return Route(None, text, "listed the open handoffs", answered=True)
        address = _ADDRESS.match(text)
        if address:
            code, rest = address.group(1).upper(), text[address.end():]
            hits = [h for h in line if h.short_code == code]
            if len(hits) > 1:  # two open handoffs share a code: never guess which one is meant
                await self._answer(channel_id, line[0], "messages/line_list.txt", handoffs=line)
                return Route(None, text, f"#{code} is ambiguous; listed the open handoffs", answered=True)
            hit = hits[0] if hits else None
            if hit is not None:
                await self._focus(hit)
                if not rest.strip():
                    await self._answer(channel_id, hit, "messages/line_focus.txt", handoff=hit)
                    return Route(None, text, f"focused #{code}", answered=True)
                return Route(hit, rest, "addressed", [h for h in line if h is not hit], addressed=True)
            ended = await self._recently_ended(channel_id, thread_key, code)
            if ended is not None:
                await self._answer(channel_id, ended, "messages/line_ended.txt", handoff=ended, open=line)
                return Route(None, text, f"#{code} has ended; not relayed", answered=True)
            # Not a code of this line: "#1234 is the order number" is just text.
        if not line:
            return Route(None, text, "no active handoff on this line")
        return Route(line[0], text, "focused", line[1:])

    async def acknowledge(self, channel_id: int, route: Route) -> None:
        """Tell the recipient which subscriber an unaddressed message reached."""
        assert route.to is not None
        await self._answer(channel_id, route.to, "messages/line_routed.txt", handoff=route.to, others=route.others)

    async def focused(self, channel_id: int, thread_key: str) -> OpenHandoff | None:
        """The handoff a plain message on the line goes to (the desk answers on it), or None."""
        line = await self._open(channel_id, thread_key)
        return line[0] if line else None

    # ------------------------------------------------------------------ internals

    async def _open(self, channel_id: int, thread_key: str) -> list[OpenHandoff]:
        """The line's active handoffs, the focused one first."""
        async with self.db.read() as session:
            rows = (await session.execute(
                _on_line(channel_id, thread_key)
                .where(col(HandoffSession.state) == HandoffState.ACTIVE)
                .order_by(col(HandoffSession.focused_at).desc(),  # set on activation (and backfilled by migration 0005)
                          col(HandoffSession.created_at).desc())
            )).all()
        return [_view(handoff, name, thread) for handoff, name, thread in rows]

    async def _recently_ended(self, channel_id: int, thread_key: str, code: str) -> OpenHandoff | None:
        since = self.clock.now() - _RECENTLY_ENDED
        async with self.db.read() as session:
            rows = (await session.execute(
                _on_line(channel_id, thread_key)
                .where(col(HandoffSession.state) != HandoffState.ACTIVE, col(HandoffSession.released_at) >= since)
                .order_by(col(HandoffSession.released_at).desc())
                .limit(200)
            )).all()
        return next((_view(h, name, thread) for h, name, thread in rows if h.short_code == code), None)

    async def _focus(self, handoff: OpenHandoff) -> None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(
                update(HandoffSession).where(col(HandoffSession.id) == handoff.id, col(HandoffSession.state) == HandoffState.ACTIVE)
                .values(focused_at=now)
            )

    async def _answer(self, channel_id: int, on: OpenHandoff, template: str, **values: object) -> None:
        text = self.renderer.render(template, **values).strip()
        now = self.clock.now()
        async with self.db.transaction() as session:
            await self.outbox.queue(
                session, channel_id=channel_id, now=now,
                outbound=Notice(handoff_id=on.id, text=text, thread=on.thread, about="routing"),
            )
            await audit.note(session, "line_answered", at=now, actor="desk", handoff_session_id=on.id,
                             template=template.rsplit("/", 1)[-1])


def _on_line(channel_id: int, thread_key: str) -> Select[HandoffSession, str | None, dict[str, Any] | None]:
    """The handoffs on one line with their subscriber's name and, for one on a route that
    reached this line among others, the thread its dispatch landed in here; each lookup adds
    which ones (open or recently ended) and in what order."""
    here = and_(col(HandoffRecipient.handoff_session_id) == col(HandoffSession.id), col(HandoffRecipient.channel_id) == channel_id)
    # Two indexed lookups, not an OR across the join (which would scan every handoff)
    on_line = union(
        select(col(HandoffSession.id)).where(col(HandoffSession.channel_id) == channel_id, col(HandoffSession.thread_key) == thread_key),
        select(col(HandoffRecipient.handoff_session_id))
        .where(col(HandoffRecipient.channel_id) == channel_id, col(HandoffRecipient.thread_key) == thread_key),
    )
    return (
        select(HandoffSession, col(Conversation.subscriber_name), col(HandoffRecipient.thread))
        .join(Conversation, col(Conversation.id) == col(HandoffSession.conversation_id))
        .outerjoin(HandoffRecipient, here)
        .where(col(HandoffSession.id).in_(on_line))
    )


def _view(handoff: HandoffSession, subscriber_name: str | None, thread: dict[str, Any] | None = None) -> OpenHandoff:
    return OpenHandoff(
        id=handoff.id, short_code=handoff.short_code, subscriber=subscriber_name or "Subscriber",
        summary=handoff.summary, thread=dict(thread or handoff.thread or {}), routed=handoff.route_id is not None,
    )

"""`/away [note]` and `/back` from a channel: the sender's person is away, or available again.

The adapter turns the command into an `AvailabilityRequest` carrying where to answer; the
person is the one the sender's identity on this channel is linked to (`People.identify`, as
every act from a channel is resolved: bot/flow/inbound.py). The change, its audit row and
the desk's `Answer` commit in one transaction (bot/domain/people/availability.py), which is
the event's effect: a redelivered request is worked once. An identity linked to nobody
changes nothing and is told to link it first: a provider's display name is no proof of who
someone is.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession

from bot.delivery.outbox import Outbox
from bot.domain.people import People
from bot.domain.people.availability import Availability
from bot.domain.rendering import Renderer
from bot.runtime.clock import Clock
from bot.store.db import Database
from bot.store.models import Person
from channels.base import Answer, AvailabilityRequest

TEMPLATE = "messages/availability.txt"
NOT_LINKED = "not changed: this identity is not linked to a person"


class ChannelAvailability:
    def __init__(self, *, db: Database, clock: Clock, people: People, availability: Availability, outbox: Outbox,
                 renderer: Renderer, kind_of: Callable[[int], str], public_url: str) -> None:
        self.db, self.clock, self.people, self.availability = db, clock, people, availability
        self.outbox, self.renderer = outbox, renderer
        self.linking_page = f"{public_url.rstrip('/')}/inbox/account/linking"
        self._kind_of = kind_of  # channel id -> the channel's kind: the identities' kind

    async def in_chat(self, channel_id: int, request: AvailabilityRequest) -> str:
        """Record what the sender said and answer where they said it; what the event records."""
        kind = self._kind_of(channel_id)
        person = await self.people.identify(kind, request.user_id) if request.user_id else None
        if person is None:
            async with self.db.transaction(effect=True) as session:
                await self._say(session, channel_id, request, self._text("not_linked", kind))
            return NOT_LINKED

        async def answer(session: AsyncSession, changed: Person) -> None:
            outcome = "away" if request.away else "back"
            await self._say(session, channel_id, request, self._text(outcome, kind, changed))

        via = f"channel:{channel_id}"
        actor = f"{person.name} ({via})"
        if request.away:
            await self.availability.set_away(person.id, note=request.note, via=via, actor=actor, answer=answer)
            return f"{person.id} is away"
        await self.availability.set_available(person.id, via=via, actor=actor, answer=answer)
        return f"{person.id} is available"

    def _text(self, outcome: str, kind: str, person: Person | None = None) -> str:
        return self.renderer.render(TEMPLATE, outcome=outcome, kind=kind, person=person.name if person else None,
                                    note=person.away_note if person else None, linking=self.linking_page).strip()

    async def _say(self, session: AsyncSession, channel_id: int, request: AvailabilityRequest, text: str) -> None:
        await self.outbox.queue(session, channel_id=channel_id, now=self.clock.now(),
                                outbound=Answer(text=text, to=request.reply_to))

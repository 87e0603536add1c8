"""Whether a person is there: away (they said so, in the inbox, from a channel's `/away`, or
an admin said so for them) or back, and their presence now (bot/domain/people/reach.py).

Teams and on-call schedules skip a person who is away, so being away is recorded, not
guessed: one UPDATE of their row and one audit row (`person_away` / `person_available`,
saying through what and, when given, their note and until when), in one transaction with
the desk's answer to a chat command when there is one (`answer`, queued in the outbox by
the caller), so a redelivered `/away` is worked once and a crash never leaves a change
nobody was told of. That transaction is the effect of the caller's event
(bot/runtime/effects.py).

Away lasts until they are back, or until `away_until` when they said: from then on
`presence` reads them as available again, with no timer to write it (the row keeps its
values until the next change).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import HoursConfig
from bot.domain.people.directory import People
from bot.domain.people.reach import Presence, presence
from bot.errors import DeskError, NotFound
from bot.runtime.clock import Clock
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import Person

NOTE_LENGTH = 200  # Person.away_note's column


class InvalidAvailability(DeskError):
    """An away note or until that cannot be stored; the message names the field."""

    code = "invalid_availability"
    status = 422


Answer = Callable[[AsyncSession, Person], Awaitable[None]]
"""Queues the desk's answer to whoever asked (a chat command), in the change's transaction,
with the person as the change left them."""


def checked_note(note: str | None) -> str | None:
    """The note as stored: its runs of spaces collapsed; empty is none. Longer than the
    column is refused, never cut."""
    if note is None:
        return None
    tidy = " ".join(note.split())
    if len(tidy) > NOTE_LENGTH:
        raise InvalidAvailability(f"note: at most {NOTE_LENGTH} characters, got {len(tidy)}")
    return tidy or None


class Availability:
    def __init__(self, db: Database, clock: Clock, people: People, schedules: Mapping[str, HoursConfig]) -> None:
        self.db, self.clock, self.people = db, clock, people
        self.schedules = schedules  # the config's `hours:`: people's working hours name one

    def presence_of(self, person: Person, now: datetime | None = None) -> Presence:
        """`person`'s presence at `now` (default: the clock's now), their working hours read
        from the config's schedules."""
        return presence(person, now or self.clock.now(), self.schedules)

    async def set_away(self, pid: str, *, until: datetime | None = None, note: str | None = None, via: str,
                       actor: str, answer: Answer | None = None) -> Person:
        """Away from now (already away: since when they went, with the new note and until),
        until they are back or `until`, which must be ahead and carry a timezone."""
        now = self.clock.now()
        tidy = checked_note(note)
        if until is not None:
            if until.tzinfo is None:
                raise InvalidAvailability("until: give a timezone (such as 2026-12-24T18:00+01:00 or …Z)")
            if until <= now:
                raise InvalidAvailability(f"until: {until.isoformat()} has passed; give a moment ahead, or none")
        async with self.db.transaction(effect=True) as session:
            current = await session.get(Person, pid)
            if current is None:
                raise NotFound("person", pid)
            away_now = presence(current, now, {}) is Presence.AWAY
            since = current.away_since if away_now and current.away_since is not None else now
            await self._write(session, pid, now, away_since=since, away_until=until, away_note=tidy)
            await audit.note(session, "person_away", at=now, actor=actor, person_id=pid, via=via, note=tidy,
                             until=until.isoformat() if until else None, already_away=away_now or None)
            changed = await self._reread(session, pid)
            if answer is not None:
                await answer(session, changed)
        self.people.forget()
        return changed

    async def set_available(self, pid: str, *, via: str, actor: str, answer: Answer | None = None) -> Person:
        """Back: available again (within their working hours). Recorded even when they were
        not away, so the trail shows every time someone said so."""
        now = self.clock.now()
        async with self.db.transaction(effect=True) as session:
            current = await session.get(Person, pid)
            if current is None:
                raise NotFound("person", pid)
            was_away = presence(current, now, {}) is Presence.AWAY
            note = current.away_note if was_away else None  # read before the update refreshes `current`
            await self._write(session, pid, now, away_since=None, away_until=None, away_note=None)
            await audit.note(session, "person_available", at=now, actor=actor, person_id=pid, via=via, note=note,
                             was_away=was_away)
            changed = await self._reread(session, pid)
            if answer is not None:
                await answer(session, changed)
        self.people.forget()
        return changed

    @staticmethod
    async def _write(session: AsyncSession, pid: str, now: datetime, **values: object) -> None:
        written = await execute_dml(session, update(Person).where(col(Person.id) == pid).values(**values, updated_at=now))
        if written.rowcount != 1:
            raise NotFound("person", pid)

    @staticmethod
    async def _reread(session: AsyncSession, pid: str) -> Person:
        person = await session.get(Person, pid, populate_existing=True)
        if person is None:
            raise NotFound("person", pid)
        return person

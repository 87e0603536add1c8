"""What every room of the handoff service shares: its dependencies, and the few reads and
measures more than one room needs.

One `HandoffContext` is built by `Handoffs` and handed to each room (requesting, dispatch,
activation, relay, claims, release, escalation), so a room names what it uses
(`self.ctx.db`, `self.ctx.clock`) and none keeps a copy of the configuration that could
drift from another's. It holds no state of a handoff: every handoff lives in its row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property

from sqlalchemy.ext.asyncio import AsyncSession

from bot.config import HandoffSettings, Ladder
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.domain import handoff_rows as rows
from bot.domain.hours import OfficeHours
from bot.domain.ladder import Steps
from bot.domain.offers import Reach
from bot.domain.rendering import Renderer
from bot.errors import found
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.store.db import Database
from bot.store.models import HandoffSession
from channels.base import DEFAULT_PUBLIC_NAME
from forms.links import FormLinks

UNKNOWN_WAIT = "as soon as someone is available"  # a handoff row from before estimated_response was kept


@dataclass(frozen=True, kw_only=True)
class HandoffContext:
    """The service's dependencies, and what several rooms read or measure alike."""

    db: Database
    clock: Clock
    settings: HandoffSettings
    channels: ChannelSet
    outbox: Outbox
    renderer: Renderer
    metrics: Metrics
    forms: FormLinks
    hours: OfficeHours
    ladders: Mapping[int, Ladder]
    background: Background
    reach: Reach | None = None  # a route's people (bot/domain/offers.py); None: its steps reach channels only

    @cached_property
    def steps(self) -> Steps:
        """Which of a ladder's steps can run now, from the channels, their hours and the people."""
        return Steps(self.channels, self.hours, self.reach)

    @property
    def idle_timeout(self) -> timedelta:
        return self.settings.idle_timeout

    async def get(self, session_id: str) -> HandoffSession:
        """The handoff as stored now: one read on its own, outside any transaction."""
        return found(rows.handoff_of(await self.db.fetch_one(rows.SELECT_HANDOFF, {"sid": session_id})), "handoff session", session_id)

    def public_name(self, handoff: HandoffSession) -> str:
        """What the subscriber is told the channel is called (its `public_name`; the default
        when the channel has since left the config). Its `label` is for the owner only."""
        if handoff.route_id is not None:
            ladder = self.ladders.get(handoff.route_id)
            return ladder.route.public_name if ladder is not None else DEFAULT_PUBLIC_NAME
        adapter = self.channels.get(handoff.channel_id)
        return adapter.config.public_name if adapter is not None else DEFAULT_PUBLIC_NAME

    def offered(self) -> list[Ladder]:
        """The routes the model may hand to now: those with at least one channel up."""
        return [ladder for ladder in self.ladders.values() if self.steps.is_available(ladder)]

    def target_ids(self) -> list[int]:
        """Every id `handoff_request` takes now: the available channels, then the routes."""
        return [a.id for a in self.channels.available()] + [ladder.id for ladder in self.offered()]

    def observe_time_to_human(self, handoff: HandoffSession, channel_kind: str, now: datetime) -> None:
        """From the handoff reaching its first person to a person acting on it."""
        if handoff.activated_at is not None:
            waited = (now - handoff.activated_at).total_seconds()
            self.metrics.time_to_human.labels(channel_kind, route_label(handoff)).observe(waited)


async def handoff_in(session: AsyncSession, session_id: str) -> HandoffSession:
    """The handoff as `session` reads it (NotFound when there is none)."""
    return found(await rows.handoff(session, session_id), "handoff session", session_id)


def elapsed(start: datetime | None, end: datetime) -> float | None:
    """Whole milliseconds, as the reports store and bucket them (None without a start)."""
    return None if start is None else round((end - start).total_seconds(), 3)


def seconds_to_person(handoff: HandoffSession, now: datetime) -> float | None:
    """The reports' time to a person of a handoff reached now: from its activation."""
    return elapsed(handoff.activated_at or handoff.created_at, now)


def route_label(handoff: HandoffSession) -> str:
    """The `route` label of the timing histograms: the route's id, "" straight to a channel."""
    return "" if handoff.route_id is None else str(handoff.route_id)

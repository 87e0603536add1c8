"""Pruning of delivery bookkeeping: processed inbound events and finished outbox items, and
the inbox's revoked sessions once their cookies have expired anyway.

Both tables grow with every message (on a front, with every subscriber message too), and
both hold copies of message text, so keeping them forever costs disk and keeps personal
data around for no purpose. What matters afterwards is in the conversation and the audit
trail, which are never pruned here. Inbound events are kept long enough to recognise a
provider's redelivery; pending or in-flight rows are never touched.

Deletes run in small batches, each its own short transaction, so a first run over a large
backlog never holds the (SQLite) write lock for long. Several instances may prune at once:
deleting a row twice is harmless.
"""

from __future__ import annotations

from datetime import datetime

import structlog
from sqlalchemy import Select, delete, select
from sqlmodel import col

from bot.config import RetentionSettings
from bot.runtime.clock import Clock
from bot.store.db import Database, execute_dml
from bot.store.models import InboundEvent, OutboxItem, RevokedSession
from bot.store.vocabulary import InboundState, OutboxState

log = structlog.get_logger(__name__)

BATCH = 500
FINISHED_EVENTS = (InboundState.DONE, InboundState.IGNORED, InboundState.FAILED)
FINISHED_ITEMS = (OutboxState.SENT, OutboxState.FAILED)


class Retention:
    def __init__(self, db: Database, clock: Clock, settings: RetentionSettings) -> None:
        self.db, self.clock, self.settings = db, clock, settings
        self._next_run: datetime | None = None

    async def sweep(self) -> dict[str, int]:
        """Run by the periodic sweep; prunes at most once per `every`."""
        now = self.clock.now()
        if self._next_run is not None and now < self._next_run:
            return {}
        self._next_run = now + self.settings.every
        return await self.prune()

    async def prune(self) -> dict[str, int]:
        now = self.clock.now()
        pruned = {"inbound_events": 0, "outbox": 0}
        if self.settings.inbound_events is not None:
            cutoff = now - self.settings.inbound_events
            pruned["inbound_events"] = await self._in_batches(
                select(col(InboundEvent.id)).where(col(InboundEvent.received_at) < cutoff, col(InboundEvent.state).in_(FINISHED_EVENTS)),
                InboundEvent,
            )
        if self.settings.outbox is not None:
            cutoff = now - self.settings.outbox
            pruned["outbox"] = await self._in_batches(
                # not_before is when the item was last scheduled: a finished item's last attempt
                select(col(OutboxItem.id)).where(col(OutboxItem.state).in_(FINISHED_ITEMS), col(OutboxItem.not_before) < cutoff),
                OutboxItem,
            )
        pruned["revoked_sessions"] = await self._expired_revocations(now)
        if any(pruned.values()):
            log.info("retention_pruned", **pruned)
        return pruned

    async def _expired_revocations(self, now: datetime) -> int:
        """A revoked session whose cookie has expired is refused by its signature's age alone.
        One row per logout: a single statement, no batches needed."""
        async with self.db.transaction() as session:
            deleted = await execute_dml(session, delete(RevokedSession).where(col(RevokedSession.expires_at) < now))
        return deleted.rowcount

    async def _in_batches(self, ids: Select[int | None], table: type[InboundEvent] | type[OutboxItem]) -> int:
        total = 0
        while True:
            async with self.db.transaction() as session:
                batch = list((await session.scalars(ids.limit(BATCH))).all())
                if batch:
                    await session.execute(delete(table).where(col(table.id).in_(batch)))
            total += len(batch)
            if len(batch) < BATCH:
                return total

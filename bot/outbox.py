"""The outbox: the one place that delivers, retries and gives up.

Every outbound message is first stored as an `OutboxItem` in the same transaction as the
change it reports (a subscriber message, a release), then delivered after commit. A crash
between the two loses nothing: the worker finds the pending row on the next start.

Rules the worker keeps:
- per handoff, messages go out in the order they were stored (an item waits while an
  earlier one of the same session is pending), so a retry never reorders a conversation;
- an item is claimed by a conditional UPDATE with a lease, so several instances never send
  the same item at once, and an instance that dies mid-send gives it back when the lease ends;
- transient errors back off exponentially (or as long as the provider asked), permanent
  errors fail at once, and every attempt outcome lands in the audit trail.

Dispatches are the exception: `handoff_request` must tell the model now whether a person
was notified, so they are delivered inline by `deliver_now` within a time budget, never by
the worker.
"""

from __future__ import annotations

import asyncio
import random
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from bot import audit
from bot.channel_set import ChannelSet
from bot.clock import Clock
from bot.db import Database
from bot.metrics import Metrics
from bot.models import OutboxItem
from channels.base import ChannelError, Outbound, PermanentChannelError, Receipt, TransientChannelError

log = structlog.get_logger(__name__)

PENDING, SENDING, SENT, FAILED = "pending", "sending", "sent", "failed"


class DeliveryFailed(Exception):
    """Delivery was given up; `error` is the last channel error."""

    def __init__(self, error: ChannelError, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


class Outbox:
    def __init__(
        self,
        db: Database,
        channels: ChannelSet,
        clock: Clock,
        metrics: Metrics,
        *,
        max_attempts: int = 10,
        base_backoff: float = 1.0,
        max_backoff: float = 600.0,
        lease: timedelta = timedelta(seconds=60),
        poll_interval: float = 1.0,
        concurrency: int = 16,
    ) -> None:
        self.db, self.channels, self.clock, self.metrics = db, channels, clock, metrics
        self.max_attempts, self.base_backoff, self.max_backoff = max_attempts, base_backoff, max_backoff
        self.lease, self.poll_interval = lease, poll_interval
        self._semaphore = asyncio.Semaphore(concurrency)
        self._kick = asyncio.Event()
        self._pass_lock = asyncio.Lock()
        self._worker: asyncio.Task[None] | None = None

    # ------------------------------------------------------------------ storing

    def enqueue(
        self, session: AsyncSession, *, channel_id: int, outbound: Outbound, now: datetime, message_id: int | None = None
    ) -> OutboxItem:
        """Add an item inside the caller's transaction; call `kick()` after commit."""
        item = OutboxItem(
            channel_id=channel_id,
            handoff_session_id=outbound.handoff_session_id,
            purpose=outbound.purpose,
            message_id=message_id,
            payload=outbound.model_dump(mode="json"),
            not_before=now,
            created_at=now,
        )
        session.add(item)
        return item

    def kick(self) -> None:
        self._kick.set()

    # ------------------------------------------------------------------ delivering

    async def deliver_now(self, item_id: int, *, budget: timedelta) -> Receipt:
        """Deliver one item inline, retrying transient errors while the budget allows.

        Raises DeliveryFailed when the item is given up (it is then marked failed, so the
        worker will never send it later behind the caller's back).
        """
        deadline = self.clock.now() + budget
        while True:
            item = await self._claim(item_id)
            if item is None:
                raise DeliveryFailed(PermanentChannelError("the message is no longer pending"), 0)
            try:
                receipt = await self._send(item)
            except ChannelError as error:
                delay = self._retry_delay(error, item.attempts)
                room = (deadline - self.clock.now()).total_seconds()
                if delay is None or delay > room:
                    await self._record_failure(item, error, retry_in=None)
                    raise DeliveryFailed(error, item.attempts) from None
                await self._record_failure(item, error, retry_in=delay)
                await asyncio.sleep(delay)
                continue
            await self._record_success(item, receipt)
            return receipt

    async def deliver_due(self) -> int:
        """One worker pass: deliver every due relay/notice that is next in its session.
        Returns how many items were attempted."""
        async with self._pass_lock:
            now = self.clock.now()
            earlier = aliased(OutboxItem)
            blocked = exists().where(
                earlier.handoff_session_id == OutboxItem.handoff_session_id,
                earlier.id < OutboxItem.id,
                earlier.state.in_((PENDING, SENDING)),
            )
            due = or_(
                and_(OutboxItem.state == PENDING, OutboxItem.not_before <= now),
                and_(OutboxItem.state == SENDING, OutboxItem.lease_until < now),
            )
            query = (
                select(OutboxItem.id)
                .where(due, OutboxItem.purpose != "dispatch", ~blocked)
                .order_by(OutboxItem.id)
                .limit(200)
            )
            async with self.db.transaction() as session:
                ids = list((await session.scalars(query)).all())
            if ids:
                await asyncio.gather(*(self._deliver_once(i) for i in ids))
            return len(ids)

    async def drain(self) -> None:
        """Deliver until nothing is due now (used at shutdown, by tests and the demo)."""
        while await self.deliver_due():
            pass

    async def _deliver_once(self, item_id: int) -> None:
        async with self._semaphore:
            item = await self._claim(item_id)
            if item is None:
                return  # another instance got it
            try:
                receipt = await self._send(item)
            except ChannelError as error:
                await self._record_failure(item, error, retry_in=self._retry_delay(error, item.attempts))
                return
            await self._record_success(item, receipt)

    async def _send(self, item: OutboxItem) -> Receipt:
        adapter = self.channels.get(item.channel_id)
        if adapter is None or not self.channels.is_available(item.channel_id):
            raise TransientChannelError(f"channel {item.channel_id} is not running", hint="the channel is not available")
        try:
            return await adapter.send(Outbound.model_validate(item.payload))
        except ChannelError:
            raise
        except Exception as exc:  # an adapter bug must not kill the worker; bounded by max_attempts
            log.exception("channel_send_crashed", channel_id=item.channel_id, outbox_id=item.id)
            raise TransientChannelError(f"{type(exc).__name__}: {exc}", hint="internal error in the channel adapter") from exc

    def _retry_delay(self, error: ChannelError, attempts: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        if not isinstance(error, TransientChannelError) or attempts >= self.max_attempts:
            return None
        backoff = min(self.max_backoff, self.base_backoff * 2 ** (attempts - 1))
        backoff *= 0.8 + 0.4 * random.random()  # spread retries of many items
        return max(backoff, error.retry_after or 0.0)

    # ------------------------------------------------------------------ bookkeeping

    async def _claim(self, item_id: int) -> OutboxItem | None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            claimed = await session.execute(
                update(OutboxItem)
                .where(
                    OutboxItem.id == item_id,
                    or_(OutboxItem.state == PENDING, and_(OutboxItem.state == SENDING, OutboxItem.lease_until < now)),
                )
                .values(state=SENDING, lease_until=now + self.lease, attempts=OutboxItem.attempts + 1)
            )
            if claimed.rowcount != 1:
                return None
            return await session.get(OutboxItem, item_id)

    def _kind_of(self, channel_id: int) -> str:
        adapter = self.channels.get(channel_id)
        return adapter.kind if adapter else "unknown"

    async def _record_success(self, item: OutboxItem, receipt: Receipt) -> None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            await session.execute(
                update(OutboxItem)
                .where(OutboxItem.id == item.id)
                .values(state=SENT, sent_at=now, lease_until=None, last_error=None, receipt=receipt.model_dump(mode="json"))
            )
            if item.purpose != "dispatch":
                await audit.record(
                    session,
                    "relayed_to_recipient" if item.purpose == "relay" else "notice_delivered",
                    at=now, actor="outbox", handoff_session_id=item.handoff_session_id,
                    outbox_id=item.id, message_id=item.message_id, channel_message_id=receipt.message_id,
                    attempts=item.attempts,
                )
        self.metrics.deliveries.labels(self._kind_of(item.channel_id), item.purpose, "sent").inc()
        if item.purpose == "relay":
            self.metrics.relayed.labels("to_recipient").inc()

    async def _record_failure(self, item: OutboxItem, error: ChannelError, *, retry_in: float | None) -> None:
        now = self.clock.now()
        values: dict[str, Any] = {"lease_until": None, "last_error": f"{type(error).__name__}: {error}"}
        if retry_in is None:
            values["state"] = FAILED
        else:
            values.update(state=PENDING, not_before=now + timedelta(seconds=retry_in))
        async with self.db.transaction() as session:
            await session.execute(update(OutboxItem).where(OutboxItem.id == item.id).values(**values))
            await audit.record(
                session,
                "delivery_failed" if retry_in is None else "delivery_retry_scheduled",
                at=now, actor="outbox", handoff_session_id=item.handoff_session_id,
                outbox_id=item.id, purpose=item.purpose, message_id=item.message_id, attempts=item.attempts,
                error=str(error), error_type=type(error).__name__, hint=error.hint,
                retry_in_seconds=None if retry_in is None else round(retry_in, 3),
            )
        result = "failed" if retry_in is None else "retry"
        self.metrics.deliveries.labels(self._kind_of(item.channel_id), item.purpose, result).inc()
        log.warning("delivery_" + result, outbox_id=item.id, purpose=item.purpose, attempts=item.attempts, error=str(error))

    # ------------------------------------------------------------------ worker

    def start(self) -> None:
        self._worker = asyncio.create_task(self._run(), name="outbox-worker")

    async def stop(self) -> None:
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None

    async def _run(self) -> None:
        while True:
            self._kick.clear()
            try:
                attempted = await self.deliver_due()
            except Exception:
                log.exception("outbox_pass_failed")
                attempted = 0
            if attempted:
                continue
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel racing a kick
                async with asyncio.timeout(self.poll_interval):
                    await self._kick.wait()
            except TimeoutError:
                pass

"""The outbox: the one place that delivers, retries and gives up.

Every outbound message is first stored as an `OutboxItem` in the same transaction as the
change it reports (a subscriber message, a release), then delivered after commit. A crash
between the two loses nothing: the worker finds the pending row on the next start.

Rules the worker keeps:
- per stream (the message's `stream` key: its handoff, the conversation of a subscriber's
  chat on a front, or the approval a prompt asks about), messages go out in the order they
  were stored (an item waits while an earlier one of the same stream is pending), so a
  retry never reorders a conversation;
- a stream's sends are pipelined: the chain carrying it starts the next send as soon as the
  provider has answered the previous one, while that success is still being recorded. Items
  stored behind a chain of this instance are claimed at insert and handed to it in memory;
  each send is bounded by its item's own lease and made only while this instance's claims
  hold (its heartbeat is current), and on a failure what the chain holds is handed back, so
  the worker sends it in order after the failed item;
- an item is claimed by a conditional UPDATE for this instance, so several instances never
  send the same item at once; what an instance that died was sending is taken over as soon
  as its heartbeat stops (bot/store/instances.py), with the lease as a backstop;
- transient errors back off exponentially (or as long as the provider asked), permanent
  errors fail at once, and every attempt outcome lands in the audit trail.

Dispatches are the exception: `handoff_request` must tell the model now whether a person
was notified, so they are delivered inline by `deliver_now` within a time budget, never by
the worker.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import structlog
from sqlalchemy import and_, bindparam, exists, insert, literal, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.delivery.callbacks import CALLBACKS, CallbackSender, CallbackSettled
from bot.delivery.channel_set import ChannelSet
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import record
from bot.store import audit, instances, prepared
from bot.store.db import Database
from bot.store.models import HandoffSession, OutboxItem, new_id
from bot.store.rows import Rows
from bot.store.vocabulary import HandoffState, OutboxState
from channels.base import (
    Callback,
    ChannelAdapter,
    ChannelError,
    DeliveryFailure,
    Outbound,
    PermanentChannelError,
    Receipt,
    Relay,
    TransientChannelError,
    UncertainDeliveryError,
    stored_outbound,
)

log = structlog.get_logger(__name__)

CHAIN_LIMIT = 50  # items of one stream delivered back to back before others waiting for a place get a turn


# The table itself: Core statements over it, prepared once (bot/store/prepared.py), run as one
# sqlite3 call each on the transaction's connection. Items come back as tuples of every
# column (`_ITEMS.one`), never through the ORM's loading machinery.
_ITEMS = Rows(OutboxItem)
_OUTBOX = _ITEMS.table
# Unsent: an item still to be sent, or being sent (`IN` over two bound values, which the
# prepared statements take, unlike an expanding list).
_UNSENT = (literal(OutboxState.PENDING), literal(OutboxState.SENDING))


def _due_statement() -> Any:
    """Due relays and notices that are next in their stream (nothing earlier unsent)."""
    earlier = _OUTBOX.alias("earlier")
    blocked = exists().where(
        earlier.c.handoff_session_id == _OUTBOX.c.handoff_session_id, earlier.c.state.in_(_UNSENT), earlier.c.id < _OUTBOX.c.id,
    )
    due = or_(
        and_(_OUTBOX.c.state == OutboxState.PENDING, _OUTBOX.c.not_before <= bindparam("now")),
        and_(_OUTBOX.c.state == OutboxState.SENDING, _OUTBOX.c.lease_until < bindparam("now")),
    )
    return select(_OUTBOX.c.id).where(due, _OUTBOX.c.purpose != "dispatch", ~blocked).order_by(_OUTBOX.c.id).limit(200)


def _claim_next_statement() -> Any:
    """Claim the pending item that follows `after` in its handoff — only if it is due: a
    later item never overtakes one that is waiting."""
    following = (
        select(_OUTBOX.c.id)
        .where(_OUTBOX.c.handoff_session_id == bindparam("session_id"), _OUTBOX.c.id > bindparam("after"),
               _OUTBOX.c.state == OutboxState.PENDING)
        .order_by(_OUTBOX.c.id)
        .limit(1)
        .scalar_subquery()
    )
    return (
        update(_OUTBOX)
        .where(_OUTBOX.c.id == following, _OUTBOX.c.state == OutboxState.PENDING, _OUTBOX.c.not_before <= bindparam("now"))
        .values(state=OutboxState.SENDING, lease_until=bindparam("lease_end"), attempts=_OUTBOX.c.attempts + 1,
                claimed_by=bindparam("owner"))
        .returning(*_ITEMS.columns)
    )


def _claim_statement() -> Any:
    """Claim one item that is pending, or whose claim has run out."""
    expired = and_(_OUTBOX.c.state == OutboxState.SENDING, _OUTBOX.c.lease_until < bindparam("now"))
    return (
        update(_OUTBOX)
        .where(_OUTBOX.c.id == bindparam("item_id"), or_(_OUTBOX.c.state == OutboxState.PENDING, expired))
        .values(
            state=OutboxState.SENDING, lease_until=bindparam("lease_end"), attempts=_OUTBOX.c.attempts + 1,
            claimed_by=bindparam("owner"),
            # taking over an expired claim: that attempt may have reached the provider
            uncertain=or_(_OUTBOX.c.uncertain, _OUTBOX.c.state == OutboxState.SENDING),
        )
        .returning(*_ITEMS.columns)
    )


def _take_over_statement() -> Any:
    """Give back the items being sent by instances that stopped beating (or by none: rows
    claimed before claims had owners). Their send may have reached the provider, so the
    next attempt reconciles first where the provider can, and says "may be duplicated"
    where it cannot. Dispatches are not: the handoff service fails an interrupted one."""
    dead_owner = or_(_OUTBOX.c.claimed_by.is_(None), _OUTBOX.c.claimed_by.not_in(instances.alive()))
    return (
        update(_OUTBOX)
        .where(_OUTBOX.c.state == OutboxState.SENDING, _OUTBOX.c.purpose != "dispatch", dead_owner)
        .values(state=OutboxState.PENDING, uncertain=True, claimed_by=null(), lease_until=null())
        .returning(_OUTBOX.c.id)
    )


def _still_ours() -> Any:
    """Fencing: record an outcome only while the claim this attempt made still holds (after a
    lease ran out another instance may have re-claimed the item)."""
    return and_(_OUTBOX.c.id == bindparam("item_id"), _OUTBOX.c.state == OutboxState.SENDING,
                _OUTBOX.c.attempts == bindparam("claim_attempts"))


def _ahead_statement() -> Any:
    """What is unsent in a stream: anything at all, and anything this instance's chain is not
    sending (pending: another instance's, one waiting for a retry, one handed back; or being
    sent by another instance)."""
    unsent = and_(_OUTBOX.c.handoff_session_id == bindparam("stream"), _OUTBOX.c.state.in_(_UNSENT))
    not_ours = or_(_OUTBOX.c.state == OutboxState.PENDING, _OUTBOX.c.claimed_by.is_(None), _OUTBOX.c.claimed_by != bindparam("owner"))
    return select(exists().where(unsent), exists().where(unsent, not_ours))


_INSERT_ITEM = prepared.Prepared(insert(_OUTBOX).returning(_OUTBOX.c.id))
_AHEAD = prepared.Prepared(_ahead_statement())
_EARLIER = prepared.Prepared(select(exists().where(
    _OUTBOX.c.handoff_session_id == bindparam("stream"), _OUTBOX.c.state.in_(_UNSENT), _OUTBOX.c.id < bindparam("item_id"),
)))
_DUE = prepared.Prepared(_due_statement())
_CLAIM = prepared.Prepared(_claim_statement())
_CLAIM_NEXT = prepared.Prepared(_claim_next_statement())
_TAKE_OVER = prepared.Prepared(_take_over_statement())
_RECORD_SENT = prepared.Prepared(update(_OUTBOX).where(_still_ours()).values(
    state=OutboxState.SENT, sent_at=bindparam("sent_now"), lease_until=null(), last_error=null(), uncertain=False,
    claimed_by=null(),
    receipt=bindparam("sent_receipt"),
))
_RECORD_FAILED = prepared.Prepared(update(_OUTBOX).where(_still_ours()).values(
    state=bindparam("new_state"), not_before=bindparam("retry_at"), lease_until=null(), last_error=bindparam("error"),
    uncertain=bindparam("still_uncertain"), claimed_by=null(),
))
# An item claimed and never sent goes back to pending as it was (its attempt stays counted,
# so a stale copy of this claim can never match a later one).
_HAND_BACK = prepared.Prepared(update(_OUTBOX).where(_still_ours()).values(
    state=OutboxState.PENDING, lease_until=null(), claimed_by=null(),
))
_RENEW = prepared.Prepared(update(_OUTBOX).where(_still_ours()).values(lease_until=bindparam("lease_end")))


_DELIVERED = {"relay": "relayed_to_recipient", "notice": "notice_delivered", "subscriber": "delivered_to_subscriber",
              "callback": "callback_delivered"}


def _trail(item: OutboxItem) -> dict[str, str]:
    """The ids an item's audit records are filed under, as its message names them."""
    return stored_outbound(item.payload).trail()


def _callback_settled(session: AsyncSession, item: OutboxItem, *, answer: dict[str, Any] | None = None,
                      error: str | None = None, hint: str | None = None) -> None:
    """Tell whoever queued a callback how it ended, once the transaction recording it commits."""
    callback = stored_outbound(item.payload)
    assert isinstance(callback, Callback)
    record(session.info, CallbackSettled(callback, answer=answer, error=error, hint=hint))


@dataclass
class _Delivered:
    """A sent item whose success waits to be recorded, and the chain waiting to hear the
    handoff's next item (claimed in the same transaction) or None."""

    item: OutboxItem
    receipt: Receipt
    claim_next: bool
    following: asyncio.Future[OutboxItem | None]


@dataclass(frozen=True)
class _Queued:
    """After-commit signal (bot/runtime/signals.py): an item was queued, either claimed at
    insert (its chain starts now, or with `follower` the chain carrying its stream here
    takes it) or behind an earlier unsent item of its stream."""

    item: OutboxItem
    stream: str
    claimed: bool
    follower: bool = False


@dataclass(eq=False)
class _Carrier:
    """The chain carrying one stream in this instance. Items stored behind the one it sends
    are claimed at insert and handed to it here, in id order: its next send starts as soon
    as the provider answered the last one, without a claim or a record in between. Whatever
    it still holds when it stops sending (a failure, its turn is over, a lost claim) is
    handed back to pending, followers that arrive meanwhile too."""

    stream: str | None  # None: a chain whose stream another chain here carries; it gets no followers
    followers: list[OutboxItem] = field(default_factory=list)
    # Items stored unclaimed behind it (another instance's, or one stored while it was
    # starting) and how many of those there were when it last looked for them in the database
    stored_behind: int = 0
    seen: int = 0
    # A success of this stream could not be recorded: send nothing more (the item stays
    # claimed, and is sent again, first, once its lease runs out)
    record_failed: bool = False

    def take(self, item: OutboxItem) -> None:
        bisect.insort(self.followers, item, key=lambda follower: follower.id or 0)

    def next(self) -> OutboxItem:
        return self.followers.pop(0)


@dataclass(frozen=True)
class _SuccessRecord:
    """What recording one success found: whether the claim still held (only then does it
    count as sent) and the handoff's next item, claimed, when one was asked for and due."""

    recorded: bool
    following: OutboxItem | None = None


class DeliveryFailed(Exception):
    """Delivery was given up; `error` is the last channel error."""

    def __init__(self, error: ChannelError, attempts: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.attempts = attempts


DispatchSettled = Callable[[AsyncSession, OutboxItem, Receipt | None, str | None, datetime], Awaitable[None]]
"""How a claimable dispatch (one of several recipients of a route's step) ended, told inside
the transaction that records it: its receipt, or the error that failed it (given up, or
reported lost by the provider after acceptance)."""


def _with_lease_end(item: OutboxItem, lease_end: datetime) -> OutboxItem:
    """A claimed item with its lease as this instance's clock computed it (the stored value
    comes back without its time zone on SQLite)."""
    item.lease_until = lease_end
    return item


def _note_record(carrier: _Carrier, recorded: asyncio.Future[OutboxItem | None]) -> None:
    """A success recorded behind its chain's next sends: if it failed, that chain stops."""
    if recorded.cancelled() or recorded.exception() is not None:
        carrier.record_failed = True


def _claimable_dispatch(item: OutboxItem) -> bool:
    """A dispatch to one of a route's recipients (its brief says the first to claim takes it);
    read off the stored payload without parsing it."""
    if item.purpose != "dispatch":
        return False
    brief = item.payload.get("brief")
    return isinstance(brief, dict) and bool(brief.get("claimable"))


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
        owner: str | None = None,
        callbacks: CallbackSender | None = None,
        claims_held: Callable[[], bool] | None = None,
    ) -> None:
        self.db, self.channels, self.clock, self.metrics = db, channels, clock, metrics
        # The instance whose claims this outbox makes (bot/store/instances.py)
        self.owner = owner or new_id("in")
        # Whether this instance's claims still hold (its heartbeat is current): checked before
        # each send a chain takes from memory (bot/store/instances.py `Instances.holds_claims`)
        self.claims_held = claims_held or (lambda: True)
        # Delivers the items of the reserved channel id CALLBACKS (bot/delivery/callbacks.py)
        self.callbacks = callbacks
        self.max_attempts, self.base_backoff, self.max_backoff = max_attempts, base_backoff, max_backoff
        self.lease, self.poll_interval = lease, poll_interval
        self.send_timeout = max(1.0, lease.total_seconds() - 10)
        # At most this many handoffs are being delivered at once; each chain has one send in
        # flight, so no claimed item ever waits for a slot while its lease runs.
        self.concurrency = concurrency
        self._stopping = False
        self._backlog = False
        self._kick = asyncio.Event()
        self._in_flight: dict[int, asyncio.Task[None]] = {}
        self._worker: asyncio.Task[None] | None = None
        # What `queue` records in a transaction is heard after its commit. A signal, not one
        # SQLAlchemy after-commit listener per item: registering one cost ~0.1 ms a message.
        if db.signals is None:
            raise ValueError("the outbox sends what was queued once it is committed: its database must publish signals")
        db.signals.on(_Queued, self._after_queued)
        # Successes of concurrent chains, recorded together (one transaction for a batch)
        self._delivered: list[_Delivered] = []
        self._recorder: asyncio.Task[None] | None = None
        # The streams a chain of this instance is carrying: items stored behind one are handed
        # to its chain (claimed at insert) or counted (stored pending), never left to a worker pass.
        self._carried: dict[str, _Carrier] = {}
        # Followers a cancelled chain still held: handed back when the outbox stops
        self._abandoned: list[OutboxItem] = []
        # The handoff service's hook (it records where a route's dispatch landed, or that it failed)
        self.on_dispatch_settled: DispatchSettled | None = None

    # ------------------------------------------------------------------ storing

    async def enqueue(
        self, session: AsyncSession, *, channel_id: int, outbound: Outbound, now: datetime, message_id: int | None = None,
        claimed: bool = False,
    ) -> OutboxItem:
        """Store an item inside the caller's transaction, and nothing else. Relays and notices
        go through `queue()`, which also starts sending after commit; the dispatch path stores
        its item `claimed` and delivers it inline with `deliver_now`."""
        return await self._insert(session, self._new_row(channel_id, outbound, now, message_id, claimed=claimed))

    @staticmethod
    async def _insert(session: AsyncSession, row: dict[str, Any]) -> OutboxItem:
        # A prepared INSERT, not an ORM flush: the item is not kept in the session, only
        # handed to whoever sends it
        ((item_id,),) = await prepared.fetch_all(session, _INSERT_ITEM, row)
        return _ITEMS.of({"id": item_id, **row})

    def _new_row(self, channel_id: int, outbound: Outbound, now: datetime, message_id: int | None, *,
                 claimed: bool) -> dict[str, Any]:
        """Every column of a new item but its id: pending, or claimed by this instance."""
        return {
            "channel_id": channel_id,
            "handoff_session_id": outbound.stream,
            "purpose": outbound.purpose,
            "message_id": message_id,
            "delivery_key": new_id("hd"),
            "uncertain": False,
            "payload": outbound.model_dump(mode="json"),
            "state": OutboxState.SENDING if claimed else OutboxState.PENDING,
            "attempts": 1 if claimed else 0,
            "not_before": now,
            "lease_until": now + self.lease if claimed else None,
            "claimed_by": self.owner if claimed else None,
            "last_error": None,
            "receipt": None,
            "created_at": now,
            "sent_at": None,
        }

    async def queue(
        self, session: AsyncSession, *, channel_id: int, outbound: Outbound, now: datetime, message_id: int | None = None
    ) -> OutboxItem:
        """Queue a relay or notice in the caller's transaction and have it sent as soon as
        that commits. When nothing of its handoff is ahead of it, it is stored already
        claimed and sent straight after commit (no worker round trip, no claim transaction).
        When everything ahead of it is in the hands of the chain carrying its stream here, it
        is stored claimed too and handed to that chain, which sends it right after the item
        before it. Otherwise it is stored pending and taken in order from the database."""
        # A stopped outbox (shutting down, or paused by a test), a full one or one whose instance
        # may have been taken for dead only stores: the worker sends later. Ordering: every caller updates the handoff's row before this
        # check in the same transaction, which serialises the checks of one handoff, so the
        # items a chain is handed always come before anything stored pending behind them.
        stream = outbound.stream
        carrier = self._carried.get(stream)
        claimed = follower = False
        if self._worker is not None and (carrier is not None or len(self._in_flight) < self.concurrency) and self.claims_held():
            unsent, not_ours = await prepared.fetch_one(session, _AHEAD, {"stream": stream, "owner": self.owner}) or (True, True)
            follower = carrier is not None and not not_ours
            claimed = follower or not unsent
        item = await self._insert(session, self._new_row(channel_id, outbound, now, message_id, claimed=claimed))
        # Heard once the transaction commits, before its writer goes on (`_after_queued`), so
        # `drain` never finds a committed, claimed item that is in nobody's hands yet.
        record(session.info, _Queued(item, stream, claimed=claimed, follower=follower))
        return item

    def _after_queued(self, queued: _Queued) -> None:
        """A queued item's transaction committed: start its chain (the task starts on the
        loop's next turn), hand it to the chain carrying its stream, or tell that chain."""
        if not queued.claimed:
            self._queued_behind(queued.stream)
            return
        carrier = self._carried.get(queued.stream) if queued.follower else None
        if carrier is not None:
            carrier.take(queued.item)  # sent after what the chain holds, or handed back with it
        else:
            # A follower whose chain ended between the check and the commit checks first that
            # nothing is unsent before it (the chain may have stopped on a failure)
            self._start_chain(queued.item, check_first=queued.follower)

    def _start_chain(self, claimed: OutboxItem, *, check_first: bool = False) -> None:
        """Start sending an item claimed at enqueue; its stream is carried from now on, so
        the items queued behind it are handed to this chain. When the outbox is stopping the
        claim is left to the takeover (once this instance leaves, another, or its next run,
        takes the item and checks before sending)."""
        item_id = int(claimed.id or 0)
        if self._stopping or item_id in self._in_flight:
            return
        carrier = self._carrier_for(claimed.handoff_session_id)
        self._track(item_id, self._deliver_chain(item_id, claimed=claimed, carrier=carrier, check_first=check_first))

    def _carrier_for(self, stream: str | None) -> _Carrier:
        """A new chain's carrier, registered for its stream unless another chain here carries it."""
        if stream is None or stream in self._carried:
            return _Carrier(stream=None)
        carrier = self._carried[stream] = _Carrier(stream=stream)
        return carrier

    def _queued_behind(self, stream: str) -> None:
        """An item was stored behind an earlier one of its stream. The chain carrying that
        stream here claims it next, or looks again when it ends; only a stream no chain of
        ours carries (another instance's, a retry that waits) needs the worker now."""
        carrier = self._carried.get(stream)
        if carrier is not None:
            carrier.stored_behind += 1
        else:
            self.kick()

    def _track(self, item_id: int, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work, name=f"outbox:{item_id}")
        self._in_flight[item_id] = task
        task.add_done_callback(lambda _task: self._chain_done(item_id))

    def kick(self) -> None:
        self._kick.set()

    # ------------------------------------------------------------------ delivering

    async def deliver_now(self, claimed: OutboxItem, *, budget: timedelta) -> Receipt:
        """Deliver one item (stored with `claimed=True`) inline, retrying transient errors
        while the budget allows. The budget is wall time and bounds the provider call too: a
        provider that never answers fails the dispatch when the budget is spent instead of
        hanging the caller. The success is recorded, receipt included, on the item before
        the receipt is returned: what the caller does next with it (the handoff service
        activates the handoff) can always be redone from the item after a crash.

        Raises DeliveryFailed when the item is given up (it is then marked failed, so the
        worker will never send it later behind the caller's back).
        """
        deadline = time.monotonic() + budget.total_seconds()
        item: OutboxItem | None = claimed
        while True:
            if item is None:
                raise DeliveryFailed(PermanentChannelError("the message is no longer pending"), 0)
            try:
                receipt = await self._send(item, timeout=max(0.001, min(self.send_timeout, deadline - time.monotonic())))
            except ChannelError as error:
                delay = self._retry_delay(error, item.attempts)
                if delay is None or delay > deadline - time.monotonic():
                    await self._record_failure(item, error, retry_in=None)
                    raise DeliveryFailed(error, item.attempts) from None
                await self._record_failure(item, error, retry_in=delay)
                await asyncio.sleep(delay)
                item = await self._claim(item.id or 0)
                continue
            await self._record_success(item, receipt)
            return receipt

    async def deliver_due(self) -> int:
        """Start delivering every due relay/notice that is next in its handoff; returns how
        many deliveries were started. It does not wait for them: one slow provider must not
        hold up the others."""
        room = self.concurrency - len(self._in_flight)
        self._backlog = room <= 0
        if room <= 0 or not self.claims_held():  # an instance that may be taken for dead claims nothing
            return 0
        async with self.db.read() as session:
            ids = [item_id for (item_id,) in await prepared.fetch_all(session, _DUE, {"now": self.clock.now()})]
        started = 0
        for item_id in ids:
            if started >= room:
                self._backlog = True  # more are due than may be sent at once: again when a chain ends
                break
            if item_id in self._in_flight:
                continue
            self._track(item_id, self._deliver_chain(item_id))
            started += 1
        return started

    def _chain_done(self, item_id: int) -> None:
        self._in_flight.pop(item_id, None)
        if self._backlog:  # items were left waiting for a free place: look again now
            self.kick()

    async def wait_in_flight(self) -> None:
        """Wait for the deliveries already started."""
        while self._in_flight:
            await asyncio.gather(*list(self._in_flight.values()), return_exceptions=True)

    async def drain(self) -> None:
        """Deliver until nothing is due now (used at shutdown, by tests and the demo)."""
        while await self.deliver_due() or self._in_flight:
            await self.wait_in_flight()

    async def _deliver_chain(self, item_id: int, claimed: OutboxItem | None = None, carrier: _Carrier | None = None, *,
                             check_first: bool = False) -> None:
        """Deliver an item, then the following items of its stream while they are due, in
        order, so a backlog of one conversation drains at provider speed rather than one per
        pass (`_carry`). `check_first`: the item was claimed as the follower of a chain that
        has ended since, so it is sent only if nothing of its stream is unsent before it."""
        # None: another instance (or an earlier pass) has it
        item = claimed if claimed is not None else await self._claim(item_id)
        if item is None:
            return
        if carrier is None:
            carrier = self._carrier_for(item.handoff_session_id)
        try:
            if check_first and await self._earlier_unsent(item):
                await self._hand_back(carrier, [item])
                return
            await self._carry(carrier, item)
        except Exception:
            if carrier.followers:  # e.g. the database failed a record: they wait for the worker
                await self._hand_back(carrier, [])
            raise
        finally:
            if carrier.stream is not None and self._carried.get(carrier.stream) is carrier:
                del self._carried[carrier.stream]
            # a cancelled chain's followers stay claimed: the outbox hands them back as it stops
            self._abandoned.extend(carrier.followers)
            carrier.followers.clear()
            if carrier.stored_behind > carrier.seen:
                self.kick()  # stored after the chain last looked for its next item: it may have missed it

    async def _carry(self, carrier: _Carrier, item: OutboxItem) -> None:
        """Send `item`, then the stream's next items: the followers handed over in memory
        straight after each answer (their successes recorded behind, a batch per
        transaction), and when none is left, the next pending item, claimed in the
        transaction that records the last success. A send that fails is recorded for a retry
        and what the chain holds is handed back; so is everything when this instance's claims
        may have ended or a success could not be recorded."""
        recording: asyncio.Future[OutboxItem | None] | None = None  # the last success not waited for
        turn = 0
        try:
            while True:
                turn += 1
                if carrier.record_failed or not self.claims_held():
                    await self._give_back(carrier, [item], recording)
                    return
                renewed = await self._with_lease(item)
                if renewed is None:  # another instance took it: what this chain holds is not its to send
                    await self._give_back(carrier, [], recording)
                    return
                item = renewed
                try:
                    receipt = await self._send(item, timeout=self.send_timeout)
                except ChannelError as error:
                    await self._record_failure(item, error, retry_in=self._retry_delay(error, item.attempts))
                    await self._give_back(carrier, [], recording)
                    return
                # After CHAIN_LIMIT sends, while other streams wait for a place, this chain gives
                # its place up: it claims nothing more and hands back what it holds
                over = turn >= CHAIN_LIMIT and self._backlog
                if carrier.followers and not over:
                    recording = self._recording(item, receipt, claim_next=False, carrier=carrier)
                    item = carrier.next()
                    continue
                carrier.seen = carrier.stored_behind
                recording = None
                following = await self._recording(item, receipt, claim_next=not over)
                if following is not None:
                    carrier.take(following)
                if over:
                    await self._give_back(carrier, [], None)  # the worker gives the others their turn, then this stream's rest
                    return
                if not carrier.followers:
                    return
                item = carrier.next()
        finally:
            if recording is not None and not recording.done():  # cancelled or failed: its record is part of this delivery
                await asyncio.wait([recording])

    async def _give_back(self, carrier: _Carrier, items: list[OutboxItem], recording: asyncio.Future[Any] | None) -> None:
        """The chain stops sending: once the success it has not waited for is recorded, hand
        back `items` and what it holds. Nothing is awaited after that before the chain lets
        go of its stream, so no follower handed to it meanwhile is left claimed."""
        if recording is not None and not recording.done():
            await asyncio.wait([recording])
        await self._hand_back(carrier, items)

    async def _with_lease(self, item: OutboxItem) -> OutboxItem | None:
        """The item, with enough of its lease left to cover a whole send: one that waited in
        memory longer than the lease's margin is renewed first (None: the claim was lost)."""
        now = self.clock.now()
        if item.lease_until is not None and (item.lease_until - now).total_seconds() > self.send_timeout:
            return item
        lease_end = now + self.lease
        async with self.db.transaction() as session:
            renewed = await prepared.execute(session, _RENEW, {
                "item_id": item.id, "claim_attempts": item.attempts, "lease_end": lease_end,
            })
        if renewed != 1:
            log.warning("outbox_claim_lost", outbox_id=item.id, attempts=item.attempts)
            return None
        item.lease_until = lease_end
        return item

    async def _earlier_unsent(self, item: OutboxItem) -> bool:
        async with self.db.read() as session:
            return await prepared.fetch_one(session, _EARLIER, {"stream": item.handoff_session_id, "item_id": item.id}) != (False,)

    async def _hand_back(self, carrier: _Carrier, items: list[OutboxItem]) -> None:
        """Give `items` and every follower the carrier holds (those handed to it meanwhile
        too) back to pending, so the worker sends them in order behind whatever stopped the
        chain. Nothing is handed back that another claim has taken since (fenced)."""
        while batch := items + carrier.followers:
            items, carrier.followers = [], []
            await self._hand_back_items(batch)

    async def _hand_back_items(self, items: list[OutboxItem]) -> None:
        async with self.db.transaction() as session:
            for item in items:
                await prepared.execute(session, _HAND_BACK, {"item_id": item.id, "claim_attempts": item.attempts})
        self.kick()

    async def _send(self, item: OutboxItem, *, timeout: float) -> Receipt:
        """One provider call, bounded by `timeout` (shorter than the lease, so no other
        instance can re-claim an item whose send is still in flight)."""
        adapter = self._sender(item.channel_id)
        if adapter is None:
            raise TransientChannelError(f"channel {item.channel_id} is not running", hint="the channel is not available")
        outbound = stored_outbound(item.payload).model_copy(update={"delivery_key": item.delivery_key})
        try:
            async with asyncio.timeout(timeout):
                if adapter.capabilities.reconcile and item.uncertain:
                    earlier = await adapter.find_sent(outbound)  # the last attempt may have arrived
                    if earlier is not None:
                        log.info("outbox_reconciled", outbox_id=item.id, channel_message_id=earlier.message_id)
                        return earlier
                return await adapter.send(outbound)
        except ChannelError:
            raise
        except TimeoutError:  # the request may well have arrived: the next attempt checks first
            raise UncertainDeliveryError(f"no answer within {timeout:g} s", hint="the provider did not answer in time") from None
        except Exception as exc:  # an adapter bug must not kill the worker; bounded by max_attempts
            log.exception("channel_send_crashed", channel_id=item.channel_id, outbox_id=item.id)
            # Only the type: an exception's text may carry a URL with a token in it.
            raise TransientChannelError(
                f"internal error in the channel adapter ({type(exc).__name__})", hint="internal error in the channel adapter"
            ) from exc

    def _retry_delay(self, error: ChannelError, attempts: int) -> float | None:
        """Seconds to wait before the next attempt, or None to give up."""
        if not isinstance(error, TransientChannelError) or attempts >= self.max_attempts:
            return None
        backoff = min(self.max_backoff, self.base_backoff * 2.0 ** (attempts - 1))
        backoff *= 0.8 + 0.4 * random.random()  # spread retries of many items
        return max(backoff, error.retry_after or 0.0)

    # ------------------------------------------------------------------ bookkeeping

    async def _claim(self, item_id: int) -> OutboxItem | None:
        now = self.clock.now()
        async with self.db.transaction() as session:
            return await self._claim_in(session, item_id, now)

    async def _claim_in(self, session: AsyncSession, item_id: int, now: datetime) -> OutboxItem | None:
        # UPDATE … RETURNING: the claim and the row in one statement (SQLite ≥ 3.35, PostgreSQL)
        lease_end = now + self.lease
        row = await prepared.fetch_one(session, _CLAIM, {"item_id": item_id, "now": now, "lease_end": lease_end, "owner": self.owner})
        return _with_lease_end(_ITEMS.one(row), lease_end) if row is not None else None

    def _sender(self, channel_id: int) -> ChannelAdapter | CallbackSender | None:
        """Who delivers an item: the callback sender for callbacks, else the channel's
        adapter while it runs (None: not now)."""
        if channel_id == CALLBACKS:
            return self.callbacks
        return self.channels.get(channel_id) if self.channels.is_available(channel_id) else None

    def _kind_of(self, channel_id: int) -> str:
        adapter = self.callbacks if channel_id == CALLBACKS else self.channels.get(channel_id)
        return adapter.kind if adapter else "unknown"

    async def _record_success(self, item: OutboxItem, receipt: Receipt) -> None:
        """Record one delivered item and its receipt, on its own (the inline dispatch)."""
        async with self.db.transaction() as session:
            record = await self._record_success_in(session, item, receipt, self.clock.now(), claim_next=False)
        self._count_sent(item, record)

    def _recording(self, item: OutboxItem, receipt: Receipt, *, claim_next: bool,
                   carrier: _Carrier | None = None) -> asyncio.Future[OutboxItem | None]:
        """Have a chain's delivered item recorded together with whatever other chains (and
        this one) delivered meanwhile: one transaction for the lot (a group commit), not one
        per item. The future gives, with `claim_next`, the stream's next due item, already
        claimed. With `carrier`, nobody waits for it: a record that fails stops that chain."""
        delivered = _Delivered(item, receipt, claim_next, asyncio.get_running_loop().create_future())
        self._delivered.append(delivered)
        if self._recorder is None:
            self._recorder = asyncio.create_task(self._record_batches(), name="outbox-recorder")
        if carrier is not None:
            delivered.following.add_done_callback(lambda recorded: _note_record(carrier, recorded))
        return delivered.following

    async def _record_batches(self) -> None:
        """Record the waiting successes, a batch per transaction, until none is left: while
        one batch commits the next gathers. A failed transaction fails every chain of its
        batch, as it would have failed each alone (their items are re-sent after the lease)."""
        try:
            while self._delivered:
                batch, self._delivered = self._delivered, []
                try:
                    records = await self._record_batch(batch)
                except BaseException as error:
                    for delivered in batch:
                        if delivered.following.done():
                            continue
                        if isinstance(error, Exception):
                            delivered.following.set_exception(error)
                        else:
                            delivered.following.cancel()
                    if not isinstance(error, Exception):
                        raise
                    continue
                for delivered, record in zip(batch, records, strict=True):
                    self._count_sent(delivered.item, record)
                    if not delivered.following.done():
                        delivered.following.set_result(record.following)
        finally:
            self._recorder = None
            for delivered in self._delivered:  # left when the recorder itself was cancelled
                delivered.following.cancel()
            self._delivered.clear()

    async def _record_batch(self, batch: list[_Delivered]) -> list[_SuccessRecord]:
        now = self.clock.now()
        async with self.db.transaction() as session:
            # a chain that was cancelled (the outbox is stopping) gets its item recorded but
            # claims nothing: no one would send it
            return [
                await self._record_success_in(
                    session, delivered.item, delivered.receipt, now, claim_next=delivered.claim_next and not delivered.following.done(),
                )
                for delivered in batch
            ]

    async def _record_success_in(
        self, session: AsyncSession, item: OutboxItem, receipt: Receipt, now: datetime, *, claim_next: bool,
    ) -> _SuccessRecord:
        """Record a delivered item and its receipt (fenced by its claim) in the caller's
        transaction; with `claim_next`, claim the handoff's next due item too."""
        recorded = await prepared.execute(session, _RECORD_SENT, {
            "item_id": item.id, "claim_attempts": item.attempts, "sent_now": now, "sent_receipt": receipt.model_dump(mode="json"),
        })
        if recorded != 1:
            # Another instance re-claimed the item after our lease ran out: the provider
            # may now have it twice. Say so in the trail instead of overwriting its record.
            log.warning("outbox_claim_lost", outbox_id=item.id, attempts=item.attempts)
            await audit.record(
                session, "delivery_claim_lost", at=now, actor="outbox", **_trail(item),
                outbox_id=item.id, attempts=item.attempts, channel_message_id=receipt.message_id,
            )
            return _SuccessRecord(recorded=False)
        if item.purpose != "dispatch":
            await audit.note(
                session, _DELIVERED[item.purpose], at=now, actor="outbox", **_trail(item),
                outbox_id=item.id, message_id=item.message_id, channel_message_id=receipt.message_id,
                attempts=item.attempts, **self._maybe_duplicated(item),
            )
        if item.purpose == "callback":
            _callback_settled(session, item, answer=receipt.answer)
        if self.on_dispatch_settled is not None and _claimable_dispatch(item):
            await self.on_dispatch_settled(session, item, receipt, None, now)
        if not claim_next or item.handoff_session_id is None:
            return _SuccessRecord(recorded=True)
        # This item was the handoff's earliest unsent one, so the next is simply the
        # following pending row; claim it in the same statement that finds it.
        lease_end = now + self.lease
        following = await prepared.fetch_one(session, _CLAIM_NEXT, {
            "session_id": item.handoff_session_id, "after": item.id, "now": now, "lease_end": lease_end, "owner": self.owner,
        })
        return _SuccessRecord(recorded=True, following=_with_lease_end(_ITEMS.one(following), lease_end) if following else None)

    def _maybe_duplicated(self, item: OutboxItem) -> dict[str, Any]:
        """An earlier attempt may have reached the provider and this one could not check
        (its provider cannot be asked what it already has): the trail says so."""
        adapter = self.channels.get(item.channel_id)
        if item.uncertain and (adapter is None or not adapter.capabilities.reconcile):
            return {"maybe_duplicated": True}
        return {}

    async def take_over(self, dead_after: float) -> int:
        """Give back what dead instances were sending (`dead_after`: seconds of silence that
        make an instance dead) and have it sent now; returns how many items."""
        async with self.db.transaction() as session:
            taken = await prepared.fetch_all(session, _TAKE_OVER, {"dead_after": dead_after})
        if taken:
            self.metrics.taken_over.labels("outbox_item").inc(len(taken))
            log.warning("outbox_taken_over", items=len(taken), owner=self.owner)
            self.kick()
        return len(taken)

    def _count_sent(self, item: OutboxItem, record: _SuccessRecord) -> None:
        if not record.recorded:
            return
        self.metrics.deliveries.labels(self._kind_of(item.channel_id), item.purpose, "sent").inc()
        if item.purpose == "relay":
            self.metrics.relayed.labels("to_recipient").inc()

    async def _record_failure(self, item: OutboxItem, error: ChannelError, *, retry_in: float | None) -> None:
        now = self.clock.now()
        values: dict[str, Any] = {
            "item_id": item.id,
            "claim_attempts": item.attempts,
            "error": f"{type(error).__name__}: {error}",
            # once uncertain, stays so until a send or a reconcile succeeds
            "still_uncertain": item.uncertain or isinstance(error, UncertainDeliveryError),
        }
        async with self.db.transaction() as session:
            if retry_in is None and item.purpose == "relay" and isinstance(error, TransientChannelError):
                # A person is waiting for this message: keep trying while the handoff lasts.
                relay = stored_outbound(item.payload)
                assert isinstance(relay, Relay)
                state = await session.scalar(select(col(HandoffSession.state)).where(col(HandoffSession.id) == relay.handoff_id))
                if state == HandoffState.ACTIVE:
                    retry_in = self.max_backoff
            if retry_in is None:
                values.update(new_state=OutboxState.FAILED, retry_at=item.not_before)
            else:
                values.update(new_state=OutboxState.PENDING, retry_at=now + timedelta(seconds=retry_in))
            if await prepared.execute(session, _RECORD_FAILED, values) != 1:
                log.warning("outbox_claim_lost", outbox_id=item.id, attempts=item.attempts)
                return
            await audit.note(
                session,
                "delivery_failed" if retry_in is None else "delivery_retry_scheduled",
                at=now, actor="outbox", **_trail(item),
                outbox_id=item.id, purpose=item.purpose, message_id=item.message_id, attempts=item.attempts,
                error=str(error), error_type=type(error).__name__, hint=error.hint,
                retry_in_seconds=None if retry_in is None else round(retry_in, 3),
            )
            if retry_in is None and item.purpose == "callback":
                _callback_settled(session, item, error=str(error), hint=error.hint)
            if retry_in is None and self.on_dispatch_settled is not None and _claimable_dispatch(item):
                await self.on_dispatch_settled(session, item, None, error.hint, now)
        result = "failed" if retry_in is None else "retry"
        self.metrics.deliveries.labels(self._kind_of(item.channel_id), item.purpose, result).inc()
        log.warning("delivery_" + result, outbox_id=item.id, purpose=item.purpose, attempts=item.attempts, error=str(error))

    async def record_late_failure(self, channel_id: int, failure: DeliveryFailure) -> str:
        """A provider reported that a message it had accepted never arrived. The item that
        carried it (found by the receipt's message id, the newest first) is marked failed and the audit
        trail of its handoff or conversation says why; nothing is resent, since the provider
        has told us it will not arrive that way. Returns what happened, for the inbound record."""
        now = self.clock.now()
        found = col(OutboxItem.receipt)["message_id"].as_string() == failure.message_id
        async with self.db.transaction(effect=True) as session:
            item = (await session.scalars(
                select(OutboxItem).where(col(OutboxItem.channel_id) == channel_id, col(OutboxItem.state) == OutboxState.SENT, found)
                .order_by(col(OutboxItem.id).desc()).limit(1)
            )).first()
            if item is not None:
                await session.execute(update(OutboxItem).where(col(OutboxItem.id) == item.id).values(
                    state=OutboxState.FAILED, last_error=f"reported by the provider after delivery: {failure.error}"))
                if self.on_dispatch_settled is not None and _claimable_dispatch(item):
                    await self.on_dispatch_settled(session, item, None, failure.hint or failure.error, now)
            await audit.note(
                session, "delivery_failed_after_acceptance", at=now, actor="provider",
                **(_trail(item) if item is not None else {}), channel_id=channel_id,
                channel_message_id=failure.message_id, outbox_id=item.id if item else None,
                purpose=item.purpose if item else None, error=failure.error, hint=failure.hint,
            )
        self.metrics.deliveries.labels(self._kind_of(channel_id), item.purpose if item else "unknown", "failed_later").inc()
        log.warning("delivery_failed_after_acceptance", channel_id=channel_id, channel_message_id=failure.message_id,
                    outbox_id=item.id if item else None, error=failure.error)
        return f"delivery of outbox item {item.id} failed after acceptance" if item else "unknown message failed after acceptance"

    # ------------------------------------------------------------------ worker

    def start(self) -> None:
        self._stopping = False
        self._worker = asyncio.create_task(self._run(), name="outbox-worker")

    async def stop(self, grace: float = 5.0) -> None:
        """Stop the worker, let deliveries in flight finish for up to `grace` seconds, then
        cancel the rest (their items are taken over once this instance leaves)."""
        self._stopping = True
        if self._worker is not None:
            self._worker.cancel()
            await asyncio.gather(self._worker, return_exceptions=True)
            self._worker = None
        if self._in_flight:
            await asyncio.wait(list(self._in_flight.values()), timeout=grace)
        for task in list(self._in_flight.values()):
            task.cancel()
        await asyncio.gather(*self._in_flight.values(), return_exceptions=True)
        self._in_flight.clear()
        if self._recorder is not None:  # the sends it records happened: let it finish
            await asyncio.gather(self._recorder, return_exceptions=True)
        if self._abandoned:  # claimed at insert, never sent: pending again, not taken over as "may have arrived"
            abandoned, self._abandoned = self._abandoned, []
            try:
                await self._hand_back_items(abandoned)
            except Exception:
                log.exception("outbox_hand_back_failed", items=len(abandoned))

    async def _run(self) -> None:
        while True:
            self._kick.clear()
            try:
                await self.deliver_due()
            except Exception:
                log.exception("outbox_pass_failed")
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel racing a kick
                async with asyncio.timeout(self.poll_interval):
                    await self._kick.wait()
            except TimeoutError:
                pass

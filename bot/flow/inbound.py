"""The inbox of inbound events (recipients' replies, and subscribers' messages from a
front): store first (deduplicated), work after.

Providers redeliver: an event they think was not acked comes again, and updates are resent
after a restart. Each inbound message is inserted under a unique
(channel_id, dedupe_key), so a redelivery is a constraint violation and is dropped; the
webhook can answer the provider at once and the relaying happens after. Pending events
left by a crash are processed on the next start.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import structlog
from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.domain.approvals import Approvals
from bot.domain.handoffs import Handoffs, ReleaseResult
from bot.errors import DeskError
from bot.flow.shared_lines import Route, SharedLines
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.locks import KeyedLocks
from bot.runtime.metrics import Metrics
from bot.store import audit, prepared
from bot.store.db import Database
from bot.store.models import InboundEvent
from bot.store.rows import Rows
from bot.store.vocabulary import InboundState, Outcome, ReleaseReason
from channels.base import (
    ChatOpened,
    Decision,
    DeliveryFailure,
    InboundMessage,
    RecipientText,
    ReleasePress,
    SubscriberEvent,
    SubscriberText,
    UserActionAnswer,
    stored_inbound,
)

log = structlog.get_logger(__name__)

# Prepared once: every inbound event is stored, claimed and finished (bot/store/prepared.py)
_EVENTS = Rows(InboundEvent)
_STORE = prepared.Prepared(insert(_EVENTS.table).returning(_EVENTS.table.c.id))
_STORE_CLAIMED = prepared.Prepared(insert(_EVENTS.table).returning(*_EVENTS.columns))
_CLAIM = prepared.Prepared(
    update(_EVENTS.table)
    .where(_EVENTS.table.c.id == bindparam("event_id"), _EVENTS.table.c.state == InboundState.PENDING)
    .values(state=InboundState.PROCESSING, processed_at=bindparam("now"))
    .returning(*_EVENTS.columns))
_FINISH = prepared.Prepared(
    update(_EVENTS.table).where(_EVENTS.table.c.id == bindparam("event_id"))
    .values(state=bindparam("new_state"), result=bindparam("outcome")))


class Inbound:
    def __init__(
        self, *, db: Database, clock: Clock, handoffs: Handoffs, metrics: Metrics, background: Background,
        kind_of: Callable[[int], str], lines: SharedLines, shared_line: Callable[[int], bool], approvals: Approvals,
        subscriber: Callable[[int, SubscriberEvent], Awaitable[str]],
        late_failure: Callable[[int, DeliveryFailure], Awaitable[str]],
    ) -> None:
        self.db, self.clock, self.handoffs, self.metrics, self.background = db, clock, handoffs, metrics, background
        self._kind_of = kind_of  # channel id -> kind, for metric labels
        self.lines = lines
        self.approvals = approvals
        self._shared_line = shared_line  # channel id -> whether its handoffs share one line (no threads)
        self._subscriber = subscriber  # a subscriber's message from a front (bot/flow/fronts.py)
        self._late_failure = late_failure  # a delivery the provider reports failed after accepting it
        self._order_locks = KeyedLocks()
        # Per lane, the events this instance is storing or working (see `_stored_work`)
        self._busy_lanes: Counter[Hashable] = Counter()

    async def store(self, channel_id: int, message: InboundMessage) -> int | None:
        """Store one event; None when it is a redelivery of one already stored."""
        row = self._row(channel_id, message)
        stored = await self._insert(channel_id, row, _STORE)
        return None if stored is None else int(stored[0])

    async def _store_claimed(self, channel_id: int, message: InboundMessage) -> InboundEvent | None:
        """Store one event already claimed by this instance, which works it next: no claim
        transaction of its own. One left unfinished (a crash, a stop before its turn) is
        taken back as any stale claim is (`process_pending`)."""
        row = self._row(channel_id, message)
        row.update(state=InboundState.PROCESSING, processed_at=row["received_at"])
        stored = await self._insert(channel_id, row, _STORE_CLAIMED)
        return None if stored is None else _EVENTS.one(stored)

    def _row(self, channel_id: int, message: InboundMessage) -> dict[str, Any]:
        return {"channel_id": channel_id, "dedupe_key": message.dedupe_key or _unique_key(),
                "payload": message.model_dump(mode="json"), "received_at": self.clock.now()}

    async def _insert(self, channel_id: int, row: dict[str, Any], statement: prepared.Prepared) -> prepared.Row | None:
        try:
            async with self.db.transaction() as session:
                stored = await prepared.fetch_one(session, statement, row)
        except IntegrityError:  # a redelivery: the unique (channel_id, dedupe_key) refused it
            self.metrics.inbound.labels(self._kind_of(channel_id), "duplicate").inc()
            log.info("inbound_duplicate_dropped", channel_id=channel_id, dedupe_key=row["dedupe_key"])
            return None
        self.metrics.inbound.labels(self._kind_of(channel_id), "stored").inc()
        return stored

    async def submit(self, channel_id: int, message: InboundMessage) -> None:
        """Store and process in the background (webhooks, pollers)."""
        lane = _lane(channel_id, message)
        with self._reserve(lane) as idle:
            work = await self._stored_work(channel_id, message, lane, idle)
            if work is None:
                return
            self.background.spawn(self._released_after(work, lane), name=f"inbound:{channel_id}")
            self._busy_lanes[lane] += 1  # handed on to the task, which gives it back

    async def submit_and_wait(self, channel_id: int, message: InboundMessage) -> str:
        """Store and process now (the owner inbox, which shows the result right away)."""
        lane = _lane(channel_id, message)
        with self._reserve(lane) as idle:
            work = await self._stored_work(channel_id, message, lane, idle)
            return "duplicate" if work is None else await work

    async def _stored_work(self, channel_id: int, message: InboundMessage, lane: Hashable,
                           idle: bool) -> Coroutine[Any, Any, str] | None:
        """Store the event and return the work on it; None for a redelivery. In a lane this
        instance has nothing else to do in, the event is stored claimed: its work starts
        straight after (behind at most a recovery pass's event), so it needs no claim
        transaction and its claim does not age while it waits for a turn. Otherwise it is
        stored pending and claimed when its turn in the lane comes."""
        if idle:
            event = await self._store_claimed(channel_id, message)
            return None if event is None else self._work(event, lane)
        event_id = await self.store(channel_id, message)
        return None if event_id is None else self.process(event_id, channel_id, lane)

    @contextmanager
    def _reserve(self, lane: Hashable) -> Iterator[bool]:
        """Count an event's work in its lane while it is stored and worked; yields whether
        the lane had none before."""
        idle = not self._busy_lanes[lane]
        self._busy_lanes[lane] += 1
        try:
            yield idle
        finally:
            self._release(lane)

    async def _released_after(self, work: Coroutine[Any, Any, str], lane: Hashable) -> str:
        try:
            return await work
        finally:
            self._release(lane)

    def _release(self, lane: Hashable) -> None:
        self._busy_lanes[lane] -= 1
        if not self._busy_lanes[lane]:
            del self._busy_lanes[lane]

    async def process(self, event_id: int, channel_id: int, lane: Hashable | None = None) -> str:
        """Relay or act on one stored event, once: the claim is a conditional update.
        Events of one lane are handled one at a time, in the order they arrived, so two
        quick replies reach the subscriber in the order they were written. A lane is a
        channel's recipients, or one subscriber's chat on a front: one subscriber waiting
        for the agent never holds up a person's reply or another subscriber."""
        async with self._order_locks[channel_id if lane is None else lane]:
            now = self.clock.now()
            async with self.db.transaction() as session:
                claimed = await prepared.fetch_one(session, _CLAIM, {"event_id": event_id, "now": now})
            if claimed is None:
                return "already processed"
            return await self._handle_or_fail(_EVENTS.one(claimed))

    async def _work(self, claimed: InboundEvent, lane: Hashable) -> str:
        """Work an event this instance stored claimed, in its lane's order (the order the
        lane's events were stored in: each is handed here right after its commit)."""
        async with self._order_locks[lane]:
            return await self._handle_or_fail(claimed)

    async def _handle_or_fail(self, event: InboundEvent) -> str:
        try:
            return await self._handle(event)
        except Exception as exc:  # never leave an event stuck in "processing"
            log.exception("inbound_failed", inbound_event_id=event.id)
            return await self._finish(event, InboundState.FAILED, f"internal error ({type(exc).__name__})")

    async def _handle(self, event: InboundEvent) -> str:
        """Each kind of event, in one place."""
        message = stored_inbound(event.payload)
        match message:
            case DeliveryFailure():
                return await self._finish(event, InboundState.DONE, await self._late_failure(event.channel_id, message))
            case SubscriberText() | ChatOpened() | UserActionAnswer():
                said = await self._subscriber(event.channel_id, message)
                return await self._finish(event, InboundState.IGNORED if said.startswith("ignored") else InboundState.DONE, said)
            case Decision():
                return await self._decide(event, message)
            case ReleasePress():
                return await self._release_press(event, message)
            case RecipientText():
                return await self._recipient_text(event, message)

    async def _recipient_text(self, event: InboundEvent, message: RecipientText) -> str:
        """A recipient's words: to the handoff of their thread (or, on a shared line, the one
        they named or focus on), where `/release …` releases it."""
        route: Route | None = None
        if self._shared_line(event.channel_id):
            route = await self.lines.route(event.channel_id, message.thread_key, message.text)
            if route.to is None:
                return await self._finish(event, InboundState.DONE if route.answered else InboundState.IGNORED, route.result)
            sid, text = route.to.id, route.text
        else:
            handoff = await self.handoffs.by_thread(event.channel_id, message.thread_key)
            if handoff is None:
                return await self._finish(event, InboundState.IGNORED, "no active handoff in this thread")
            sid, text = handoff.id, message.text
        author = message.author or "recipient"
        try:
            result = await self.handoffs.recipient_message(sid, text, author=author, via=f"channel:{event.channel_id}")
        except DeskError as exc:
            return await self._finish(event, InboundState.IGNORED, exc.message, handoff_session_id=sid)
        if isinstance(result, ReleaseResult):
            return await self._released(event, result, sid)
        if route is not None and route.ambiguous:
            await self.lines.acknowledge(event.channel_id, route)
        return await self._finish(event, InboundState.DONE, "relayed", handoff_session_id=sid)

    async def _release_press(self, event: InboundEvent, press: ReleasePress) -> str:
        """A Release button under a dispatch: releases the handoff of its thread as a typed
        `/release` does (the buttons live only in threads, never on a shared line)."""
        handoff = await self.handoffs.by_thread(event.channel_id, press.thread_key)
        if handoff is None:
            return await self._finish(event, InboundState.IGNORED, "no active handoff in this thread")
        try:
            result = await self.handoffs.release(
                handoff.id, reason=ReleaseReason.RELEASE_TOKEN, actor=" ".join((press.author or "").split())[:200] or "recipient",
                outcome=Outcome(press.outcome) if press.outcome else None,
            )
        except DeskError as exc:
            return await self._finish(event, InboundState.IGNORED, exc.message, handoff_session_id=handoff.id)
        return await self._released(event, result, handoff.id)

    async def _released(self, event: InboundEvent, result: ReleaseResult, sid: str) -> str:
        outcome = "released" if result.released else "release was a no-op"
        return await self._finish(event, InboundState.DONE, outcome, handoff_session_id=sid)

    async def _decide(self, event: InboundEvent, decision: Decision) -> str:
        """An Approve / Deny button pressed in a channel; it counts only in a channel the
        prompt was sent to."""
        try:
            approval = await self.approvals.get(decision.approval_id)
        except DeskError as exc:
            return await self._finish(event, InboundState.IGNORED, exc.message)
        if event.channel_id not in approval.channel_ids:
            return await self._finish(event, InboundState.IGNORED, f"approval {approval.id} was not asked in this channel")
        result = await self.approvals.decide(
            approval.id, approve=decision.approve, by=decision.author or "recipient", via=f"channel:{event.channel_id}",
            reason=decision.reason, always_allow=decision.always_allow,
        )
        if not result.changed:
            return await self._finish(event, InboundState.IGNORED, f"approval {approval.id} is already {result.approval.state}")
        return await self._finish(event, InboundState.DONE, f"approval {result.approval.state}")

    async def _finish(self, event: InboundEvent, state: InboundState, result: str, handoff_session_id: str | None = None) -> str:
        now = self.clock.now()
        async with self.db.transaction() as session:
            await prepared.execute(session, _FINISH, {"event_id": event.id, "new_state": state, "outcome": result})
            if state in (InboundState.IGNORED, InboundState.FAILED):
                await audit.record(
                    session, f"inbound_{state}", at=now, actor=event.payload.get("author") or "recipient",
                    handoff_session_id=handoff_session_id, channel_id=event.channel_id, inbound_event_id=event.id,
                    reason=result,
                )
        return result

    async def process_pending(self) -> int:
        """Finish events a previous run stored but did not get to (crash, restart); returns
        how many were worked."""
        async with self.db.transaction() as session:
            # An event stuck in "processing" for a while belongs to a run that died.
            stale = self.clock.now() - timedelta(minutes=5)
            await session.execute(
                update(InboundEvent)
                .where(col(InboundEvent.state) == InboundState.PROCESSING, col(InboundEvent.processed_at) < stale)
                .values(state=InboundState.PENDING)
            )
            pending = (await session.execute(
                select(col(InboundEvent.id), col(InboundEvent.channel_id), col(InboundEvent.payload))
                .where(col(InboundEvent.state) == InboundState.PENDING).order_by(col(InboundEvent.id))
            )).all()
        worked = 0
        for event_id, channel_id, payload in pending:
            lane = _lane(channel_id, stored_inbound(payload))
            if lane in self._busy_lanes:
                # A task of ours works this lane and has this event's turn spawned already,
                # behind the lane's earlier event, which may still be claimed and unworked:
                # taking it here would overtake that one.
                continue
            await self.process(event_id, channel_id, lane)
            worked += 1
        return worked


def _lane(channel_id: int, message: InboundMessage) -> Hashable:
    """A subscriber's chat is a lane of its own; a channel's recipients share one."""
    match message:
        case SubscriberText() | ChatOpened() | UserActionAnswer():
            return (channel_id, message.chat)
    return channel_id


def _unique_key() -> str:
    """Providers without event ids are not deduplicated: a person may well send "ok" twice."""
    return f"local:{uuid.uuid4().hex}"

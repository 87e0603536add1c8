"""The inbox of inbound events (recipients' replies, and subscribers' messages from a
front): store first (deduplicated), work after.

Every act from a channel is someone's: a reply, a Release or Claim press and an approval
decision are resolved to the person of the directory whose provider identity sent it
(`People.identify`, one cached read), and then recorded as theirs (their name is what the
subscriber sees, their id on the message, the claim, the release, the vote and the audit
row). An identity linked to nobody acts under the name its provider gave, as before. A
`/link CODE` is never relayed: bot/flow/linking.py links the sender's identity.

Providers redeliver: an event they think was not acked comes again, and updates are resent
after a restart. Each inbound message is inserted under a unique
(channel_id, dedupe_key), so a redelivery is a constraint violation and is dropped; the
webhook can answer the provider at once and the relaying happens after. Pending events
left by a crash are processed on the next start.
"""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Hashable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import structlog
from sqlalchemy import bindparam, insert, literal, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.domain.approval_votes import ANSWERS, DecisionOutcome, channel_voter
from bot.domain.approvals import APPROVED, DENIED, Approvals
from bot.domain.handoffs import Handoffs, ReleaseResult, parse_release_command
from bot.domain.people import Actor, People
from bot.errors import DeskError
from bot.flow.availability import ChannelAvailability
from bot.flow.linking import ChannelLinking
from bot.flow.shared_lines import Route, SharedLines
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.effects import committed_with
from bot.runtime.locks import KeyedLocks
from bot.runtime.metrics import Metrics
from bot.store import audit, instances, prepared
from bot.store.db import Database
from bot.store.models import InboundEvent
from bot.store.rows import Rows
from bot.store.vocabulary import InboundState, Outcome, ReleaseReason
from channels.base import (
    AvailabilityRequest,
    ChatOpened,
    ClaimPress,
    Decision,
    DeliveryFailure,
    InboundMessage,
    LinkRequest,
    RecipientText,
    ReleasePress,
    SatisfactionAnswer,
    SubscriberEvent,
    SubscriberText,
    UserActionAnswer,
    stored_inbound,
)
from channels.linking import link_code

log = structlog.get_logger(__name__)

# Prepared once: every inbound event is stored, claimed and finished (bot/store/prepared.py)
_EVENTS = Rows(InboundEvent)
_STORE = prepared.Prepared(insert(_EVENTS.table).returning(_EVENTS.table.c.id))
_STORE_CLAIMED = prepared.Prepared(insert(_EVENTS.table).returning(*_EVENTS.columns))
_TABLE = _EVENTS.table
_CLAIM = prepared.Prepared(
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("event_id"), _TABLE.c.state == InboundState.PENDING)
    .values(state=InboundState.PROCESSING, processed_at=bindparam("now"), claimed_by=bindparam("owner"))
    .returning(*_EVENTS.columns))
# Fenced: only while the event is still this instance's claim. Another instance that took it
# for dead has it now, and its record stands (and an effect carrying this mark rolls back).
_FINISH = prepared.Prepared(
    update(_TABLE)
    .where(_TABLE.c.id == bindparam("event_id"), _TABLE.c.claimed_by == bindparam("owner"),
           # done already when its effect carried the mark and the outcome is then worded again
           _TABLE.c.state.in_((literal(InboundState.PROCESSING), literal(InboundState.DONE))))
    .values(state=bindparam("new_state"), result=bindparam("outcome")))
# Events stored or being worked by instances that stopped beating (or by none: rows from
# before events had owners) become this instance's, to be worked again from the start: an
# event's effect commits with its "done" mark, so one whose mark is missing changed nothing.
_ADOPT = prepared.Prepared(
    update(_TABLE)
    .where(_TABLE.c.state.in_((literal(InboundState.PENDING), literal(InboundState.PROCESSING))),
           or_(_TABLE.c.claimed_by.is_(None), _TABLE.c.claimed_by.not_in(instances.alive())))
    .values(state=InboundState.PENDING, claimed_by=bindparam("owner"))
    .returning(_TABLE.c.id))
_OURS_PENDING = prepared.Prepared(
    select(_TABLE.c.id, _TABLE.c.channel_id, _TABLE.c.payload)
    .where(_TABLE.c.state == InboundState.PENDING, _TABLE.c.claimed_by == bindparam("owner"))
    .order_by(_TABLE.c.id))


class Inbound:
    def __init__(
        self, *, db: Database, clock: Clock, handoffs: Handoffs, metrics: Metrics, background: Background,
        kind_of: Callable[[int], str], lines: SharedLines, shared_line: Callable[[int], bool], approvals: Approvals,
        subscriber: Callable[[int, SubscriberEvent], Awaitable[str]],
        late_failure: Callable[[int, DeliveryFailure], Awaitable[str]],
        owner: str, dead_after: Callable[[], float], people: People, linking: ChannelLinking,
        identity_kind: Callable[[int], str], availability: ChannelAvailability,
    ) -> None:
        self.db, self.clock, self.handoffs, self.metrics, self.background = db, clock, handoffs, metrics, background
        self._kind_of = kind_of  # channel id -> kind, for metric labels
        self.people, self.linking, self.availability = people, linking, availability
        self._identity_kind = identity_kind  # channel id -> the config's kind of the channel: its identities' kind
        self.lines = lines
        self.approvals = approvals
        self._shared_line = shared_line  # channel id -> whether its handoffs share one line (no threads)
        self._subscriber = subscriber  # a subscriber's message from a front (bot/flow/fronts.py)
        self._late_failure = late_failure  # a delivery the provider reports failed after accepting it
        self.owner = owner  # the instance storing and working events here (bot/store/instances.py)
        self._dead_after = dead_after  # seconds of silence that make an instance dead
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
                "payload": message.model_dump(mode="json"), "received_at": self.clock.now(), "claimed_by": self.owner}

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
        lane = self._lane(channel_id, message)
        with self._reserve(lane) as idle:
            work = await self._stored_work(channel_id, message, lane, idle)
            if work is None:
                return
            self.background.spawn(self._released_after(work, lane), name=f"inbound:{channel_id}")
            self._busy_lanes[lane] += 1  # handed on to the task, which gives it back

    async def submit_and_wait(self, channel_id: int, message: InboundMessage) -> str:
        """Store and process now (the owner inbox, which shows the result right away)."""
        lane = self._lane(channel_id, message)
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
                claimed = await prepared.fetch_one(session, _CLAIM, {"event_id": event_id, "now": now, "owner": self.owner})
            if claimed is None:
                return "already processed"
            return await self._handle_or_fail(_EVENTS.one(claimed))

    async def _work(self, claimed: InboundEvent, lane: Hashable) -> str:
        """Work an event this instance stored claimed, in its lane's order (the order the
        lane's events were stored in: each is handed here right after its commit)."""
        async with self._order_locks[lane]:
            return await self._handle_or_fail(claimed)

    async def _handle_or_fail(self, event: InboundEvent) -> str:
        """Work one claimed event, exactly once: its "done" mark commits in the transaction
        that makes its effect (the relayed reply, the release, the decision), so a crash
        leaves either both or neither, and an event is worked again only when nothing of it
        committed. Work that changes nothing (an ignored reply, a no-op) is marked after."""
        done = _DoneMark(int(event.id or 0), self.owner)
        try:
            with committed_with(done) as effect:
                worked = await self._handle(event, done)
        except ClaimLost:  # taken over meanwhile (this instance was taken for dead): nothing of it committed here
            log.warning("inbound_claim_lost", inbound_event_id=event.id, owner=self.owner)
            return "claim lost"
        except OperationalError:  # the database hiccupped before the effect: try again later
            if effect.applied:
                log.exception("inbound_failed_after_its_effect", inbound_event_id=event.id)
                return done.result
            log.exception("inbound_deferred", inbound_event_id=event.id)
            return await self._finish(event, _Worked(InboundState.PENDING, "deferred: the database was unavailable"))
        except Exception as exc:  # never leave an event stuck in "processing"
            if effect.applied:  # done already, with its effect: what failed came after
                log.exception("inbound_failed_after_its_effect", inbound_event_id=event.id)
                return done.result
            log.exception("inbound_failed", inbound_event_id=event.id)
            return await self._finish(event, _Worked(InboundState.FAILED, f"internal error ({type(exc).__name__})"))
        if effect.applied and worked.state == InboundState.DONE and worked.result == done.result:
            return worked.result  # marked with its effect: nothing more to write
        return await self._finish(event, worked)

    async def _handle(self, event: InboundEvent, done: _DoneMark) -> _Worked:
        """Each kind of event, in one place. `done.result` is set, before the service call
        that makes the effect, to what the event will say if that effect commits."""
        message = stored_inbound(event.payload)
        match message:
            case DeliveryFailure():
                return _Worked(InboundState.DONE, await self._late_failure(event.channel_id, message))
            case SubscriberText() | ChatOpened() | UserActionAnswer() | SatisfactionAnswer():
                done.result = "routed to human"  # the hot path: a subscriber's message during a handoff
                said = await self._subscriber(event.channel_id, message)
                return _Worked(InboundState.IGNORED if said.startswith("ignored") else InboundState.DONE, said)
            case Decision():
                done.result = f"approval {APPROVED if message.approve else DENIED}"
                return await self._decide(event, message)
            case ReleasePress():
                done.result = "released"
                return await self._release_press(event, message)
            case RecipientText():
                code = link_code(message.text)
                if code is not None:  # never relayed: it links the writer (bot/flow/linking.py)
                    done.result = "linked"
                    return _Worked(InboundState.DONE, await self.linking.in_thread(event.channel_id, message, code))
                done.result = "released" if parse_release_command(message.text) is not None else "relayed"
                return await self._recipient_text(event, message)
            case ClaimPress():
                done.result = "claimed"
                return await self._claim_press(event, message)
            case LinkRequest():
                done.result = "linked"
                return _Worked(InboundState.DONE, await self.linking.in_chat(event.channel_id, message))
            case AvailabilityRequest():  # `/away`, `/back`: the sender's person (bot/flow/availability.py)
                done.result = "away" if message.away else "available"
                said = await self.availability.in_chat(event.channel_id, message)
                return _Worked(InboundState.DONE, said)

    async def _actor(self, channel_id: int, message: RecipientText | ReleasePress | ClaimPress | Decision) -> Actor:
        """Who did this: the person whose identity on this channel sent it (the inbox's own
        signed-in person for its replies), else whoever the provider says it was."""
        via = f"channel:{channel_id}"
        name = " ".join((message.author or "").split())[:200] or "recipient"
        if isinstance(message, RecipientText) and message.person_id is not None:
            return Actor(name=name, via=via, person_id=message.person_id)
        if not message.user_id:
            return Actor(name=name, via=via)
        person = await self.people.identify(self._identity_kind(channel_id), message.user_id)
        if person is not None:
            return Actor.of_person(person, via)
        return Actor(name=name, via=via, provider_user=channel_voter(channel_id, message.user_id))

    async def _recipient_text(self, event: InboundEvent, message: RecipientText) -> _Worked:
        """A recipient's words: to the handoff of their thread (or, on a shared line, the one
        they named or focus on), where `/release …` releases it."""
        route: Route | None = None
        if self._shared_line(event.channel_id):
            route = await self.lines.route(event.channel_id, message.thread_key, message.text)
            if route.to is None:
                return _Worked(InboundState.DONE if route.answered else InboundState.IGNORED, route.result)
            sid, text, routed = route.to.id, route.text, route.to.routed
        else:
            handoff = await self.handoffs.by_thread(event.channel_id, message.thread_key)
            if handoff is None:
                return _Worked(InboundState.IGNORED, "no active handoff in this thread")
            sid, text, routed = handoff.id, message.text, handoff.route_id is not None
        who = await self._actor(event.channel_id, message)
        try:
            # On a route: the first to write claims it; someone else's thread is told who has it.
            speaking = await self.handoffs.speaking(sid, event.channel_id, by=who.name, via=who.via,
                                                    person_id=who.person_id, thread_key=message.thread_key) if routed else None
            if speaking is not None and not speaking.allowed:
                return _Worked(InboundState.IGNORED, f"not relayed: {speaking.holder} has this handoff", sid)
            result = await self.handoffs.recipient_message(sid, text, author=who.name, via=who.via, person_id=who.person_id)
        except DeskError as exc:
            return _Worked(InboundState.IGNORED, exc.message, sid)
        if isinstance(result, ReleaseResult):
            return _released(result, sid)
        if route is not None and route.ambiguous:
            await self.lines.acknowledge(event.channel_id, route)
        return _Worked(InboundState.DONE, "relayed", sid)

    async def _release_press(self, event: InboundEvent, press: ReleasePress) -> _Worked:
        """A Release button under a dispatch: releases the handoff of its thread as a typed
        `/release` does (the buttons live only in threads, never on a shared line)."""
        handoff = await self.handoffs.by_thread(event.channel_id, press.thread_key)
        if handoff is None:
            return _Worked(InboundState.IGNORED, "no active handoff in this thread")
        who = await self._actor(event.channel_id, press)
        try:
            if handoff.claimed_at is not None:  # on a route someone has: only their thread releases it
                speaking = await self.handoffs.speaking(handoff.id, event.channel_id, by=who.name, via=who.via,
                                                        person_id=who.person_id, thread_key=press.thread_key)
                if not speaking.allowed:
                    return _Worked(InboundState.IGNORED, f"not released: {speaking.holder} has this handoff", handoff.id)
            result = await self.handoffs.release(
                handoff.id, reason=ReleaseReason.RELEASE_TOKEN, actor=who.name, person_id=who.person_id,
                outcome=Outcome(press.outcome) if press.outcome else None,
            )
        except DeskError as exc:
            return _Worked(InboundState.IGNORED, exc.message, handoff.id)
        return _released(result, handoff.id)

    async def _claim_press(self, event: InboundEvent, press: ClaimPress) -> _Worked:
        """A Claim button under a route's dispatch: the first press anywhere takes the handoff;
        a later one is told who has it."""
        found = await self.handoffs.in_thread(event.channel_id, press.thread_key)
        if found is None:
            return _Worked(InboundState.IGNORED, "no active handoff in this thread")
        sid = found.handoff.id
        who = await self._actor(event.channel_id, press)
        try:
            speaking = await self.handoffs.speaking(sid, event.channel_id, by=who.name, via=who.via, claiming=True,
                                                    person_id=who.person_id, thread_key=press.thread_key)
        except DeskError as exc:
            return _Worked(InboundState.IGNORED, exc.message, sid)
        if not speaking.allowed:
            return _Worked(InboundState.DONE, f"already claimed by {speaking.holder}", sid)
        return _Worked(InboundState.DONE, "claimed", sid)

    async def _decide(self, event: InboundEvent, decision: Decision) -> _Worked:
        """An Approve / Deny button pressed in a channel; it counts only in a channel the
        prompt was sent to."""
        try:
            approval = await self.approvals.get(decision.approval_id)
        except DeskError as exc:
            return _Worked(InboundState.IGNORED, exc.message)
        if event.channel_id not in approval.channel_ids:
            return _Worked(InboundState.IGNORED, f"approval {approval.id} was not asked in this channel")
        who = await self._actor(event.channel_id, decision)
        result = await self.approvals.decide(
            approval.id, approve=decision.approve, by=who.name, via=who.via, voter=who.voter, reason=decision.reason,
            always_allow=decision.always_allow,
        )
        if result.outcome is DecisionOutcome.CLOSED:
            return _Worked(InboundState.IGNORED, f"approval {approval.id} is already {result.approval.state}")
        if result.outcome is not DecisionOutcome.DECIDED:  # one of two people, or not counted: say which
            return _Worked(InboundState.DONE if result.changed else InboundState.IGNORED, ANSWERS[result.outcome])
        return _Worked(InboundState.DONE, f"approval {result.approval.state}")

    async def _finish(self, event: InboundEvent, worked: _Worked) -> str:
        now = self.clock.now()
        async with self.db.transaction() as session:
            finished = await prepared.execute(session, _FINISH, {
                "event_id": event.id, "new_state": worked.state, "outcome": worked.result, "owner": self.owner,
            })
            if finished != 1:  # another instance took it over meanwhile: its record stands
                log.warning("inbound_claim_lost", inbound_event_id=event.id, owner=self.owner)
                return worked.result
            if worked.state in (InboundState.IGNORED, InboundState.FAILED):
                await audit.record(
                    session, f"inbound_{worked.state}", at=now, actor=event.payload.get("author") or "recipient",
                    handoff_session_id=worked.handoff_session_id, channel_id=event.channel_id, inbound_event_id=event.id,
                    reason=worked.result,
                )
        return worked.result

    async def process_pending(self) -> int:
        """Take over the events of instances that stopped beating (a crash, a restart: see
        bot/store/instances.py) and work this instance's events still pending; returns how
        many were worked. Run at start and after every heartbeat."""
        async with self.db.transaction() as session:
            adopted = await prepared.fetch_all(session, _ADOPT, {"owner": self.owner, "dead_after": self._dead_after()})
        if adopted:
            self.metrics.taken_over.labels("inbound_event").inc(len(adopted))
            log.warning("inbound_taken_over", events=len(adopted), owner=self.owner)
        pending = await self.db.fetch_all(_OURS_PENDING, {"owner": self.owner})
        taken_over = {event_id for (event_id,) in adopted}
        lanes: dict[Hashable, list[tuple[int, int]]] = {}
        for event_id, channel_id, payload in pending:
            lane = self._lane(channel_id, stored_inbound(payload))
            if event_id not in taken_over and lane in self._busy_lanes:
                # A task of ours works this lane and has this event's turn spawned already,
                # behind the lane's earlier event, which may still be claimed and unworked:
                # taking it here would overtake that one. (An event taken over has no task
                # here: it queues for its lane's turn, however busy the lane is.)
                continue
            lanes.setdefault(lane, []).append((event_id, channel_id))
        # Lanes side by side, each in the order its events were stored
        worked = await asyncio.gather(*(self._work_lane(lane, events) for lane, events in lanes.items()))
        return sum(worked)

    async def _work_lane(self, lane: Hashable, events: list[tuple[int, int]]) -> int:
        for event_id, channel_id in events:
            await self.process(event_id, channel_id, lane)
        return len(events)

    def _lane(self, channel_id: int, message: InboundMessage) -> Hashable:
        """Events whose order matters share a lane: a subscriber's chat; a thread of a
        channel (one handoff's replies and its Release button); one approval's buttons; a
        shared line as a whole (its recipients' focus is one state); anything else of a
        channel. Lanes are worked side by side, so a busy handoff never holds up a reply
        in another."""
        match message:
            case SubscriberText() | ChatOpened() | UserActionAnswer() | SatisfactionAnswer():
                return (channel_id, "chat", message.chat)
            case RecipientText() | ReleasePress() | ClaimPress() if not self._shared_line(channel_id):
                return (channel_id, "thread", message.thread_key)
            case Decision():
                return (channel_id, "approval", message.approval_id)
        return channel_id


class ClaimLost(Exception):
    """The event being worked was taken over by another instance (this one was taken for
    dead): its effect must not commit here."""

    def __init__(self, event_id: int) -> None:
        super().__init__(f"inbound event {event_id} is another instance's now")
        self.event_id = event_id


@dataclass(frozen=True)
class _Worked:
    """What working an event came to, as its row records it."""

    state: InboundState
    result: str
    handoff_session_id: str | None = None


@dataclass
class _DoneMark:
    """Marks an event done in the transaction of its effect (bot/runtime/effects.py); raises
    ClaimLost, rolling the effect back, when the event is no longer this instance's."""

    event_id: int
    owner: str
    result: str = "done"

    async def __call__(self, session: AsyncSession) -> None:
        marked = await prepared.execute(session, _FINISH, {
            "event_id": self.event_id, "new_state": InboundState.DONE, "outcome": self.result, "owner": self.owner,
        })
        if marked != 1:
            raise ClaimLost(self.event_id)


def _released(result: ReleaseResult, sid: str) -> _Worked:
    return _Worked(InboundState.DONE, "released" if result.released else "release was a no-op", sid)


def _unique_key() -> str:
    """Providers without event ids are not deduplicated: a person may well send "ok" twice."""
    return f"local:{uuid.uuid4().hex}"

"""The handoff lifecycle: request → dispatch → active (bypass) → released, or → failed.

Every transition is one conditional UPDATE on the session row (compare-and-set on its
state), committed together with its audit event and, for a release, the resume message.
When two release paths race — a form submission and the idle timer, say — exactly one
UPDATE matches, exactly one resume message is written, and each loser is recorded as a
`release_noop`. Nothing here holds a transaction open across a network call: the dispatch
is stored, committed, delivered (the outbox records the receipt on its item), and only
then does this service activate the bypass from that receipt, in a transaction of its own.
A crash between the two leaves a sent dispatch beside a `dispatching` session; the sweep
(`recover_dispatches`) activates it from the stored receipt.

The service speaks the domain: `request` returns a `HandoffStarted` or raises one of the
`HandoffRequestRefused` errors, carrying facts, not sentences; `bot/tools/handoff.py` words
them for the model. What others react to (the idle timer, a sibling agent, the agent's
resume turn) is a signal recorded in the changing transaction and heard after its commit
(`bot/runtime/signals.py`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial
from typing import Annotated, Any, Literal

import structlog
from pydantic import BaseModel, BeforeValidator, ConfigDict, EmailStr, Field, ValidationInfo, WithJsonSchema, field_validator
from sqlalchemy import bindparam, case, func, literal, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import HandoffSettings, Ladder, format_duration
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import DeliveryFailed, Outbox
from bot.domain import conversations
from bot.domain import handoff_rows as rows
from bot.domain import ladder as recipients
from bot.domain.hours import Closed, OfficeHours
from bot.domain.ladder import InThread, StepPlan, Steps
from bot.domain.rendering import Renderer
from bot.domain.resume import MAX_NOTE, resume_message
from bot.errors import Conflict, DeskError, NotFound
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import Changed, record
from bot.runtime.text import CleanStr, one_line
from bot.store import audit, prepared
from bot.store.db import Database, execute_dml
from bot.store.dialects import seconds_between
from bot.store.models import (
    Conversation,
    HandoffRecipient,
    HandoffSession,
    Message,
    OutboxItem,
    new_id,
)
from bot.store.vocabulary import (
    OUTCOMES_SPOKEN,
    HandoffState,
    OutboxState,
    Outcome,
    RecipientState,
    ReleaseReason,
    Role,
)
from channels.base import (
    DEFAULT_PUBLIC_NAME,
    ChannelAdapter,
    Dispatch,
    HandoffBrief,
    Notice,
    NoticeAbout,
    Receipt,
    Relay,
)
from forms.fields import (
    MAX_RETURN_FIELDS,
    CoercedReturn,
    ReturnField,
    ReturnValuesInvalid,
    check_unique_names,
    coerce_returned,
)
from forms.links import FormLinks, new_link_id

log = structlog.get_logger(__name__)

OutcomeInput = Annotated[
    Outcome, WithJsonSchema({"enum": [outcome.value for outcome in Outcome], "type": "string"})
]
"""An outcome as the tools and the API take it. The schema is the one clients know: the words
inline, not a `$ref` to an enum definition carrying the class docstring (a field using it
names its title, which the replaced schema no longer derives)."""
EXTRA_CONTEXT_MAX_BYTES = 4096


# --------------------------------------------------------------------------- tool inputs


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a channel id (an integer), not true/false")
    return value


class HandoffRequestInput(BaseModel):
    """Input of `handoff_request`, a contract clients depend on (docs/architecture.md).
    `channel_id` is checked against the channels available at call time, which a static
    model cannot know."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    channel_id: Annotated[int, BeforeValidator(_not_bool)] = Field(
        description="The handoff channel to use; one of the ids listed in the description."
    )
    summary: CleanStr = Field(
        min_length=20, max_length=2000, description="What is happening, who the user is, what they need (20-2000 chars)."
    )
    expected_action: CleanStr = Field(
        min_length=10, max_length=1000, description="The concrete next step for the recipient (10-1000 chars)."
    )
    urgency: Literal["low", "normal", "high"] = Field(default="normal", description="How soon someone should look.")
    contact_back_email: EmailStr | None = Field(
        default=None, description="Where to reach the user; defaults to the subscriber's email when known."
    )
    include_transcript: bool = Field(default=True, description="Attach the recent conversation transcript.")
    extra_context: dict[CleanStr, CleanStr] | None = Field(
        default=None, description="Structured key/value context for the recipient, up to about 4 KB."
    )
    expected_return: list[ReturnField] | None = Field(
        default=None,
        max_length=MAX_RETURN_FIELDS,
        description="Up to 20 fields the recipient fills when handing back; they come back in the resume message.",
    )

    @field_validator("channel_id")
    @classmethod
    def _available_channel(cls, value: int, info: ValidationInfo) -> int:
        allowed = (info.context or {}).get("channel_ids")
        if allowed is not None and value not in allowed:
            raise ValueError(f"must be one of the available handoff channels {allowed}")
        return value

    @field_validator("extra_context")
    @classmethod
    def _small_context(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is None:
            return None
        size = len(json.dumps(value, ensure_ascii=False).encode())
        if size > EXTRA_CONTEXT_MAX_BYTES:
            raise ValueError(f"is {size} bytes when serialized; the limit is {EXTRA_CONTEXT_MAX_BYTES}")
        if any(not key.strip() or len(key) > 100 for key in value):
            raise ValueError("keys must be 1-100 characters")
        return value

    @field_validator("expected_return")
    @classmethod
    def _unique_names(cls, value: list[ReturnField] | None) -> list[ReturnField] | None:
        return None if value is None else check_unique_names(value)


class HandoffReleaseInput(BaseModel):
    """Input of `handoff_release` (sibling agents)."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    handoff_session_id: str = Field(min_length=1, max_length=40, description="The handoff you are serving.")
    outcome: OutcomeInput = Field(title="Outcome", description=f"{OUTCOMES_SPOKEN}.")
    note: CleanStr | None = Field(default=None, max_length=2000, description="One or two sentences for the original agent.")
    return_values: dict[str, Any] | None = Field(
        default=None,
        description="Values for the expected return fields, keyed by field name: only fields the handoff asked for, "
                    "each of its type (numbers as JSON numbers, dates as YYYY-MM-DD). Anything else is refused with "
                    "an error naming the field, and nothing is released until you call again with it corrected.",
    )


# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class ReleaseResult:
    released: bool
    session: HandoffSession
    resume_message_id: int | None = None


class NotActive(Conflict):
    code = "handoff_not_active"


@dataclass(frozen=True)
class HandoffStarted:
    """A person was notified: the dispatch went out and the bypass is active."""

    handoff_session_id: str
    handoff_event_id: int  # the `handoff_requested` audit event
    channel_id: int
    channel_kind: str
    channel_label: str
    channel_message_id: str | None
    estimated_response: str
    # On a route: its id, and the channels reached and those that failed on the way
    route_id: int | None = None
    notified: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    pending: tuple[int, ...] = ()  # still being sent when the first was reached


class HandoffRequestRefused(DeskError):
    """A `handoff_request` that started no handoff (or one that ended before it began)."""


class ChannelUnavailable(HandoffRequestRefused):
    """The asked channel is not (or no longer) among the available ones; nothing was stored."""

    code = "invalid_input"

    def __init__(self, channel_id: int, available: list[int]) -> None:
        super().__init__(f"channel {channel_id} is not available")
        self.channel_id, self.available = channel_id, available


class RouteClosed(HandoffRequestRefused):
    """The route refuses handoffs while none of its steps is open (`when_closed: refuse`);
    nothing was stored. `back` says when someone is (None: no office hours ahead)."""

    code = "nobody_available"
    status = 409

    def __init__(self, route_id: int, back: str | None) -> None:
        super().__init__(f"nobody on route {route_id} is available now" + (f"; back {back}" if back else ""))
        self.route_id, self.back = route_id, back


class HandoffAlreadyOpen(HandoffRequestRefused):
    """The conversation already has an open handoff (`active_id`; None when it ended
    before it could be read back); nothing was stored."""

    code = "handoff_already_active"
    status = 409

    def __init__(self, active_id: str | None) -> None:
        super().__init__(f"the conversation already has an open handoff ({active_id})")
        self.active_id = active_id


class DispatchFailed(HandoffRequestRefused):
    """The handoff was stored but nobody was notified: the channel refused or never
    answered within the budget (`reason` is the channel's hint), or, with `attempts` None,
    the handoff was failed as stuck while the dispatch was in flight."""

    code = "dispatch_failed"
    status = 502

    def __init__(
        self, *, handoff_session_id: str, handoff_event_id: int, channel_id: int, channel_label: str,
        attempts: int | None, reason: str | None, failed: tuple[int, ...] = (),
    ) -> None:
        super().__init__(f"handoff {handoff_session_id} was not dispatched: {reason or 'cancelled'}")
        self.handoff_session_id, self.handoff_event_id = handoff_session_id, handoff_event_id
        self.channel_id, self.channel_label = channel_id, channel_label
        self.attempts, self.reason = attempts, reason
        self.failed = failed  # on a route: every channel tried

    @property
    def cancelled(self) -> bool:
        """The dispatch was not refused; the handoff left `dispatching` while it was in flight."""
        return self.attempts is None


@dataclass(frozen=True)
class HandoffActivated:
    """Signal: the bypass began (the idle timer arms, a sibling agent speaks first)."""

    handoff: HandoffSession


@dataclass(frozen=True)
class HandoffReleased:
    """Signal: the bypass ended (the idle timer disarms, the agent resumes)."""

    handoff: HandoffSession


@dataclass(frozen=True)
class HandoffClaimed:
    """Signal: someone took a handoff on a route (the ladder stops, the idle timer starts)."""

    handoff: HandoffSession


@dataclass(frozen=True)
class EscalationDue:
    """Signal: a route's handoff has a (new) ladder deadline, to be armed."""

    handoff_session_id: str
    at: datetime


@dataclass(frozen=True)
class ClaimResult:
    """How a claim went: `claimed` when this call took the handoff; `handoff` as it stands
    after it (its `claimed_by` is whoever holds it)."""

    claimed: bool
    handoff: HandoffSession


@dataclass(frozen=True)
class Speaking:
    """Whether a recipient's action on a handoff goes through: always on a handoff straight
    to a channel; on a route, when their thread holds the claim (or has just taken it)."""

    allowed: bool
    handoff: HandoffSession
    holder: str | None = None  # who has it, when not allowed


@dataclass(frozen=True)
class HeldMessagesOrphaned:
    """Signal: the dispatch failed after the subscriber wrote for a person; nobody but the
    agent will answer those messages."""

    handoff: HandoffSession


_Line = tuple[int, dict[str, Any], int | None]
"""Where a handoff's message goes: the channel, the thread there, and its lane (bot/delivery/outbox.py)."""

# The release reasons that are a person's own act: on a route nobody had claimed, they claim it too.
_A_PERSON_ACTED = (ReleaseReason.FORM, ReleaseReason.RELEASE_TOKEN, ReleaseReason.OWNER, ReleaseReason.AGENT)

# Longer than the step from recording a dispatch as sent to activating its handoff: the
# sweep leaves a dispatch this fresh to the request that sent it.
ACTIVATION_GRACE = timedelta(seconds=10)
UNKNOWN_WAIT = "as soon as someone is available"  # a handoff row from before estimated_response was kept


@dataclass(frozen=True)
class OnTheLine:
    """Who an active handoff's subscriber is talking to. Until a person has written in it,
    nobody has joined: the subscriber waits for the channel's public name, usually within
    `estimated_response`. After the first reply, `name` is that reply's author."""

    joined: bool
    name: str
    estimated_response: str


# --------------------------------------------------------------------------- the service


class Handoffs:
    def __init__(
        self,
        *,
        db: Database,
        clock: Clock,
        settings: HandoffSettings,
        channels: ChannelSet,
        outbox: Outbox,
        renderer: Renderer,
        metrics: Metrics,
        forms: FormLinks,
        hours: OfficeHours,
        ladders: Mapping[int, Ladder] | None = None,
        background: Background | None = None,
    ) -> None:
        self.db, self.clock, self.settings, self.forms = db, clock, settings, forms
        self.channels, self.outbox, self.renderer = channels, outbox, renderer
        self.metrics, self.hours = metrics, hours
        self.ladders: Mapping[int, Ladder] = ladders or {}
        self.steps = Steps(channels, hours)
        self.background = background or Background()
        outbox.on_dispatch_settled = self._dispatch_settled

    @property
    def idle_timeout(self) -> timedelta:
        return self.settings.idle_timeout

    # ------------------------------------------------------------------ queries

    async def get(self, session_id: str) -> HandoffSession:
        """The handoff as stored now: one read on its own, outside any transaction."""
        return _found(rows.handoff_of(await self.db.fetch_one(rows.SELECT_HANDOFF, {"sid": session_id})), session_id)

    @staticmethod
    async def _get(session: AsyncSession, session_id: str) -> HandoffSession:
        return _found(await rows.handoff(session, session_id), session_id)

    @staticmethod
    async def open_session(session: AsyncSession, conversation_id: str) -> HandoffSession | None:
        """The conversation's open handoff as stored now (a re-read in the same session sees
        a new state: each read builds its object afresh from the row)."""
        return await rows.open_handoff(session, conversation_id)

    def public_name(self, handoff: HandoffSession) -> str:
        """What the subscriber is told the channel is called (its `public_name`; the default
        when the channel has since left the config). Its `label` is for the owner only."""
        if handoff.route_id is not None:
            ladder = self.ladders.get(handoff.route_id)
            return ladder.route.public_name if ladder is not None else DEFAULT_PUBLIC_NAME
        adapter = self.channels.get(handoff.channel_id)
        return adapter.config.public_name if adapter is not None else DEFAULT_PUBLIC_NAME

    async def on_the_line(self, conversation_id: str) -> OnTheLine | None:
        """Who is on the line in the conversation's active handoff, if it has one. "Joined"
        is decided by what happened (a person's reply is stored), never assumed at dispatch."""
        async with self.db.read() as session:
            handoff = await self.open_session(session, conversation_id)
            if handoff is None or handoff.state != HandoffState.ACTIVE:
                return None
            first_reply = (await session.scalars(
                select(Message)
                .where(col(Message.conversation_id) == conversation_id, col(Message.handoff_session_id) == handoff.id,
                       col(Message.role) == "human")
                .order_by(col(Message.id)).limit(1)
            )).first()
        waited = handoff.estimated_response or UNKNOWN_WAIT
        if first_reply is None:
            return OnTheLine(joined=False, name=self.public_name(handoff), estimated_response=waited)
        return OnTheLine(joined=True, name=first_reply.author or self.public_name(handoff), estimated_response=waited)

    async def by_thread(self, channel_id: int, thread_key: str) -> HandoffSession | None:
        """The active session a recipient's reply in this thread belongs to."""
        found = await self.in_thread(channel_id, thread_key)
        return found.handoff if found is not None else None

    async def in_thread(self, channel_id: int, thread_key: str) -> InThread | None:
        """The active session a recipient's thread belongs to and, on a route, which of its
        recipients the thread is. A handoff straight to a channel is found by its own row, as
        before routes; only a miss (or a routed row) looks at the recipients."""
        async with self.db.read() as session:
            handoff = await rows.active_in_thread(session, channel_id, thread_key)
            if handoff is not None and handoff.route_id is None:
                return InThread(handoff, None)
            return await recipients.active_in_thread(session, channel_id, thread_key)

    async def recipient_on(self, sid: str, channel_id: int) -> HandoffRecipient | None:
        async with self.db.read() as session:
            return await recipients.on_channel(session, sid, channel_id)

    async def recipients_of(self, sid: str) -> list[HandoffRecipient]:
        """Every channel a handoff on a route notified, in order (none for one straight to a channel)."""
        async with self.db.read() as session:
            return await recipients.of_handoff(session, sid)

    async def recipients_of_many(self, sids: Collection[str]) -> dict[str, list[HandoffRecipient]]:
        """`recipients_of` for several handoffs, in one read (a listing's)."""
        async with self.db.read() as session:
            return await recipients.of_handoffs(session, sids)

    def offered(self) -> list[Ladder]:
        """The routes the model may hand to now: those with at least one channel up."""
        return [ladder for ladder in self.ladders.values() if self.steps.is_available(ladder)]

    def target_ids(self) -> list[int]:
        """Every id `handoff_request` takes now: the available channels, then the routes."""
        return [a.id for a in self.channels.available()] + [ladder.id for ladder in self.offered()]

    # ------------------------------------------------------------------ request

    async def record_rejection(self, conversation_id: str, *, actor: str, error: str, hint: str, **detail: Any) -> int:
        """Audit a handoff_request that started nothing; returns the event id."""
        async with self.db.transaction() as session:
            event = await audit.record(
                session, "handoff_request_rejected", at=self.clock.now(), actor=actor,
                conversation_id=conversation_id, error=error, hint=hint, **detail,
            )
        self.metrics.handoff_requests.labels("none", "rejected").inc()
        return int(event.id or 0)

    async def request(self, conversation: Conversation, req: HandoffRequestInput, *, actor: str = "agent") -> HandoffStarted:
        """Start a handoff and dispatch it now: the caller learns whether a person was
        notified. Raises ChannelUnavailable or HandoffAlreadyOpen (nothing stored; the caller
        records the rejection with its wording), or DispatchFailed (the handoff is failed).
        `conversation` is the one the caller just read (the tool's context): conversations are
        never deleted, and the brief needs only who the subscriber is, so it is not read again."""
        ladder = self.ladders.get(req.channel_id)
        if ladder is not None and self.steps.is_available(ladder):
            return await self._request_on_route(conversation, req, ladder, actor=actor)
        adapter = self.channels.get(req.channel_id)
        if adapter is None or adapter not in self.channels.available():
            raise ChannelUnavailable(req.channel_id, self.target_ids())

        now = self.clock.now()
        sid = new_id("hs")
        conversation_id = conversation.id
        closed = self.hours.closed(adapter.config)
        estimate = self._estimate(adapter.config.estimated_response, closed)
        try:
            async with self.db.transaction(effect=True) as session:
                # No look for an open handoff first: the one-open-per-conversation unique index
                # refuses the insert below, and only then is the open one's id looked up.
                history = await conversations.recent_messages(session, conversation_id, self.settings.transcript_messages)
                handoff = await self._insert_requested(session, sid, conversation, req, adapter, estimate, now)
                requested = await audit.record(
                    session, "handoff_requested", at=now, actor=actor, handoff_session_id=sid,
                    conversation_id=conversation_id, channel_id=adapter.id, channel_kind=adapter.kind,
                    request=req.model_dump(mode="json", exclude_none=True),
                )
                outbound = self._dispatch_outbound(handoff, conversation, history, closed=closed)
                item = await self.outbox.enqueue(session, channel_id=adapter.id, outbound=outbound, now=now, claimed=True)
        except IntegrityError:  # the unique index on one open handoff per conversation
            raise HandoffAlreadyOpen(await self._open_id(conversation_id)) from None

        started = time.perf_counter()
        refused = partial(
            DispatchFailed, handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=adapter.id,
            channel_label=adapter.label,
        )
        try:
            try:
                receipt = await self.outbox.deliver_now(item, budget=self.settings.dispatch_timeout)
            except DeliveryFailed as exc:
                await self._fail(sid, error=str(exc.error), hint=exc.error.hint, attempts=exc.attempts)
                self.metrics.handoff_requests.labels(adapter.kind, "dispatch_failed").inc()
                raise refused(attempts=exc.attempts, reason=exc.error.hint) from None
            # The send is recorded; the activation is this service's own step.
            activated = await self._activate(sid, receipt) or await self._activated_meanwhile(sid)
        finally:
            self.metrics.dispatch_seconds.labels(adapter.kind).observe(time.perf_counter() - started)

        if activated is None:
            self.metrics.handoff_requests.labels(adapter.kind, "dispatch_failed").inc()
            raise refused(attempts=None, reason=None)
        self.metrics.handoff_requests.labels(adapter.kind, "ok").inc()
        return HandoffStarted(
            handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=adapter.id,
            channel_kind=adapter.kind, channel_label=adapter.label, channel_message_id=receipt.message_id,
            estimated_response=estimate,
        )

    # ------------------------------------------------------------------ a request on a route

    async def _request_on_route(
        self, conversation: Conversation, req: HandoffRequestInput, ladder: Ladder, *, actor: str,
    ) -> HandoffStarted:
        """Start a handoff on a route: notify its first open step's channels at once and
        return as soon as one of them is reached; a step whose every channel fails gives way
        to the next at once. Fails (DispatchFailed, the bypass never active) only when every
        channel the ladder could use now failed."""
        now = self.clock.now()
        plan = self.steps.next_open(ladder, 0, now)
        if plan is None:
            plan = self.steps.first_to_open(ladder, now)
            if plan is None:
                raise ChannelUnavailable(req.channel_id, self.target_ids())
            if ladder.route.when_closed == "refuse":
                raise RouteClosed(ladder.id, plan.closed.back_text if plan.closed else None)
        estimate = self._estimate(ladder.route.estimated_response, plan.closed)
        sid = new_id("hs")
        first = plan.adapters[0]
        try:
            async with self.db.transaction(effect=True) as session:
                history = await conversations.recent_messages(session, conversation.id, self.settings.transcript_messages)
                handoff = await self._insert_requested(
                    session, sid, conversation, req, first, estimate, now, route_id=ladder.id, step=plan.index,
                )
                requested = await audit.record(
                    session, "handoff_requested", at=now, actor=actor, handoff_session_id=sid,
                    conversation_id=conversation.id, channel_id=ladder.id, channel_kind="route", route_id=ladder.id,
                    request=req.model_dump(mode="json", exclude_none=True),
                )
                sending = await self._notify_step(session, handoff, conversation, history, plan, now)
        except IntegrityError:  # the unique index on one open handoff per conversation
            raise HandoffAlreadyOpen(await self._open_id(conversation.id)) from None

        started = time.perf_counter()
        failed: list[int] = []
        last_hint: str | None = None
        try:
            while True:
                reached, hints = await self._first_reached(sending, failed)
                last_hint = hints[-1] if hints else last_hint
                if reached is not None:
                    break
                following = self.steps.next_open(ladder, plan.index + 1, self.clock.now())
                if following is None:
                    await self._fail(sid, error="every channel of the route failed", hint=last_hint or "no channel could be reached")
                    self.metrics.handoff_requests.labels("route", "dispatch_failed").inc()
                    raise DispatchFailed(
                        handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
                        channel_label=ladder.route.label, attempts=len(failed), reason=last_hint, failed=tuple(failed),
                    )
                plan = following
                sending = await self._next_step_while_dispatching(sid, conversation, plan)
                self.metrics.escalations.labels(str(ladder.id), "failed_delivery").inc()
            recipient, receipt = reached
            activated = await self._activate(
                sid, receipt, recipient=recipient, escalate_at=self.clock.now() + plan.step.claim_within,
            ) or await self._activated_meanwhile(sid)
        finally:
            self.metrics.dispatch_seconds.labels("route").observe(time.perf_counter() - started)
        if activated is None:
            self.metrics.handoff_requests.labels("route", "dispatch_failed").inc()
            raise DispatchFailed(
                handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
                channel_label=ladder.route.label, attempts=None, reason=None, failed=tuple(failed),
            )
        self.metrics.handoff_requests.labels("route", "ok").inc()
        async with self.db.read() as session:
            now_known = await recipients.of_handoff(session, sid)
        return HandoffStarted(
            handoff_session_id=sid, handoff_event_id=int(requested.id or 0), channel_id=ladder.id,
            channel_kind="route", channel_label=ladder.route.label, channel_message_id=receipt.message_id,
            estimated_response=estimate, route_id=ladder.id,
            notified=tuple(r.channel_id for r in now_known if r.state == RecipientState.NOTIFIED),
            failed=tuple(r.channel_id for r in now_known if r.state == RecipientState.FAILED),
            pending=tuple(r.channel_id for r in now_known if r.state == RecipientState.SENDING),
        )

    async def _notify_step(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, history: list[Message],
        plan: StepPlan, now: datetime,
    ) -> list[_Sending]:
        """Store one dispatch per channel of the step not notified before (claimed, to be sent
        inline), each with its recipient row; returns what to send. A channel an earlier step
        already reached is not dispatched again (it was reminded, when the step says so)."""
        already = {r.channel_id for r in await recipients.of_handoff(session, handoff.id)}
        sending = []
        for adapter in plan.adapters:
            if adapter.id in already:
                continue
            closed = self.hours.closed(adapter.config) or plan.closed
            outbound = self._dispatch_outbound(handoff, conversation, history, closed=closed, to=adapter)
            item = await self.outbox.enqueue(session, channel_id=adapter.id, outbound=outbound, now=now, claimed=True)
            recipient = await recipients.add(
                session, handoff_session_id=handoff.id, channel_id=adapter.id, channel_kind=adapter.kind,
                channel_label=adapter.label, step=plan.index, state=RecipientState.SENDING, outbox_item_id=item.id,
                created_at=now,
            )
            sending.append(_Sending(item, recipient))
        return sending

    async def _next_step_while_dispatching(self, sid: str, conversation: Conversation, plan: StepPlan) -> list[_Sending]:
        """Every channel of the step before failed while the request waits: the next step, now."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            handoff = await self._get(session, sid)
            await session.execute(update(HandoffSession).where(col(HandoffSession.id) == sid).values(step=plan.index))
            history = await conversations.recent_messages(session, conversation.id, self.settings.transcript_messages)
            sending = await self._notify_step(session, handoff, conversation, history, plan, now)
            await audit.note(
                session, "handoff_escalated", at=now, actor="ladder", handoff_session_id=sid,
                conversation_id=conversation.id, to_step=plan.index, why="failed_delivery",
                notify=[s.recipient.channel_id for s in sending],
            )
        return sending

    async def _first_reached(
        self, sending: list[_Sending], failed: list[int],
    ) -> tuple[tuple[HandoffRecipient, Receipt] | None, list[str]]:
        """Send a step's dispatches side by side and return with the first one delivered; the
        others go on in the background (how each ends is recorded on its recipient by the
        outbox's settle hook). Appends the channels that failed to `failed`."""
        budget = self.settings.dispatch_timeout
        tasks = {
            self.background.spawn(self._deliver(s.item, budget), name=f"dispatch:{s.item.id}"): s for s in sending
        }
        hints: list[str] = []
        pending = set(tasks)
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                result = task.result()
                if isinstance(result, Receipt):
                    return (tasks[task].recipient, result), hints
                failed.append(tasks[task].recipient.channel_id)
                hints.append(result)
        return None, hints

    async def _deliver(self, item: OutboxItem, budget: timedelta) -> Receipt | str:
        """One dispatch of a step: its receipt, or the channel's hint when it was given up."""
        try:
            return await self.outbox.deliver_now(item, budget=budget)
        except DeliveryFailed as exc:
            return exc.error.hint

    def _estimate(self, usual: str, closed: Closed | None) -> str:
        """What the model and the subscriber are told to expect: the channel's (or route's) own
        estimate, or, outside its office hours, when its people are back (a template owners can reword)."""
        if closed is None:
            return usual
        return self.renderer.render("messages/out_of_hours_estimate.txt", back=closed.back_text, usual=usual).strip()

    async def _insert_requested(
        self, session: AsyncSession, sid: str, conversation: Conversation, req: HandoffRequestInput, to: ChannelAdapter,
        estimate: str, now: datetime, **route: int,
    ) -> HandoffSession:
        """The handoff row as asked for, `dispatching` on `to` (on a route, its first channel,
        with `route_id` and `step`), and its first return-form link. The row is inserted already
        naming the link, then the link (its foreign key needs the handoff)."""
        link_id = new_link_id()
        handoff = await rows.insert_handoff(
            session, id=sid, conversation_id=conversation.id, channel_id=to.id, channel_kind=to.kind,
            channel_label=to.label, state=HandoffState.DISPATCHING, urgency=req.urgency, summary=req.summary,
            expected_action=req.expected_action,
            contact_back_email=str(req.contact_back_email or conversation.subscriber_email or "") or None,
            include_transcript=req.include_transcript, extra_context=req.extra_context or {},
            expected_return=[f.model_dump(exclude_none=True) for f in req.expected_return or []],
            estimated_response=estimate, created_at=now, form_link_id=link_id, **route,
        )
        await self.forms.store(session, link_id, sid, now)
        await rows.mark_escalated(session, conversation.id, now)
        return handoff

    async def _open_id(self, conversation_id: str) -> str | None:
        async with self.db.read() as session:
            found = await self.open_session(session, conversation_id)
            return found.id if found else None

    def _dispatch_outbound(
        self, handoff: HandoffSession, conversation: Conversation, history: list[Message], *, closed: Closed | None,
        to: ChannelAdapter | None = None,
    ) -> Dispatch:
        """The brief for the handoff's channel, or, on a route, for one recipient `to` (the
        first to claim takes it, which the brief says and a Claim button offers)."""
        brief = self._brief(handoff, conversation, history if handoff.include_transcript else [])
        if to is not None:
            brief = brief.model_copy(update={"claimable": True})
        if closed is not None:
            outside = self.renderer.render("messages/out_of_hours_dispatch.txt", estimated_response=handoff.estimated_response)
            brief = brief.model_copy(update={"outside_hours": outside.strip()})
        text = self.renderer.render(
            "messages/dispatch.txt",
            brief=brief,
            field_lines=brief.field_lines,
            claimable=brief.claimable,
            channel_label=to.label if to is not None else handoff.channel_label,
            idle_timeout=format_duration(self.idle_timeout),
            form_ttl=format_duration(self.forms.ttl),
        )
        subject = f"[Handoff {handoff.short_code}] {one_line(handoff.summary, 80)}"
        return Dispatch(handoff_id=handoff.id, text=text, subject=subject, brief=brief)

    def _brief(self, handoff: HandoffSession, conversation: Conversation, history: list[Message]) -> HandoffBrief:
        return HandoffBrief(
            handoff_session_id=handoff.id,
            short_code=handoff.short_code,
            conversation_id=conversation.id,
            subscriber_name=conversation.subscriber_name,
            subscriber_email=conversation.subscriber_email,
            summary=handoff.summary,
            expected_action=handoff.expected_action,
            urgency=handoff.urgency,
            contact_back_email=handoff.contact_back_email,
            extra_context=handoff.extra_context,
            expected_return=stored_fields(handoff),
            transcript=conversations.transcript(history, conversation),
            form_url=self.forms.url(handoff.form_link_id),
            idle_timeout_seconds=self.idle_timeout.total_seconds(),
        )

    async def _fail(self, sid: str, *, error: str, hint: str, attempts: int | None = None, actor: str = "dispatcher") -> bool:
        """dispatching → failed, unless its dispatch is recorded as sent: a person was
        notified then, and the handoff is activated from that receipt instead."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            handoff = await rows.transition(session, rows.FAIL, sid, state=HandoffState.FAILED, failure=hint)
            if handoff is None:
                return False
            await session.execute(
                update(OutboxItem)
                .where(col(OutboxItem.handoff_session_id) == sid, col(OutboxItem.purpose) == "dispatch", col(OutboxItem.state) != OutboxState.SENT)
                .values(state=OutboxState.FAILED, lease_until=None)
            )
            held = await session.scalar(
                select(func.count()).select_from(Message)
                .where(col(Message.handoff_session_id) == sid, col(Message.role) == "subscriber")
            )
            await audit.note(
                session, "dispatch_failed", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, error=error, hint=hint, attempts=attempts,
                held_messages=held or None,
            )
            if held:  # the subscriber wrote while we waited for the channel: nobody will answer but the agent
                record(session.info, HeldMessagesOrphaned(handoff))
        log.warning("handoff_dispatch_failed", handoff_session_id=sid, hint=hint)
        return True

    async def _activate(
        self, sid: str, receipt: Receipt, *, actor: str = "dispatcher", recipient: HandoffRecipient | None = None,
        escalate_at: datetime | None = None,
    ) -> HandoffSession | None:
        """dispatching → active from the dispatch's receipt, in a transaction of its own:
        the relays of held messages, the subscriber's notice and the audit event commit with
        it. None when the compare-and-set found nothing to do: the session left
        `dispatching` (another caller activated it, or the sweep failed it as stuck), or its
        dispatch is not recorded as sent (the send's record lost its claim)."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            if recipient is None:
                handoff = await rows.transition(
                    session, rows.ACTIVATE, sid, state=HandoffState.ACTIVE, channel_message_id=receipt.message_id,
                    thread_key=receipt.thread_key, thread=receipt.thread, activated_at=now, focused_at=now,
                    last_activity_at=now, idle_deadline=now + self.idle_timeout,
                )
            else:
                handoff = await rows.transition(
                    session, rows.ACTIVATE_ROUTED, sid, state=HandoffState.ACTIVE, channel_id=recipient.channel_id,
                    channel_kind=recipient.channel_kind, channel_label=recipient.channel_label,
                    channel_message_id=receipt.message_id, thread_key=receipt.thread_key, thread=receipt.thread,
                    activated_at=now, focused_at=now, last_activity_at=now, idle_deadline=None, escalate_at=escalate_at,
                )
            if handoff is None:
                return None
            held = await rows.held_messages(session, sid)
            if held:  # written while the dispatch was in flight
                conversation = await rows.conversation(session, handoff.conversation_id)
                if conversation is None:  # never deleted, so never None: the handoff's foreign key
                    raise NotFound("conversation", handoff.conversation_id)
                for message in held:
                    await self._queue_relay(session, handoff, conversation, message, now)
            await self._tell_subscriber(session, handoff, "messages/subscriber_handoff_started.txt", now)
            await audit.note(
                session, "handoff_activated", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, channel_message_id=receipt.message_id,
                idle_deadline=handoff.idle_deadline.isoformat() if handoff.idle_deadline else None,
                escalate_at=handoff.escalate_at.isoformat() if handoff.escalate_at else None,
                held_messages=len(held) or None,
            )
            record(session.info, Changed(handoff.conversation_id))  # its pages show who is on the line now
            record(session.info, HandoffActivated(handoff))
        return handoff

    async def _activated_meanwhile(self, sid: str) -> HandoffSession | None:
        """The session, when another caller (the sweep of another instance) activated it
        from the same sent dispatch before this one could."""
        handoff = await self.get(sid)
        return handoff if handoff.state == HandoffState.ACTIVE else None

    async def recover_dispatches(self) -> None:
        """After a crash or a stop: activate the handoffs whose dispatch was sent, then fail
        the ones left `dispatching` for good (run by the sweep, which also runs at start)."""
        await self.activate_sent_dispatches()
        await self.fail_stale_dispatches()

    async def activate_sent_dispatches(self) -> int:
        """Handoffs still `dispatching` although their dispatch is recorded as sent: the
        process stopped between recording the send and activating. A person was notified,
        so each is activated from the receipt stored on its dispatch item."""
        cutoff = self.clock.now() - ACTIVATION_GRACE
        async with self.db.read() as session:
            rows = (await session.execute(
                select(col(HandoffSession.id), col(OutboxItem.receipt), col(HandoffSession.route_id),
                       col(HandoffSession.step), col(OutboxItem.id))
                .join(OutboxItem, col(OutboxItem.handoff_session_id) == col(HandoffSession.id))
                .where(col(HandoffSession.state) == HandoffState.DISPATCHING, col(OutboxItem.purpose) == "dispatch",
                       col(OutboxItem.state) == OutboxState.SENT, col(OutboxItem.sent_at) <= cutoff)
            )).all()
        activated = 0
        for sid, receipt, route_id, step, item_id in rows:
            try:
                routed: dict[str, Any] = {}
                if route_id is not None:
                    routed = await self._routed_activation(route_id, step, item_id)
                if receipt is not None and await self._activate(sid, Receipt.model_validate(receipt), actor="sweeper", **routed):
                    log.info("handoff_activated_on_recovery", handoff_session_id=sid)
                    activated += 1
            except Exception:  # one bad row must not keep the others inactive
                log.exception("handoff_recovery_failed", handoff_session_id=sid)
        return activated

    async def _routed_activation(self, route_id: int, step: int | None, item_id: int) -> dict[str, Any]:
        """What activating a route's handoff from a sent dispatch needs: its recipient, and the
        step's deadline from now (a ladder since removed from the config escalates at once)."""
        async with self.db.read() as session:
            recipient = await recipients.by_item(session, item_id)
        ladder = self.ladders.get(route_id)
        wait = ladder.steps[step].claim_within if ladder is not None and step is not None and step < len(ladder.steps) else timedelta(0)
        return {"recipient": recipient, "escalate_at": self.clock.now() + wait}

    async def _tell_subscriber(
        self, session: AsyncSession, handoff: HandoffSession, template: str, now: datetime, **extra: Any,
    ) -> None:
        """The desk's own word to the subscriber (who was asked, that the assistant is back),
        from a template the owner can reword, so no agent has to remember to say it."""
        text = self.renderer.render(
            template, public_name=self.public_name(handoff), label=handoff.channel_label,
            idle_timeout=format_duration(self.idle_timeout),
            estimated_response=handoff.estimated_response or UNKNOWN_WAIT, **extra,
        ).strip()
        if text:
            await conversations.add_message(
                session, handoff.conversation_id, role=Role.AGENT, text=text, now=now, handoff_session_id=handoff.id,
            )

    # ------------------------------------------------------------------ relaying

    # Prepared once: every relayed message, both ways, runs it (bot/store/prepared.py)
    _BUMP = prepared.Prepared(
        update(HandoffSession.__table__)  # type: ignore[attr-defined]  # SQLAlchemy sets it on table models
        .where(col(HandoffSession.id) == bindparam("sid"), col(HandoffSession.state) == HandoffState.ACTIVE)
        # While a route's ladder deadline runs the idle timer does not: it starts at the claim.
        .values(last_activity_at=bindparam("now"), idle_deadline=case(
            (col(HandoffSession.escalate_at).is_(None), bindparam("deadline", type_=rows.HANDOFFS.c.idle_deadline.type)),
            else_=col(HandoffSession.idle_deadline),
        ))
    )

    async def bump(self, session: AsyncSession, sid: str, now: datetime) -> bool:
        """Push the idle deadline out; False when the session is not active (any more).

        This UPDATE doubles as the activity check, so a message racing a release is either
        part of the session or refused — never relayed into a released one. An ORM copy of
        the row loaded earlier in the session keeps its old deadline."""
        params = {"sid": sid, "now": now, "deadline": now + self.idle_timeout}
        return await prepared.execute(session, self._BUMP, params) == 1

    async def route_subscriber_message(
        self, session: AsyncSession, conversation: Conversation, text: str, now: datetime
    ) -> tuple[Message, HandoffSession] | None:
        """Store a subscriber message meant for a person, in the caller's transaction, and
        queue its relay. Returns None when no handoff is open: the message is the agent's.

        While the dispatch is still in flight the message is held (stored with the handoff's
        id) and relayed the moment the channel confirms; the conditional UPDATE on the
        session row orders it against the activation, so it is never missed."""
        handoff = await self.open_session(session, conversation.id)
        if handoff is None:
            return None
        if handoff.state == HandoffState.DISPATCHING:
            held = await execute_dml(
                session,
                update(HandoffSession)
                .where(col(HandoffSession.id) == handoff.id, col(HandoffSession.state) == HandoffState.DISPATCHING)
                .values(last_activity_at=now)
            )
            if held.rowcount == 1:
                message = await conversations.add_message(
                    session, conversation.id, role=Role.SUBSCRIBER, text=text, now=now, handoff_session_id=handoff.id
                )
                return message, handoff
            handoff = await self.open_session(session, conversation.id)  # it was activated (or failed) meanwhile
            if handoff is None or handoff.state != HandoffState.ACTIVE:
                return None
        if not await self.bump(session, handoff.id, now):
            return None
        message = await conversations.add_message(
            session, conversation.id, role=Role.SUBSCRIBER, text=text, now=now, handoff_session_id=handoff.id
        )
        await self._queue_relay(session, handoff, conversation, message, now)
        return message, handoff

    async def _queue_relay(
        self, session: AsyncSession, handoff: HandoffSession, conversation: Conversation, message: Message, now: datetime
    ) -> None:
        """Queue a subscriber's message to the handoff's line; on a route nobody has claimed
        yet, to every channel reached (each channel's messages in order on their own lane)."""
        author = conversation.subscriber_name or "Subscriber"
        text = self.renderer.render("messages/relay.txt", author=author, text=message.text, short_code=handoff.short_code)
        for channel_id, thread, lane in await self._lines(session, handoff):
            outbound = Relay(handoff_id=handoff.id, text=text, author=author, body=message.text, thread=thread, lane=lane)
            await self.outbox.queue(session, channel_id=channel_id, outbound=outbound, now=now, message_id=message.id)

    async def _lines(self, session: AsyncSession, handoff: HandoffSession) -> list[_Line]:
        """Where the handoff's messages go, as (channel, thread, lane): its one line, or, on a
        route nobody has claimed, every recipient reached (none once someone took it from a
        page, the inbox, where they read the conversation itself). On a route each channel has a lane
        of its own (a slow channel never holds up another's messages)."""
        if handoff.route_id is None:
            return [(handoff.channel_id, handoff.thread, None)]
        if handoff.claimed_at is not None:
            if handoff.claimed_recipient_id is None:  # taken where no dispatch went (the inbox page): no thread of it
                return []
            return [(handoff.channel_id, handoff.thread, handoff.channel_id)]
        reached = await recipients.of_handoff(session, handoff.id, state=RecipientState.NOTIFIED)
        return [(r.channel_id, r.thread, r.channel_id) for r in reached] or [(handoff.channel_id, handoff.thread, handoff.channel_id)]

    async def _notify(
        self, session: AsyncSession, handoff: HandoffSession, about: NoticeAbout, text: str, now: datetime,
        *, to: Sequence[_Line] | None = None,
    ) -> None:
        """A notice to the handoff's lines (or to `to`)."""
        for channel_id, thread, lane in to if to is not None else await self._lines(session, handoff):
            await self.outbox.queue(
                session, channel_id=channel_id, now=now,
                outbound=Notice(handoff_id=handoff.id, text=text, thread=thread, about=about, lane=lane),
            )

    async def recipient_message(self, sid: str, text: str, *, author: str, via: str) -> Message | ReleaseResult:
        """A recipient wrote into the handoff: relay it to the subscriber, or release on `/release`."""
        author = " ".join(author.split())[:200] or "recipient"
        command = parse_release_command(text)
        if command is not None:
            outcome, note = command
            return await self.release(sid, reason=ReleaseReason.RELEASE_TOKEN, actor=author, outcome=outcome, note=note)
        now = self.clock.now()
        async with self.db.transaction(effect=True) as session:
            if not await self.bump(session, sid, now):
                handoff = await session.get(HandoffSession, sid)
                if handoff is None:
                    raise NotFound("handoff session", sid)
                raise NotActive(f"handoff {sid} is {handoff.state}; the message was not relayed", state=handoff.state)
            handoff = await self._get(session, sid)
            first_reply = await self._first_reply(session, handoff, now)
            message = await conversations.add_message(
                session, handoff.conversation_id, role=Role.HUMAN, text=text, now=now, author=author, handoff_session_id=sid
            )
            await audit.note(
                session, "relayed_to_subscriber", at=now, actor=author, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, message_id=message.id, via=via,
            )
        self.metrics.relayed.labels("to_subscriber").inc()
        if first_reply:
            self._observe_time_to_human(handoff, handoff.channel_kind, now)
        return message

    @staticmethod
    async def _first_reply(session: AsyncSession, handoff: HandoffSession, now: datetime) -> bool:
        """Whether this is the first person's reply to a handoff straight to a channel (the
        moment a person was reached; on a route the claim is), marked on the row once. The
        column comes with the row the caller read, so later replies cost no statement."""
        if handoff.route_id is not None or handoff.first_human_reply_at is not None:
            return False
        marked = await execute_dml(
            session, update(HandoffSession)
            .where(col(HandoffSession.id) == handoff.id, col(HandoffSession.first_human_reply_at).is_(None))
            .values(first_human_reply_at=now, time_to_person_seconds=_seconds_to_person(handoff, now))
        )
        return marked.rowcount == 1

    def _observe_time_to_human(self, handoff: HandoffSession, channel_kind: str, now: datetime) -> None:
        """From the handoff reaching its first person to a person acting on it."""
        if handoff.activated_at is not None:
            waited = (now - handoff.activated_at).total_seconds()
            self.metrics.time_to_human.labels(channel_kind, _route_label(handoff)).observe(waited)

    # ------------------------------------------------------------------ claims (routes)

    async def claim(
        self, sid: str, *, by: str, via: str, recipient_id: int | None = None, effect: bool = False,
        record_noop: bool = True,
    ) -> ClaimResult:
        """Take a handoff on a route nobody has claimed yet: exactly one claim wins (a
        compare-and-set on the row, as a release is); the rest are recorded as no-ops. The
        winner's thread becomes the handoff's line (the subscriber's messages go only there
        from now on), the idle timer starts, the other recipients are told who has it, and the
        subscriber who has joined. `effect`: this claim is what its caller's event does (a
        Claim press), not a step before the message that claims (a reply). `record_noop`
        False: a caller that records the lost claim its own way (`speaking`)."""
        now = self.clock.now()
        by = " ".join(by.split())[:200] or "recipient"
        async with self.db.transaction(effect=effect) as session:
            recipient = await recipients.get(session, recipient_id) if recipient_id is not None else None
            values: dict[str, Any] = {
                "claimed_at": now, "claimed_by": by, "claimed_via": via[:40], "claimed_recipient_id": recipient_id,
                "escalate_at": None, "idle_deadline": now + self.idle_timeout, "last_activity_at": now,
                "time_to_person_seconds": _seconds_to_person_sql(now),
            }
            if recipient is not None and recipient.thread_key is not None:
                values.update(
                    channel_id=recipient.channel_id, channel_kind=recipient.channel_kind, channel_label=recipient.channel_label,
                    thread_key=recipient.thread_key, thread=recipient.thread, channel_message_id=recipient.channel_message_id,
                )
            row = (await session.execute(
                update(rows.HANDOFFS)
                .where(rows.HANDOFFS.c.id == sid, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                       rows.HANDOFFS.c.route_id.is_not(None), rows.HANDOFFS.c.claimed_at.is_(None))
                .values(**values).returning(*rows.HANDOFFS.columns)
            )).first()
            handoff = rows.handoff_of(row)
            if handoff is None:
                current = await self._get(session, sid)
                if not record_noop:
                    return ClaimResult(claimed=False, handoff=current)
                await audit.note(
                    session, "claim_noop", at=now, actor=by, handoff_session_id=sid, conversation_id=current.conversation_id,
                    via=via, state=current.state, claimed_by=current.claimed_by,
                )
                self.metrics.claims.labels("noop").inc()
                return ClaimResult(claimed=False, handoff=current)
            waited = (now - handoff.activated_at).total_seconds() if handoff.activated_at else None
            await audit.note(
                session, "handoff_claimed", at=now, actor=by, handoff_session_id=sid, conversation_id=handoff.conversation_id,
                via=via, channel_id=recipient.channel_id if recipient else None, step=handoff.step,
                waited_seconds=round(waited, 3) if waited is not None else None,
            )
            await self._tell_subscriber(session, handoff, "messages/subscriber_handoff_claimed.txt", now, person=by)
            await self._tell_claim(session, handoff, recipient, now)
            record(session.info, Changed(handoff.conversation_id))
            record(session.info, HandoffClaimed(handoff))
        self.metrics.claims.labels("claimed").inc()
        if waited is not None:
            kind = recipient.channel_kind if recipient else via.split(":")[0]
            self.metrics.time_to_claim.labels(str(handoff.route_id), kind).observe(waited)
            self._observe_time_to_human(handoff, kind, now)
        log.info("handoff_claimed", handoff_session_id=sid, by=by, via=via)
        return ClaimResult(claimed=True, handoff=handoff)

    async def _tell_claim(
        self, session: AsyncSession, handoff: HandoffSession, winner: HandoffRecipient | None, now: datetime,
    ) -> None:
        """The claimer's thread hears it has the handoff; every other recipient reached, who has
        it (an adapter that can edits its dispatch to say so)."""
        at = now.strftime("%H:%M UTC")
        for other in await recipients.of_handoff(session, handoff.id, state=RecipientState.NOTIFIED):
            line = [(other.channel_id, other.thread, other.channel_id)]
            if winner is not None and other.id == winner.id:
                text = self.renderer.render("messages/claimed.txt", short_code=handoff.short_code, by=handoff.claimed_by).strip()
                await self._notify(session, handoff, "claimed", text, now, to=line)
            else:
                text = self.renderer.render(
                    "messages/taken.txt", short_code=handoff.short_code, by=handoff.claimed_by,
                    via=winner.channel_label if winner else handoff.claimed_via, at=at,
                ).strip()
                await self._notify(session, handoff, "taken", text, now, to=line)

    async def speaking(self, sid: str, channel_id: int | None, *, by: str, via: str, claiming: bool = False) -> Speaking:
        """Whether what a recipient on `channel_id` does next (a reply, `/release`) goes
        through: always on a handoff straight to a channel; on a route, if their thread holds
        the claim, or takes it now. When it does not, their thread is told who has it (nothing
        of theirs reaches the subscriber) and the refusal is in the audit trail. `claiming`:
        the act is the claim itself (a Claim press), so the claim is its effect and a late one
        is recorded as a `claim_noop`."""
        async with self.db.read() as session:
            handoff = await self._get(session, sid)
            if handoff.route_id is None:
                return Speaking(allowed=True, handoff=handoff)
            recipient = await recipients.on_channel(session, sid, channel_id) if channel_id is not None else None
        if handoff.claimed_at is None:
            result = await self.claim(
                sid, by=by, via=via, recipient_id=recipient.id if recipient else None, effect=claiming, record_noop=False,
            )
            handoff = result.handoff
            if result.claimed:
                return Speaking(allowed=True, handoff=handoff)
        if handoff.state != HandoffState.ACTIVE:
            return Speaking(allowed=True, handoff=handoff)  # ended meanwhile: the caller's own step says so
        ours = recipient is not None and handoff.claimed_recipient_id == recipient.id
        if ours or (recipient is None and handoff.claimed_via == via):
            return Speaking(allowed=True, handoff=handoff)
        now = self.clock.now()
        if claiming:
            self.metrics.claims.labels("noop").inc()
        async with self.db.transaction(effect=claiming) as session:
            await audit.note(
                session, "claim_noop" if claiming else "not_relayed", at=now, actor=by, handoff_session_id=sid, conversation_id=handoff.conversation_id,
                via=via, claimed_by=handoff.claimed_by,
            )
            # A late Claim press wrote nothing: its thread already heard who took it ("taken")
            if not claiming and recipient is not None and recipient.state == RecipientState.NOTIFIED:
                text = self.renderer.render("messages/not_yours.txt", short_code=handoff.short_code, by=handoff.claimed_by).strip()
                await self._notify(session, handoff, "not_yours", text, now,
                                   to=[(recipient.channel_id, recipient.thread, recipient.channel_id)])
        return Speaking(allowed=False, handoff=handoff, holder=handoff.claimed_by)

    # ------------------------------------------------------------------ the ladder (routes)

    async def _dispatch_settled(
        self, session: AsyncSession, item: OutboxItem, receipt: Receipt | None, error: str | None, now: datetime,
    ) -> None:
        """The outbox recorded how a route's dispatch ended, in this transaction: where it
        landed, or that it failed. A step whose every channel has failed moves the ladder on
        at once (its deadline is set to now), instead of waiting out `claim_within`."""
        if receipt is not None:
            reached = await recipients.notified_from(session, item.id or 0, receipt, now)
            if reached is not None:
                await audit.note(
                    session, "recipient_notified", at=now, actor="dispatcher", handoff_session_id=reached.handoff_session_id,
                    channel_id=reached.channel_id, step=reached.step, channel_message_id=receipt.message_id,
                )
            return
        lost = await recipients.failed_at(session, item.id or 0, error or "failed", now)
        if lost is None:
            return
        await audit.note(
            session, "recipient_failed", at=now, actor="dispatcher", handoff_session_id=lost.handoff_session_id,
            channel_id=lost.channel_id, step=lost.step, hint=error,
        )
        self.metrics.fallbacks.labels(lost.channel_kind).inc()
        if await recipients.step_has_hope(session, lost.handoff_session_id, lost.step):
            return
        moved = await execute_dml(
            session,
            update(HandoffSession).where(
                col(HandoffSession.id) == lost.handoff_session_id, col(HandoffSession.state) == HandoffState.ACTIVE,
                col(HandoffSession.claimed_at).is_(None), col(HandoffSession.step) == lost.step,
            ).values(escalate_at=now)
        )
        if moved.rowcount == 1:
            record(session.info, EscalationDue(lost.handoff_session_id, now))

    async def escalate_if_due(self, sid: str) -> HandoffSession | None:
        """A route's ladder deadline passed with nobody claiming: notify the next open step
        (reminding the last one first when it says so), or, past the last, release the
        handoff as `unclaimed`. Compare-and-set on the step and the deadline, so a second
        instance or a double fire does nothing. Returns the handoff as it is after it."""
        now = self.clock.now()
        handoff = await self.get(sid)
        due = handoff.escalate_at
        if (handoff.state != HandoffState.ACTIVE or handoff.route_id is None or handoff.claimed_at is not None
                or due is None or due > now or handoff.step is None):
            return handoff
        ladder = self.ladders.get(handoff.route_id)
        plan = self.steps.next_open(ladder, handoff.step + 1, now) if ladder is not None else None
        if plan is None:
            result = await self.release(sid, reason=ReleaseReason.UNCLAIMED, actor="ladder", unclaimed_cutoff=now)
            if result.released:
                self.metrics.unclaimed.labels(str(handoff.route_id)).inc()
            return result.session
        assert ladder is not None
        from_step = handoff.step
        async with self.db.transaction() as session:
            moved = (await session.execute(
                update(rows.HANDOFFS).where(
                    rows.HANDOFFS.c.id == sid, rows.HANDOFFS.c.state == HandoffState.ACTIVE,
                    rows.HANDOFFS.c.claimed_at.is_(None), rows.HANDOFFS.c.step == from_step,
                    rows.HANDOFFS.c.escalate_at <= now,
                ).values(step=plan.index, escalate_at=now + plan.step.claim_within).returning(*rows.HANDOFFS.columns)
            )).first()
            handoff = rows.handoff_of(moved) or await self._get(session, sid)
            if moved is None:
                return handoff
            # Reminded: the step before, when it asks for it, and whoever this step names again
            # (a channel is dispatched once per handoff; a later step naming it reminds it).
            again = {a.id for a in plan.adapters}
            reminded = [
                r for r in await recipients.of_handoff(session, sid, state=RecipientState.NOTIFIED)
                if r.channel_id in again or (ladder.steps[from_step].remind and r.step == from_step)
            ]
            if reminded:
                text = self.renderer.render("messages/reminder.txt", short_code=handoff.short_code).strip()
                await self._notify(session, handoff, "reminder", text, now,
                                   to=[(r.channel_id, r.thread, r.channel_id) for r in reminded])
            conversation = await rows.conversation(session, handoff.conversation_id)
            if conversation is None:
                raise NotFound("conversation", handoff.conversation_id)
            history = await conversations.recent_messages(session, conversation.id, self.settings.transcript_messages)
            sending = await self._notify_step(session, handoff, conversation, history, plan, now)
            await self._tell_subscriber(session, handoff, "messages/subscriber_handoff_escalated.txt", now)
            await audit.note(
                session, "handoff_escalated", at=now, actor="ladder", handoff_session_id=sid,
                conversation_id=handoff.conversation_id, from_step=from_step, to_step=plan.index, why="nobody_claimed", notify=[s.recipient.channel_id for s in sending],
                escalate_at=handoff.escalate_at.isoformat() if handoff.escalate_at else None,
            )
            record(session.info, Changed(handoff.conversation_id))
            if handoff.escalate_at is not None:
                record(session.info, EscalationDue(sid, handoff.escalate_at))
        self.metrics.escalations.labels(str(ladder.id), "nobody_claimed").inc()
        for each in sending:
            self.background.spawn(self._deliver(each.item, self.settings.dispatch_timeout), name=f"dispatch:{each.item.id}")
        return handoff

    async def escalations_due(self, horizon: datetime, limit: int = 5000) -> list[tuple[str, datetime]]:
        """Unclaimed handoffs on a route whose ladder deadline falls before `horizon`, soonest first."""
        async with self.db.read() as session:
            query = (
                select(col(HandoffSession.id), col(HandoffSession.escalate_at))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.escalate_at) <= horizon)
                .order_by(col(HandoffSession.escalate_at)).limit(limit)
            )
            return [(sid, at) for sid, at in (await session.execute(query)).all() if at is not None]

    # ------------------------------------------------------------------ release

    async def release(
        self,
        sid: str,
        *,
        reason: ReleaseReason,
        actor: str,
        outcome: Outcome | None = None,
        note: str | None = None,
        return_values: dict[str, Any] | None = None,
        idle_cutoff: datetime | None = None,
        unclaimed_cutoff: datetime | None = None,
        guard: Callable[[AsyncSession, datetime], Awaitable[None]] | None = None,
    ) -> ReleaseResult:
        """End the bypass. Exactly one caller wins; the rest are recorded as no-ops.

        `idle_cutoff` makes it an idle release: it only applies while the deadline is at or
        before the cutoff, so a message that pushed the deadline out wins over a late timer;
        `unclaimed_cutoff` makes it the ladder's end: only while nobody has claimed it and its
        last deadline is at or before the cutoff.
        `guard` runs inside the winning transaction (e.g. consuming a form link); if it
        raises, nothing of the release is committed and the exception propagates.
        Returned values that do not fit the handoff's fields raise ReturnValuesInvalid
        before anything changes (recorded as `release_refused`), whoever sent them.
        """
        now = self.clock.now()
        reason = ReleaseReason(reason)  # callers outside the type checker pass the plain word
        outcome = Outcome(outcome) if outcome else reason.default_outcome
        note = note.strip() if note and note.strip() else None
        refused: ReturnValuesInvalid | None = None
        resume: Message | None = None
        # One transaction whichever way it goes: the values are typed against the row read
        # here, and the loser's `release_noop` is recorded beside that read.
        async with self.db.transaction(effect=True) as session:
            handoff = await self._get(session, sid)
            try:
                coerced = coerce_returned(stored_fields(handoff), return_values)
            except ReturnValuesInvalid as exc:
                await audit.note(
                    session, "release_refused", at=now, actor=actor, handoff_session_id=sid,
                    conversation_id=handoff.conversation_id, reason=reason, invalid=exc.problems,
                )
                refused = exc
            else:
                change = _Release(reason=reason, actor=actor, outcome=outcome, note=note, coerced=coerced,
                                  lasted=_elapsed(handoff.activated_at, now))
                released = await change.apply(session, sid, now, idle_cutoff=idle_cutoff, unclaimed_cutoff=unclaimed_cutoff)
                if released is None:
                    handoff = await self._get(session, sid)  # what the winner (or another change) left
                    await audit.note(
                        session, "release_noop", at=now, actor=actor, handoff_session_id=sid,
                        conversation_id=handoff.conversation_id, reason=reason, state=handoff.state,
                        released_by_reason=handoff.release_reason,
                    )
                else:
                    handoff = released
                    if guard is not None:
                        await guard(session, now)
                    resume = await self._after_release(session, handoff, now, change)
        if refused is not None:
            raise refused
        if resume is None:
            self.metrics.release_noops.labels(reason).inc()
            return ReleaseResult(released=False, session=handoff)
        self.metrics.releases.labels(reason).inc()
        if handoff.activated_at is not None:
            lasted = (now - handoff.activated_at).total_seconds()
            self.metrics.duration.labels(handoff.channel_kind, _route_label(handoff)).observe(lasted)
        log.info("handoff_released", handoff_session_id=sid, reason=reason, outcome=outcome)
        return ReleaseResult(released=True, session=handoff, resume_message_id=resume.id)

    async def _after_release(self, session: AsyncSession, handoff: HandoffSession, now: datetime, change: _Release) -> Message:
        """What the winning release writes with it: the subscriber's notice, the resume
        message, the audit event, the recipient's notice and the signal. Returns the resume."""
        reason, actor, outcome, note, coerced = change.reason, change.actor, change.outcome, change.note, change.coerced
        lines = await self._lines(session, handoff)  # on a route nobody claimed: every recipient reached hears of it
        if handoff.route_id is not None and handoff.claimed_at is None and reason in _A_PERSON_ACTED:
            # Nobody had claimed it, and a person just handed it back: that was the claim.
            handoff = await self._claimed_by_release(session, handoff, actor, reason, now)
        await self._tell_subscriber(session, handoff, "messages/subscriber_handoff_ended.txt", now, reason=reason)
        text = resume_message(
            reason=reason, outcome=outcome, note=note, returned=coerced.values,
            missing_required=coerced.missing_required, idle_timeout=self.idle_timeout,
        )
        resume = await conversations.add_message(
            session, handoff.conversation_id, role=Role.SYSTEM, text=text, now=now, handoff_session_id=handoff.id
        )
        await audit.note(
            session, "handoff_released", at=now, actor=actor, handoff_session_id=handoff.id,
            conversation_id=handoff.conversation_id, reason=reason, outcome=outcome, note=note,
            returned=coerced.values, missing_required=coerced.missing_required or None,
            resume_message_id=resume.id,
        )
        notice = self.renderer.render(
            "messages/released.txt", reason=reason, outcome=outcome, actor=actor,
            short_code=handoff.short_code, idle_timeout=format_duration(self.idle_timeout),
        )
        await self._notify(session, handoff, "released", notice, now, to=lines)
        record(session.info, HandoffReleased(handoff))
        return resume

    async def _claimed_by_release(
        self, session: AsyncSession, handoff: HandoffSession, actor: str, reason: ReleaseReason, now: datetime,
    ) -> HandoffSession:
        row = (await session.execute(
            update(rows.HANDOFFS).where(rows.HANDOFFS.c.id == handoff.id, rows.HANDOFFS.c.claimed_at.is_(None))
            .values(claimed_at=now, claimed_by=actor[:200], claimed_via=str(reason), escalate_at=None,
                    time_to_person_seconds=_seconds_to_person(handoff, now))
            .returning(*rows.HANDOFFS.columns)
        )).first()
        claimed = rows.handoff_of(row)
        if claimed is None:
            return handoff
        await audit.note(
            session, "handoff_claimed", at=now, actor=actor, handoff_session_id=handoff.id,
            conversation_id=handoff.conversation_id, via=str(reason), step=handoff.step,
        )
        self.metrics.claims.labels("claimed").inc()
        if claimed.activated_at is not None:  # timed like any claim: a person was reached now
            waited = (now - claimed.activated_at).total_seconds()
            self.metrics.time_to_claim.labels(str(claimed.route_id), claimed.channel_kind).observe(waited)
            self._observe_time_to_human(claimed, claimed.channel_kind, now)
        return claimed

    async def reissue_form_link(self, sid: str, *, actor: str) -> str:
        """A fresh return-form link (older unused ones stop working), sent to the recipient
        through the channel as well. Returns the new URL."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            handoff = await self._get(session, sid)
            if handoff.state != HandoffState.ACTIVE:
                raise NotActive(f"handoff {sid} is {handoff.state}; it has no return form any more", state=handoff.state)
            link = await self.forms.issue(session, handoff, now)
            url = self.forms.url(link.id) or ""
            await audit.note(
                session, "form_link_issued", at=now, actor=actor, handoff_session_id=sid,
                conversation_id=handoff.conversation_id, expires_at=link.expires_at.isoformat(),
            )
            text = self.renderer.render(
                "messages/form_link.txt", short_code=handoff.short_code, url=url, form_ttl=format_duration(self.forms.ttl)
            )
            await self._notify(session, handoff, "form_link", text, now)
        return url

    async def release_if_idle(self, sid: str) -> ReleaseResult:
        return await self.release(sid, reason=ReleaseReason.IDLE_TIMEOUT, actor="idle timer", idle_cutoff=self.clock.now())

    async def overdue(self, limit: int = 500) -> list[str]:
        now = self.clock.now()
        async with self.db.read() as session:
            query = (
                select(col(HandoffSession.id))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.idle_deadline) <= now)
                .order_by(col(HandoffSession.idle_deadline))
                .limit(limit)
            )
            return list((await session.scalars(query)).all())

    async def due_before(self, horizon: datetime, limit: int = 5000) -> list[tuple[str, datetime]]:
        """Active sessions whose idle deadline falls before `horizon`, soonest first."""
        async with self.db.read() as session:
            query = (
                select(col(HandoffSession.id), col(HandoffSession.idle_deadline))
                .where(col(HandoffSession.state) == HandoffState.ACTIVE, col(HandoffSession.idle_deadline) <= horizon)
                .order_by(col(HandoffSession.idle_deadline))
                .limit(limit)
            )
            # `<= horizon` already left out sessions without a deadline; the filter tells mypy so
            return [(sid, deadline) for sid, deadline in (await session.execute(query)).all() if deadline is not None]

    async def fail_stale_dispatches(self) -> int:
        """Sessions stuck in `dispatching` (the server stopped mid-dispatch) become `failed`,
        so the conversation is not blocked from a new handoff forever."""
        cutoff = self.clock.now() - (self.settings.dispatch_timeout * 2 + timedelta(seconds=30))
        async with self.db.read() as session:
            query = select(col(HandoffSession.id)).where(col(HandoffSession.state) == HandoffState.DISPATCHING, col(HandoffSession.created_at) < cutoff)
            stale = list((await session.scalars(query)).all())
        failed = 0
        for sid in stale:
            hint = "the server stopped while this handoff was being dispatched"
            failed += await self._fail(sid, error="interrupted", hint=hint, actor="sweeper")
        return failed


@dataclass(frozen=True)
class _Sending:
    """A route's dispatch stored claimed, to be sent inline, and the recipient it is for."""

    item: OutboxItem
    recipient: HandoffRecipient


@dataclass(frozen=True)
class _Release:
    """One release as asked: why, by whom, how it went, and the values typed for its fields."""

    reason: ReleaseReason
    actor: str
    outcome: Outcome
    note: str | None
    coerced: CoercedReturn
    lasted: float | None  # seconds from the activation (None: never activated)

    async def apply(
        self, session: AsyncSession, sid: str, now: datetime, *, idle_cutoff: datetime | None,
        unclaimed_cutoff: datetime | None = None,
    ) -> HandoffSession | None:
        """The compare-and-set active → released; the released row as the UPDATE returns it
        (no read after it), or None when the handoff was not active (or not idle, or claimed) any more."""
        statement, guard = (rows.RELEASE, {}) if idle_cutoff is None else (rows.RELEASE_IDLE, {"cutoff": idle_cutoff})
        if unclaimed_cutoff is not None:
            statement, guard = rows.RELEASE_UNCLAIMED, {"cutoff": unclaimed_cutoff}
        return await rows.transition(
            session, statement, sid, **guard, state=HandoffState.RELEASED, released_at=now, release_reason=self.reason,
            released_by=self.actor, outcome=self.outcome, note=self.note, returned=self.coerced.values,
            missing_required=self.coerced.missing_required, duration_seconds=self.lasted,
        )


def stored_fields(handoff: HandoffSession) -> list[ReturnField]:
    """The handoff's return fields, skipping any a newer version of the rules rejects: an
    old row must never make a release impossible."""
    fields = []
    for data in handoff.expected_return:
        try:
            fields.append(ReturnField.model_validate(data))
        except ValueError:
            log.warning("stored_return_field_invalid", handoff_session_id=handoff.id, field=data.get("name"))
    return fields


def parse_release_command(text: str) -> tuple[Outcome | None, str | None] | None:
    """`/release`, `/release resolved`, `/release needs_followup call back Monday`.

    Returns (outcome, note) or None when the text is not a release command. An unknown
    first word is part of the note, so `/release done, refunded` still releases.
    """
    words = text.split(maxsplit=1)  # any whitespace: "/release\nnote" from a mail client too
    if not words or words[0].split("@", 1)[0].lower() != "/release":  # chat commands may carry "@botname"
        return None
    rest = words[1].strip() if len(words) > 1 else ""
    parts = rest.split(maxsplit=1)
    if parts and parts[0].lower() in tuple(Outcome):
        return Outcome(parts[0].lower()), (parts[1].strip() if len(parts) > 1 else "")[:MAX_NOTE] or None
    return None, rest[:MAX_NOTE] or None


def _elapsed(start: datetime | None, end: datetime) -> float | None:
    """Whole milliseconds, as the reports store and bucket them (None without a start)."""
    return None if start is None else round((end - start).total_seconds(), 3)


def _seconds_to_person(handoff: HandoffSession, now: datetime) -> float | None:
    """The reports' time to a person of a handoff reached now: from its activation."""
    return _elapsed(handoff.activated_at or handoff.created_at, now)


def _seconds_to_person_sql(now: datetime) -> Any:
    """`_seconds_to_person` as SQL, for the claim's compare-and-set, which reads no row before it."""
    started = func.coalesce(rows.HANDOFFS.c.activated_at, rows.HANDOFFS.c.created_at)
    return seconds_between(started, literal(now, type_=rows.HANDOFFS.c.claimed_at.type))


def _route_label(handoff: HandoffSession) -> str:
    """The `route` label of the timing histograms: the route's id, "" straight to a channel."""
    return "" if handoff.route_id is None else str(handoff.route_id)


def _found(handoff: HandoffSession | None, session_id: str) -> HandoffSession:
    if handoff is None:
        raise NotFound("handoff session", session_id)
    return handoff

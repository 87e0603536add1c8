"""User actions: steps only the subscriber can do on their own device.

Entering a one-time code, logging in, solving a captcha, allowing a permission prompt: the
agent must not simulate these and must never ask for the secret in chat. It calls
`request_user_action`; the subscriber gets the reason's instruction (and the guided steps,
one at a time) with Done / Cancel, and the agent's turn ends. The request is answered by
`response_user_action`: the subscriber pressing Done / Cancel or writing "done" / "cancel",
the owner's API, or the agent itself. Done is not proof: when the request names an
expectation (config `user_actions.expectations`), it is checked, and a check that does not
hold is `HANDOFF_FAILED` with what was observed. No answer before the deadline
(`handoff.user_action_timeout`) is `HANDOFF_TIMEOUT`, also for an answer that comes after
it but before the sweep. The agent reads the outcome as a
`[User action — …]` system message and is told to look before it acts; nothing is retried.

While an `authentication` or `verification_code` action is pending, subscriber text that
looks like a one-time code or a password is redacted before it is stored, relayed or shown
to the agent, and the subscriber is reminded to type it on their device instead.

A conversation run as a background task (created with `background: true`) has no person
watching the chat: the request returns `USER_ACTION_REQUESTED` and is POSTed, signed, to
the owner's orchestrator (`user_actions.webhook`), and so is its outcome. Each event is a
callback queued in the outbox in the transaction of the change it reports
(bot/delivery/callbacks.py): delivered after that commits, in order per conversation,
retried across restarts with the same `X-Handoff-Delivery`, every attempt audited.

The service answers in facts (`UserActionRequested`, `UserActionOutcome`, the error
`UserActionAlreadyPending`); `bot/tools/user_actions.py` words them for the model and the
API. An outcome the agent should read records a `UserActionSettled` signal, heard after its
commit (the agent's turn).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import structlog
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import bindparam, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.config import Config
from bot.delivery.callbacks import CALLBACKS, ORCHESTRATOR
from bot.delivery.outbox import Outbox
from bot.domain import conversations
from bot.domain.actions import ActionFailed, run_action
from bot.domain.rendering import Renderer
from bot.errors import Conflict, DeskError, NotFound, found
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import Changed, record
from bot.runtime.text import CleanStr, iso
from bot.store import audit, prepared
from bot.store.db import Database, execute_dml
from bot.store.models import Conversation, UserAction
from bot.store.rows import Rows
from bot.store.vocabulary import Role
from channels.base import Callback, UserActionPrompt

log = structlog.get_logger(__name__)

REASONS = (
    "authentication", "login_method_selection", "captcha", "verification_code", "sensitive_operation",
    "redirect_confirmation", "permission_confirmation", "black_screen", "ambiguous_situation",
    "unsupported_action", "stuck", "other",
)
Reason = Literal[
    "authentication", "login_method_selection", "captcha", "verification_code", "sensitive_operation",
    "redirect_confirmation", "permission_confirmation", "black_screen", "ambiguous_situation",
    "unsupported_action", "stuck", "other",
]
SECRET_REASONS = ("authentication", "verification_code")
PENDING = "pending"

# A one-time code: 4–10 digits, maybe split by spaces or dashes ("123 456", "12-34-56").
_CODE = re.compile(r"(?<![\w-])\d(?:[ -]?\d){3,9}(?![\w-])")
# A password-like word: 8+ characters without spaces mixing letters with digits or symbols.
_PASSWORD = re.compile(r"(?<!\S)(?=\S*[A-Za-z])(?=\S*[\d!@#$%^&*()_+=\[\]{};:'\",.<>/?\\|`~-])\S{8,64}(?!\S)")
# A code of letters and digits ("A1B2C3", "abc123", "S3cret"), maybe followed by punctuation.
_MIXED = re.compile(r"(?<![\w-])(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[A-Za-z])[A-Za-z0-9]{4,12}(?=[.,!?;:]*(?:\s|$))")
# A message that is one long word and nothing else: a passphrase pasted on its own.
_LONE_WORD = re.compile(r"^\s*\S{10,128}\s*$")
_DONE = re.compile(r"^\s*(done|i'?m done|finished|ok,? done|it'?s done|completed?)\s*[.!]*\s*$", re.I)
_CANCEL = re.compile(r"^\s*(cancel|stop|never ?mind|i can'?t|abort)\s*[.!]*\s*$", re.I)


class Step(BaseModel):
    model_config = ConfigDict(extra="forbid")
    instruction: CleanStr = Field(min_length=3, max_length=300, description="One short instruction for the subscriber.")


class RequestUserActionInput(BaseModel):
    """Ask the subscriber to do a step only they can do, on their own device."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    reason: Reason = Field(description="Why a person is needed.")
    details: CleanStr = Field(min_length=10, max_length=1000, description="What the subscriber should do, concretely.")
    suggested_action: CleanStr | None = Field(default=None, max_length=300, description="A short label, e.g. 'Enter the code from your SMS'.")
    steps: list[Step] | None = Field(default=None, max_length=10, description="Guided steps, shown one at a time.")
    expectation: str | None = Field(default=None, description="A configured check that tells whether it really happened.")


class ResponseUserActionInput(BaseModel):
    """Report how a requested user action ended (the subscriber said done, or gave up)."""

    model_config = ConfigDict(extra="forbid")

    user_action_id: str = Field(max_length=40)
    outcome: Literal["done", "cancelled"]


@dataclass(frozen=True)
class Redaction:
    text: str
    redacted: bool


@dataclass(frozen=True)
class UserActionRequested:
    """The request is stored (and shown to the subscriber, or sent to the orchestrator when
    `action.background`); the agent's turn ends."""

    action: UserAction


@dataclass(frozen=True)
class UserActionOutcome:
    """How a user action stands after an answer: `action.state` is done, cancelled, timeout
    or failed. `already`: it had ended before this answer, which changed nothing."""

    action: UserAction
    already: bool = False


class UserActionAlreadyPending(Conflict):
    """The conversation has a pending user action (`pending_id`); `identical`: with the same
    reason and details as the refused request. The refusal is audited."""

    code = "user_action_pending"

    def __init__(self, pending_id: str, *, identical: bool) -> None:
        super().__init__(f"user action {pending_id} is pending")
        self.pending_id, self.identical = pending_id, identical


@dataclass(frozen=True)
class UserActionSettled:
    """Signal: the agent has a `[User action — …]` message to read in this conversation."""

    conversation_id: str


class UserActions:
    def __init__(self, *, db: Database, clock: Clock, config: Config, renderer: Renderer, outbox: Outbox,
                 metrics: Metrics) -> None:
        self.metrics = metrics
        self.db, self.clock, self.renderer, self.outbox = db, clock, renderer, outbox
        self.timeout = config.handoff.user_action_timeout
        self.expectations = {e.id: e for e in config.user_actions.expectations}
        self.webhook = config.user_actions.webhook

    # ------------------------------------------------------------------ request

    async def request(self, conversation: Conversation, args: RequestUserActionInput, *, actor: str) -> UserActionRequested:
        """Ask the subscriber (or the orchestrator); raises UserActionAlreadyPending while
        another request of the conversation is pending."""
        try:
            return await self._request(conversation, args, actor=actor)
        except IntegrityError:  # another request won the race for the conversation's one pending slot
            return await self._request(conversation, args, actor=actor)

    async def _request(self, conversation: Conversation, args: RequestUserActionInput, *, actor: str) -> UserActionRequested:
        now = self.clock.now()
        refused: UserActionAlreadyPending | None = None
        async with self.db.transaction(effect=True) as session:
            pending = await pending_in(session, conversation.id)
            if pending is not None:
                refused = UserActionAlreadyPending(
                    pending.id, identical=(pending.reason, pending.details) == (args.reason, args.details),
                )
                await audit.record(session, "user_action_rejected", at=now, actor=actor, conversation_id=conversation.id,
                                   user_action_id=pending.id, identical=refused.identical)
            else:
                action = await self._store(session, conversation, args, actor=actor, now=now)
                if action.background:
                    await self._tell_orchestrator(session, "user_action_requested", action, now=now)
        if refused is not None:  # raised once the refusal's audit is committed
            raise refused
        return UserActionRequested(action)

    async def _store(self, session: AsyncSession, conversation: Conversation, args: RequestUserActionInput, *,
                     actor: str, now: datetime) -> UserAction:
        action = UserAction(
            id=f"ua_{secrets.token_urlsafe(12)}", conversation_id=conversation.id, reason=args.reason,
            details=args.details, suggested_action=args.suggested_action,
            steps=[s.instruction for s in args.steps or []], expectation=args.expectation,
            background=conversation.background, state=PENDING, created_at=now, deadline=now + self.timeout,
        )
        session.add(action)
        await session.flush()
        self.metrics.user_actions.labels(action.reason, "requested").inc()
        await audit.record(session, "user_action_requested", at=now, actor=actor, conversation_id=conversation.id,
                           user_action_id=action.id, reason=args.reason, expectation=args.expectation,
                           steps=len(action.steps) or None, background=action.background or None)
        if not action.background:
            await conversations.add_message(session, conversation.id, role=Role.AGENT, text=self.instruction(action),
                                            now=now, author="Assistant", user_action=prompt_for(action))
        record(session.info, Changed(conversation.id))  # its pages show the pending action
        return action

    def instruction(self, action: UserAction) -> str:
        """What the subscriber reads: the reason's wording, the details, the current step."""
        return self.renderer.render("messages/user_action.txt", action=action).strip()

    # ------------------------------------------------------------------ steps and answers

    async def get(self, user_action_id: str) -> UserAction:
        async with self.db.read() as session:
            action = await session.get(UserAction, user_action_id)
        return found(action, "user action", user_action_id)

    async def pending_for(self, conversation_id: str) -> UserAction | None:
        async with self.db.read() as session:
            return await pending_in(session, conversation_id)

    async def move(self, user_action_id: str, direction: Literal["next", "previous"]) -> UserAction:
        """Show the next or previous guided step. It only changes what is explained: no step
        is "completed" by moving, and nothing is verified until Done."""
        action = await self.get(user_action_id)
        if action.state != PENDING:
            raise NotPending(action)
        target = max(0, min(len(action.steps) - 1, action.step + (1 if direction == "next" else -1)))
        if target == action.step:
            return action  # already at the first / last step
        now = self.clock.now()
        async with self.db.transaction(effect=True) as session:
            await session.execute(update(UserAction).where(col(UserAction.id) == action.id, col(UserAction.state) == PENDING)
                                  .values(step=target).execution_options(synchronize_session=False))
            action = await session.get(UserAction, action.id, populate_existing=True) or action
            await conversations.add_message(session, action.conversation_id, role=Role.AGENT,
                                            text=self.instruction(action), now=now, author="Assistant",
                                            user_action=prompt_for(action))
        return action

    async def respond(self, user_action_id: str, outcome: Literal["done", "cancelled"], *, via: str,
                      conversation_id: str | None = None, tell_agent: bool = True) -> UserActionOutcome:
        """The answer to a user action, verified when it names an expectation. `conversation_id`
        restricts it to one conversation (a tool call may only answer its own)."""
        action = await self.get(user_action_id)
        if conversation_id is not None and action.conversation_id != conversation_id:
            raise NotFound("user action", user_action_id)
        if action.state != PENDING:
            return UserActionOutcome(action, already=True)
        if action.deadline <= self.clock.now():  # too late, even if the sweep has not run yet
            return await self._close(action, "timeout", via="timer", observed=None, tell_agent=True)
        state, observed = ("cancelled", None) if outcome == "cancelled" else await self._verify(action)
        if state != "cancelled" and action.deadline <= self.clock.now():
            state, observed = "timeout", "the check finished after the deadline"
        return await self._close(action, state, via=via, observed=observed, tell_agent=tell_agent)

    async def _verify(self, action: UserAction) -> tuple[str, str | None]:
        check = self.expectations.get(action.expectation or "")
        if check is None:
            return "done", None  # asserted by the subscriber, not verified
        try:
            answer = await run_action(check.run, action_id=check.id, approval_id=action.id,
                                      conversation_id=action.conversation_id,
                                      arguments={"user_action_id": action.id, "reason": action.reason,
                                                 "details": action.details})
        except ActionFailed as exc:
            return "failed", f"the check {check.id} could not run: {exc}"
        observed = str(answer.get("observed") or "")[:1000] or None
        return ("done", observed) if answer.get("holds") is True else ("failed", observed or f"{check.description}: not observed")

    async def expire_due(self) -> int:
        """No answer in time: HANDOFF_TIMEOUT (run by the sweep)."""
        async with self.db.read() as session:
            due = (await session.scalars(select(UserAction).where(
                col(UserAction.state) == PENDING, col(UserAction.deadline) <= self.clock.now()))).all()
        closed = 0
        for action in due:
            result = await self._close(action, "timeout", via="timer", observed=None, tell_agent=True)
            closed += 0 if result.already else 1
        return closed

    async def _close(self, action: UserAction, state: str, *, via: str, observed: str | None,
                     tell_agent: bool) -> UserActionOutcome:
        now = self.clock.now()
        async with self.db.transaction(effect=True) as session:
            changed = await execute_dml(
                session,
                update(UserAction).where(col(UserAction.id) == action.id, col(UserAction.state) == PENDING)
                .values(state=state, resolved_at=now, resolved_via=via, observed=observed)
                .execution_options(synchronize_session=False)
            )
            action = await session.get(UserAction, action.id, populate_existing=True) or action
            if changed.rowcount != 1:
                return UserActionOutcome(action, already=True)
            self.metrics.user_actions.labels(action.reason, state).inc()
            await audit.record(session, f"user_action_{state}", at=now, actor=via, conversation_id=action.conversation_id,
                               user_action_id=action.id, reason=action.reason, observed=observed)
            if tell_agent:
                text = self.renderer.render("messages/user_action_outcome.txt", action=action).strip()
                await conversations.add_message(session, action.conversation_id, role=Role.SYSTEM, text=text, now=now)
                record(session.info, UserActionSettled(action.conversation_id))
            record(session.info, Changed(action.conversation_id))  # its pages stop offering the action
            if action.background:
                await self._tell_orchestrator(session, "user_action_resolved", action, now=now)
        return UserActionOutcome(action)

    # ------------------------------------------------------------------ the subscriber's chat

    @staticmethod
    def redact(action: UserAction | None, text: str) -> Redaction:
        """Hide what looks like a code or a password while one is being asked for."""
        if action is None or action.reason not in SECRET_REASONS:
            return Redaction(text, False)
        if _LONE_WORD.match(text) and keyword_outcome(text) is None:
            return Redaction("[hidden]", True)
        hidden = _MIXED.sub("[hidden]", _CODE.sub("[hidden]", _PASSWORD.sub("[hidden]", text)))
        return Redaction(hidden, hidden != text)

    def reminder(self, action: UserAction) -> str:
        return self.renderer.render("messages/user_action_reminder.txt", action=action).strip()

    # ------------------------------------------------------------------ background tasks

    async def _tell_orchestrator(self, session: AsyncSession, event: str, action: UserAction, *, now: datetime) -> None:
        """Queue the event for the orchestrator in the caller's transaction: it is sent once
        that commits, behind the conversation's earlier events, and retried by the outbox."""
        if self.webhook is None:
            log.warning("user_action_without_orchestrator", user_action_id=action.id,
                        hint="set user_actions.webhook to hear about user actions of background conversations")
            return
        body = json.dumps({"type": event, **view(action)}, separators=(",", ":"))
        await self.outbox.queue(session, channel_id=CALLBACKS, now=now, outbound=Callback(
            text=f"{event} {action.id}", endpoint=ORCHESTRATOR, event=event, body=body,
            conversation_id=action.conversation_id, ordered_by=f"{action.conversation_id}:orchestrator",
            user_action_id=action.id,
        ))


_ACTIONS = Rows(UserAction)
# Prepared once: every subscriber message asks it (bot/store/prepared.py)
_PENDING_IN = prepared.Prepared(select(*_ACTIONS.columns).where(
    _ACTIONS.table.c.conversation_id == bindparam("cid"), _ACTIONS.table.c.state == PENDING))


async def pending_in(session: AsyncSession, conversation_id: str) -> UserAction | None:
    """The conversation's pending user action (at most one: a unique index), in the caller's
    session; a copy of the row, not tracked by the session."""
    row = await prepared.fetch_one(session, _PENDING_IN, {"cid": conversation_id})
    return _ACTIONS.one(row) if row is not None else None


def prompt_for(action: UserAction) -> UserActionPrompt:
    """What a front needs to offer the action's buttons."""
    return UserActionPrompt(user_action_id=action.id, steps=len(action.steps), step=action.step)


def keyword_outcome(text: str) -> Literal["done", "cancelled"] | None:
    """A plain "done" / "cancel" from the subscriber while an action is pending answers it."""
    if _DONE.match(text):
        return "done"
    if _CANCEL.match(text):
        return "cancelled"
    return None


class NotPending(DeskError):
    code = "user_action_not_pending"
    status = 409

    def __init__(self, action: UserAction) -> None:
        super().__init__(f"the user action is {action.state}")


def view(action: UserAction) -> dict[str, Any]:
    return {
        "user_action_id": action.id, "conversation_id": action.conversation_id, "reason": action.reason,
        "details": action.details, "suggested_action": action.suggested_action, "steps": action.steps,
        "step": action.step, "expectation": action.expectation, "state": action.state,
        "created_at": iso(action.created_at), "deadline": iso(action.deadline), "resolved_at": iso(action.resolved_at),
        "resolved_via": action.resolved_via, "observed": action.observed,
    }

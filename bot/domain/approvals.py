"""Approvals: a person decides whether the agent may run one concrete invocation.

The agent stays the actor. A call of a gated action (config `actions:`, policy `ask` or
`ask_always`) stores an approval with the exact normalized arguments and their hash, sends
an Approve / Deny prompt through the action's approval channels, and ends the agent's turn
with `APPROVAL_PENDING`. When a person decides, the stored arguments, and only those, run;
the agent then reads an `[Approval — …]` system message with the result and carries on.

Fail closed, each recorded distinctly in the audit trail: no approval channel available
(`approval_unrouted`), a denial (`approval_denied`, with the person's reason for the agent),
no answer before the deadline (`approval_expired`), and a prompt nobody can answer any
more after a restart because its channels left the config (`approval_cleared`) all end in
`PERMISSION_DENIED`, and the action does not run. A decision is a compare-and-set on a
pending, unexpired approval: a link or button works once and only for its own approval id;
a late decision changes nothing. A call with other arguments is another approval.

`ask` may let the person "always allow" the same action shape (action id + argument keys)
for the rest of the conversation; `ask_always` never does. The receipt (who, when, through
what, the argument hash) is kept for the owner and never put into the model's context.

`request` answers in facts (`ApprovalPending`, `ActionRan`, or the errors `ApprovalUnrouted`
and `ActionRunFailed`); `bot/tools/actions.py` words them for the model. Each `[Approval — …]`
message records an `ApprovalSettled` signal, heard after its commit (the agent's turn).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import structlog
from itsdangerous import BadSignature, URLSafeSerializer
from jsonschema import Draft202012Validator
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.config import ActionConfig
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.domain import conversations
from bot.domain.actions import ActionFailed, run_action
from bot.domain.rendering import Renderer
from bot.errors import DeskError, NotFound
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import record
from bot.runtime.text import iso
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import Approval, ApprovalGrant, Conversation, OutboxItem
from bot.store.vocabulary import OutboxState, Role
from channels.base import ApprovalBrief, ApprovalClosed, ApprovalPrompt, pretty_arguments

log = structlog.get_logger(__name__)

PENDING, APPROVED, DENIED, EXPIRED, UNROUTED, CLEARED = "pending", "approved", "denied", "expired", "unrouted", "cleared"
# Longer than any action may run (the HTTP runner's timeout is at most minutes): a run still
# "running" after this was cut short by a crash or a stop.
RUN_GRACE = timedelta(minutes=10)
SALT = "handoff-desk.approval-decision.v1"


def canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def arguments_hash(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(arguments).encode()).hexdigest()


def shape_of(arguments: dict[str, Any]) -> str:
    """What "always allow" covers: the action with the same argument keys, any values (a
    hash: keys may be many, long, or contain commas)."""
    return hashlib.sha256(json.dumps(sorted(arguments)).encode()).hexdigest()


def approval_view(approval: Approval) -> dict[str, Any]:
    """For the owner: the invocation, its state, the receipt and what running it returned."""
    return {
        "approval_id": approval.id, "conversation_id": approval.conversation_id, "action": approval.action_id,
        "description": approval.description, "risk": approval.risk, "policy": approval.policy,
        "arguments": approval.arguments, "state": approval.state, "created_at": iso(approval.created_at),
        "deadline": iso(approval.deadline), "channel_ids": approval.channel_ids,
        "receipt": {
            "decided_by": approval.decided_by, "decided_at": iso(approval.decided_at), "via": approval.decided_via,
            "reason": approval.reason, "always_allow": approval.always_allow, "arguments_hash": approval.arguments_hash,
        },
        "run_state": approval.run_state, "result": approval.result, "error": approval.error,
    }


@dataclass(frozen=True)
class DecisionResult:
    changed: bool
    approval: Approval


@dataclass(frozen=True)
class ApprovalPending:
    """A person was asked to approve this exact call; the outcome comes as a system message."""

    approval_id: str
    action_id: str
    expires_at: datetime


@dataclass(frozen=True)
class ActionRan:
    """The action needed no approval (policy `none`, or always allowed here) and ran."""

    action_id: str
    result: Any


class ApprovalUnrouted(DeskError):
    """No approval channel is available to ask a person: denied at once (fail closed), the
    action did not run. The approval is stored as `unrouted`."""

    code = "PERMISSION_DENIED"
    status = 403

    def __init__(self, approval_id: str) -> None:
        super().__init__(f"approval {approval_id}: no approval channel is available")
        self.approval_id = approval_id


class ActionRunFailed(DeskError):
    """An action that needed no approval ran and failed; `reason` says how."""

    code = "action_failed"
    status = 502

    def __init__(self, action_id: str, reason: str) -> None:
        super().__init__(reason)
        self.action_id, self.reason = action_id, reason


@dataclass(frozen=True)
class ApprovalSettled:
    """Signal: the agent has an `[Approval — …]` message to read in this conversation."""

    conversation_id: str


class Approvals:
    def __init__(
        self, *, db: Database, clock: Clock, actions: list[ActionConfig], channels: ChannelSet, outbox: Outbox,
        renderer: Renderer, secret_keys: list[str], public_url: str, metrics: Metrics, background: Background,
    ) -> None:
        self.metrics, self.background = metrics, background
        self.db, self.clock, self.channels, self.outbox, self.renderer = db, clock, channels, outbox, renderer
        self.actions = {a.id: a for a in actions}
        self._links = URLSafeSerializer(secret_keys, salt=SALT)
        self.public_url = public_url.rstrip("/")

    # ------------------------------------------------------------------ links

    def decision_url(self, approval_id: str) -> str:
        return f"{self.public_url}/a/{self._links.dumps(approval_id)}"

    def approval_id(self, token: str) -> str | None:
        try:
            value = self._links.loads(token)
        except BadSignature:
            return None
        return value if isinstance(value, str) else None

    # ------------------------------------------------------------------ the agent's call

    async def request(self, conversation: Conversation, action: ActionConfig, arguments: dict[str, Any],
                      *, actor: str) -> ApprovalPending | ActionRan:
        """The tool call of a declared action, its input already valid. Raises
        ApprovalUnrouted (nobody can be asked) or ActionRunFailed (it ran without a gate and failed)."""
        if action.policy == "none":
            return await self._run_now(conversation, action, arguments, actor=actor, why="policy none")
        if action.policy == "ask" and await self._granted(conversation.id, action, arguments):
            return await self._run_now(conversation, action, arguments, actor=actor, why="always allowed in this conversation")
        now = self.clock.now()
        routes = [cid for cid in action.approval_channels if self.channels.is_available(cid)]
        approval = Approval(
            id=f"ap_{secrets.token_urlsafe(12)}", conversation_id=conversation.id, action_id=action.id,
            description=action.description, risk=action.risk, policy=action.policy, arguments=arguments,
            arguments_hash=arguments_hash(arguments), state=PENDING if routes else UNROUTED, channel_ids=routes,
            created_at=now, deadline=now + action.timeout,
        )
        async with self.db.transaction(effect=True) as session:
            session.add(approval)
            await session.flush()
            self.metrics.approvals.labels(action.id, approval.state).inc()
            if not routes:
                await audit.record(session, "approval_unrouted", at=now, actor=actor, conversation_id=conversation.id,
                                   approval_id=approval.id, action=action.id, arguments_hash=approval.arguments_hash,
                                   configured=action.approval_channels)
            else:
                await audit.record(session, "approval_requested", at=now, actor=actor, conversation_id=conversation.id,
                                   approval_id=approval.id, action=action.id, risk=action.risk, policy=action.policy,
                                   arguments_hash=approval.arguments_hash, channel_ids=routes,
                                   deadline=approval.deadline.isoformat())
            for channel_id in routes:
                await self.outbox.queue(session, channel_id=channel_id, now=now,
                                        outbound=self._prompt(approval, conversation))
        if not routes:  # raised once the unrouted approval and its audit are committed
            raise ApprovalUnrouted(approval.id)
        return ApprovalPending(approval_id=approval.id, action_id=action.id, expires_at=approval.deadline)

    async def _granted(self, conversation_id: str, action: ActionConfig, arguments: dict[str, Any]) -> bool:
        async with self.db.read() as session:
            found = await session.scalar(select(col(ApprovalGrant.id)).where(
                col(ApprovalGrant.conversation_id) == conversation_id, col(ApprovalGrant.action_id) == action.id,
                col(ApprovalGrant.shape) == shape_of(arguments),
            ))
        return found is not None

    async def _run_now(self, conversation: Conversation, action: ActionConfig, arguments: dict[str, Any], *,
                       actor: str, why: str) -> ActionRan:
        now = self.clock.now()
        try:
            result = await run_action(action.run, action_id=action.id, approval_id=None, conversation_id=conversation.id,
                                      arguments=arguments)
        except ActionFailed as exc:
            async with self.db.transaction(effect=True) as session:
                await audit.record(session, "action_failed", at=now, actor=actor, conversation_id=conversation.id,
                                   action=action.id, arguments_hash=arguments_hash(arguments), why=why, error=str(exc),
                                   detail=exc.detail)
            raise ActionRunFailed(action.id, str(exc)) from None
        async with self.db.transaction(effect=True) as session:
            await audit.record(session, "action_ran", at=now, actor=actor, conversation_id=conversation.id,
                               action=action.id, arguments_hash=arguments_hash(arguments), why=why)
        return ActionRan(action_id=action.id, result=result)

    def _brief(self, approval: Approval, subscriber_name: str | None) -> ApprovalBrief:
        return ApprovalBrief(
            approval_id=approval.id, action_id=approval.action_id, description=approval.description,
            risk=approval.risk, arguments=approval.arguments, conversation_id=approval.conversation_id,
            subscriber_name=subscriber_name, decision_url=self.decision_url(approval.id),
            allow_always=approval.policy == "ask", expires_at=approval.deadline.isoformat(),
        )

    def _prompt(self, approval: Approval, conversation: Conversation) -> ApprovalPrompt:
        brief = self._brief(approval, conversation.subscriber_name)
        text = self.renderer.render("messages/approval_prompt.txt", approval=brief,
                                    arguments=pretty_arguments(approval.arguments)[0]).strip()
        return ApprovalPrompt(text=text, approval=brief)

    # ------------------------------------------------------------------ decisions

    async def listing(self, *, state: str | None, limit: int) -> list[Approval]:
        async with self.db.read() as session:
            query = select(Approval).order_by(col(Approval.created_at).desc()).limit(limit)
            if state is not None:
                query = query.where(col(Approval.state) == state)
            return list((await session.scalars(query)).all())

    async def get(self, approval_id: str) -> Approval:
        async with self.db.read() as session:
            approval = await session.get(Approval, approval_id)
        if approval is None:
            raise NotFound("approval", approval_id)
        return approval

    async def decide(self, approval_id: str, *, approve: bool, by: str, via: str, reason: str | None = None,
                     always_allow: bool = False) -> DecisionResult:
        """A person's decision; only the first one on a pending, unexpired approval counts."""
        now = self.clock.now()
        by = " ".join(by.split())[:200] or "someone"
        reason = (reason or "").strip()[:2000] or None
        async with self.db.transaction(effect=True) as session:
            approval = await session.get(Approval, approval_id)
            if approval is None:
                raise NotFound("approval", approval_id)
            always = bool(approve and always_allow and approval.policy == "ask")
            changed = await execute_dml(
                session,
                update(Approval)
                .where(col(Approval.id) == approval_id, col(Approval.state) == PENDING, col(Approval.deadline) > now)
                .values(state=APPROVED if approve else DENIED, decided_at=now, decided_by=by, decided_via=via,
                        reason=reason, always_allow=always)
                .execution_options(synchronize_session=False)
            )
            if changed.rowcount != 1:
                await audit.record(session, "approval_decision_ignored", at=now, actor=by, approval_id=approval_id,
                                   conversation_id=approval.conversation_id, state=approval.state, via=via,
                                   decision="approve" if approve else "deny")
                return DecisionResult(False, approval)
            await session.refresh(approval)
            self.metrics.approvals.labels(approval.action_id, approval.state).inc()
            await audit.record(session, "approval_approved" if approve else "approval_denied", at=now, actor=by,
                               approval_id=approval_id, conversation_id=approval.conversation_id, via=via,
                               action=approval.action_id, arguments_hash=approval.arguments_hash, reason=reason,
                               always_allow=always or None)
            if always:
                await self._grant(session, approval, now)
            await self._close_prompts(session, approval, now)
            if not approve:
                await self._tell_agent(session, approval, "denied", now)
        if approve:  # in the background: not inside the caller's request or a channel's inbound order
            self.background.spawn(self._run_approved(approval.id), name=f"approved:{approval.id}")
        return DecisionResult(True, approval)

    async def _grant(self, session: Any, approval: Approval, now: datetime) -> None:
        try:
            async with session.begin_nested():
                session.add(ApprovalGrant(conversation_id=approval.conversation_id, action_id=approval.action_id,
                                          shape=shape_of(approval.arguments), approval_id=approval.id, created_at=now))
        except IntegrityError:
            pass  # already allowed (two prompts of one shape decided "always")

    async def _run_approved(self, approval_id: str) -> Approval | None:
        """Run exactly the stored arguments of this approval, once (a conditional claim);
        None when it was not ours to run."""
        async with self.db.transaction() as session:
            claimed = await execute_dml(
                session,
                update(Approval).where(col(Approval.id) == approval_id, col(Approval.state) == APPROVED, col(Approval.run_state).is_(None))
                .values(run_state="running").execution_options(synchronize_session=False)
            )
            approval = await session.get(Approval, approval_id)
        if claimed.rowcount != 1 or approval is None:
            return None
        action = self.actions.get(approval.action_id)
        values: dict[str, Any]
        detail: str | None = None
        if action is None:  # removed from the config since the prompt went out
            values = {"run_state": "failed", "error": f"the action {approval.action_id} is no longer configured"}
        elif not Draft202012Validator(action.input_schema).is_valid(approval.arguments):
            values = {"run_state": "failed", "error": "its input schema changed since it was approved, so it did not run"}
        else:
            try:
                result = await run_action(action.run, action_id=action.id, approval_id=approval.id,
                                          conversation_id=approval.conversation_id, arguments=dict(approval.arguments))
                values = {"run_state": "succeeded", "result": result}
            except ActionFailed as exc:
                values, detail = {"run_state": "failed", "error": str(exc)}, exc.detail
        return await self._record_run(approval, values, detail)

    async def _record_run(self, approval: Approval, values: dict[str, Any], detail: str | None) -> Approval:
        now = self.clock.now()
        async with self.db.transaction() as session:
            if values:
                await session.execute(update(Approval).where(col(Approval.id) == approval.id).values(**values)
                                      .execution_options(synchronize_session=False))
            approval = await session.get(Approval, approval.id, populate_existing=True) or approval
            await audit.record(session, "action_ran" if approval.run_state == "succeeded" else "action_failed", at=now,
                               actor="desk", approval_id=approval.id, conversation_id=approval.conversation_id,
                               action=approval.action_id, arguments_hash=approval.arguments_hash, error=approval.error,
                               detail=detail)
            await self._tell_agent(session, approval, "ran", now)
        return approval

    async def recover_interrupted(self) -> int:
        """After a crash or a stop: an approved call that never started runs now (its claim
        keeps it single), and one that was running for longer than any action may take is
        reported as interrupted, so the agent is never left waiting (start and sweep)."""
        now = self.clock.now()
        async with self.db.read() as session:
            unstarted = list((await session.scalars(select(col(Approval.id)).where(
                col(Approval.state) == APPROVED, col(Approval.run_state).is_(None)))).all())
            stuck = list((await session.scalars(select(Approval).where(
                col(Approval.state) == APPROVED, col(Approval.run_state) == "running",
                col(Approval.decided_at) < now - RUN_GRACE))).all())
        for approval_id in unstarted:
            self.background.spawn(self._run_approved(approval_id), name=f"approved:{approval_id}")
        for approval in stuck:
            async with self.db.transaction() as session:
                changed = await execute_dml(
                    session,
                    update(Approval).where(col(Approval.id) == approval.id, col(Approval.run_state) == "running")
                    .values(run_state="failed", error="interrupted: the desk stopped while it ran, so it may or may not "
                                                      "have taken effect").execution_options(synchronize_session=False))
            if changed.rowcount == 1:
                await self._record_run(approval, {}, "interrupted while running")
        return len(unstarted) + len(stuck)

    # ------------------------------------------------------------------ fail closed without a decision

    async def expire_due(self) -> int:
        """Deny the approvals nobody answered in time (run by the sweep)."""
        return await self._close_where(EXPIRED, col(Approval.deadline) <= self.clock.now())

    async def clear_unanswerable(self) -> int:
        """At start: a pending prompt whose channels all left the config can never be
        answered; it is denied now instead of waiting for its deadline."""
        async with self.db.read() as session:
            pending = (await session.scalars(select(Approval).where(col(Approval.state) == PENDING))).all()
        orphans = [a.id for a in pending if not any(self.channels.get(cid) for cid in a.channel_ids)]
        return await self._close_where(CLEARED, col(Approval.id).in_(orphans)) if orphans else 0

    async def _close_where(self, state: str, condition: Any) -> int:
        now = self.clock.now()
        async with self.db.read() as session:
            ids = list((await session.scalars(select(col(Approval.id)).where(col(Approval.state) == PENDING, condition))).all())
        closed = 0
        for approval_id in ids:
            async with self.db.transaction() as session:
                changed = await execute_dml(
                    session,
                    update(Approval).where(col(Approval.id) == approval_id, col(Approval.state) == PENDING)
                    .values(state=state, decided_at=now, decided_by="desk", decided_via=state)
                    .execution_options(synchronize_session=False)
                )
                if changed.rowcount != 1:
                    continue  # decided meanwhile
                approval = await session.get(Approval, approval_id, populate_existing=True)
                assert approval is not None
                self.metrics.approvals.labels(approval.action_id, state).inc()
                await audit.record(session, f"approval_{state}", at=now, actor="desk", approval_id=approval_id,
                                   conversation_id=approval.conversation_id, action=approval.action_id,
                                   arguments_hash=approval.arguments_hash)
                await self._close_prompts(session, approval, now)
                await self._tell_agent(session, approval, state, now)
            closed += 1
        return closed

    # ------------------------------------------------------------------ telling people

    async def _close_prompts(self, session: Any, approval: Approval, now: datetime) -> None:
        """Tell the approvers' channels how it ended, so nobody answers a closed prompt (and
        adapters with buttons can remove them). The notice carries the approval and, once the
        prompt went out, the prompt's receipt: an adapter can edit it in place, even after a restart."""
        text = self.renderer.render("messages/approval_closed.txt", approval=approval).strip()
        brief = self._brief(approval, await session.scalar(
            select(col(Conversation.subscriber_name)).where(col(Conversation.id) == approval.conversation_id)))
        sent = dict((await session.execute(
            select(col(OutboxItem.channel_id), col(OutboxItem.receipt)).where(
                col(OutboxItem.handoff_session_id) == approval.id, col(OutboxItem.state) == OutboxState.SENT, col(OutboxItem.receipt).is_not(None))
        )).all())
        for channel_id in approval.channel_ids:
            if self.channels.get(channel_id) is not None:
                # where the prompt is (its receipt), so the adapter can edit it instead of searching
                receipt = sent.get(channel_id) or {}
                prompt = {**(receipt.get("thread") or {}), **({"message_id": receipt["message_id"]} if receipt.get("message_id") else {})}
                await self.outbox.queue(session, channel_id=channel_id, now=now, outbound=ApprovalClosed(
                    text=text, prompt=prompt, approval=brief,
                ))

    async def _tell_agent(self, session: Any, approval: Approval, outcome: str, now: datetime) -> None:
        """The `[Approval — …]` message; once it commits, the agent reads it (a turn starts)."""
        text = self.renderer.render(
            "messages/approval_outcome.txt", approval=approval, outcome=outcome,
            result=json.dumps(approval.result, ensure_ascii=False) if approval.result is not None else None,
        ).strip()
        await conversations.add_message(session, approval.conversation_id, role=Role.SYSTEM, text=text, now=now)
        record(session.info, ApprovalSettled(approval.conversation_id))

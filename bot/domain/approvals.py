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

An approved HTTP action's call is a callback (bot/delivery/callbacks.py) queued in the
outbox in the decision's own transaction, with the approval id as its `X-Handoff-Delivery`:
a crash between the decision and the call loses nothing, a call whose answer was lost is
retried with the same delivery id (the endpoint drops a repeat), and the endpoint's answer
reaches the agent when the outbox has recorded it (`CallbackSettled`), or from the item
itself when a crash came between the two (`recover_interrupted`). An action that needs no
approval runs inline, inside the tool call, since the agent reads its result there, and so
does an approved callable, which has no endpoint to tell a repeat.

Who a decision counts as, and whether it counts, is `bot/domain/approval_votes.py`'s: two
people (`approvals_required: 2`, only with `ask_always`) means two distinct *people* of the
directory: the owner token's service identity, a provider identity linked to nobody and an
unverified decision are refused and recorded, never counted (and for one-person approvals
too under `sign_in.approvals_from_unlinked: refuse`, but for the owner token). The first
approval sets `first_approver` by a compare-and-set on the pending row; the approval moves to
`approved` only by a second compare-and-set naming a different person, in the transaction
that records that vote, so the same person twice (from two channels too) counts once and two
instances or two presses at once cannot run it twice or on one person's word. One denial
denies at once. The receipt and the audit trail name both people.

Through a route (`approval_channels` names one): the prompt goes to the first open step of
its ladder (and to any plain channels named beside it), and when nobody has decided within
the step's `claim_within` the sweep asks the next open step too (`escalate_due`, a
compare-and-set on the step, so it fires once across instances); earlier prompts stay
answerable, the first decision wins, and past the last step only the deadline is left.

`request` answers in facts (`ApprovalPending`, `ActionRan`, or the errors `ApprovalUnrouted`
and `ActionRunFailed`); `bot/tools/actions.py` words them for the model. Each `[Approval — …]`
message records an `ApprovalSettled` signal, heard after its commit (the agent's turn).
"""

from __future__ import annotations

import hashlib
import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import structlog
from jsonschema import Draft202012Validator
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlmodel import col

from bot.config import ActionConfig, AgentActionRun, HttpActionRun, Ladder
from bot.delivery.callbacks import CALLBACKS, CallbackSettled, action_endpoint
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.domain import conversations
from bot.domain.actions import ActionFailed, run_action, run_body
from bot.domain.approval_votes import DecisionOutcome, DecisionResult, person_of, record_vote, refusal, why_refused
from bot.domain.hours import OfficeHours
from bot.domain.ladder import Steps
from bot.domain.rendering import Renderer
from bot.errors import DeskError, found
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.signals import record
from bot.runtime.signed_ids import SignedIds
from bot.runtime.text import iso
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import Approval, ApprovalGrant, ApprovalVote, Conversation, OutboxItem
from bot.store.vocabulary import OutboxState, Role
from channels.base import ApprovalBrief, ApprovalClosed, ApprovalPrompt, Callback, Receipt, pretty_arguments

log = structlog.get_logger(__name__)

PENDING, APPROVED, DENIED, EXPIRED, UNROUTED, CLEARED = "pending", "approved", "denied", "expired", "unrouted", "cleared"
# run_state: the call is under way (inline, or in the outbox), or how it ended; AGENT: the
# action's run is the agent's own (`run: {by: agent}`), handed to it with the approval
RUNNING, SUCCEEDED, FAILED, AGENT = "running", "succeeded", "failed", "agent"
# Longer than any inline run may take (the HTTP runner's timeout is at most minutes): an inline
# run still "running" after this was cut short by a crash or a stop.
RUN_GRACE = timedelta(minutes=10)
INTERRUPTED = {"run_state": FAILED, "error": "interrupted: the desk stopped while it ran, so it may or may not have taken effect"}
SALT = "handoff-desk.approval-decision.v1"


def canonical(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def run_stream(approval_id: str) -> str:
    """The outbox stream of an approved action's call: its own, so it waits for nothing (not
    for the approval's prompts and closing notices, which have the approval id)."""
    return f"{approval_id}:run"


def settled(approval: Approval) -> bool:
    """Nothing more will happen to it: decided (or closed by the desk), and when approved,
    run to an end or handed to the agent to run. What a long-poll on it waits for."""
    return approval.state != PENDING and not (approval.state == APPROVED and approval.run_state in (None, RUNNING))


def arguments_hash(arguments: dict[str, Any]) -> str:
    return hashlib.sha256(canonical(arguments).encode()).hexdigest()


def shape_of(arguments: dict[str, Any]) -> str:
    """What "always allow" covers: the action with the same argument keys, any values (a
    hash: keys may be many, long, or contain commas)."""
    return hashlib.sha256(json.dumps(sorted(arguments)).encode()).hexdigest()


def approval_view(approval: Approval, votes: list[ApprovalVote] | None = None) -> dict[str, Any]:
    """For the owner: the invocation, its state, the receipt, what running it returned, how
    many people must approve and (when given: one approval's view, not a listing) each
    person's vote, and on a route the step asked last and when the next one will be."""
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
        "approvals_required": approval.approvals_required,
        **({} if votes is None else {"votes": [
            {"voter": v.voter, "name": v.name, "via": v.via, "approve": v.approve, "at": iso(v.at)} for v in votes]}),
        "route_id": approval.route_id, "step": approval.step, "escalate_at": iso(approval.escalate_at),
    }


@dataclass(frozen=True)
class Asked:
    """Where a prompt goes: its channels and, through a route, the ladder step asked last
    and when the next step is asked (None: no step is left, or no route)."""

    channel_ids: list[int]
    route_id: int | None = None
    step: int | None = None
    escalate_at: datetime | None = None


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


@dataclass(frozen=True)
class RunByAgent:
    """The action needed no approval (policy `none`, or always allowed here), and its run is
    the agent's own (`run: {by: agent}`): the agent runs it now; the desk ran nothing."""

    action_id: str
    why: str


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
        hours: OfficeHours, ladders: Mapping[int, Ladder] | None = None,
        unlinked: Literal["allow", "refuse"] = "allow",
    ) -> None:
        self.metrics, self.background = metrics, background
        self.unlinked = unlinked  # sign_in.approvals_from_unlinked (bot/domain/approval_votes.py)
        self.ladders, self.steps = dict(ladders or {}), Steps(channels, hours)
        self.db, self.clock, self.channels, self.outbox, self.renderer = db, clock, channels, outbox, renderer
        self.actions = {a.id: a for a in actions}
        self._links = SignedIds(secret_keys, SALT)
        self.public_url = public_url.rstrip("/")

    # ------------------------------------------------------------------ links

    def decision_url(self, approval_id: str) -> str:
        return f"{self.public_url}/a/{self._links.token(approval_id)}"

    def approval_id(self, token: str) -> str | None:
        return self._links.ident(token)

    # ------------------------------------------------------------------ the agent's call

    async def request(self, conversation: Conversation, action: ActionConfig, arguments: dict[str, Any],
                      *, actor: str) -> ApprovalPending | ActionRan | RunByAgent:
        """The tool call of a declared action, its input already valid. Raises
        ApprovalUnrouted (nobody can be asked) or ActionRunFailed (it ran without a gate and failed)."""
        if action.policy == "none":
            return await self._run_now(conversation, action, arguments, actor=actor, why="policy none")
        if action.policy == "ask" and await self._granted(conversation.id, action, arguments):
            return await self._run_now(conversation, action, arguments, actor=actor, why="always allowed in this conversation")
        now = self.clock.now()
        asked = self._first_ask(action, now)
        routes = asked.channel_ids
        approval = Approval(
            id=f"ap_{secrets.token_urlsafe(12)}", conversation_id=conversation.id, action_id=action.id,
            description=action.description, risk=action.risk, policy=action.policy, arguments=arguments,
            arguments_hash=arguments_hash(arguments), state=PENDING if routes else UNROUTED, channel_ids=routes,
            created_at=now, deadline=now + action.timeout, approvals_required=action.approvals_required,
            route_id=asked.route_id, step=asked.step, escalate_at=asked.escalate_at if routes else None,
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
                                   deadline=approval.deadline.isoformat(),
                                   approvals_required=approval.approvals_required if approval.approvals_required > 1 else None,
                                   route_id=approval.route_id, step=approval.step)
            for channel_id in routes:
                await self.outbox.queue(session, channel_id=channel_id, now=now,
                                        outbound=self._prompt(approval, conversation))
        if not routes:  # raised once the unrouted approval and its audit are committed
            raise ApprovalUnrouted(approval.id)
        return ApprovalPending(approval_id=approval.id, action_id=action.id, expires_at=approval.deadline)

    # ------------------------------------------------------------------ where the prompt goes

    def _first_ask(self, action: ActionConfig, now: datetime) -> Asked:
        """The available plain channels, and through a route its first open step's (when no
        step is open: the step back soonest if the route dispatches when closed, nobody if it
        refuses), as the ladder of a handoff picks them (`Steps`, bot/domain/ladder.py)."""
        plain = [cid for cid in action.approval_channels if cid not in self.ladders and self.channels.is_available(cid)]
        route_id = next((cid for cid in action.approval_channels if cid in self.ladders), None)
        if route_id is None:
            return Asked(plain)
        ladder = self.ladders[route_id]
        plan = self.steps.next_open(ladder, 0, now)
        if plan is None and ladder.route.when_closed == "dispatch":
            plan = self.steps.first_to_open(ladder, now)
        if plan is None:
            return Asked(plain, route_id)
        channels = plain + [adapter.id for adapter in plan.adapters if adapter.id not in plain]
        return Asked(channels, route_id, plan.index, self._next_escalation(ladder, plan.index, now))

    @staticmethod
    def _next_escalation(ladder: Ladder, step: int, now: datetime) -> datetime | None:
        """When the next step is asked if nobody decides: past the last step, never."""
        return now + ladder.steps[step].claim_within if step + 1 < len(ladder.steps) else None

    async def escalate_due(self) -> int:
        """Ask the next open step of the ladder of every approval nobody decided within its
        step's `claim_within` (run by the sweep). Each escalation is a compare-and-set on the
        step asked last, so any instance may sweep and it fires once; the earlier prompts
        stay answerable. Past the last open step nothing more is sent: the deadline is left."""
        now = self.clock.now()
        async with self.db.read() as session:
            due = (await session.execute(select(col(Approval.id), col(Approval.route_id), col(Approval.step)).where(
                col(Approval.state) == PENDING, col(Approval.escalate_at) <= now, col(Approval.deadline) > now,
            ))).all()
        escalated = 0
        for approval_id, route_id, step in due:
            ladder = self.ladders.get(route_id) if route_id is not None else None
            plan = self.steps.next_open(ladder, step + 1, now) if ladder is not None and step is not None else None
            following = plan.index if plan is not None else None
            async with self.db.transaction() as session:
                approval = await session.get(Approval, approval_id)
                assert approval is not None
                added = [] if plan is None else [a.id for a in plan.adapters if a.id not in approval.channel_ids]
                changed = await execute_dml(
                    session,
                    update(Approval).where(col(Approval.id) == approval_id, col(Approval.state) == PENDING,
                                           col(Approval.step) == step, col(Approval.escalate_at).is_not(None))
                    .values(step=step if following is None else following, channel_ids=[*approval.channel_ids, *added],
                            escalate_at=None if ladder is None or following is None
                            else self._next_escalation(ladder, following, now))
                    .execution_options(synchronize_session=False)
                )
                if changed.rowcount != 1:
                    continue  # decided, or escalated by another instance, meanwhile
                await session.refresh(approval)
                if following is None:
                    await audit.record(session, "approval_not_escalated", at=now, actor="desk", approval_id=approval_id,
                                       conversation_id=approval.conversation_id, action=approval.action_id,
                                       route_id=route_id, why="no later step of the route is open or reachable"
                                       if ladder is not None else "the route is no longer configured")
                    continue
                self.metrics.approvals.labels(approval.action_id, "escalated").inc()
                await audit.record(session, "approval_escalated", at=now, actor="desk", approval_id=approval_id,
                                   conversation_id=approval.conversation_id, action=approval.action_id,
                                   route_id=route_id, step=following, channel_ids=added)
                conversation = await session.get(Conversation, approval.conversation_id)
                assert conversation is not None
                for channel_id in added:
                    await self.outbox.queue(session, channel_id=channel_id, now=now,
                                            outbound=self._prompt(approval, conversation))
            escalated += 1
        return escalated

    async def _granted(self, conversation_id: str, action: ActionConfig, arguments: dict[str, Any]) -> bool:
        async with self.db.read() as session:
            found = await session.scalar(select(col(ApprovalGrant.id)).where(
                col(ApprovalGrant.conversation_id) == conversation_id, col(ApprovalGrant.action_id) == action.id,
                col(ApprovalGrant.shape) == shape_of(arguments),
            ))
        return found is not None

    async def _run_now(self, conversation: Conversation, action: ActionConfig, arguments: dict[str, Any], *,
                       actor: str, why: str) -> ActionRan | RunByAgent:
        now = self.clock.now()
        if isinstance(action.run, AgentActionRun):
            async with self.db.transaction(effect=True) as session:
                await audit.record(session, "action_run_by_agent", at=now, actor=actor, conversation_id=conversation.id,
                                   action=action.id, arguments_hash=arguments_hash(arguments), why=why)
            return RunByAgent(action_id=action.id, why=why)
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
            approvals_required=approval.approvals_required,
        )

    def _prompt(self, approval: Approval, conversation: Conversation) -> ApprovalPrompt:
        brief = self._brief(approval, conversation.subscriber_name)
        text = self.renderer.render("messages/approval_prompt.txt", approval=brief,
                                    arguments=pretty_arguments(approval.arguments)[0],
                                    two_people=approval.approvals_required > 1).strip()
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
        return found(approval, "approval", approval_id)

    async def votes(self, approval_id: str) -> list[ApprovalVote]:
        """Each person's vote on an approval that needs two, first first."""
        async with self.db.read() as session:
            return list((await session.scalars(select(ApprovalVote).where(col(ApprovalVote.approval_id) == approval_id)
                                               .order_by(col(ApprovalVote.id)))).all())

    async def view(self, approval_id: str) -> dict[str, Any]:
        """The owner's view of one approval, with its votes."""
        return approval_view(await self.get(approval_id), await self.votes(approval_id))

    async def decide(self, approval_id: str, *, approve: bool, by: str, via: str, voter: str | None = None,
                     reason: str | None = None, always_allow: bool = False) -> DecisionResult:
        """A decision; only the first one on a pending, unexpired approval counts, or, when two
        people must approve, the first approval of each of two people. `voter` is who the
        desk verified made it (bot/domain/approval_votes.py: a person, the owner token, an
        identity linked to nobody, or None); a voter who may not decide this approval is
        refused and recorded (`refusal`)."""
        now = self.clock.now()
        by = " ".join(by.split())[:200] or "someone"
        reason = (reason or "").strip()[:2000] or None
        person_id = person_of(voter)
        async with self.db.transaction(effect=True) as session:
            approval = found(await session.get(Approval, approval_id), "approval", approval_id)
            always = bool(approve and always_allow and approval.policy == "ask")
            refused = refusal(voter, approvals_required=approval.approvals_required, unlinked=self.unlinked)
            if refused is not None:
                outcome = await self._refuse(session, approval, refused, approve=approve, by=by, via=via, voter=voter, now=now)
            elif approval.approvals_required > 1:
                assert voter is not None  # `refusal` refuses an unverified decision here
                outcome = await self._count_vote(session, approval, approve=approve, by=by, via=via, voter=voter,
                                                 reason=reason, now=now)
            else:
                outcome = await self._settle_once(session, approval, approve=approve, by=by, via=via, reason=reason,
                                                  always=always, now=now)
            if outcome is not DecisionOutcome.DECIDED:
                if outcome is DecisionOutcome.CLOSED:
                    await audit.record(session, "approval_decision_ignored", at=now, actor=by, person_id=person_id,
                                       approval_id=approval_id, conversation_id=approval.conversation_id,
                                       state=approval.state, via=via, decision="approve" if approve else "deny")
                return DecisionResult(outcome, approval)
            await session.refresh(approval)
            self.metrics.approvals.labels(approval.action_id, approval.state).inc()
            both = [person_of(approval.first_approver), person_id] if approve and approval.approvals_required > 1 else None
            await audit.record(session, "approval_approved" if approve else "approval_denied", at=now,
                               actor=approval.decided_by or by, person_id=person_id, approval_id=approval_id,
                               conversation_id=approval.conversation_id, via=via, action=approval.action_id,
                               arguments_hash=approval.arguments_hash, reason=reason, always_allow=always or None,
                               approved_by_people=both)
            if always:
                await self._grant(session, approval, now)
            await self._close_prompts(session, approval, now)
            if not approve:
                await self._tell_agent(session, approval, "denied", now)
            queued = approve and (await self._hand_to_agent(session, approval, now)
                                  or await self._queue_call(session, approval, now))
        if approve and not queued:  # in the background: not inside the caller's request or a channel's inbound order
            self.background.spawn(self._run_approved(approval.id), name=f"approved:{approval.id}")
        return DecisionResult(DecisionOutcome.DECIDED, approval)

    @staticmethod
    def _still_open(approval_id: str, now: datetime) -> list[Any]:
        return [col(Approval.id) == approval_id, col(Approval.state) == PENDING, col(Approval.deadline) > now]

    @staticmethod
    async def _refuse(session: Any, approval: Approval, refused: DecisionOutcome, *, approve: bool, by: str, via: str,
                      voter: str | None, now: datetime) -> DecisionOutcome:
        """A decision by someone who may not decide this approval: recorded, never counted
        (CLOSED when it is not open any more, which is what they are told then)."""
        if approval.state != PENDING or approval.deadline <= now:
            return DecisionOutcome.CLOSED
        await audit.record(session, "approval_vote_refused", at=now, actor=by, approval_id=approval.id,
                           conversation_id=approval.conversation_id, action=approval.action_id, via=via, voter=voter,
                           decision="approve" if approve else "deny", why=why_refused(refused))
        return refused

    async def _settle_once(self, session: Any, approval: Approval, *, approve: bool, by: str, via: str,
                           reason: str | None, always: bool, now: datetime) -> DecisionOutcome:
        """One person decides: a compare-and-set on the pending, unexpired approval."""
        changed = await execute_dml(
            session,
            update(Approval).where(*self._still_open(approval.id, now))
            .values(state=APPROVED if approve else DENIED, decided_at=now, decided_by=by, decided_via=via,
                    reason=reason, always_allow=always)
            .execution_options(synchronize_session=False)
        )
        return DecisionOutcome.DECIDED if changed.rowcount == 1 else DecisionOutcome.CLOSED

    async def _count_vote(self, session: Any, approval: Approval, *, approve: bool, by: str, via: str,
                          voter: str, reason: str | None, now: datetime) -> DecisionOutcome:
        """Two people must approve, and `voter` is a person. Every step is a compare-and-set
        on the approval's row, so concurrent votes queue on it: the first approval claims
        `first_approver`; only a different person's approval moves it to approved; a denial
        denies at once."""
        person_id = person_of(voter)
        facts = {"approval_id": approval.id, "conversation_id": approval.conversation_id, "action": approval.action_id,
                 "via": via, "voter": voter, "decision": "approve" if approve else "deny"}
        if not approve:
            denied = await self._settle_once(session, approval, approve=False, by=by, via=via, reason=reason,
                                             always=False, now=now)
            if denied is DecisionOutcome.CLOSED:
                return denied
            await record_vote(session, approval.id, voter=voter, name=by, via=via, approve=False, now=now)
            await audit.record(session, "approval_vote", at=now, actor=by, person_id=person_id, **facts, counted=True)
            return DecisionOutcome.DECIDED
        first = await execute_dml(session, update(Approval).where(
            *self._still_open(approval.id, now), col(Approval.first_approver).is_(None),
        ).values(first_approver=voter).execution_options(synchronize_session=False))
        if first.rowcount == 1:
            await record_vote(session, approval.id, voter=voter, name=by, via=via, approve=True, now=now)
            await audit.record(session, "approval_vote", at=now, actor=by, person_id=person_id, **facts, counted=True,
                               approvals=1)
            await session.refresh(approval)
            return DecisionOutcome.FIRST_APPROVAL
        second = await execute_dml(session, update(Approval).where(
            *self._still_open(approval.id, now), col(Approval.first_approver).is_not(None),
            col(Approval.first_approver) != voter,
        ).values(state=APPROVED, decided_at=now, decided_via=via, reason=reason).execution_options(synchronize_session=False))
        await session.refresh(approval)
        if second.rowcount != 1:
            if approval.state == PENDING and approval.first_approver == voter:
                await audit.record(session, "approval_vote_repeated", at=now, actor=by, person_id=person_id, **facts,
                                   counted=False)
                return DecisionOutcome.SAME_PERSON
            return DecisionOutcome.CLOSED
        await record_vote(session, approval.id, voter=voter, name=by, via=via, approve=True, now=now)
        await audit.record(session, "approval_vote", at=now, actor=by, person_id=person_id, **facts, counted=True,
                           approvals=2)
        first_name = await session.scalar(select(col(ApprovalVote.name)).where(
            col(ApprovalVote.approval_id) == approval.id, col(ApprovalVote.voter) == approval.first_approver))
        await execute_dml(session, update(Approval).where(col(Approval.id) == approval.id).values(
            decided_by=f"{first_name or 'someone'} and {by}"[:200]).execution_options(synchronize_session=False))
        return DecisionOutcome.DECIDED

    async def _grant(self, session: Any, approval: Approval, now: datetime) -> None:
        try:
            async with session.begin_nested():
                session.add(ApprovalGrant(conversation_id=approval.conversation_id, action_id=approval.action_id,
                                          shape=shape_of(approval.arguments), approval_id=approval.id, created_at=now))
        except IntegrityError:
            pass  # already allowed (two prompts of one shape decided "always")

    async def _hand_to_agent(self, session: Any, approval: Approval, now: datetime) -> bool:
        """In the decision's transaction: an approved action whose run is the agent's own is
        handed to it (run_state `agent`, audited, its `[Approval — …]` message written), and
        the desk runs nothing. False for an action the desk runs, or one that can no longer
        run (`_run_approved` reports it)."""
        action = self.actions.get(approval.action_id)
        if action is None or not isinstance(action.run, AgentActionRun) or self._cannot_run(action, approval):
            return False
        handed = await execute_dml(
            session,
            update(Approval).where(col(Approval.id) == approval.id, col(Approval.state) == APPROVED, col(Approval.run_state).is_(None))
            .values(run_state=AGENT).execution_options(synchronize_session=False)
        )
        if handed.rowcount == 1:
            await session.refresh(approval)
            await audit.record(session, "action_run_by_agent", at=now, actor="desk", approval_id=approval.id,
                               conversation_id=approval.conversation_id, action=approval.action_id,
                               arguments_hash=approval.arguments_hash, why="approved")
            await self._tell_agent(session, approval, AGENT, now)
        return True

    async def _queue_call(self, session: Any, approval: Approval, now: datetime) -> bool:
        """In the caller's transaction (the decision's): claim an approved HTTP action's run
        and queue its call in the outbox. True when the call is the outbox's to make (queued
        now, or claimed before); False when this approval runs inline (a callable, or an
        action that can no longer run, which `_run_approved` reports)."""
        action = self.actions.get(approval.action_id)
        if action is None or not isinstance(action.run, HttpActionRun) or self._cannot_run(action, approval):
            return False
        claimed = await execute_dml(
            session,
            update(Approval).where(col(Approval.id) == approval.id, col(Approval.state) == APPROVED, col(Approval.run_state).is_(None))
            .values(run_state=RUNNING).execution_options(synchronize_session=False)
        )
        if claimed.rowcount == 1:
            await self.outbox.queue(session, channel_id=CALLBACKS, now=now, outbound=Callback(
                text=f"run {action.id} as approved in {approval.id}", endpoint=action_endpoint(action.id), event="action_run",
                body=run_body(action.id, approval.id, approval.conversation_id, dict(approval.arguments)),
                conversation_id=approval.conversation_id, ordered_by=run_stream(approval.id), approval_id=approval.id,
                delivery=approval.id,
            ))
        return True

    def _cannot_run(self, action: ActionConfig | None, approval: Approval) -> str | None:
        """Why the approved arguments must not run any more, or None."""
        if action is None:  # removed from the config since the prompt went out
            return f"the action {approval.action_id} is no longer configured"
        if not Draft202012Validator(action.input_schema).is_valid(approval.arguments):
            return "its input schema changed since it was approved, so it did not run"
        return None

    async def _run_approved(self, approval_id: str) -> Approval | None:
        """Run exactly the stored arguments of this approval, once (a conditional claim), or
        queue its call when it is an HTTP action, or hand it to the agent when its run is the
        agent's; None when it was not ours to run here."""
        async with self.db.transaction() as session:
            approval = await session.get(Approval, approval_id)
            now = self.clock.now()
            if approval is None or await self._hand_to_agent(session, approval, now) or await self._queue_call(session, approval, now):
                return None
            claimed = await execute_dml(
                session,
                update(Approval).where(col(Approval.id) == approval_id, col(Approval.state) == APPROVED, col(Approval.run_state).is_(None))
                .values(run_state=RUNNING).execution_options(synchronize_session=False)
            )
        if claimed.rowcount != 1:
            return None
        action = self.actions.get(approval.action_id)
        problem = self._cannot_run(action, approval)
        values: dict[str, Any]
        detail: str | None = None
        if action is None or problem is not None:
            values = {"run_state": FAILED, "error": problem}
        else:
            assert not isinstance(action.run, AgentActionRun), "handed to the agent above"
            try:
                result = await run_action(action.run, action_id=action.id, approval_id=approval.id,
                                          conversation_id=approval.conversation_id, arguments=dict(approval.arguments))
                values = {"run_state": SUCCEEDED, "result": result}
            except ActionFailed as exc:
                values, detail = {"run_state": FAILED, "error": str(exc)}, exc.detail
        return await self._record_run(approval_id, values, detail)

    def on_call_settled(self, settled: CallbackSettled) -> None:
        """After the outbox recorded how an approved action's call ended: record what it
        returned and tell the agent (in the background: the outbox's recorder goes on)."""
        approval_id = settled.callback.approval_id
        if approval_id is None:
            return
        values = ({"run_state": SUCCEEDED, "result": settled.answer} if settled.error is None
                  else {"run_state": FAILED, "error": settled.error})
        self.background.spawn(self._record_run(approval_id, values, settled.hint), name=f"ran:{approval_id}")

    async def _record_run(self, approval_id: str, values: dict[str, Any], detail: str | None) -> Approval | None:
        """How a run ended, recorded once (only while it is still running: the outbox's
        signal and a recovery may both report one call), audited, and told to the agent."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            changed = await execute_dml(
                session,
                update(Approval).where(col(Approval.id) == approval_id, col(Approval.run_state) == RUNNING)
                .values(**values).execution_options(synchronize_session=False)
            )
            if changed.rowcount != 1:
                return None
            approval = await session.get(Approval, approval_id, populate_existing=True)
            assert approval is not None
            await audit.record(session, "action_ran" if approval.run_state == SUCCEEDED else "action_failed", at=now,
                               actor="desk", approval_id=approval.id, conversation_id=approval.conversation_id,
                               action=approval.action_id, arguments_hash=approval.arguments_hash, error=approval.error,
                               detail=detail)
            await self._tell_agent(session, approval, "ran", now)
        return approval

    async def recover_interrupted(self) -> int:
        """After a crash or a stop (start and sweep): an approved call that never started
        runs now (its claim keeps it single); a call the outbox settled before the crash let
        the answer be recorded is recorded from its item; and an inline run still "running"
        after longer than any action may take is reported as interrupted, so the agent is
        never left waiting. A call the outbox still carries is left to it."""
        now = self.clock.now()
        async with self.db.read() as session:
            unstarted = list((await session.scalars(select(col(Approval.id)).where(
                col(Approval.state) == APPROVED, col(Approval.run_state).is_(None)))).all())
            running = list((await session.execute(select(col(Approval.id), col(Approval.decided_at)).where(
                col(Approval.state) == APPROVED, col(Approval.run_state) == RUNNING))).all())
            calls = {stream: (state, receipt, error) for stream, state, receipt, error in (await session.execute(
                select(col(OutboxItem.handoff_session_id), col(OutboxItem.state), col(OutboxItem.receipt),
                       col(OutboxItem.last_error))
                .where(col(OutboxItem.handoff_session_id).in_([run_stream(aid) for aid, _ in running]),
                       col(OutboxItem.purpose) == "callback"))).all()} if running else {}
        for approval_id in unstarted:
            self.background.spawn(self._run_approved(approval_id), name=f"approved:{approval_id}")
        recovered = 0
        for approval_id, decided_at in running:
            call = calls.get(run_stream(approval_id))
            if call is not None:
                values, detail = self._outcome_of_call(call), "recorded from its outbox item after a restart"
            elif decided_at is not None and decided_at < now - RUN_GRACE:
                values, detail = INTERRUPTED, "interrupted while running"
            else:
                continue  # an inline run that may still be going
            if values is not None and await self._record_run(approval_id, values, detail) is not None:
                recovered += 1
        return len(unstarted) + recovered

    @staticmethod
    def _outcome_of_call(call: tuple[str, dict[str, Any] | None, str | None]) -> dict[str, Any] | None:
        """How a queued call ended, as its outbox item says (None: still on its way)."""
        state, receipt, error = call
        if state == OutboxState.SENT:
            return {"run_state": SUCCEEDED, "result": Receipt.model_validate(receipt or {}).answer}
        if state == OutboxState.FAILED:  # the item keeps "<error type>: <message>"
            return {"run_state": FAILED, "error": (error or "").partition(": ")[2] or "its call failed"}
        return None

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

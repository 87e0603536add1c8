"""The desk's answers as typed values: what `DeskClient` and `SyncDeskClient` return.

Each model mirrors one answer of the HTTP API, field for field with the response schema the
desk serves at /api/openapi.json (tests/test_client_models.py checks both ways, so a field
renamed on one side fails a test instead of turning into a silent None). Fields a newer desk
adds are ignored, so an older client keeps working.

The `…Outcome` models are the client's own reading of an ended handoff, approval or user
action: one `status` to branch on, in which a timeout is never a person's "no"
(`ApprovalOutcome.status == "timed_out"` is an approval nobody answered in time; "denied"
is a person's, or the desk's fail-closed refusal, with its `reason`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["subscriber", "agent", "human", "system"]


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


# --------------------------------------------------------------------------- conversations


class Message(_Answer):
    """One message of a conversation, oldest first by `id`."""

    id: int
    role: Role
    text: str
    author: str | None = None
    handoff_session_id: str | None = None
    created_at: datetime


class Reply(_Answer):
    id: int
    role: Role
    text: str


class PostedMessage(_Answer):
    """The answer to a subscriber message: who got it, and what the agent answered at once."""

    message_id: int
    routed_to: Literal["agent", "human"]
    handoff_session_id: str | None = None
    replies: list[Reply] = Field(default_factory=list)


# --------------------------------------------------------------------------- handoffs


class Satisfaction(_Answer):
    asked_at: datetime | None = None
    asked_on: str | None = None
    answer: str | None = None
    comment: str | None = None
    answered_at: datetime | None = None
    answered_by: str | None = None
    answered_via: str | None = None


class Recipient(_Answer):
    """One channel (or person) a route's handoff was offered to, and how that ended."""

    channel_id: int | None = None
    channel_kind: str | None = None
    channel_label: str | None = None
    step: int | None = None
    state: str
    channel_message_id: str | None = None
    notified_at: datetime | None = None
    failed_at: datetime | None = None
    error: str | None = None
    person_id: str | None = None
    person_name: str | None = None
    target: str | None = None
    contact: str | None = None
    contact_index: int | None = None
    turn: int | None = None
    result: str | None = None
    ended_at: datetime | None = None


class ResumeMessage(_Answer):
    """The `[Bot resumed — …]` system message the release wrote for the agent."""

    id: int
    text: str


HandoffState = Literal["dispatching", "active", "released", "failed"]


class Handoff(_Answer):
    """GET /api/handoffs/{sid}: the handoff's state, and once released why and with what."""

    handoff_session_id: str
    short_code: str | None = None
    conversation_id: str
    state: HandoffState
    channel_id: int
    channel_kind: str | None = None
    channel_label: str | None = None
    channel_message_id: str | None = None
    urgency: str | None = None
    summary: str | None = None
    expected_action: str | None = None
    contact_back_email: str | None = None
    extra_context: dict[str, Any] | None = None
    expected_return: list[dict[str, Any]] | None = None
    estimated_response: str | None = None
    release_reason: str | None = None
    released_by: str | None = None
    outcome: str | None = None
    note: str | None = None
    returned: dict[str, Any] | None = None
    missing_required: list[str] | None = None
    failure: str | None = None
    form_url: str | None = None
    created_at: datetime | None = None
    activated_at: datetime | None = None
    last_activity_at: datetime | None = None
    idle_deadline: datetime | None = None
    released_at: datetime | None = None
    route_id: int | None = None
    step: int | None = None
    escalate_at: datetime | None = None
    claimed_by: str | None = None
    claimed_at: datetime | None = None
    claimed_via: str | None = None
    satisfaction: Satisfaction | None = None
    recipients: list[Recipient] | None = None
    resume_message: ResumeMessage | None = None

    @property
    def ended(self) -> bool:
        return self.state in ("released", "failed")


class HandoffEvent(_Answer):
    """One entry of a handoff's audit trail."""

    id: str
    kind: str
    actor: str | None = None
    handoff_session_id: str | None = None
    conversation_id: str | None = None
    detail: dict[str, Any] | None = None
    created_at: datetime


class Released(_Answer):
    """The answer to a release: the handoff as it is now, and the resume message written."""

    released: bool
    resume_message_id: int | None = None
    handoff: Handoff


TIMEOUT_REASONS = ("idle_timeout", "unclaimed")


class HandoffOutcome(_Answer):
    """How a handoff ended, for the agent: released by a person (or the sibling agent, the
    owner), failed to reach anyone, or timed out (idle, or nobody claimed it)."""

    handoff_session_id: str
    status: Literal["released", "failed", "timed_out"]
    reason: str | None = None
    outcome: str | None = None
    returned: dict[str, Any] = Field(default_factory=dict)
    missing_required: list[str] = Field(default_factory=list)
    note: str | None = None
    failure: str | None = None
    resume_text: str = ""

    @classmethod
    def of(cls, handoff: Handoff) -> HandoffOutcome:
        status: Literal["released", "failed", "timed_out"] = (
            "failed" if handoff.state == "failed"
            else "timed_out" if handoff.release_reason in TIMEOUT_REASONS else "released")
        return cls(
            handoff_session_id=handoff.handoff_session_id, status=status, reason=handoff.release_reason,
            outcome=handoff.outcome, returned=handoff.returned or {}, missing_required=handoff.missing_required or [],
            note=handoff.note, failure=handoff.failure,
            resume_text=handoff.resume_message.text if handoff.resume_message else "",
        )


# --------------------------------------------------------------------------- approvals


ApprovalState = Literal["pending", "approved", "denied", "expired", "unrouted", "cleared"]


class ApprovalReceipt(_Answer):
    decided_by: str | None = None
    decided_at: datetime | None = None
    via: str | None = None
    reason: str | None = None
    always_allow: bool = False
    arguments_hash: str


class ApprovalVote(_Answer):
    voter: str | None = None
    name: str
    via: str
    approve: bool
    at: datetime


class Approval(_Answer):
    """GET /api/approvals/{aid}: one gated call, its state and its receipt. `run_state` says
    how running it went: running, succeeded, failed, or `agent` (the action's run is the
    agent's own: the desk ran nothing)."""

    approval_id: str
    conversation_id: str
    action: str
    description: str
    risk: str
    policy: str
    arguments: dict[str, Any]
    state: ApprovalState
    created_at: datetime
    deadline: datetime
    channel_ids: list[int]
    receipt: ApprovalReceipt
    run_state: str | None = None
    result: Any = None
    error: str | None = None
    approvals_required: int = 1
    votes: list[ApprovalVote] | None = None
    route_id: int | None = None
    step: int | None = None
    escalate_at: datetime | None = None

    @property
    def settled(self) -> bool:
        """Decided, and when approved, run (or handed to the agent to run)."""
        return self.state != "pending" and not (self.state == "approved" and self.run_state in (None, "running"))


class ApprovalOutcome(_Answer):
    """How an approval ended. `approved`: a person (two, where required) approved; `denied`:
    a person denied it (`reason` is theirs), or the desk refused it closed because nobody
    could be asked (`state` unrouted) or its prompt was cleared (`state` cleared);
    `timed_out`: nobody answered before the deadline. Only `approved` may run the action."""

    approval_id: str
    status: Literal["approved", "denied", "timed_out"]
    state: ApprovalState
    reason: str | None = None
    decided_by: str | None = None
    run_state: str | None = None
    result: Any = None
    error: str | None = None

    @classmethod
    def of(cls, approval: Approval) -> ApprovalOutcome:
        status: Literal["approved", "denied", "timed_out"] = (
            "approved" if approval.state == "approved" else "timed_out" if approval.state == "expired" else "denied")
        reason = approval.receipt.reason
        if approval.state == "unrouted":
            reason = "no approval channel was available to ask a person"
        elif approval.state == "cleared":
            reason = "the approval prompt was cleared: its channels left the configuration"
        return cls(
            approval_id=approval.approval_id, status=status, state=approval.state, reason=reason,
            decided_by=approval.receipt.decided_by if approval.state in ("approved", "denied") else None,
            run_state=approval.run_state, result=approval.result, error=approval.error,
        )


# --------------------------------------------------------------------------- user actions


class UserAction(_Answer):
    """GET /api/user_actions/{uaid}: a step only the subscriber can do, and how it stands."""

    user_action_id: str
    conversation_id: str
    reason: str
    details: str
    suggested_action: str | None = None
    steps: list[str] | None = None
    step: int | None = None
    expectation: str | None = None
    state: Literal["pending", "done", "cancelled", "timeout", "failed"]
    created_at: datetime
    deadline: datetime
    resolved_at: datetime | None = None
    resolved_via: str | None = None
    observed: str | None = None


class UserActionOutcome(_Answer):
    """How a user action ended: done (then look before acting on it), cancelled by the
    subscriber, timed_out, or failed (its expectation did not hold: `observed` says why)."""

    user_action_id: str
    status: Literal["done", "cancelled", "timed_out", "failed"]
    observed: str | None = None
    resolved_via: str | None = None

    @classmethod
    def of(cls, action: UserAction) -> UserActionOutcome:
        return cls(user_action_id=action.user_action_id, status=_USER_ACTION_STATUS[action.state], observed=action.observed,
                   resolved_via=action.resolved_via)


_USER_ACTION_STATUS: dict[str, Literal["done", "cancelled", "timed_out", "failed"]] = {
    "done": "done", "cancelled": "cancelled", "timeout": "timed_out", "failed": "failed",
}


class UserActionAnswer(_Answer):
    """The answer to a user action's Done / Cancel: `status` done (`verified` when an
    expectation was checked), or the `error` code (HANDOFF_CANCELLED, HANDOFF_TIMEOUT,
    HANDOFF_FAILED) with its `details`; `already` when it came after the end."""

    status: Literal["done"] | None = None
    user_action_id: str | None = None
    verified: bool | None = None
    error: str | None = None
    details: dict[str, Any] | None = None
    already: bool | None = None


# --------------------------------------------------------------------------- people


class Identity(_Answer):
    kind: str
    value: str
    verified_via: str | None = None


class Holding(_Answer):
    handoff_session_id: str
    code: str | None = None


class ContactMethod(_Answer):
    kind: str
    channel_id: int | None = None
    position: int
    address: str | None = None


class Person(_Answer):
    """A person of the directory, as GET /api/people/{pid} shows them (never a credential)."""

    id: str
    name: str
    email: str | None = None
    role: str
    timezone: str | None = None
    source: str
    state: str
    disabled_at: datetime | None = None
    password_set: bool
    totp_enabled: bool
    identities: list[Identity]
    last_sign_in_at: datetime | None = None
    holding: list[Holding]
    open_handoffs: int
    max_concurrent: int | None = None
    presence: str | None = None
    away_since: datetime | None = None
    away_until: datetime | None = None
    away_note: str | None = None
    working_hours: Any = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    contact: list[ContactMethod] = Field(default_factory=list)

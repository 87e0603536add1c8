"""What the API's routes answer on success, as the OpenAPI document states it.

The routes build their answers as plain JSON (`handoff_view`, `approval_view`, …): these
models only *describe* them in /api/openapi.json (`responses=answer(Model)` on a route), so
declaring one never filters or slows an answer. They are the contract clients are generated
from and the typed client (bot/clients/models.py) is checked against; tests/test_client_models.py
validates the desk's real answers against them, so the description cannot drift either.

A field listed with no default is in every answer (null where the type allows it); one with
a default appears only in some answers (a route's handoff lists its `recipients`, one approval
its `votes`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel


def answer(model: type[BaseModel], status: int = 200) -> dict[int | str, dict[str, Any]]:
    """A route's `responses=` entry naming the model of its success answer."""
    return {status: {"model": model, "description": model.__doc__.strip().split("\n\n")[0] if model.__doc__ else ""}}


# --------------------------------------------------------------------------- conversations

class ConversationCreated(BaseModel):
    """The new conversation."""

    conversation_id: str


class MessageReply(BaseModel):
    id: int
    role: Literal["subscriber", "agent", "human", "system"]
    text: str


class MessagePosted(BaseModel):
    """Who got the subscriber's message, and what the agent answered at once."""

    message_id: int
    routed_to: Literal["agent", "human"]
    handoff_session_id: str | None
    replies: list[MessageReply]


class MessageAnswer(BaseModel):
    id: int
    role: Literal["subscriber", "agent", "human", "system"]
    text: str
    author: str | None
    handoff_session_id: str | None
    created_at: datetime


class MessageList(BaseModel):
    """The conversation's messages after `after`, oldest first."""

    messages: list[MessageAnswer]


class ToolList(BaseModel):
    """The tools as the model sees them now, in the asked format."""

    tools: list[dict[str, Any]]


# --------------------------------------------------------------------------- handoffs

class SatisfactionAnswer(BaseModel):
    asked_at: datetime | None
    asked_on: str | None
    answer: str | None
    comment: str | None
    answered_at: datetime | None
    answered_by: str | None
    answered_via: str | None


class RecipientAnswer(BaseModel):
    channel_id: int | None
    channel_kind: str | None
    channel_label: str | None
    step: int | None
    state: str
    channel_message_id: str | None
    notified_at: datetime | None
    failed_at: datetime | None
    error: str | None
    person_id: str | None
    person_name: str | None
    target: str | None
    contact: str | None
    contact_index: int | None
    turn: int | None
    result: str | None
    ended_at: datetime | None


class ResumeMessageAnswer(BaseModel):
    id: int
    text: str


class HandoffAnswer(BaseModel):
    """The handoff: its state, and once released why, with what and the resume message.

    `satisfaction` and `resume_message` are in the answer of one handoff (not in listings),
    `recipients` only for a handoff on a route."""

    handoff_session_id: str
    short_code: str | None
    conversation_id: str
    state: Literal["dispatching", "active", "released", "failed"]
    channel_id: int
    channel_kind: str | None
    channel_label: str | None
    channel_message_id: str | None
    urgency: str | None
    summary: str | None
    expected_action: str | None
    contact_back_email: str | None
    extra_context: dict[str, Any] | None
    expected_return: list[dict[str, Any]] | None
    estimated_response: str | None
    release_reason: str | None
    released_by: str | None
    outcome: str | None
    note: str | None
    returned: dict[str, Any] | None
    missing_required: list[str] | None
    failure: str | None
    form_url: str | None
    created_at: datetime | None
    activated_at: datetime | None
    last_activity_at: datetime | None
    idle_deadline: datetime | None
    released_at: datetime | None
    route_id: int | None
    step: int | None
    escalate_at: datetime | None
    claimed_by: str | None
    claimed_at: datetime | None
    claimed_via: str | None
    satisfaction: SatisfactionAnswer | None = None
    recipients: list[RecipientAnswer] | None = None
    resume_message: ResumeMessageAnswer | None = None


class HandoffList(BaseModel):
    """The handoffs in that state, newest first."""

    handoffs: list[HandoffAnswer]


class EventAnswer(BaseModel):
    id: str
    kind: str
    actor: str | None
    handoff_session_id: str | None
    conversation_id: str | None
    detail: dict[str, Any] | None
    created_at: datetime


class EventList(BaseModel):
    """The handoff's audit trail, oldest first."""

    events: list[EventAnswer]


class HandoffReleased(BaseModel):
    """The handoff, released, and the resume message written for the agent."""

    released: bool
    resume_message_id: int | None
    handoff: HandoffAnswer


# --------------------------------------------------------------------------- approvals

class ReceiptAnswer(BaseModel):
    decided_by: str | None
    decided_at: datetime | None
    via: str | None
    reason: str | None
    always_allow: bool
    arguments_hash: str


class VoteAnswer(BaseModel):
    voter: str | None
    name: str
    via: str
    approve: bool
    at: datetime


class ApprovalAnswer(BaseModel):
    """The gated call, its state and receipt, and how running it went.

    `state`: pending, approved, denied (by a person), expired (nobody answered in time),
    unrouted (nobody could be asked), cleared (its channels left the config). `run_state`:
    running, succeeded, failed, or agent (the action's run is the agent's own). `votes`
    only in the answer of one approval."""

    approval_id: str
    conversation_id: str
    action: str
    description: str
    risk: str
    policy: str
    arguments: dict[str, Any]
    state: Literal["pending", "approved", "denied", "expired", "unrouted", "cleared"]
    created_at: datetime
    deadline: datetime
    channel_ids: list[int]
    receipt: ReceiptAnswer
    run_state: Literal["running", "succeeded", "failed", "agent"] | None
    result: Any
    error: str | None
    approvals_required: int
    votes: list[VoteAnswer] | None = None
    route_id: int | None
    step: int | None
    escalate_at: datetime | None


class ApprovalList(BaseModel):
    """The approvals, newest first."""

    approvals: list[ApprovalAnswer]


# --------------------------------------------------------------------------- user actions

class UserActionAnswer(BaseModel):
    """The step only the subscriber can do, and how it stands."""

    user_action_id: str
    conversation_id: str
    reason: str
    details: str
    suggested_action: str | None
    steps: list[str] | None
    step: int | None
    expectation: str | None
    state: Literal["pending", "done", "cancelled", "timeout", "failed"]
    created_at: datetime
    deadline: datetime
    resolved_at: datetime | None
    resolved_via: str | None
    observed: str | None


class UserActionResponded(BaseModel):
    """`{"status": "done", "user_action_id", "verified"}`, or the outcome's code
    (HANDOFF_CANCELLED, HANDOFF_TIMEOUT, HANDOFF_FAILED) as a tool result: `{"error", "details"}`;
    `already` when the answer came after the end."""

    status: Literal["done"] | None = None
    user_action_id: str | None = None
    verified: bool | None = None
    error: str | None = None
    details: dict[str, Any] | None = None
    already: bool | None = None


# --------------------------------------------------------------------------- people

class IdentityAnswer(BaseModel):
    kind: str
    value: str
    verified_via: str | None


class HoldingAnswer(BaseModel):
    handoff_session_id: str
    code: str | None


class ContactAnswer(BaseModel):
    kind: str
    channel_id: int | None
    position: int
    address: str | None = None


class PersonAnswer(BaseModel):
    """A person of the directory (never a credential: only whether a password or TOTP is set).
    Contact addresses are shown to admins only."""

    id: str
    name: str
    email: str | None
    role: str
    timezone: str | None
    source: str
    state: str
    disabled_at: datetime | None
    password_set: bool
    totp_enabled: bool
    identities: list[IdentityAnswer]
    last_sign_in_at: datetime | None
    holding: list[HoldingAnswer]
    open_handoffs: int
    max_concurrent: int | None
    presence: str | None
    away_since: datetime | None
    away_until: datetime | None
    away_note: str | None
    working_hours: Any
    created_at: datetime | None
    updated_at: datetime | None
    contact: list[ContactAnswer]


class PeopleList(BaseModel):
    """Everyone in the directory, by name."""

    people: list[PersonAnswer]

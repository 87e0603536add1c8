"""Database tables.

Times are timezone-aware UTC everywhere (sqlmodel's UTC type refuses naive datetimes).
State changes that can race — releasing a handoff, claiming an outbox item, consuming an
inbound event — are single conditional UPDATEs on these rows, never read-then-write in
Python, so they stay correct with several server instances on one PostgreSQL database.
"""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Index, Text, UniqueConstraint, text
from sqlmodel import Field, SQLModel

from channels.base import short_code_of

# The words stored in `state`, `role`, `release_reason` and `outcome` are the StrEnums of
# bot/store/vocabulary.py; the columns stay plain strings, and a member compares equal to its value.


def new_id(prefix: str) -> str:
    """Random, URL-safe, unguessable ids: they appear in links and API paths."""
    return f"{prefix}_{secrets.token_urlsafe(12)}"


class Conversation(SQLModel, table=True):
    __tablename__ = "conversations"
    __table_args__ = (
        # One conversation per chat on a front, enforced where two instances could both
        # create one for a subscriber's first message.
        Index(
            "uq_conversations_front_chat", "front", "subscriber_external_id", unique=True,
            sqlite_where=text("front IS NOT NULL AND subscriber_external_id IS NOT NULL"),
            postgresql_where=text("front IS NOT NULL AND subscriber_external_id IS NOT NULL"),
        ),
        # Containment (bot/domain/reports.py): the range's conversations, read from the index alone
        Index("ix_conversations_report", "created_at", "serves_handoff_session_id", "first_handoff_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    subscriber_name: str | None = Field(default=None, max_length=200)
    subscriber_email: str | None = Field(default=None, max_length=320)
    subscriber_external_id: str | None = Field(default=None, max_length=200, index=True)
    # The front the subscriber talks through (config `fronts[].name`: "web" or a provider front's);
    # on a provider front `subscriber_external_id` is their chat there. None: the HTTP API.
    front: str | None = Field(default=None, max_length=40)
    # Set when this conversation is a sibling agent serving someone else's handoff: that
    # agent may release exactly this session and nothing else.
    serves_handoff_session_id: str | None = Field(default=None, max_length=40, index=True)
    # Run as a background task: user actions are announced to the owner's orchestrator
    # (USER_ACTION_REQUESTED) instead of a person watching the chat.
    background: bool = False
    created_at: datetime
    last_message_at: datetime
    # When its first handoff was asked for (None: the bot handled it alone so far), so the
    # reports count containment from the conversations' index alone.
    first_handoff_at: datetime | None = None


class Message(SQLModel, table=True):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_conversation_id_id", "conversation_id", "id"),
        # A handoff's messages of one role: what the subscriber wrote while it was dispatching
        Index("ix_messages_handoff_role_created_at", "handoff_session_id", "role", "created_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", max_length=40)
    role: str = Field(max_length=16)
    text: str = Field(sa_type=Text)
    author: str | None = Field(default=None, max_length=200)
    person_id: str | None = Field(default=None, max_length=40)  # a person's reply: who (the author is their name)
    handoff_session_id: str | None = Field(default=None, max_length=40)
    created_at: datetime


class HandoffSession(SQLModel, table=True):
    __tablename__ = "handoff_sessions"
    __table_args__ = (
        # The database, not Python, enforces one open handoff per conversation, so two
        # concurrent handoff_request calls cannot both start one.
        Index(
            "uq_handoff_sessions_one_open_per_conversation",
            "conversation_id",
            unique=True,
            sqlite_where=text("state IN ('dispatching', 'active')"),
            postgresql_where=text("state IN ('dispatching', 'active')"),
        ),
        Index("ix_handoff_sessions_state_idle_deadline", "state", "idle_deadline"),
        Index("ix_handoff_sessions_state_created_at", "state", "created_at"),
        # Recipient replies are routed by thread; with `state` in the index SQLite picks it
        # over the state index even without statistics (measured: 330 ms → 2 ms at 100k).
        Index("ix_handoff_sessions_channel_thread_state", "channel_id", "thread_key", "state"),
        Index("ix_handoff_sessions_state_escalate_at", "state", "escalate_at"),
        # A person's workload: the open handoffs they hold (assignment's capacity check)
        Index("ix_handoff_sessions_claimed_person_state", "claimed_person_id", "state"),
        # A report's range (bot/domain/reports.py): every column a summary reads, so SQLite
        # answers from the index without reading a row, through one channel or route too.
        Index(
            "ix_handoff_sessions_report", "created_at", "channel_id", "route_id", "state", "release_reason", "outcome",
            "time_to_person_seconds", "duration_seconds", "channel_label",
        ),
        # The few released with required fields missing (JSON is no key PostgreSQL can index)
        Index(
            "ix_handoff_sessions_missing_required", "created_at", "channel_id", "route_id",
            sqlite_where=text("missing_required != '[]'"), postgresql_where=text("missing_required::text <> '[]'"),
        ),
        # A percentile's value: the rows of the one fine bucket its rank falls in, in order,
        # read from the index alone (the rollups located the bucket)
        Index("ix_handoff_sessions_time_to_person", "time_to_person_seconds", "created_at", "channel_id", "route_id"),
        Index("ix_handoff_sessions_duration", "duration_seconds", "created_at", "channel_id", "route_id"),
        Index("ix_handoff_sessions_handled_by", "handled_by", "time_to_person_seconds", "created_at", "channel_id", "route_id"),
    )

    id: str = Field(primary_key=True, max_length=40)
    conversation_id: str = Field(foreign_key="conversations.id", index=True, max_length=40)
    channel_id: int
    channel_kind: str = Field(max_length=40)
    channel_label: str = Field(max_length=80)
    state: str = Field(max_length=16)
    urgency: str = Field(max_length=8)
    summary: str = Field(sa_type=Text)
    expected_action: str = Field(sa_type=Text)
    contact_back_email: str | None = Field(default=None, max_length=320)
    include_transcript: bool = True
    extra_context: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    expected_return: list[dict[str, Any]] = Field(default_factory=list, sa_type=JSON)
    estimated_response: str | None = Field(default=None, max_length=200)
    channel_message_id: str | None = Field(default=None, max_length=200)
    thread_key: str | None = Field(default=None, max_length=200)
    thread: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    failure: str | None = Field(default=None, sa_type=Text)
    created_at: datetime
    activated_at: datetime | None = None
    last_activity_at: datetime | None = None
    idle_deadline: datetime | None = None
    released_at: datetime | None = None
    release_reason: str | None = Field(default=None, max_length=20)
    released_by: str | None = Field(default=None, max_length=200)
    outcome: str | None = Field(default=None, max_length=20)
    note: str | None = Field(default=None, sa_type=Text)
    returned: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    missing_required: list[str] = Field(default_factory=list, sa_type=JSON)
    form_link_id: str | None = Field(default=None, max_length=40)  # the current return-form link
    # On a channel without threads, where a recipient's plain reply goes: the handoff they
    # addressed last (`#CODE`) or the newest one, whichever happened later.
    focused_at: datetime | None = None
    # On a route (config `routes:`): which route, the step of its ladder notified last, and
    # when the next step runs if nobody claims it first (None once claimed or past the last
    # step). While a ladder deadline runs the idle timer does not: it starts at the claim.
    # The handoff's channel and thread above are then its first notified recipient's, and
    # the claimer's once someone has claimed it.
    route_id: int | None = None
    step: int | None = None
    # Within a step that offers one person at a time (a team's round robin or least busy, an
    # on-call schedule's layers): which offer of the step is out now, 0 for the first.
    turn: int | None = None
    # When the current offer (the step, or its turn when one person at a time) ends with
    # nobody claiming; `escalate_at` is the ladder's next wake-up: this, or sooner when a
    # person's next contact method is due (`HandoffRecipient.next_contact_at`).
    offer_until: datetime | None = None
    escalate_at: datetime | None = None
    claimed_at: datetime | None = None
    claimed_by: str | None = Field(default=None, max_length=200)  # the person's name as their channel shows it
    claimed_via: str | None = Field(default=None, max_length=40)  # channel:<id>, form, inbox, agent
    claimed_person_id: str | None = Field(default=None, max_length=40)  # the person who claimed, when the desk knows them
    released_person_id: str | None = Field(default=None, max_length=40)  # the person who released, when a person did
    claimed_recipient_id: int | None = None  # the `HandoffRecipient` whose thread took it
    # Who handled it, for the reports: the claim's person on a route, else the first human
    # reply's straight to a channel, else a person's release's; '' when that act carried no
    # person of the directory, None while nobody has acted (or nobody ever did).
    handled_by: str | None = Field(default=None, max_length=40)
    # Straight to a channel (no route): when a person first replied, the moment they were reached.
    first_human_reply_at: datetime | None = None
    # The reports' facts, written once where they happen: from the activation to a person
    # (the claim on a route, the first human reply straight to a channel), and from the
    # activation to the release. None while it has not happened (or never will).
    time_to_person_seconds: float | None = None
    duration_seconds: float | None = None

    @property
    def routed(self) -> bool:
        return self.route_id is not None

    @property
    def short_code(self) -> str:
        """A short, speakable reference for people ("handoff A7F3")."""
        return short_code_of(self.id)


class HandoffRecipient(SQLModel, table=True):
    """One place a route's handoff was offered: a channel's room, or one person directly on
    one of their contact methods (`person_id` and `address` set). Its dispatch, where it
    landed (the thread replies come back from), whether it was delivered, and how the offer
    ended. A handoff straight to a channel has none: its one thread is on the session row."""

    __tablename__ = "handoff_recipients"
    __table_args__ = (
        # A room or a person's contact method is sent one brief per handoff, however many
        # steps name it: "c:<channel id>" for a room, "p:<person id>:<channel id>" for a person.
        UniqueConstraint("handoff_session_id", "lane_key", name="uq_handoff_recipients_lane"),
        Index("ix_handoff_recipients_channel_thread", "channel_id", "thread_key"),
        Index("ix_handoff_recipients_outbox_item", "outbox_item_id"),
        # Assignment: who was offered what last (round robin), a person's offers (reports)
        Index("ix_handoff_recipients_person_created", "person_id", "created_at"),
        Index("ix_handoff_recipients_next_contact", "next_contact_at"),
    )

    id: int | None = Field(default=None, primary_key=True)
    handoff_session_id: str = Field(foreign_key="handoff_sessions.id", index=True, max_length=40)
    lane_key: str = Field(max_length=100)
    channel_id: int
    channel_kind: str = Field(max_length=40)
    channel_label: str = Field(max_length=80)
    step: int
    turn: int = 0  # the offer of the step it belongs to (one person at a time: 0, 1, 2 …)
    # To a person directly: who, through which target of the step (person:olga, team:support,
    # oncall:nights), at which address (their Slack user id, e-mail …), and which of their
    # contact methods it is (0 = their first). None for a channel's room.
    person_id: str | None = Field(default=None, foreign_key="people.id", max_length=40)
    target: str | None = Field(default=None, max_length=100)
    address: str | None = Field(default=None, max_length=320)
    contact_index: int | None = None
    # When the person's next contact method is tried if nobody has claimed (a step's
    # `contact_after`); None: only when this one fails, or already tried.
    next_contact_at: datetime | None = None
    state: str = Field(max_length=12)  # a RecipientState (bot/store/vocabulary.py)
    # How the offer ended (an OfferResult): claimed, taken (by someone else), missed (its
    # turn passed), released (the handoff ended before anyone claimed); None while open.
    result: str | None = Field(default=None, max_length=12)
    outbox_item_id: int | None = None  # the dispatch carrying the brief to this channel
    channel_message_id: str | None = Field(default=None, max_length=200)
    thread_key: str | None = Field(default=None, max_length=200)
    thread: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    error: str | None = Field(default=None, sa_type=Text)
    created_at: datetime
    notified_at: datetime | None = None
    failed_at: datetime | None = None
    ended_at: datetime | None = None


class FormLink(SQLModel, table=True):
    """A return-form link. The signed token carries only this id; whether it may still be
    used is decided here, by conditional updates (forms/links.py)."""

    __tablename__ = "form_links"

    id: str = Field(primary_key=True, max_length=40)
    handoff_session_id: str = Field(foreign_key="handoff_sessions.id", index=True, max_length=40)
    created_at: datetime
    expires_at: datetime
    consumed_at: datetime | None = None
    consumed_by: str | None = Field(default=None, max_length=200)
    superseded_at: datetime | None = None


class HandoffEvent(SQLModel, table=True):
    """The audit trail: one row per thing that happened, including the no-ops."""

    __tablename__ = "handoff_events"

    id: int | None = Field(default=None, primary_key=True)
    handoff_session_id: str | None = Field(default=None, index=True, max_length=40)
    conversation_id: str | None = Field(default=None, index=True, max_length=40)
    kind: str = Field(max_length=40)
    actor: str = Field(max_length=200)
    person_id: str | None = Field(default=None, max_length=40)  # the person who acted, when one did
    detail: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    created_at: datetime


class OutboxItem(SQLModel, table=True):
    """A durable outbound send. Stored in the same transaction as the thing it reports,
    delivered after commit, retried by the outbox worker until sent or given up."""

    __tablename__ = "outbox"
    __table_args__ = (
        Index("ix_outbox_state_not_before", "state", "not_before"),
        # "is an earlier item of this stream still pending?" probes only unsent rows
        Index("ix_outbox_session_state_id", "handoff_session_id", "state", "id"),
    )

    id: int | None = Field(default=None, primary_key=True)
    channel_id: int  # 0 (bot/delivery/callbacks.py CALLBACKS): a callback to the owner's endpoints
    # The message's `stream` (channels/base.py), which orders the items: a handoff id, a
    # conversation id (messages to a subscriber's chat), an approval id, or a callback's
    # (`<conversation>:orchestrator`, `<approval>:run`). The column keeps its first name;
    # the audit trail takes its ids from the message, never from here.
    handoff_session_id: str | None = Field(default=None, max_length=40)
    purpose: str = Field(max_length=16)  # the message's `purpose`: dispatch | relay | notice | subscriber | callback
    message_id: int | None = None  # the conversation message a relay carries
    # Unique across databases, so two desks posting into one chat never mistake each other's
    # messages when reconciling.
    delivery_key: str = Field(default_factory=lambda: new_id("hd"), max_length=40)
    # An attempt may have reached the provider: the next one asks `find_sent` first.
    uncertain: bool = False
    payload: dict[str, Any] = Field(sa_type=JSON)
    state: str = Field(default="pending", max_length=16)  # an OutboxState (bot/store/vocabulary.py)
    attempts: int = 0
    not_before: datetime
    lease_until: datetime | None = None  # a backstop: a claim ends first when its owner stops beating
    # The instance (`DeskInstance.id`) whose claim this is, while the item is being sent
    claimed_by: str | None = Field(default=None, max_length=40)
    last_error: str | None = Field(default=None, sa_type=Text)
    receipt: dict[str, Any] | None = Field(default=None, sa_type=JSON)
    created_at: datetime
    sent_at: datetime | None = None


class Approval(SQLModel, table=True):
    """One gated invocation: the exact arguments a person is asked about, their decision
    and the receipt (who, when, through what), and what running the action returned."""

    __tablename__ = "approvals"
    __table_args__ = (
        Index("ix_approvals_state_deadline", "state", "deadline"),
        Index("ix_approvals_state_escalate_at", "state", "escalate_at"),
    )

    id: str = Field(primary_key=True, max_length=40)
    conversation_id: str = Field(foreign_key="conversations.id", index=True, max_length=40)
    action_id: str = Field(max_length=64)
    description: str = Field(sa_type=Text)
    risk: str = Field(max_length=8)
    policy: str = Field(max_length=12)
    arguments: dict[str, Any] = Field(default_factory=dict, sa_type=JSON)
    arguments_hash: str = Field(max_length=64)  # sha256 of the canonical JSON: the decision is bound to it
    # pending → approved | denied | expired, or straight to unrouted (no approval channel)
    # or cleared (its prompt cannot be answered any more); only `approved` ever runs.
    state: str = Field(max_length=12)
    channel_ids: list[int] = Field(default_factory=list, sa_type=JSON)  # where the prompt went
    created_at: datetime
    deadline: datetime
    decided_at: datetime | None = None
    decided_by: str | None = Field(default=None, max_length=200)
    decided_via: str | None = Field(default=None, max_length=40)
    reason: str | None = Field(default=None, sa_type=Text)
    always_allow: bool = False
    run_state: str | None = Field(default=None, max_length=12)  # running (inline or in the outbox) | succeeded | failed
    result: dict[str, Any] | None = Field(default=None, sa_type=JSON)  # what the action returned
    error: str | None = Field(default=None, sa_type=Text)
    # The two-person rule: how many different people must approve (1 or 2), and the verified
    # identity of the first approval while it waits for a second (the compare-and-set key).
    approvals_required: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    first_approver: str | None = Field(default=None, max_length=250)
    # Asked through a route: its id, the ladder step asked last, and when the next step is
    # asked if nobody has decided (None: no further step).
    route_id: int | None = None
    step: int | None = None
    escalate_at: datetime | None = None


class ApprovalGrant(SQLModel, table=True):
    """"Always allow" for one action shape (action id + argument keys) in one conversation."""

    __tablename__ = "approval_grants"
    __table_args__ = (UniqueConstraint("conversation_id", "action_id", "shape", name="uq_approval_grants_shape"),)

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", max_length=40)
    action_id: str = Field(max_length=64)
    shape: str = Field(max_length=1000)
    approval_id: str = Field(max_length=40)
    created_at: datetime


class ApprovalVote(SQLModel, table=True):
    """One person's decision on an approval that needs two: who (the verified identity, never
    a display name), what they are called, through what, and when. One row per person, so
    the same person approving twice counts once."""

    __tablename__ = "approval_votes"
    __table_args__ = (UniqueConstraint("approval_id", "voter", name="uq_approval_votes_voter"),)

    id: int | None = Field(default=None, primary_key=True)
    approval_id: str = Field(foreign_key="approvals.id", index=True, max_length=40)
    voter: str = Field(max_length=250)  # "person:<id>", "owner", or "<channel id>:<the provider's user id>"
    name: str = Field(max_length=200)
    via: str = Field(max_length=40)
    approve: bool
    at: datetime


class UserAction(SQLModel, table=True):
    """A step only the subscriber can do on their own device, and how it ended."""

    __tablename__ = "user_actions"
    __table_args__ = (
        Index("ix_user_actions_state_deadline", "state", "deadline"),
        # One pending user action per conversation, enforced where two instances (or an API
        # call and an agent turn) could both pass a check.
        Index(
            "uq_user_actions_one_pending_per_conversation", "conversation_id", unique=True,
            sqlite_where=text("state = 'pending'"), postgresql_where=text("state = 'pending'"),
        ),
    )

    id: str = Field(primary_key=True, max_length=40)
    conversation_id: str = Field(foreign_key="conversations.id", index=True, max_length=40)
    reason: str = Field(max_length=40)
    details: str = Field(sa_type=Text)
    suggested_action: str | None = Field(default=None, sa_type=Text)
    steps: list[str] = Field(default_factory=list, sa_type=JSON)
    step: int = 0  # the guided step shown now
    expectation: str | None = Field(default=None, max_length=64)
    background: bool = False
    # pending → done | cancelled | timeout | failed (the expectation was not observed)
    state: str = Field(max_length=12)
    created_at: datetime
    deadline: datetime
    resolved_at: datetime | None = None
    resolved_via: str | None = Field(default=None, max_length=40)
    observed: str | None = Field(default=None, sa_type=Text)


class InboundEvent(SQLModel, table=True):
    """A recipient message as received, deduplicated on the provider's event id."""

    __tablename__ = "inbound_events"
    __table_args__ = (
        UniqueConstraint("channel_id", "dedupe_key", name="uq_inbound_events_channel_dedupe"),
        Index("ix_inbound_events_received_at", "received_at"),  # pruning (bot/delivery/retention.py)
        # the events still to work, and whose they are (taking over a dead instance's)
        Index("ix_inbound_events_state_owner", "state", "claimed_by"),
    )

    id: int | None = Field(default=None, primary_key=True)
    channel_id: int
    dedupe_key: str = Field(max_length=200)
    payload: dict[str, Any] = Field(sa_type=JSON)
    state: str = Field(default="pending", max_length=16)  # an InboundState (bot/store/vocabulary.py)
    result: str | None = Field(default=None, sa_type=Text)
    received_at: datetime
    processed_at: datetime | None = None
    # The instance (`DeskInstance.id`) that stored the event and works it; another takes it
    # over when this one stops beating
    claimed_by: str | None = Field(default=None, max_length=40)


class DeskInstance(SQLModel, table=True):
    """A running desk process, alive while it beats (bot/store/instances.py). Claims on
    outbox items and inbound events belong to an instance and end when its beat stops."""

    __tablename__ = "desk_instances"

    id: str = Field(primary_key=True, max_length=40)
    host: str = Field(max_length=255)
    pid: int
    started_at: datetime
    # Seconds since the epoch by the database's clock (never the instance's own): every
    # instance judges every other by one clock.
    beat_at: float


class Person(SQLModel, table=True):
    """A human of the desk: who claims, replies, releases and votes, by name (what subscribers
    see) and id (what the audit trail and the two-person rule count). Never deleted: a person
    who leaves is disabled, and their history keeps pointing at them."""

    __tablename__ = "people"

    id: str = Field(primary_key=True, max_length=40)
    name: str = Field(max_length=80)
    email: str = Field(max_length=320)
    email_key: str = Field(max_length=320, unique=True)  # the address lower-cased: how sign-ins find the person
    role: str = Field(max_length=12)  # a Role (bot/config/people.py)
    timezone: str = Field(default="UTC", max_length=64)
    source: str = Field(max_length=12)  # where the row came from: config | cli | inbox | sso
    password_hash: str | None = Field(default=None, max_length=200)  # argon2id, "$argon2id$…"
    totp_secret: str | None = Field(default=None, max_length=64)
    totp_confirmed_at: datetime | None = None  # the secret counts only once a code from it was typed
    totp_last_step: int | None = None  # the TOTP time step of the last accepted code: no code is accepted twice
    # How to reach them directly, in their order: channel kinds (slack, telegram, discord,
    # whatsapp, email), each at the identity they linked (e-mail: their address). None: every
    # linked identity in the order linked, then e-mail.
    contact_order: list[str] | None = Field(default=None, sa_type=JSON)
    working_hours: str | None = Field(default=None, max_length=40)  # a schedule under hours:; None: always
    max_concurrent: int | None = None  # open handoffs they hold at most; None: the step's limit
    # Away (set in the inbox or from chat): skipped by teams and on-call schedules until
    # they are back, or until `away_until` when they said.
    away_since: datetime | None = None
    away_until: datetime | None = None
    away_note: str | None = Field(default=None, max_length=200)
    disabled_at: datetime | None = None
    created_at: datetime
    updated_at: datetime


class PersonIdentity(SQLModel, table=True):
    """A provider's identity of a person: a Slack user id, a Telegram user id, a Discord user
    id, a WhatsApp number, an e-mail address, a single-sign-on subject. Each belongs to at most
    one person (the unique key), and was verified the way `verified_via` says."""

    __tablename__ = "person_identities"
    __table_args__ = (UniqueConstraint("kind", "value", name="uq_person_identity"),)

    id: int | None = Field(default=None, primary_key=True)
    person_id: str = Field(foreign_key="people.id", index=True, max_length=40)
    kind: str = Field(max_length=40)  # a channel kind, "email", or "sso"
    value: str = Field(max_length=320)  # the provider's id (e-mail lower-cased; "issuer subject" for sso)
    verified_via: str = Field(max_length=20)  # code | sso | email | cli
    created_at: datetime


class PersonSession(SQLModel, table=True):
    """A signed-in browser: only the hash of its random token is stored, so a copy of the
    table signs nobody in. Over when revoked (sign-out, disabling the person, "sign out
    everywhere"), idle past the configured time, or past its absolute expiry. `person_id` is
    None for the owner token's service session."""

    __tablename__ = "person_sessions"

    token_hash: str = Field(primary_key=True, max_length=64)
    person_id: str | None = Field(default=None, foreign_key="people.id", index=True, max_length=40)
    via: str = Field(max_length=16)  # password | sso | owner_token | open
    created_at: datetime
    last_seen_at: datetime
    expires_at: datetime = Field(index=True)
    revoked_at: datetime | None = None


class ApiToken(SQLModel, table=True):
    """A personal API token: a script acting as its person, with a role no higher than
    theirs. Shown once; only its hash is stored."""

    __tablename__ = "api_tokens"

    id: str = Field(primary_key=True, max_length=40)
    person_id: str = Field(foreign_key="people.id", index=True, max_length=40)
    name: str = Field(max_length=80)
    token_hash: str = Field(max_length=64, unique=True)
    role: str = Field(max_length=12)
    created_at: datetime
    last_used_at: datetime | None = None
    revoked_at: datetime | None = None


class LinkCode(SQLModel, table=True):
    """A one-time code a signed-in person sends from a channel to link that channel's identity
    of theirs: whoever can write it from the provider's account holds that account."""

    __tablename__ = "link_codes"

    code_hash: str = Field(primary_key=True, max_length=64)
    person_id: str = Field(foreign_key="people.id", index=True, max_length=40)
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None = None


class OnCallOverride(SQLModel, table=True):
    """A person covering an on-call schedule for a while ("Olga covers Ben 24 Dec 18:00 - 25
    Dec 08:00"), made in the inbox (the YAML's overrides are read from the file). Removing
    one keeps the row (`removed_at`), so the audit trail and the reports still explain who
    was on call."""

    __tablename__ = "oncall_overrides"
    __table_args__ = (Index("ix_oncall_overrides_schedule_ends", "schedule_id", "ends_at"),)

    id: int | None = Field(default=None, primary_key=True)
    schedule_id: str = Field(max_length=40)
    person_id: str = Field(foreign_key="people.id", max_length=40)
    covers_person_id: str | None = Field(default=None, max_length=40)  # None: whoever the first layer has
    starts_at: datetime
    ends_at: datetime
    note: str | None = Field(default=None, max_length=200)
    created_by: str = Field(max_length=200)
    created_at: datetime
    removed_at: datetime | None = None


class RevokedSession(SQLModel, table=True):
    """An owner-inbox session signed out before its cookie expired: its cookie is refused from
    then on, even replayed. Kept until the cookie would have expired anyway, then pruned
    (bot/delivery/retention.py)."""

    __tablename__ = "revoked_sessions"

    session_id: str = Field(primary_key=True, max_length=40)
    revoked_at: datetime
    expires_at: datetime = Field(index=True)  # the cookie's own expiry: pruning


class IdempotencyKey(SQLModel, table=True):
    """A request sent with an `Idempotency-Key` header, kept so that a retry of it is answered
    with the first answer instead of being run again (bot/domain/idempotency.py)."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (
        UniqueConstraint("scope", "key", name="uq_idempotency_keys_scope_key"),
        Index("ix_idempotency_keys_created_at", "created_at"),  # pruning (bot/delivery/retention.py)
    )

    id: int | None = Field(default=None, primary_key=True)
    # The route template and method, and which API key called it: two clients' keys never meet.
    scope: str = Field(max_length=300)
    key: str = Field(max_length=255)
    fingerprint: str = Field(max_length=64)  # sha256 of the method, path and raw body
    state: str = Field(max_length=12)  # an IdempotencyState (bot/store/vocabulary.py)
    owner: str = Field(max_length=40)  # the instance (`DeskInstance.id`) running it; empty once nobody will answer it
    applied: dict[str, Any] | None = Field(default=None, sa_type=JSON)  # the ids the change named, as its mark recorded
    status: int | None = None
    response: str | None = Field(default=None, sa_type=Text)  # the JSON answer, as sent
    created_at: datetime


class HandoffSatisfaction(SQLModel, table=True):
    """The satisfaction question asked after a handoff ended, and the subscriber's answer.
    One row per handoff: asked once, answered once (a compare-and-set on `answer IS NULL`).
    The answer never becomes a message of the conversation, so the agent never reads it."""

    __tablename__ = "handoff_satisfaction"

    handoff_session_id: str = Field(primary_key=True, foreign_key="handoff_sessions.id", max_length=40)
    conversation_id: str = Field(foreign_key="conversations.id", index=True, max_length=40)
    asked_at: datetime = Field(index=True)  # a report's range: asked after the handoffs it chose
    asked_on: str = Field(max_length=40)  # the front: "web", or a provider front's name
    in_words: bool  # the front has no buttons: "1" / "2" answers
    question_message_id: int  # a subscriber message after it closes the question
    answer: str | None = Field(default=None, max_length=3)  # "yes" / "no"
    comment: str | None = Field(default=None, max_length=500)
    answered_at: datetime | None = None
    answered_by: str | None = Field(default=None, max_length=200)
    answered_via: str | None = Field(default=None, max_length=40)


# The reports' rollups (bot/store/rollups.py): counts kept by triggers in the transaction
# that writes a fact, keyed by the UTC hour or day since the epoch (integers), channel and
# route (0: none), and a shard (on PostgreSQL, concurrent writers of one key land on
# different rows; readers sum them). Read by bot/domain/reports.py; `handoff reports
# rebuild` counts them afresh.


class ReportHour(SQLModel, table=True):
    """Handoffs created in one UTC hour through one channel and route."""

    __tablename__ = "report_hours"

    hour: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    channel_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    route: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # bot/store/rollups.py SHARDS
    handoffs: int
    channel_label: str = Field(max_length=80)  # the greatest label counted here (a channel renamed within the hour)


class ReportEnding(SQLModel, table=True):
    """Handoffs created on one UTC day through one channel and route that ended (or stand)
    one way: `ending` the release reason, else the state; `outcome` '' for none."""

    __tablename__ = "report_endings"

    day: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    channel_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    route: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    ending: str = Field(primary_key=True, max_length=20)
    outcome: str = Field(primary_key=True, max_length=20)
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # bot/store/rollups.py SHARDS
    handoffs: int
    missing_required: int  # of them, released with required return fields missing


class ReportMeasure(SQLModel, table=True):
    """Handoffs created on one UTC day through one channel and route whose time to a person
    (measure 0) or duration (1) falls in one fine bucket (bot/store/rollups.py FINE_EDGES)."""

    __tablename__ = "report_measures"

    measure: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # first: a summary reads one
    day: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    channel_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    route: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    fine: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # bot/store/rollups.py SHARDS
    handoffs: int


class _HandledTimes(SQLModel):
    """Handoffs created on one UTC day that one person handled (`person`: their id, '' for an
    act linked to nobody) whose time to a person falls in one fine bucket (-1: they have none)."""

    day: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    person: str = Field(primary_key=True, max_length=40)
    fine: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # bot/store/rollups.py SHARDS
    handoffs: int


class ReportPerson(_HandledTimes, table=True):
    """`_HandledTimes` through any channel or route."""

    __tablename__ = "report_people"


class ReportPersonThrough(_HandledTimes, table=True):
    """`_HandledTimes` per channel and route too (a summary filtered by one reads it)."""

    __tablename__ = "report_people_through"

    channel_id: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    route: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})


class ReportConversations(SQLModel, table=True):
    """Subscribers' conversations started on one UTC day, and how many of them had a handoff."""

    __tablename__ = "report_conversations"

    day: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})
    shard: int = Field(primary_key=True, sa_column_kwargs={"autoincrement": False})  # bot/store/rollups.py SHARDS
    conversations: int
    escalated: int

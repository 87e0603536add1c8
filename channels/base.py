"""The one interface every channel adapter implements, and the types that cross it.

A channel is how a recipient (a person or a sibling agent) is reached. The core never names a
provider: it builds an adapter from its config, calls `send()` with an `Outbound`, and gets a
`Receipt` back or a typed `ChannelError`. Adapters never retry, sleep or touch the database;
the core's outbox owns retries, ordering and the audit trail, so a flaky provider can never
corrupt a session or drop a message.

What a provider cannot do is a capability flag, not a method that raises. docs/architecture.md
("The channel port") walks through the types below and how to add a provider.
"""

from __future__ import annotations

import json
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from forms.fields import ReturnField

# --------------------------------------------------------------------------- config

# Subscribers are told about a channel by this name unless its config sets `public_name`:
# the channel's `label` is the owner's internal name ("Owner inbox"), not for subscribers.
DEFAULT_PUBLIC_NAME = "our team"
_HIDDEN = {"Cc", "Cf", "Zl", "Zp"}  # control, format (bidi, zero-width) and line/paragraph separators


class ChannelConfig(BaseModel):
    """Keys every channel accepts. An adapter subclasses this with its own keys.

    `extra="forbid"` so a typo (`bot_tokn`) is an error with its key path, not a silently
    ignored setting; secrets are `SecretStr` in subclasses so they never reach a log.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: int = Field(ge=1, description="Stable id the agent uses as channel_id.")
    kind: str
    label: str = Field(
        min_length=1, max_length=80, description="Internal name, shown to the model and to the people who take handoffs.",
    )
    estimated_response: str = Field(
        default="as soon as someone is available", min_length=1, max_length=200,
        description="Told to the model and the subscriber, e.g. 'within 1 business day'.",
    )
    public_name: str = Field(
        default=DEFAULT_PUBLIC_NAME, min_length=1, max_length=80,
        description="Who subscribers are told they are waiting for, mid-sentence: \"I've asked our team to join\".",
    )
    enabled: bool = True

    @field_validator("public_name")
    @classmethod
    def _readable_in_a_sentence(cls, value: str) -> str:
        """The name is set into sentences the subscriber reads, so it must be one plain line;
        it is refused rather than trimmed, so what the owner wrote is what subscribers see."""
        if value != value.strip():
            raise ValueError("must not start or end with spaces")
        if any(unicodedata.category(c) in _HIDDEN for c in value):
            raise ValueError("must be one line of plain text (no line breaks or control characters)")
        return value


# --------------------------------------------------------------------------- what crosses the interface


@dataclass(frozen=True)
class Capabilities:
    """What the provider can do; the core and templates adapt to it."""

    buttons: bool = False  # can show a link / release button
    threads: bool = False  # each handoff gets its own thread, so replies map to it unambiguously
    inbound: bool = False  # recipients can answer through the channel itself
    webhook: bool = False  # receives provider calls on POST /webhooks/{channel_id}
    reconcile: bool = False  # can tell whether a send that timed out went through (find_sent)
    front: bool = False  # can also serve subscribers (a front): see `ChannelContext.subscribers`


class TranscriptLine(BaseModel):
    role: str
    author: str | None = None
    text: str
    at: str


class HandoffBrief(BaseModel):
    """Everything a recipient needs to act, in structured form, so each adapter can render
    it in its own markup (and escape user-derived text its own way)."""

    handoff_session_id: str
    short_code: str
    conversation_id: str
    subscriber_name: str | None = None
    subscriber_email: str | None = None
    summary: str
    expected_action: str
    urgency: Literal["low", "normal", "high"] = "normal"
    contact_back_email: str | None = None
    extra_context: dict[str, str] = Field(default_factory=dict)
    expected_return: list[ReturnField] = Field(default_factory=list)
    transcript: list[TranscriptLine] = Field(default_factory=list)
    form_url: str | None = None
    idle_timeout_seconds: float = 1800


def pretty_arguments(arguments: dict[str, Any], limit: int | None = None, *, also_escape: str = "") -> tuple[str, int]:
    """Approval arguments as pretty JSON for people, at most `limit` characters (cut at a line
    break where possible), and how many characters were left out. Invisible and control
    characters inside strings (bidi overrides, zero-width spaces), and any of `also_escape`
    (a backtick that could close a code block), are shown as their JSON escapes: still the
    same JSON, so what people read is exactly what will run."""
    text = json.dumps(arguments, indent=2, ensure_ascii=False)
    text = "".join(
        c if c == "\n" or (c not in also_escape and unicodedata.category(c) not in _HIDDEN) else f"\\u{ord(c):04x}"
        for c in text
    )
    if limit is None or len(text) <= limit:
        return text, 0
    cut = text.rfind("\n", 0, limit)
    cut = cut if cut > limit // 2 else limit
    return text[:cut], len(text) - cut


class ApprovalBrief(BaseModel):
    """An approval prompt: the exact invocation a person is asked to allow. Adapters with
    buttons offer Approve / Deny (and "always allow" when `allow_always`), and report a
    press as an InboundMessage with `decision`; every adapter can fall back to the
    `decision_url` page, which is in the text too."""

    approval_id: str
    action_id: str
    description: str
    risk: Literal["low", "medium", "high"]
    arguments: dict[str, Any]
    conversation_id: str
    subscriber_name: str | None = None
    decision_url: str
    allow_always: bool
    expires_at: str


class Decision(BaseModel):
    """A person's answer to an approval prompt, pressed in the channel itself."""

    approval_id: str
    approve: bool
    always_allow: bool = False
    reason: str | None = Field(default=None, max_length=2000)


class UserActionPrompt(BaseModel):
    """A step only the subscriber can do, asked in their chat: an adapter with buttons offers
    Done / Cancel (and Previous / Next step when there are several steps) and reports a press
    as an InboundMessage with `answer`; the text already names the "done" / "cancel" keywords."""

    user_action_id: str
    steps: int = 0
    step: int = 0


class UserActionAnswer(BaseModel):
    """A subscriber's button press on a UserActionPrompt."""

    user_action_id: str
    move: Literal["done", "cancelled", "next", "previous"]


class Outbound(BaseModel):
    """One message to deliver. `text` is always a complete plain-text rendering; `brief`
    carries the structure for richer markup. `thread` is the receipt data of the dispatch,
    so follow-ups land in the handoff's own thread.

    Purpose "subscriber" is a message to a subscriber through a front: `thread["chat"]` is
    the subscriber's chat (the `thread_key` their messages came with), `author` is set for a
    person's reply (None for the assistant), and `handoff_session_id` holds the conversation
    id, which is what orders the messages of one chat."""

    purpose: Literal["dispatch", "relay", "notice", "subscriber"]
    handoff_session_id: str
    text: str
    subject: str | None = None
    author: str | None = None
    # For relays and notices: the words alone, without the "Author: " label of `text`, so an
    # adapter can label (and escape) them in its own markup.
    body: str | None = None
    brief: HandoffBrief | None = None
    thread: dict[str, Any] = Field(default_factory=dict)
    # Stable for every attempt at this one message (set by the outbox): attach it where the
    # provider keeps message metadata, and `find_sent` can recognise an earlier attempt.
    delivery_key: str | None = None
    # What a notice announces, so an adapter can also update the dispatch (e.g. remove its
    # buttons once the handoff is released). "routing" answers a recipient on a shared line
    # (no threads): which handoff their message went to, or the list of active ones.
    notice: Literal["released", "form_link", "routing", "approval", "approval_closed"] | None = None
    # For approval notices: the prompt (notice "approval") or how it ended ("approval_closed",
    # so an adapter can remove the buttons). Then `handoff_session_id` is the approval id.
    approval: ApprovalBrief | None = None
    # For subscriber messages that ask for a user action: offer its buttons.
    user_action: UserActionPrompt | None = None

    @property
    def short_code(self) -> str:
        """The handoff's short code ("A7F3"): on a channel without threads it is how people
        tell several handoffs apart, so put it in every message."""
        return short_code_of(self.handoff_session_id)


def short_code_of(handoff_session_id: str) -> str:
    """A short, speakable reference for people ("handoff A7F3"), derived from the id: letters
    and digits only, so it is easy to type on a phone and never turns into chat markup."""
    return "".join(c for c in handoff_session_id.split("_", 1)[-1] if c.isalnum())[:4].upper()


class Receipt(BaseModel):
    """What the provider said about a delivered message.

    `thread_key` is the string under which replies to this handoff will come back
    (e.g. a thread timestamp); the core indexes sessions by it.
    """

    message_id: str | None = None
    thread_key: str | None = None
    thread: dict[str, Any] = Field(default_factory=dict)


class DeliveryFailure(BaseModel):
    """The provider reports, after it accepted a message, that it never arrived (a status
    callback such as WhatsApp's 63016): `message_id` is the Receipt's message_id it had."""

    message_id: str
    error: str
    hint: str | None = None


class InboundMessage(BaseModel):
    """A message from a recipient or, through a front, from a subscriber, as the adapter
    understood it.

    `dedupe_key` is the provider's id for the event (update_id, event_id, MessageSid …):
    the core drops a redelivery carrying a key it has seen. From a recipient, `thread_key`
    matches the receipt's thread_key of the handoff it belongs to; from a subscriber, it is
    their chat (a private chat id, a phone number): one chat is one conversation, and
    messages to the subscriber come back with it in `Outbound.thread["chat"]`.
    """

    thread_key: str
    text: str
    author: str | None = None  # from a subscriber: their profile name
    dedupe_key: str | None = None
    sender: Literal["recipient", "subscriber"] = "recipient"
    # A press of an approval button: the core decides the approval instead of relaying text.
    decision: Decision | None = None
    # A subscriber opened the chat (e.g. Telegram's /start): the core greets them.
    opened: bool = False
    # A subscriber pressed a user-action button.
    answer: UserActionAnswer | None = None
    # Not a message: a delivery reported failed after it was accepted (thread_key and text empty).
    failed_delivery: DeliveryFailure | None = None


# --------------------------------------------------------------------------- errors


class ChannelError(Exception):
    """Base of all delivery failures; `hint` is written for the person fixing it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint or message


class TransientChannelError(ChannelError):
    """Worth retrying: timeouts, 429, 5xx, SMTP 4xx. `retry_after` is the provider's wish."""

    def __init__(self, message: str, *, retry_after: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class UncertainDeliveryError(TransientChannelError):
    """The request may have reached the provider (e.g. a timeout after sending). Before a
    retry the core asks `find_sent` when the channel can reconcile, instead of sending twice."""


class PermanentChannelError(ChannelError):
    """Retrying will not help: bad recipient, rejected content, SMTP 5xx."""


class ChannelAuthError(PermanentChannelError):
    """The credentials were refused; an operator has to fix the config."""


# --------------------------------------------------------------------------- webhooks


@dataclass(frozen=True)
class WebhookRequest:
    """A provider call, with the raw body kept intact for signature checks."""

    body: bytes
    headers: Mapping[str, str]
    query: Mapping[str, str]
    url: str


@dataclass
class WebhookReply:
    """What to answer the provider, plus the messages found in the call."""

    status: int = 200
    body: bytes = b""
    content_type: str = "text/plain"
    messages: list[InboundMessage] = field(default_factory=list)


# --------------------------------------------------------------------------- the adapter


InboundSink = Callable[[InboundMessage], Awaitable[None]]


def _nobody_listens(error: ChannelError) -> None:
    """The `lost` of an adapter started outside a desk (its tests)."""


@dataclass(frozen=True)
class ChannelContext:
    """What the core hands an adapter on start: where it is reachable, where to put the
    recipient messages it receives (pollers, gateways), and the template renderer."""

    public_url: str
    deliver_inbound: InboundSink
    render: Callable[..., str]
    # A key for the channel's own MACs (e.g. reply tokens in addresses), derived from the
    # desk's secret_key and the channel id, so no adapter needs a secret of its own. Empty
    # only when an adapter is started outside a desk (its tests).
    secret: bytes = b""
    # Call when the channel stops working after start (a gateway that will not reconnect):
    # the desk takes it out of handoff_request, shows the hint at /healthz and, when the
    # error is transient, stops and starts the adapter again on its next sweep.
    lost: Callable[[ChannelError], None] = _nobody_listens
    # The adapter serves a front too (config `fronts:`): subscribers' own chats with the bot
    # (Telegram private chats, WhatsApp numbers that are not the staff's) are passed to
    # `deliver_inbound` with sender="subscriber" instead of being ignored.
    subscribers: bool = False


class ChannelAdapter(ABC):
    """Base class of every channel adapter. Subclasses set `kind`, `config_model` and
    `capabilities`, and implement `send`."""

    kind: ClassVar[str]
    config_model: ClassVar[type[ChannelConfig]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # The provider's keys when it serves only subscribers (a front without a staff chat): the
    # connection part of `config_model`. An adapter built from it is never offered to
    # handoff_request. None: this provider cannot be a front.
    front_model: ClassVar[type[ChannelConfig] | None] = None

    def __init__(self, config: ChannelConfig) -> None:
        self.config = config

    @property
    def id(self) -> int:
        return self.config.id

    @property
    def label(self) -> str:
        return self.config.label

    @classmethod
    def same_connection(cls, channel: ChannelConfig, front: ChannelConfig) -> bool:
        """Whether a front and a channel use one provider connection (one bot token, one
        sender number): then one adapter instance serves both roles, since a provider allows
        one poller or one webhook per connection."""
        return False

    async def start(self, ctx: ChannelContext) -> None:
        """Connect, register pollers; raise ChannelError when the channel cannot work."""

    @abstractmethod
    async def send(self, outbound: Outbound) -> Receipt:
        """Deliver one message once. Raise a ChannelError subclass on failure; never retry."""

    async def probe(self) -> str:
        """Check credentials against the provider; return a short description of who we are."""
        return "nothing to check"

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        """Whether an earlier attempt at `outbound` (same `delivery_key`) reached the
        provider; only called when `capabilities.reconcile`."""
        return None

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        """Verify and parse a provider call. Only called when `capabilities.webhook`."""
        return WebhookReply(status=404, body=b"this channel takes no webhooks")

    async def stop(self) -> None:
        """Release connections and tasks."""

"""The one interface every channel adapter implements, and the types that cross it.

A channel is how a recipient (a person or a sibling agent) is reached. The core never names a
provider: it builds an adapter from its config, calls `send()` with an `Outbound` (one class
per kind of message), and gets a `Receipt` back or a typed `ChannelError`; what an adapter
hands back is an `InboundMessage` (one class per kind of event). The base class decides which
kind a message is and calls the adapter's method for it: adapters only render and send. Adapters never retry, sleep or touch the database;
the core's outbox owns retries, ordering and the audit trail, so a flaky provider can never
corrupt a session or drop a message.

What a provider cannot do is a capability flag, not a method that raises. docs/architecture.md
("The channel port") walks through the types below and how to add a provider.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, ClassVar, Literal, final

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from channels.errors import ChannelAuthError as ChannelAuthError  # the port's errors, where adapters import them
from channels.errors import ChannelError as ChannelError
from channels.errors import PermanentChannelError as PermanentChannelError
from channels.errors import TransientChannelError as TransientChannelError
from channels.errors import UncertainDeliveryError as UncertainDeliveryError
from channels.text import TextLimit
from channels.webhooks import MalformedWebhook as MalformedWebhook  # where adapters import them
from channels.webhooks import WebhookRequest as WebhookRequest
from channels.webhooks import json_object as json_object
from forms.fields import ReturnField, preview_line

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
    hours: str | None = Field(
        default=None, description="The name of a schedule under the top-level hours: when the people behind it are there.",
    )

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
    approvals: bool = False  # can put an approval prompt before a person (`send_approval_prompt`)
    edits: bool = False  # can change a message it already sent in place (a "taken" notice edits the dispatch)
    # can send a brief to one person directly (`Dispatch.direct`: a Slack DM, a Telegram
    # private chat, a Discord DM, a mail to them, their WhatsApp number), and take their
    # replies and presses there like any thread's
    direct: bool = False


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
    # One sentence for a handoff that arrived outside the channel's office hours (what the
    # subscriber was told to expect); None within them or when the channel names no hours.
    outside_hours: str | None = None
    # Sent to several recipients at once (a route's step, config `routes:`): the first to
    # claim takes the handoff. An adapter with buttons adds a Claim button (`ClaimPress`);
    # without, a reply in the thread claims it, which the brief's text already says.
    claimable: bool = False

    @property
    def field_lines(self) -> list[str]:
        """One readable line per return field ("ETA [date, YYYY-MM-DD] (required)"), as every
        rendering of the brief lists them; an adapter escapes them for its markup."""
        return [preview_line(f) for f in self.expected_return]


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
    press as a `Decision`; every adapter can fall back to the
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
    # How many different people must approve before the action runs: 1, or 2 under the
    # two-person rule (one denial still denies). Prompts built for 2 say so.
    approvals_required: int = Field(default=1, ge=1, le=2)

    @property
    def two_people_line(self) -> str | None:
        """The line every provider's prompt adds when two people must approve, so a person
        does not take their own press for the decision; None for a one-person approval,
        whose prompt stays as it is. The wording lives here once; each adapter escapes it
        like any other field."""
        return TWO_PEOPLE_LINE if self.approvals_required == 2 else None


TWO_PEOPLE_LINE = "Needs two people: two different people must approve; one denial denies."


class UserActionPrompt(BaseModel):
    """A step only the subscriber can do, asked in their chat: an adapter with buttons offers
    Done / Cancel (and Previous / Next step when there are several steps) and reports a press
    as a `UserActionAnswer`; the text already names the "done" / "cancel" keywords."""

    user_action_id: str
    steps: int = 0
    step: int = 0


class SatisfactionPrompt(BaseModel):
    """The question asked after a handoff ended ("Did that solve it?"): an adapter with
    buttons offers 👍 / 👎 and reports a press as a `SatisfactionAnswer`; on a front without
    buttons the text itself says how to answer in words."""

    handoff_id: str


# --------------------------------------------------------------------------- what the core sends
#
# One class per kind of message, each with only its own fields. `kind` is the discriminator
# and is stored with the outbox row; `stream` is what orders the messages (the outbox sends
# the items of one stream in the order they were stored); `trail` names the ids the audit
# trail files a delivery under. `text` is always a complete plain-text rendering, so an
# adapter with nothing better to show can send it as it is.


class _Message(BaseModel):
    text: str
    # Stable for every attempt at this one message (set by the outbox): attach it where the
    # provider keeps message metadata, and `find_sent` can recognise an earlier attempt.
    delivery_key: str | None = None

    # The outbox's coarse category (its audit event and metric label): dispatch, relay,
    # notice, subscriber or callback.
    purpose: ClassVar[str]

    @property
    @abstractmethod
    def stream(self) -> str:
        """What orders this message: the outbox sends the items of one stream in order."""

    @abstractmethod
    def trail(self) -> dict[str, str]:
        """The ids the audit trail files this message's deliveries under."""


class _ToHandoff(_Message):
    """A message about one handoff, to the people working on it."""

    handoff_id: str
    # On a route (several channels at once) the channel this copy goes to: each channel's
    # messages are ordered on their own, so one slow channel never holds up another's. A
    # person reached directly has a lane of their own ("r<recipient id>").
    lane: int | str | None = None

    @property
    def stream(self) -> str:
        return self.handoff_id if self.lane is None else f"{self.handoff_id}:{self.lane}"

    def trail(self) -> dict[str, str]:
        return {"handoff_session_id": self.handoff_id}

    @property
    def short_code(self) -> str:
        """The handoff's short code ("A7F3"): on a channel without threads it is how people
        tell several handoffs apart, so put it in every message."""
        return short_code_of(self.handoff_id)


class Dispatch(_ToHandoff):
    """The brief that asks a person to take a handoff. Its receipt becomes the handoff's
    thread: every later message of the handoff carries it."""

    kind: Literal["dispatch"] = "dispatch"
    purpose: ClassVar[str] = "dispatch"
    brief: HandoffBrief
    subject: str | None = None  # for a mail: the core's subject line
    # To one person directly (a route's `person:`, `team:` or `oncall:` target), only to an
    # adapter with `capabilities.direct`: their address on this provider, as the identity they
    # linked holds it (a Slack user id, a Telegram user id, which is their private chat's id,
    # a Discord user id, a WhatsApp number as +E.164) or their e-mail address. The brief goes
    # there instead of the channel's room; the receipt's `thread` is where the handoff's
    # later messages to them go, and their replies and presses there come back with its
    # `thread_key`. None: the channel's own room, as always.
    direct: str | None = None


class Relay(_ToHandoff):
    """A subscriber's message, relayed into the handoff's thread. `body` is the words alone,
    without the "Author: " label of `text`, so an adapter can label (and escape) them in its
    own markup."""

    kind: Literal["relay"] = "relay"
    purpose: ClassVar[str] = "relay"
    author: str
    body: str
    thread: dict[str, Any] = Field(default_factory=dict)


NoticeAbout = Literal["released", "form_link", "routing", "claimed", "taken", "reminder", "not_yours", "linking"]


class Notice(_ToHandoff):
    """What the desk tells the handoff's thread: it was released (an adapter may also take
    the dispatch's buttons away), a new form link, or, on a shared line (no threads), which
    handoff a recipient's message went to ("routing"). On a route (`HandoffBrief.claimable`):
    this thread's claim won ("claimed": the Claim button can go), someone on another channel
    took it ("taken": an adapter with `capabilities.edits` edits its dispatch in place to say
    so and drops the buttons, posting nothing; others post the text), nobody has taken it yet
    ("reminder"), or what was written here was not relayed because someone else has it
    ("not_yours"); or the answer to a `/link CODE` written in the thread ("linking")."""

    kind: Literal["notice"] = "notice"
    purpose: ClassVar[str] = "notice"
    about: NoticeAbout
    thread: dict[str, Any] = Field(default_factory=dict)


class _AboutApproval(_Message):
    """Not a handoff's message: ordered by the approval, filed under its conversation."""

    approval: ApprovalBrief
    purpose: ClassVar[str] = "notice"

    @property
    def stream(self) -> str:
        return self.approval.approval_id

    def trail(self) -> dict[str, str]:
        return {"conversation_id": self.approval.conversation_id, "approval_id": self.approval.approval_id}


class ApprovalPrompt(_AboutApproval):
    """Asks a person to allow an action: an adapter with buttons offers Approve / Deny."""

    kind: Literal["approval_prompt"] = "approval_prompt"


class ApprovalClosed(_AboutApproval):
    """How an approval ended, so an adapter can take the prompt's buttons away. `prompt` is
    the receipt data of the prompt in this channel (its `thread` and `message_id`), so it can
    be edited in place even after a restart; empty when the prompt's send was not recorded."""

    kind: Literal["approval_closed"] = "approval_closed"
    prompt: dict[str, Any] = Field(default_factory=dict)


class ToSubscriber(_Message):
    """A message to a subscriber through a front: `chat` is their chat (what their messages
    came with), `author` is set for a person's reply (None for the assistant), and
    `user_action` offers its buttons when the message asks for a user action, `satisfaction`
its 👍 / 👎 when the message is the satisfaction question."""

    kind: Literal["to_subscriber"] = "to_subscriber"
    purpose: ClassVar[str] = "subscriber"
    conversation_id: str
    chat: str
    author: str | None = None
    body: str
    user_action: UserActionPrompt | None = None
    satisfaction: SatisfactionPrompt | None = None

    @property
    def stream(self) -> str:
        return self.conversation_id

    def trail(self) -> dict[str, str]:
        return {"conversation_id": self.conversation_id}


class Callback(_Message):
    """Not for a channel: a signed JSON POST to one of the owner's endpoints (a background
    task's orchestrator, an approved action's `run` URL), stored and retried by the outbox like
    any message and handed to the desk's callback sender (bot/delivery/callbacks.py) instead of
    an adapter. `endpoint` names the configured endpoint, whose URL and secret are looked up at
    each attempt, so no secret is stored; `body` is the JSON text, signed afresh each time.
    `delivery` is the `X-Handoff-Delivery` the endpoint drops a repeat by, when it already knows
    the call by an id of its own (an approval's); otherwise it is the item's `delivery_key`.
    `ordered_by` is the stream: the orchestrator hears one conversation's events in order, and
    an action's call waits for nothing but itself."""

    kind: Literal["callback"] = "callback"
    purpose: ClassVar[str] = "callback"
    endpoint: str
    event: str
    body: str
    conversation_id: str
    ordered_by: str
    user_action_id: str | None = None
    approval_id: str | None = None
    delivery: str | None = None

    @property
    def stream(self) -> str:
        return self.ordered_by

    def trail(self) -> dict[str, str]:
        about = {"user_action_id": self.user_action_id, "approval_id": self.approval_id}
        return {"conversation_id": self.conversation_id, **{k: v for k, v in about.items() if v is not None}}

    @property
    def delivery_id(self) -> str | None:
        """What `X-Handoff-Delivery` says: the same for every attempt at this call."""
        return self.delivery or self.delivery_key


class Answer(_Message):
    """The desk's answer to someone who wrote to it outside any handoff (a `LinkRequest`),
    sent to `to`: the request's `reply_to`. Ordered per place, filed under no handoff."""

    kind: Literal["answer"] = "answer"
    purpose: ClassVar[str] = "notice"
    to: dict[str, Any]

    @property
    def stream(self) -> str:
        place = json.dumps(self.to, sort_keys=True, separators=(",", ":"))
        return "answer:" + hashlib.sha256(place.encode()).hexdigest()[:24]

    def trail(self) -> dict[str, str]:
        return {}


Outbound = Annotated[
    Dispatch | Relay | Notice | ApprovalPrompt | ApprovalClosed | ToSubscriber | Callback | Answer,
    Field(discriminator="kind"),
]
"""One message to deliver; the base class's `send` calls the adapter's method for its kind."""
HandoffMessage = Dispatch | Relay | Notice
_OUTBOUND: TypeAdapter[Outbound] = TypeAdapter(Outbound)


def stored_outbound(payload: dict[str, Any]) -> Outbound:
    """The message an outbox row holds (its `payload`, as `model_dump(mode="json")` wrote it)."""
    return _OUTBOUND.validate_python(payload)


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
    # A callback's: what the owner's endpoint answered, as a JSON object (an action's result)
    answer: dict[str, Any] | None = None


# --------------------------------------------------------------------------- what comes in
#
# What an adapter understood from the provider, one class per kind. `dedupe_key` is the
# provider's id for the event (update_id, event_id, MessageSid …): the core drops a
# redelivery carrying a key it has seen. From a recipient, `thread_key` matches the
# receipt's thread_key of the handoff it belongs to; from a subscriber, `chat` is their chat
# (a private chat id, a phone number): one chat is one conversation, and messages to the
# subscriber come back with it in `ToSubscriber.chat`.


class _Event(BaseModel):
    dedupe_key: str | None = None
    author: str | None = None  # who: a person's display name, a subscriber's profile name
    # The provider's own id of who acted (a Slack user id, a Telegram user id, a Discord
    # user id, a phone number), as the verified call carries it; never a display name.
    # None where the provider does not say.
    user_id: str | None = Field(default=None, max_length=200)


class RecipientText(_Event):
    """A recipient wrote into a handoff's thread (`/release …` typed in it releases, `/link
    CODE` links the writer's identity and is never relayed: `link_code`)."""

    kind: Literal["recipient_text"] = "recipient_text"
    thread_key: str
    text: str
    # Who wrote, set only by the desk's own inbox (its signed-in person); never by an adapter
    person_id: str | None = Field(default=None, max_length=40)


# The release outcomes (`Outcome` in bot/store/vocabulary.py), spelled out here because the
# port sits below the store in the layers; tests/test_channel_base.py checks the two agree.
ReleaseOutcome = Literal["resolved", "unresolved", "needs_followup"]


class ReleasePress(_Event):
    """A recipient pressed a handoff's Release button: it releases like `/release`, with
    `outcome` when the button names one."""

    kind: Literal["release_press"] = "release_press"
    thread_key: str
    outcome: ReleaseOutcome | None = None


class ClaimPress(_Event):
    """A recipient pressed a handoff's Claim button ("I'm on it"): the first claim takes it."""

    kind: Literal["claim_press"] = "claim_press"
    thread_key: str


class Decision(_Event):
    """A person's answer to an approval prompt, pressed in the channel itself."""

    kind: Literal["decision"] = "decision"
    approval_id: str
    approve: bool
    always_allow: bool = False
    reason: str | None = Field(default=None, max_length=2000)


class LinkRequest(_Event):
    """`/link CODE` written to the bot outside any handoff's thread: link `user_id` to the
    code's person; answered by an `Answer` to `reply_to` (so its adapter has `send_answer`)."""

    kind: Literal["link_request"] = "link_request"
    code: str = Field(max_length=200)
    reply_to: dict[str, Any]


class AvailabilityRequest(_Event):
    """A person told the bot they are away or back (`/away [note]`, `/back` on Telegram;
    `/handoff away [note]`, `/handoff back` on Slack): the core finds the person `user_id` is
    linked to, records it, and answers with an `Answer` to `reply_to`."""

    kind: Literal["availability_request"] = "availability_request"
    away: bool
    note: str | None = Field(default=None, max_length=200)
    reply_to: dict[str, Any]


class SubscriberText(_Event):
    """A subscriber wrote in their own chat with the bot (a front)."""

    kind: Literal["subscriber_text"] = "subscriber_text"
    chat: str
    text: str


class ChatOpened(_Event):
    """A subscriber opened the chat (e.g. Telegram's /start): the core greets them."""

    kind: Literal["chat_opened"] = "chat_opened"
    chat: str


class UserActionAnswer(_Event):
    """A subscriber's button press on a UserActionPrompt."""

    kind: Literal["user_action_answer"] = "user_action_answer"
    chat: str
    user_action_id: str
    move: Literal["done", "cancelled", "next", "previous"]


class SatisfactionAnswer(_Event):
    """A subscriber's 👍 / 👎 on a SatisfactionPrompt."""

    kind: Literal["satisfaction_answer"] = "satisfaction_answer"
    chat: str
    handoff_id: str
    satisfied: bool


class DeliveryFailure(_Event):
    """Not a message: the provider reports, after it accepted a message, that it never
    arrived (a status callback such as WhatsApp's 63016). `message_id` is the Receipt's
    message_id it had."""

    kind: Literal["failed_delivery"] = "failed_delivery"
    message_id: str
    error: str
    hint: str | None = None


SubscriberEvent = SubscriberText | ChatOpened | UserActionAnswer | SatisfactionAnswer
InboundMessage = Annotated[
    RecipientText | ReleasePress | ClaimPress | Decision | LinkRequest | AvailabilityRequest | SubscriberText | ChatOpened
    | UserActionAnswer
    | SatisfactionAnswer | DeliveryFailure,
    Field(discriminator="kind"),
]
"""Anything an adapter hands the core: the inbox stores it, deduplicated, and handles each kind in one place."""
_INBOUND: TypeAdapter[InboundMessage] = TypeAdapter(InboundMessage)


def stored_inbound(payload: dict[str, Any]) -> InboundMessage:
    """The event an inbound row holds (its `payload`, as `model_dump(mode="json")` wrote it)."""
    return _INBOUND.validate_python(payload)


# --------------------------------------------------------------------------- webhooks


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
class DirectLine:
    """An open handoff a person was sent directly on this channel, as the desk stored its
    receipt: its id, short code and the dispatch's `thread`. An adapter that learns which
    chats are people's lines from what it sends (`Capabilities.direct`) reads them on start
    (`ChannelContext.open_lines`), so a restart forgets none."""

    handoff_id: str
    short_code: str
    thread: dict[str, Any]


async def _no_lines() -> list[DirectLine]:
    return []


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
    # `deliver_inbound` as subscriber events (`SubscriberText`, …) instead of being ignored.
    subscribers: bool = False
    # The open handoffs this channel sent to people directly (read on start; see DirectLine)
    open_lines: Callable[[], Awaitable[list[DirectLine]]] = _no_lines


class ChannelAdapter(ABC):
    """Base class of every channel adapter. Subclasses set `kind`, `config_model` and
    `capabilities`, and implement one method per kind of message: the base class's `send`
    decides which kind a message is, so an adapter only renders and sends."""

    kind: ClassVar[str]
    config_model: ClassVar[type[ChannelConfig]]
    capabilities: ClassVar[Capabilities] = Capabilities()
    # The provider's keys when it serves only subscribers (a front without a staff chat): the
    # connection part of `config_model`. An adapter built from it is never offered to
    # handoff_request. None: this provider cannot be a front.
    front_model: ClassVar[type[ChannelConfig] | None] = None
    # How long one message may be, as the provider counts it; a longer text goes out in
    # parts cut by `text_limit.split`. None: the provider takes any length (or one message
    # per handoff, as a mail does).
    text_limit: ClassVar[TextLimit | None] = None
    # The media types the provider posts to the webhook (with `capabilities.webhook`): a call
    # of any other type is answered 415 before the adapter sees it.
    webhook_media_types: ClassVar[frozenset[str]] = frozenset({"application/json"})

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

    @final
    async def send(self, outbound: Outbound) -> Receipt:
        """Deliver one message once, by the method for its kind. Raise a ChannelError
        subclass on failure; never retry (the outbox does)."""
        match outbound:
            case Dispatch():
                if outbound.direct is not None and not self.capabilities.direct:
                    raise PermanentChannelError(f"channel {self.id} cannot reach one person directly",
                                                hint="this channel posts to its room only (it has no capabilities.direct)")
                return await self.send_dispatch(outbound)
            case Relay():
                return await self.send_relay(outbound)
            case Notice():
                return await self.send_notice(outbound)
            case ApprovalPrompt():
                return await self.send_approval_prompt(outbound)
            case ApprovalClosed():
                return await self.send_approval_closed(outbound)
            case ToSubscriber():
                return await self.send_to_subscriber(outbound)
            case Callback():
                raise PermanentChannelError(f"channel {self.id} was handed a callback",
                                            hint="callbacks go to the owner's endpoints through the desk's callback sender")
            case Answer():
                return await self.send_answer(outbound)

    @abstractmethod
    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        """Post the brief; the receipt's `thread_key` and `thread` are where the handoff's
        later messages go, and where replies come back from."""

    @abstractmethod
    async def send_relay(self, relay: Relay) -> Receipt:
        """Post a subscriber's words into the handoff's thread (`relay.thread`)."""

    @abstractmethod
    async def send_notice(self, notice: Notice) -> Receipt:
        """Post what the desk has to say (`notice.about`) into the handoff's thread; on a
        release an adapter may also take the dispatch's buttons away."""

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        """Put an approval prompt before the channel's people. An adapter with
        `capabilities.approvals` implements it; the config never routes approvals elsewhere."""
        raise PermanentChannelError(f"channel {self.id} cannot ask for approvals",
                                    hint="approvals need a channel a person reads")

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        """Say how an approval ended (and take the prompt's buttons away where there are
        some). By default nothing is sent: the prompt's link answers for itself once the
        approval is closed."""
        return Receipt()

    async def send_to_subscriber(self, message: ToSubscriber) -> Receipt:
        """Post into a subscriber's chat. Only called when `capabilities.front`."""
        raise PermanentChannelError(f"channel {self.id} serves no subscribers",
                                    hint="this channel is not a front: it cannot reach a subscriber")

    async def send_answer(self, answer: Answer) -> Receipt:
        """Answer where a `LinkRequest` of this adapter came from (`answer.to`)."""
        raise PermanentChannelError(f"channel {self.id} cannot answer outside a handoff",
                                    hint="internal error: an answer went to a channel that sends no LinkRequest")

    def link_hint(self, code: str) -> str | None:
        """A link that sends `/link CODE` from this provider in one tap (Telegram's t.me deep
        link), for the inbox's "Link a channel"; None where there is none."""
        return None

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

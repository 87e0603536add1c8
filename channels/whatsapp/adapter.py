"""The WhatsApp channel (through Twilio): handoffs reach people's phones, and their answers come back.

A dispatch is one WhatsApp message from the configured sender (`from_number`) to every
configured recipient (`to`): urgency, who needs help, the summary, what to do, the fields to
hand back, the return-form link and the handoff's short code (`#A7F3`). The subscriber's
messages are relayed to the same numbers ("#A7F3 *Ana*: …"), and whatever a recipient writes
back to the sender goes to the subscriber; `/release` ends the handoff. It uses the official
`twilio` SDK on its async path (`AsyncTwilioHttpClient` + `create_async`), pointed at
`api_base_url`.

The same number can be a front too (config `fronts: [{kind: whatsapp, …}]`): subscribers
write to the sender and talk to the bot. Each sender number is one conversation (thread_key
`whatsapp:+…`, the name from their WhatsApp profile); the assistant's and people's replies go
back to that number, a person's name in bold. With a channel on the same account and sender
(one webhook per sender at Twilio), one adapter does both: the staff numbers in `to` are
recipients, every other number is a subscriber. A front of its own (built from
WhatsAppConnection, without `to`) takes every sender as a subscriber and never dispatches.
WhatsApp has no buttons here: a pending user action names the "done" / "cancel" keywords.

WhatsApp has no threads. Every handoff of a channel shares one line, so every receipt and
every inbound message carries the same thread_key (`"whatsapp"`), and a reply cannot tell by
itself which handoff it answers. The core routes it (the most recent handoff, or the one
named by a `#A7F3` prefix, `/list` to see them) and answers with routing notices; this
adapter makes that possible by putting the short code at the start of every message it sends.

What it guards against:
- **Forged webhooks.** Every call must carry a valid `X-Twilio-Signature` (HMAC-SHA1 of the
  public URL and the form parameters with the auth token, compared in constant time by the
  SDK's RequestValidator): otherwise 403 and nothing is stored. Only messages from the
  configured recipient numbers to our sender are relayed to a handoff; anyone else who writes
  to the business number is a subscriber with a conversation of their own when the number is a
  front, and ignored (and logged) otherwise, so a stranger can never talk to another subscriber.
- **Redeliveries.** Twilio retries a webhook it thinks failed; MessageSid is the dedupe key.
- **Restyled text.** WhatsApp turns `*x*`, `_x_`, `~x~` and backticks into formatting, so a
  summary could make its own words look like the desk's. People's text (summary, names,
  transcript, relayed messages) has those markers replaced by look-alike characters where they
  could format, leaving links, e-mail addresses and snake_case words untouched.
- **The 1600-character limit.** The dispatch is fitted into one message with its link kept
  (the newest transcript lines that fit, long parts shortened when needed); relays, notices and
  messages to a subscriber longer than a message go out in numbered parts.
- **The 24-hour window.** WhatsApp refuses free-form messages to someone who has not written
  to the sender in 24 hours (error 63016). That is a permanent failure whose hint says to set
  `content_sid`: the dispatch then goes out as the approved template (`content_sid` +
  `content_variables`), which opens the conversation; relays follow once the person answers.
  To a subscriber, the hint says they must write first.
- **Duplicates.** Twilio's create is not idempotent: a 5xx or a lost answer is an
  UncertainDeliveryError (the message may exist). With several recipients, the numbers that
  already got a message are remembered by its delivery key, so a retry sends only to the rest.

Approval prompts (`notice="approval"`) go to every number as one text: the action, its
description, the risk, the exact arguments as pretty JSON in a monospace block (where
WhatsApp formats nothing; a backtick in a value is written as the JSON escape `\\u0060`, so
the block cannot be closed early and the value stays exact), the deadline and the signed
decision link; WhatsApp has no buttons here, the page decides. When it does not fit 1600
characters the arguments are cut visibly ("… N more characters on the page"), never the
link. `approval_closed` sends how it ended. An approval is not a handoff: a reply on the line
is routed to the handoffs as always, and the prompt says that a reply is not a decision.

Errors are mapped, never retried here: 429 → transient with Retry-After; 401/20003 → auth;
63016, 21211/21614 (bad number), 63007 (wrong sender) and other 4xx → permanent.

Twilio setup: a WhatsApp sender (or the sandbox) whose "A message comes in" webhook is
`{public_url}/webhooks/{channel id}` (HTTP POST; a front of its own: its id, 1000 + its
position in `fronts` by default). The recipients must have opted in (for the sandbox: sent
the join code).
"""

from __future__ import annotations

import asyncio
import base64
import contextvars
import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache, partial
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import parse_qsl, urlparse

import structlog
from pydantic import AliasChoices, BeforeValidator, Field, SecretStr, field_validator

from bot.runtime.text import hang, one_line
from channels.base import (
    ApprovalBrief,
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelAdapter,
    ChannelAuthError,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    DeliveryFailure,
    Dispatch,
    HandoffBrief,
    HandoffMessage,
    InboundMessage,
    Notice,
    Outbound,
    PermanentChannelError,
    Receipt,
    RecipientText,
    Relay,
    SubscriberText,
    ToSubscriber,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
    pretty_arguments,
)
from channels.text import Budget, SentParts, TextLimit, clip, fit_brief, short_duration, utf16_len

if TYPE_CHECKING:
    from twilio.http.response import Response
    from twilio.rest import Client

log = structlog.get_logger(__name__)

TWILIO_API = "https://api.twilio.com"
LINE_KEY = "whatsapp"  # the thread_key of every handoff on a WhatsApp channel: one shared line
BODY_LIMIT = 1600  # Twilio's limit for one message body
SIGNATURE_HEADER = "x-twilio-signature"
EMPTY_TWIML = b'<?xml version="1.0" encoding="UTF-8"?><Response/>'
SENT_MEMORY = 10_000  # (delivery key, number, part) → MessageSid, so a retry skips numbers already reached
TRANSCRIPT_LINE = 300
APPROVAL_DESCRIPTION = 400  # characters of an action's description in a prompt
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
_SEPARATORS = re.compile(r"[\s().\-\u00a0]")
TemplateValue = Literal["summary", "expected_action", "link", "short_code", "urgency", "subscriber", "contact_back_email"]


def _default_template_variables() -> dict[str, TemplateValue]:
    return {"1": "summary", "2": "expected_action", "3": "link"}

# The last HTTP answer of the current task: the SDK's exceptions drop the headers (Retry-After).
_last_response: contextvars.ContextVar[Response | None] = contextvars.ContextVar("whatsapp_last_response", default=None)


# --------------------------------------------------------------------------- config


def normalise_number(value: str) -> str:
    """`whatsapp:+1 (415) 523-8886` → `whatsapp:+14155238886`; ValueError when not E.164."""
    number = _SEPARATORS.sub("", value.strip().removeprefix("whatsapp:"))
    if not _E164.match(number):
        raise ValueError(f"'{value}' is not a phone number in E.164 form, such as +14155238886 (a + and the country code)")
    return f"whatsapp:{number}"


def _as_list(value: Any) -> Any:
    if isinstance(value, str):  # `to: "+34600111222"`, or several from one ${VAR}, comma-separated
        return [part for part in value.split(",") if part.strip()]
    return value


class WhatsAppConnection(ChannelConfig):
    """One Twilio account and its WhatsApp sender: everything needed to send and to verify
    webhooks. It is all a front of its own needs (`fronts: [{kind: whatsapp, …}]`); a channel
    adds the staff numbers (WhatsAppConfig)."""

    kind: Literal["whatsapp"] = "whatsapp"
    account_sid: str = Field(description="The Twilio Account SID (AC…): Twilio Console → Account Info.")
    auth_token: SecretStr = Field(
        description="The Twilio account's Auth Token, which authenticates API calls and verifies webhook signatures: "
        "Twilio Console → Account Info.",
    )
    from_number: str = Field(
        validation_alias=AliasChoices("from_number", "from"),
        description="The WhatsApp sender, E.164 with or without 'whatsapp:' (such as +14155238886); `from` works too.",
    )
    status_callback: bool = Field(
        default=False,
        description="Ask Twilio to report delivery status to the webhook, so failures after acceptance "
        "(such as 63016) are logged.",
    )
    api_base_url: str = Field(default=TWILIO_API, description="Twilio REST API base URL.")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to wait for one Twilio call.")

    @field_validator("account_sid")
    @classmethod
    def _account_sid(cls, value: str) -> str:
        value = value.strip()
        if not re.fullmatch(r"AC[0-9a-fA-F]{32}", value):
            raise ValueError("must be the Account SID: AC followed by 32 hex digits (Twilio console → Account info)")
        return value

    @field_validator("auth_token")
    @classmethod
    def _auth_token(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value().strip()
        if not token:
            raise ValueError("required")  # check-config adds the description: what it is, where to find it
        return SecretStr(token)

    @field_validator("from_number")
    @classmethod
    def _from(cls, value: str) -> str:
        return normalise_number(value)

    @field_validator("api_base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError("must be an http(s) URL such as https://api.twilio.com")
        return value.rstrip("/")


class WhatsAppConfig(WhatsAppConnection):
    """A channel: the connection plus the staff numbers handoffs go to."""

    to: Annotated[list[str], BeforeValidator(_as_list)] = Field(
        min_length=1, max_length=20,
        description="The recipients' WhatsApp numbers (E.164); every message goes to each, and only they may answer.",
    )
    content_sid: str | None = Field(
        default=None,
        description="An approved WhatsApp template (HX…) to send the dispatch with, so it arrives outside the 24-hour window.",
    )
    content_variables: dict[str, TemplateValue] = Field(
        default_factory=_default_template_variables,
        description="Which value fills each template variable (with content_sid): summary, expected_action, link, "
        "short_code, urgency, subscriber, contact_back_email.",
    )

    @field_validator("to")
    @classmethod
    def _to(cls, value: list[str]) -> list[str]:
        numbers = [normalise_number(v) for v in value]
        if len(set(numbers)) != len(numbers):
            raise ValueError("lists the same number twice")
        return numbers

    @field_validator("content_sid")
    @classmethod
    def _content_sid(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not re.fullmatch(r"HX[0-9a-fA-F]{32}", value.strip()):
            raise ValueError("must be a Content SID: HX followed by 32 hex digits (Content Template Builder)")
        return value.strip()

    @field_validator("content_variables")
    @classmethod
    def _variables(cls, value: dict[str, str]) -> dict[str, str]:
        if not value:
            raise ValueError("must map at least one template variable, such as {'1': summary}")
        return value


# --------------------------------------------------------------------------- text helpers





# Links and addresses are kept exactly as written (a changed character breaks them).
_VERBATIM = re.compile(r"https?://\S*[^\s*_~`.,;:!?)\]'\"]|[\w.+-]+@[\w-]+(?:\.[\w-]+)+", re.IGNORECASE)
# A formatting marker that could open or close a span: not between two letters or digits
# (`snake_case` and `ORD_123` cannot format, so they stay as they are).
_MARKER = re.compile(r"(?<![^\W_])[*_~]|[*_~](?![^\W_])|`")
_QUOTE = re.compile(r"(?m)^(\s*)>")
_LOOKALIKE = {"*": "\u2217", "_": "\u02cd", "~": "\u223c", "`": "\u02cb"}  # ∗ ˍ ∼ ˋ


def defuse(text: str) -> str:
    """People's text with WhatsApp's formatting markers made inert: `*bold*` shows as
    `∗bold∗`, not in bold, and a line starting with `>` is not a quote."""

    def plain(part: str) -> str:
        return _QUOTE.sub("\\1\u203a", _MARKER.sub(lambda m: _LOOKALIKE[m.group()], part))

    out, last = [], 0
    for match in _VERBATIM.finditer(text):
        out.append(plain(text[last:match.start()]))
        out.append(match.group())
        last = match.end()
    out.append(plain(text[last:]))
    return "".join(out).replace("\x00", "\ufffd")





def template_value(text: str, limit: int) -> str:
    """A template variable: WhatsApp refuses line breaks, tabs and runs of spaces in them
    (and `clip` cuts a trailing blank before its ellipsis)."""
    return clip(one_line(text), limit)




_BUDGETS = (
    Budget(context_key=60),
    Budget(summary=700, action=400, context_items=5, context_key=60, context_value=100, field_items=5, field_line=100),
    Budget(summary=400, action=250, context_items=0, field_items=0),
)


@dataclass(frozen=True)
class _Message:
    """One create call's content: a body, or a template with its variables."""

    body: str | None = None
    content_sid: str | None = None
    content_variables: str | None = None


class _Multi(dict[str, str]):
    """Form parameters for RequestValidator, which signs every value of a repeated key."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def getall(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k == key]


# --------------------------------------------------------------------------- the adapter


class WhatsAppChannel(ChannelAdapter):
    kind = "whatsapp"
    config_model = WhatsAppConfig
    front_model = WhatsAppConnection
    # No threads: every handoff shares the line (thread_key "whatsapp"); the core routes replies.
    # reconcile=False: a lost answer is retried (possibly sent twice) rather than lost.
    capabilities = Capabilities(buttons=False, threads=False, inbound=True, webhook=True, reconcile=False, front=True,
                                approvals=True)
    text_limit = TextLimit(BODY_LIMIT)
    webhook_media_types = frozenset({"application/x-www-form-urlencoded"})  # Twilio posts forms
    config: WhatsAppConnection  # a WhatsAppConfig unless it is a front of its own (no staff numbers)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: ChannelContext | None = None
        self._client: Client | None = None
        self._validator: Any = None
        self._sent = SentParts(SENT_MEMORY)  # (delivery key, number, part) → MessageSid
        self.account_name: str | None = None

    @classmethod
    def same_connection(cls, channel: ChannelConfig, front: ChannelConfig) -> bool:
        """One account's one sender: Twilio calls one webhook per sender, so one adapter
        takes both the staff's answers and the subscribers' messages."""
        return (isinstance(channel, WhatsAppConnection) and isinstance(front, WhatsAppConnection)
                and channel.account_sid == front.account_sid and channel.from_number == front.from_number)

    @property
    def staff(self) -> tuple[str, ...]:
        """The recipients' numbers; none on a front of its own."""
        return tuple(getattr(self.config, "to", ()))

    @property
    def _serves_subscribers(self) -> bool:
        return self._ctx is not None and self._ctx.subscribers

    # ------------------------------------------------------------------ lifecycle

    def _connect(self) -> Client:
        from twilio.rest import Client

        return Client(self.config.account_sid, self.config.auth_token.get_secret_value(),
                      http_client=_http_client_class()(self.config.api_base_url, self.config.request_timeout))

    async def start(self, ctx: ChannelContext) -> None:
        from twilio.request_validator import RequestValidator

        self._ctx = ctx
        self._validator = RequestValidator(self.config.auth_token.get_secret_value())
        self._client = self._connect()
        try:
            account = await self._fetch_account(self._client)
        except BaseException:
            await self.stop()
            raise
        self.account_name = account.friendly_name
        webhook = f"{ctx.public_url.rstrip('/')}/webhooks/{self.id}"
        log.info("whatsapp_started", channel_id=self.id, account=account.friendly_name, sender=self.config.from_number,
                 recipients=len(self.staff), subscribers=ctx.subscribers, webhook=webhook,
                 hint=f"set the sender's 'A message comes in' webhook to {webhook} (HTTP POST) in the Twilio console")

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.http_client.close()
            self._client = None

    async def probe(self) -> str:
        own = self._client is None  # `check-config --probe` calls this without start()
        client = self._connect() if own else self._client
        assert client is not None
        try:
            account = await self._fetch_account(client)
        finally:
            if own:
                await client.http_client.close()
        staff = len(self.staff)
        to = f"to {staff} number{'s' if staff != 1 else ''}" if staff else "to subscribers"
        return f"Twilio account '{account.friendly_name}' ({account.status}), sending from {self.config.from_number} {to}"

    async def _fetch_account(self, client: Client) -> Any:
        account = await self._call(client.api.v2010.accounts(self.config.account_sid).fetch_async(), "fetch the account")
        if account.status != "active":
            raise ChannelAuthError(f"the Twilio account is {account.status}", hint=(
                f"the Twilio account {self.config.account_sid} is {account.status}; reactivate it in the Twilio console"))
        return account

    def _require_client(self) -> Client:
        if self._client is None:
            raise TransientChannelError("the WhatsApp channel is not started", hint="the WhatsApp channel is not running")
        return self._client

    # ------------------------------------------------------------------ sending

    def _staff_numbers(self) -> tuple[str, ...]:
        """The numbers handoffs and approvals go to, or why there are none: a front of its
        own is never offered to handoff_request or approvals."""
        if not self.staff:
            raise PermanentChannelError(f"WhatsApp front {self.id} has no staff numbers",
                                        hint="this WhatsApp front only serves subscribers: handoffs need a channel with `to`")
        return self.staff

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        return await self._on_the_line(dispatch, [self._dispatch_message(dispatch.brief)])

    async def send_relay(self, relay: Relay) -> Receipt:
        return await self._on_the_line(relay, [_Message(body=part) for part in self._relay_parts(relay)])

    async def send_notice(self, notice: Notice) -> Receipt:
        return await self._on_the_line(notice, [_Message(body=part) for part in self._notice_parts(notice)])

    async def _on_the_line(self, outbound: HandoffMessage, messages: list[_Message]) -> Receipt:
        """A handoff's message to every staff number: they share one line (no threads)."""
        self._staff_numbers()
        sids = await self._to_everyone(self._require_client(), outbound, messages)
        first = next((sids[n] for n in self.staff if n in sids), None)
        return Receipt(message_id=first, thread_key=LINE_KEY, thread={"line": LINE_KEY})

    # Approvals are not a handoff's: no short code, not on the line's thread (replies route to handoffs).
    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        return await self._to_staff(prompt, self.approval_text(prompt.approval))

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        return await self._to_staff(closed, self._closed_text(closed))

    async def _to_staff(self, outbound: ApprovalPrompt | ApprovalClosed, text: str) -> Receipt:
        staff = self._staff_numbers()
        sids = await self._to_everyone(self._require_client(), outbound, [_Message(body=text)])
        return Receipt(message_id=next((sids[n] for n in staff if n in sids), None))

    async def send_to_subscriber(self, message: ToSubscriber) -> Receipt:
        """A message to one subscriber's chat: the words defused, a person's name in bold,
        in numbered parts when longer than one message (a part that went out is not sent
        again when the outbox retries the rest)."""
        chat = _number_or_none(message.chat)
        if chat is None:
            raise PermanentChannelError(f"no WhatsApp number in the subscriber's chat {message.chat!r}",
                                        hint="internal error: the message to a subscriber named no WhatsApp number")
        parts = [_Message(body=part) for part in self.subscriber_parts(message)]
        sid = await self._to_one(self._require_client(), message, chat, parts, subscriber=True)
        return Receipt(message_id=sid, thread={"chat": chat})

    async def _to_everyone(self, client: Client, outbound: Outbound, messages: list[_Message]) -> dict[str, str]:
        """Send to every recipient at once (each in order). Succeeds when everyone got it, or
        when some did and the rest refused for good; a retryable failure is raised so the core
        retries, and the retry skips the numbers already reached."""
        numbers = self.staff
        results = await asyncio.gather(*(self._to_one(client, outbound, n, messages) for n in numbers), return_exceptions=True)
        sent = {n: r for n, r in zip(numbers, results, strict=True) if isinstance(r, str)}
        failed = {n: r for n, r in zip(numbers, results, strict=True) if not isinstance(r, str)}
        for error in failed.values():
            if not isinstance(error, ChannelError):
                raise error
        errors = {n: e for n, e in failed.items() if isinstance(e, ChannelError)}  # all of them, after the loop above
        if not errors:
            return sent
        hint = "; ".join(e.hint for e in errors.values()) if len(errors) > 1 else next(iter(errors.values())).hint
        retryable = [e for e in errors.values() if isinstance(e, TransientChannelError)]
        if retryable:
            waits = [e.retry_after for e in retryable if e.retry_after is not None]
            cls = UncertainDeliveryError if any(isinstance(e, UncertainDeliveryError) for e in retryable) else TransientChannelError
            reached = f" (already delivered to {', '.join(sent)})" if sent else ""
            raise cls(f"WhatsApp {outbound.purpose}: {hint}{reached}", retry_after=max(waits) if waits else None, hint=hint)
        if sent:  # the others refused for good: the handoff still reached someone
            log.warning("whatsapp_partly_delivered", channel_id=self.id, purpose=outbound.purpose, delivered=list(sent),
                        failed={n: e.hint for n, e in errors.items()})
            return sent
        if len(errors) == 1:
            raise next(iter(errors.values()))
        auth = next((e for e in errors.values() if isinstance(e, ChannelAuthError)), None)
        if auth is not None:
            raise auth
        raise PermanentChannelError(f"WhatsApp {outbound.purpose}: {hint}", hint=hint)

    async def _to_one(self, client: Client, outbound: Outbound, number: str, messages: list[_Message], *,
                      subscriber: bool = False) -> str:
        sids = [await self._sent.send((outbound.delivery_key, number, index) if outbound.delivery_key else None,
                                      partial(self._create, client, number, message, subscriber=subscriber))
                for index, message in enumerate(messages)]
        return sids[0]

    async def _create(self, client: Client, number: str, message: _Message, *, subscriber: bool = False) -> str:
        callback = None
        if self.config.status_callback and self._ctx is not None:
            callback = f"{self._ctx.public_url.rstrip('/')}/webhooks/{self.id}"
        kwargs = {k: v for k, v in (("body", message.body), ("content_sid", message.content_sid),
                                    ("content_variables", message.content_variables), ("status_callback", callback)) if v}
        created = await self._call(
            client.messages.create_async(from_=self.config.from_number, to=number, **kwargs),
            "send a message", may_have_landed=True, number=number, template=message.content_sid is not None,
            subscriber=subscriber,
        )
        return str(created.sid)

    # ------------------------------------------------------------------ rendering

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/whatsapp/{name}.txt", **context).strip()

    def _dispatch_message(self, brief: HandoffBrief) -> _Message:
        config = self.config
        if isinstance(config, WhatsAppConfig) and config.content_sid:  # a front of its own dispatches nothing
            variables = self._template_values(brief, config.content_variables)
            return _Message(content_sid=config.content_sid, content_variables=json.dumps(variables))
        return _Message(body=self.dispatch_text(brief))

    def _template_values(self, brief: HandoffBrief, variables: dict[str, TemplateValue]) -> dict[str, str]:
        values = {
            "summary": template_value(defuse(brief.summary), 600),
            "expected_action": template_value(defuse(brief.expected_action), 300),
            "link": brief.form_url or "(no return form)",
            "short_code": f"#{brief.short_code}",
            "urgency": brief.urgency,
            "subscriber": template_value(defuse(brief.subscriber_name or "a subscriber"), 100),
            "contact_back_email": brief.contact_back_email or "(none)",
        }
        return {number: values[name] for number, name in variables.items()}

    def dispatch_text(self, brief: HandoffBrief) -> str:
        """The dispatch as one message: everything when it fits, else the newest transcript
        lines that fit and, when the brief alone is too long, its long parts shortened.
        The link and the short code are never cut."""
        lines = [(defuse(line.author or line.role), hang(defuse(clip(line.text, TRANSCRIPT_LINE)), width=2)) for line in brief.transcript]
        context = [(defuse(k), defuse(v)) for k, v in brief.extra_context.items()]
        fields = [defuse(line) for line in brief.field_lines]
        fitted = fit_brief(
            summary=brief.summary, action=brief.expected_action, context=context, fields=fields, lines=lines,
            budgets=_BUDGETS, fits=self.text_limit.fits,
            render=lambda cut: self._render(
                "dispatch",
                brief=brief,
                code=brief.short_code,
                subscriber=defuse(template_value(brief.subscriber_name, 100)) if brief.subscriber_name else None,
                summary=defuse(cut.summary),
                action=defuse(cut.action),
                **cut.shown(),
                idle=short_duration(brief.idle_timeout_seconds, at_least_a_minute=True),
            ),
        )
        if fitted is not None:
            return fitted
        raise PermanentChannelError("the dispatch does not fit one WhatsApp message", hint="the brief is too long for WhatsApp")

    def approval_text(self, brief: ApprovalBrief) -> str:
        """The prompt as one message: everything when it fits, else the arguments cut with a
        visible note (the page shows them all); the link is never cut."""
        arguments, _ = pretty_arguments(brief.arguments, also_escape="`")  # a backtick cannot close the block
        try:
            deadline = datetime.fromisoformat(brief.expires_at).strftime("%d %b, %H:%M UTC")
        except ValueError:
            deadline = clip(brief.expires_at, 40)

        def render(kept: int) -> str:
            return self._render(
                "approval", a=brief, action=defuse(brief.action_id), description=defuse(clip(brief.description, APPROVAL_DESCRIPTION)),
                who=defuse(template_value(brief.subscriber_name, 100)) if brief.subscriber_name else None,
                arguments=arguments[:kept].rstrip() if kept < len(arguments) else arguments,
                left_out=len(arguments) - kept, deadline=deadline,
                two_people=defuse(brief.two_people_line) if brief.two_people_line else None,
            )

        if self.text_limit.fits(render(len(arguments))):
            return render(len(arguments))
        low, high = 0, len(arguments)  # the most characters of the arguments that fit
        while low < high:
            middle = (low + high + 1) // 2
            if self.text_limit.fits(render(middle)):
                low = middle
            else:
                high = middle - 1
        text = render(low)
        if not self.text_limit.fits(text):
            raise PermanentChannelError("the approval prompt does not fit one WhatsApp message",
                                        hint="the approval prompt is too long for WhatsApp")
        return text

    def _closed_text(self, closed: ApprovalClosed) -> str:
        raw = clip(closed.text, 1400)
        # The approval id stays exactly as written (it may hold `_` or `-`): people quote it.
        approval_id = closed.approval.approval_id
        return self._render("approval_closed", body=approval_id.join(defuse(part) for part in raw.split(approval_id)))

    def subscriber_parts(self, message: ToSubscriber) -> list[str]:
        """A message to a subscriber: their words defused like a relay's (the assistant's too:
        what an agent was told to say cannot restyle itself), a person's name in bold, and
        numbered parts of at most 1600 characters, so nothing is cut off."""
        author = defuse(template_value(message.author, 100)) if message.author else None
        body = defuse(message.body.strip())
        head = utf16_len(self._render("to_subscriber", author=author, body="", part="99/99"))
        chunks = self.text_limit.split(body, reserve=head + 1)
        return [self._render("to_subscriber", author=author, body=chunk, part=f"{i}/{len(chunks)}" if len(chunks) > 1 else None)
                for i, chunk in enumerate(chunks, 1)]

    def _relay_parts(self, relay: Relay) -> list[str]:
        author = defuse(template_value(relay.author or "Subscriber", 100))
        body = defuse(relay.body)
        head = utf16_len(self._render("relay", code=relay.short_code, author=author, body="", part="99/99"))
        chunks = self.text_limit.split(body, reserve=head + 1)
        return [self._render("relay", code=relay.short_code, author=author, body=chunk,
                             part=f"{i}/{len(chunks)}" if len(chunks) > 1 else None)
                for i, chunk in enumerate(chunks, 1)]

    def _notice_parts(self, notice: Notice) -> list[str]:
        raw = notice.text.strip()
        code = notice.short_code
        # The desk's notices usually name their handoff already ("Handoff A7F3 released …");
        # the code stays exactly as written: people type it to address the handoff.
        body = code.join(defuse(part) for part in raw.split(code))
        tagged = code in raw
        head = 0 if tagged else utf16_len(self._render("notice", code=code, tagged=False, body="")) + 1
        return [self._render("notice", code=code, tagged=tagged, body=chunk) for chunk in self.text_limit.split(body, reserve=head)]

    # ------------------------------------------------------------------ inbound

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        signature = request.headers.get(SIGNATURE_HEADER, "")
        try:
            pairs = parse_qsl(request.body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            pairs = None
        if self._validator is None or not signature or pairs is None or not self._validator.validate(
            request.url, _Multi(pairs), signature
        ):
            log.warning("whatsapp_webhook_rejected", channel_id=self.id, reason="missing or invalid X-Twilio-Signature",
                        url=request.url)
            return WebhookReply(status=403, body=b"invalid signature")
        params = dict(pairs)
        reply = WebhookReply(status=200, body=EMPTY_TWIML, content_type="text/xml")
        message = self._parse(params)
        if message is not None:
            reply.messages.append(message)
        return reply

    def _parse(self, params: dict[str, str]) -> InboundMessage | None:
        """The message in a (verified) webhook call, if it is one we take: from a staff number,
        a recipient's answer; from any other number, when the adapter serves a front, a
        subscriber's message in their own chat."""
        if params.get("AccountSid") != self.config.account_sid:
            log.warning("whatsapp_webhook_ignored", channel_id=self.id, reason="another account's message")
            return None
        sender, receiver = _number_or_none(params.get("From")), _number_or_none(params.get("To"))
        if sender == self.config.from_number:  # a status callback about a message we sent
            return self._status(params)
        if receiver != self.config.from_number:
            log.warning("whatsapp_webhook_ignored", channel_id=self.id, reason=f"addressed to {params.get('To')}, not to our sender")
            return None
        if sender is not None and sender not in self.staff and self._serves_subscribers:
            return self._subscriber_message(params)
        if sender not in self.staff:
            log.warning("whatsapp_unknown_sender", channel_id=self.id, sender=params.get("From"),
                        hint="only the numbers in `to` can answer handoffs; add it there to let it answer")
            return None
        sid = params.get("MessageSid") or params.get("SmsMessageSid")
        text = (params.get("Body") or params.get("ButtonText") or "").replace("\x00", "\ufffd").strip()
        extras = []
        for i in range(_media_count(params)):
            kind = (params.get(f"MediaContentType{i}") or "file").split("/", 1)[0]
            extras.append(f"({kind} attachment, not forwarded)")
        if params.get("Latitude") and params.get("Longitude"):
            extras.append(f"(location: {params['Latitude']}, {params['Longitude']})")
        text = "\n".join([text, *extras] if text else extras)
        if not sid or not text:
            return None
        author = " ".join((params.get("ProfileName") or "").split())[:100] or sender.removeprefix("whatsapp:")
        return RecipientText(thread_key=LINE_KEY, text=text, author=author, user_id=sender, dedupe_key=f"message:{sid}")

    def _subscriber_message(self, params: dict[str, str]) -> SubscriberText | None:
        """A subscriber writing to the sender: their number is their chat (one conversation),
        their WhatsApp profile name their name. An attachment is named in brackets ("[image]"),
        since the desk relays text only."""
        raw = (params.get("From") or "").strip()
        sid = params.get("MessageSid") or params.get("SmsMessageSid")
        if not raw.startswith("whatsapp:") or not sid:  # an SMS to the same number is not a WhatsApp chat
            log.warning("whatsapp_webhook_ignored", channel_id=self.id, reason="not a WhatsApp message", sender=raw)
            return None
        chat = _number_or_none(raw)
        assert chat is not None
        text = (params.get("Body") or params.get("ButtonText") or "").replace("\x00", "\ufffd").strip()
        extras = [f"[{_media_kind(params.get(f'MediaContentType{i}'))}]" for i in range(_media_count(params))]
        if params.get("Latitude") and params.get("Longitude"):
            extras.append(f"[location: {params['Latitude']}, {params['Longitude']}]")
        text = "\n".join([text, *extras] if text else extras)
        if not text:
            return None
        author = " ".join((params.get("ProfileName") or "").split())[:100] or None
        return SubscriberText(chat=chat, text=text, author=author, user_id=chat, dedupe_key=f"message:{sid}")

    def _status(self, params: dict[str, str]) -> DeliveryFailure | None:
        """A status callback: a message Twilio accepted was not delivered after all (63016
        usually arrives this way). Reported to the core, which marks the delivery failed and
        says why in the audit trail; other statuses (sent, delivered, read) need nothing."""
        status, sid = params.get("MessageStatus") or params.get("SmsStatus"), params.get("MessageSid")
        if status not in ("failed", "undelivered") or not sid:
            return None
        code = params.get("ErrorCode")
        hint = _hint_for_code(code, params.get("To") or "", self.config,
                              subscriber=_number_or_none(params.get("To")) not in self.staff)
        log.warning("whatsapp_message_failed", channel_id=self.id, message_sid=sid, to=params.get("To"), status=status,
                    error_code=code, hint=hint)
        return DeliveryFailure(message_id=sid, error=f"{status} (Twilio error {code or 'unknown'})", hint=hint,
                               dedupe_key=f"status:{sid}:{status}")

    # ------------------------------------------------------------------ errors

    async def _call(self, call: Any, what: str, *, may_have_landed: bool = False, number: str | None = None,
                    template: bool = False, subscriber: bool = False) -> Any:
        """Await one SDK call and turn every failure into a typed channel error.
        `may_have_landed`: the call creates something, so a lost answer is uncertain."""
        import aiohttp
        from twilio.base.exceptions import TwilioException, TwilioRestException, TwilioServiceException

        _last_response.set(None)
        try:
            return await call
        except TwilioRestException as exc:
            raise self._api_error(what, exc.status, exc.code, exc.msg, may_have_landed, number, template, subscriber) from None
        except TwilioServiceException as exc:
            raise self._api_error(what, exc.status, exc.code, exc.detail or exc.title, may_have_landed, number, template,
                                  subscriber) from None
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as exc:
            raise TransientChannelError(f"Twilio: could not connect to {self.config.api_base_url} ({type(exc).__name__})",
                                        hint=f"could not reach the Twilio API at {self.config.api_base_url}") from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            text = f"Twilio: no complete answer to '{what}' ({type(exc).__name__})"
            if may_have_landed:
                raise UncertainDeliveryError(text, hint="Twilio did not answer in time; the message may have been sent") from exc
            raise TransientChannelError(text, hint="Twilio did not answer in time") from exc
        except (TwilioException, ValueError) as exc:  # an answer the SDK could not read (a proxy's HTML page)
            cls = UncertainDeliveryError if may_have_landed else TransientChannelError
            raise cls(f"Twilio: unreadable answer to '{what}' ({type(exc).__name__})",
                      hint="Twilio's answer could not be read" + ("; the message may have been sent" if may_have_landed else "")) from exc

    def _api_error(self, what: str, status: int, code: Any, detail: Any, may_have_landed: bool, number: str | None,
                   template: bool, subscriber: bool = False) -> ChannelError:
        try:
            code = int(code)
        except (TypeError, ValueError):
            code = status
        detail = str(detail or f"HTTP {status}").removeprefix("Unable to create record: ").removeprefix("Unable to fetch record: ")
        message = f"Twilio refused to {what} ({code}): {detail}"
        if status == 429 or code in (20429, 63018):
            wait = _retry_after(_last_response.get())
            return TransientChannelError(message, retry_after=wait, hint=f"Twilio rate-limited us ({code}); retrying after a pause")
        if status == 401 or code == 20003:
            return ChannelAuthError(message, hint=(
                f"Twilio refused account_sid/auth_token of channel {self.id} (20003): copy both from the Twilio console again"))
        if status >= 500:
            if may_have_landed:
                return UncertainDeliveryError(message, hint=f"Twilio failed ({status}); the message may have been sent")
            return TransientChannelError(message, hint=f"Twilio is having trouble ({status})")
        hint = _hint_for_code(str(code), number or "", self.config, template=template, subscriber=subscriber)
        return PermanentChannelError(message, hint=hint or f"Twilio refused to {what}: {detail} ({code})")


def _hint_for_code(code: str | None, number: str, config: WhatsAppConnection, *, template: bool = False,
                   subscriber: bool = False) -> str | None:
    who = number.removeprefix("whatsapp:") or "the recipient"
    if code == "63016" and subscriber:
        return (f"WhatsApp refused a free-form message to the subscriber {who}: they have not written to "
                f"{config.from_number} in the last 24 hours (63016). The subscriber must write first; only an approved "
                "WhatsApp template can reach them before that")
    if code == "63016":
        if getattr(config, "content_sid", None) and not template:
            return (f"WhatsApp refused a free-form message to {who}: they have not written to {config.from_number} in the last "
                    "24 hours (63016). The dispatch template opens the conversation; messages follow once they answer it")
        return (f"WhatsApp refused a free-form message to {who}: they have not written to {config.from_number} in the last "
                "24 hours (63016). Configure content_sid with an approved WhatsApp template so dispatches can start the "
                "conversation, or ask them to message the sender first")
    if code in ("21211", "21614", "63024"):
        return f"{who} is not a valid WhatsApp number ({code})" + ("" if subscriber else ": check `to`")
    if code in ("21606", "21212", "63007", "21910"):
        return f"{config.from_number} is not a WhatsApp sender of this Twilio account ({code}): check `from_number`"
    if code == "21610":
        return f"{who} has opted out of messages from {config.from_number} (21610); they must opt in again"
    if code in ("21655", "21656", "63027", "63028"):
        return f"WhatsApp refused the template ({code}): check content_sid and content_variables against the approved template"
    if code == "21617":
        return "the message is longer than Twilio accepts (21617)"
    return None


def _media_count(params: dict[str, str]) -> int:
    try:
        return max(0, min(int(params.get("NumMedia") or 0), 10))  # WhatsApp carries at most 10 (usually 1)
    except ValueError:
        return 0


def _media_kind(content_type: str | None) -> str:
    """`image/jpeg` → image, `application/pdf` → document, `text/vcard` → contact."""
    main, _, sub = (content_type or "").lower().partition("/")
    if main in ("image", "video", "audio"):
        return main
    if main == "application":
        return "document"
    if "vcard" in sub:
        return "contact"
    return "file"


def _number_or_none(value: str | None) -> str | None:
    try:
        return normalise_number(value) if value else None
    except ValueError:
        return None


def _retry_after(response: Response | None) -> float | None:
    if response is None:
        return None
    for key, value in (response.headers or {}).items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except (TypeError, ValueError):
                return None
    return None


@cache
def _http_client_class() -> type:
    """Built on first use, so validating a config does not import the SDK."""
    import aiohttp
    from twilio.http.async_http_client import AsyncTwilioHttpClient
    from twilio.http.response import Response as TwilioResponse

    class HttpClient(AsyncTwilioHttpClient):  # type: ignore[misc]  # twilio ships no type information: the base is Any
        """The SDK's aiohttp client interface, sent to `api_base_url` instead of api.twilio.com,
        with a real timeout on every call (the SDK passes none unless asked), one connection
        pool made inside the event loop, basic auth as a header (aiohttp deprecates its
        BasicAuth), and the last answer kept for the error mapping (Retry-After)."""

        session: aiohttp.ClientSession | None  # set by the SDK's __init__ (None), which mypy cannot see: no stubs

        def __init__(self, base_url: str, timeout: float) -> None:
            super().__init__(pool_connections=False, timeout=timeout)
            self._base_url = base_url

        async def request(self, method: str, url: str, params: Any = None, data: Any = None, headers: Any = None,
                          auth: Any = None, timeout: float | None = None, allow_redirects: bool = False) -> Response:
            if self.session is None:  # made here, inside the event loop; one pool for every call
                self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
            if url.startswith(TWILIO_API):
                url = self._base_url + url[len(TWILIO_API):]
            headers = dict(headers or {})
            if auth is not None:
                credentials = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
                headers["Authorization"] = f"Basic {credentials}"
            async with self.session.request(
                method.upper(), url, params=params, data=data, headers=headers, allow_redirects=allow_redirects,
                timeout=aiohttp.ClientTimeout(total=timeout or self.timeout),
            ) as answer:
                response = TwilioResponse(answer.status, await answer.text(), answer.headers)
            _last_response.set(response)
            return response

        async def close(self) -> None:
            if self.session is not None:
                await self.session.close()
                self.session = None

    return HttpClient

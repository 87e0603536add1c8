"""The email channel: a handoff is one email thread, and replies to it come back.

A dispatch is a multipart/alternative message (plain text and HTML, both from templates in
templates/messages/email/) sent through the configured SMTP server with aiosmtplib to the
`to` addresses. Subscriber messages and desk notices follow as replies in the same thread
(`In-Reply-To` / `References`, "Re: " subject). Replies come back through a small SMTP
receiver built on aiosmtpd that runs inside the desk's event loop (`inbound:`), usually
behind the organisation's own mail server, which forwards the reply address to it.

How a reply finds its handoff, without a lookup table (so it survives restarts and works on
any instance): every handoff has a *thread key*, 16 base32 characters of a hash of its id,
and a *reply token*, the thread key plus a MAC of it (keyed by the desk's secret_key, or by
`reply_token_secret` when set). The token
sits in the `Reply-To` plus-address (`desk+<token>@example.com`) and in every Message-ID we
generate (`<hd.<token>.<random>@domain>`), so a reply maps back through the address it was
sent to or through its `In-Reply-To` / `References` headers; the MAC means nobody can aim a
reply at another handoff by guessing (the short code "A7F3" is not enough, and a handoff id
alone does not give the MAC).

What it guards against:
- **Header injection.** Subjects come from the summary people wrote: every control
  character and line break is collapsed to a space before it reaches a header, and headers
  are built by the standard library's `EmailMessage`, which refuses CR/LF anyway.
- **Markup injection.** The HTML part comes from autoescaped templates; the text part is
  plain text. A hostile summary shows as text in both.
- **Strangers writing in.** The receiver accepts mail only for its own address (with or
  without a token; 550 for any other recipient), only when it maps to a handoff by a valid
  token, and only from one of the `to` addresses — or from anyone holding the token when
  `accept_forwarded` is on (a colleague the handoff was forwarded to). Everything else is
  refused during the SMTP dialogue (550 with the reason), so nothing is stored and a person
  who wrote gets a bounce that says why. Sender addresses are not authenticated by SMTP
  itself: run the receiver behind a mail server that checks SPF/DKIM/DMARC.
- **Mail loops and robots.** Our own messages, bounces (empty envelope sender) and
  automatic replies (`Auto-Submitted`, `Precedence: bulk`, vacation notices) are accepted
  and dropped, never relayed to the subscriber; what we send carries `Auto-Submitted:
  auto-generated` so responders leave it alone.
- **Quoted history.** Replies quote the whole thread; only the new words are relayed:
  "On … wrote:" and everything after it, `>` lines, Outlook's "-----Original Message-----"
  and "From: … Sent: …" blocks, and the signature after "-- " are removed. The text/plain
  part is preferred; an HTML-only reply is turned into text (its blockquotes dropped).
- **Redelivery.** A sending server retries when it does not see our 250 (we answer only
  after the core stored the message); the Message-ID is the dedupe key.
- **Size.** `inbound.max_message_size` caps a message during the DATA transfer (552).

Approval prompts (`notice="approval"`) are not part of any handoff thread: each is a new
mail to the `to` addresses ("[Approval needed] refund_order (high risk)") showing the
action, its description, the risk, the exact arguments (pretty JSON), the deadline and the
signed decision link; mail has no buttons, the page decides. Its Message-ID is derived from
the approval id (`<ap.<hash>.prompt@domain>`), so the closing mail (`approval_closed`) can
answer it in the same thread without any stored state. Its Reply-To is
`<mailbox>+approval@domain`, and a reply to either mail (by that address or by its thread
headers) is refused during the SMTP dialogue with a 550 that says to use the decision link:
nothing of it is stored or relayed, and a "yes" by mail never counts as a decision.

Errors are mapped, never retried here: SMTP 4xx → TransientChannelError; 5xx →
PermanentChannelError with the server's words in the hint; refused credentials →
ChannelAuthError; refused connections and timeouts → transient, except a timeout or broken
connection once the message body was handed over (→ UncertainDeliveryError). Email cannot
look a sent message up, so `reconcile` is False: such a retry may deliver twice.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import re
import secrets
import ssl
import unicodedata
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import formataddr, formatdate, parseaddr
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any, Literal

import structlog
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from channels.base import (
    ApprovalBrief,
    Capabilities,
    ChannelAdapter,
    ChannelAuthError,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    HandoffBrief,
    InboundMessage,
    Outbound,
    PermanentChannelError,
    Receipt,
    TransientChannelError,
    UncertainDeliveryError,
    pretty_arguments,
)
from channels.text import clip
from forms.fields import preview_line

if TYPE_CHECKING:
    import aiosmtplib

log = structlog.get_logger(__name__)

SUBJECT_LIMIT = 160
TRANSCRIPT_LINE = 2000  # characters of one transcript message in the dispatch
THREAD_KEY_LENGTH, MAC_LENGTH = 16, 10  # base32 characters: 80 and 50 bits
TOKEN_LENGTH = THREAD_KEY_LENGTH + MAC_LENGTH
_TOKEN = re.compile(rf"[a-z2-7]{{{TOKEN_LENGTH}}}")
_MESSAGE_ID_TOKEN = re.compile(rf"<hd\.([a-z2-7]{{{TOKEN_LENGTH}}})\.[a-z0-9]+@", re.IGNORECASE)
_APPROVAL_MESSAGE_ID = re.compile(rf"<ap\.[a-z2-7]{{{THREAD_KEY_LENGTH}}}\.(prompt|closed)@", re.IGNORECASE)
APPROVAL_TAG = "approval"  # the plus-address tag of approval mails: replies to it are refused
ARGUMENTS_LIMIT = 50_000  # characters of pretty JSON shown in an approval prompt; the page shows all
APPROVAL_SUBJECTS = 10_000  # approval id -> prompt subject, so the closing mail threads in clients that match subjects
APPROVAL_REFUSAL = ("550 5.7.1 approval requests are not answered by email: open the decision link in the request "
                    "to approve or deny (this reply was not passed on to anyone)")
_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
# The SMTP 7bit policy: headers with non-ASCII text become encoded words, bodies
# quoted-printable or base64, lines end in CRLF; any server takes it without SMTPUTF8/8BITMIME.
_WIRE = policy.SMTP.clone(cte_type="7bit")
AUTO_PRECEDENCE = {"bulk", "junk", "list", "auto_reply"}


# --------------------------------------------------------------------------- config


def _address(value: str, what: str = "an email address") -> str:
    value = value.strip()
    if not _ADDRESS.match(value) or ".." in value or value.startswith("."):
        raise ValueError(f"must be {what} such as desk@example.com (ASCII, no display name)")
    return value


class SmtpSettings(BaseModel):
    """The outgoing mail server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1, description="SMTP server host name, e.g. smtp.example.com (127.0.0.1 for a local relay).")
    port: int | None = Field(
        default=None, ge=1, le=65535,
        description="SMTP port; by default 587 with starttls, 465 with tls, 25 with none.",
    )
    security: Literal["starttls", "tls", "none"] = Field(
        default="starttls",
        description="starttls: upgrade a plain connection (port 587, required); tls: implicit TLS from the first byte "
        "(port 465); none: no encryption (a relay on localhost only).",
    )
    username: str | None = Field(default=None, description="Login name for SMTP AUTH; leave out for a server without auth.")
    password: SecretStr | None = Field(default=None, description="Password (or app password) for SMTP AUTH.")
    timeout: float = Field(
        default=30.0, gt=0, le=300,
        description="Seconds for connecting and for each SMTP command, including the message transfer.",
    )
    ca_file: str | None = Field(
        default=None, description="A PEM file of extra certificates to trust (a private CA or a self-signed server).",
    )
    helo_name: str | None = Field(
        default=None, description="Name we greet the server with (EHLO); the domain of from_address by default.",
    )

    @model_validator(mode="before")
    @classmethod
    def _starttls_shorthand(cls, data: Any) -> Any:
        """Early configs said `starttls: true` (the documented sketch did); it keeps working as a shorthand."""
        if isinstance(data, dict) and "starttls" in data:
            data = dict(data)
            flag = data.pop("starttls")
            if "security" in data:
                raise ValueError("starttls and security both set: keep security (starttls, tls or none)")
            if not isinstance(flag, bool):
                raise ValueError("starttls must be true or false (or use security: starttls | tls | none)")
            data["security"] = "starttls" if flag else ("tls" if data.get("port") == 465 else "none")
        return data

    @field_validator("username", "helo_name", "ca_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("password", mode="before")
    @classmethod
    def _empty_password(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value else value

    @model_validator(mode="after")
    def _login_pair(self) -> SmtpSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together: set both for SMTP AUTH, or neither")
        return self

    @property
    def effective_port(self) -> int:
        return self.port or {"starttls": 587, "tls": 465, "none": 25}[self.security]


class InboundSettings(BaseModel):
    """The built-in receiver replies are delivered to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="Interface the receiver listens on (0.0.0.0 for every interface).")
    port: int = Field(default=2525, ge=0, le=65535, description="Port the receiver listens on (0 picks a free one).")
    address: str | None = Field(
        default=None,
        description="The mailbox recipients reply to, e.g. desk@example.com; each message's Reply-To is this address "
        "with the handoff's token added (desk+<token>@example.com). Defaults to reply_to, then from_address.",
    )
    max_message_size: int = Field(
        default=2_000_000, ge=10_000, le=50_000_000, description="Largest accepted message in bytes (attachments included).",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = _address(value)
        if "+" in value.split("@", 1)[0]:
            raise ValueError("must not contain '+': the handoff token is added after a '+'")
        return value


class EmailConfig(ChannelConfig):
    kind: Literal["email"] = "email"
    to: list[str] = Field(min_length=1, max_length=50, description="Recipient addresses every handoff is sent to.")
    from_address: str = Field(
        validation_alias=AliasChoices("from_address", "from"),
        description="Sender address of every message, e.g. desk@example.com (the SMTP account must be allowed to use it). "
        "`from` is accepted as another name for this key.",
    )
    from_name: str = Field(default="Handoff Desk", max_length=80, description="Display name shown next to from_address.")
    reply_to: str | None = Field(
        default=None,
        description="Where replies go, before the handoff token is added; inbound.address, then from_address by default.",
    )
    smtp: SmtpSettings = Field(description="The outgoing mail server: {host, port, security, username, password, timeout}.")
    inbound: InboundSettings | None = Field(
        default=None,
        description="The built-in receiver for replies: {host, port, address, max_message_size}. Without it the desk "
        "sends mail but receives no replies (use the return form or the owner inbox to release).",
    )
    reply_token_secret: SecretStr | None = Field(
        default=None,
        description="Key for the MAC in reply tokens (any long random string). By default derived from the desk's "
        "secret_key; set it to keep replies to old mails working across a secret_key rotation.",
    )
    accept_forwarded: bool = Field(
        default=True,
        description="Accept a reply from an address not in `to` when it carries the handoff's token (the handoff email "
        "was forwarded to a colleague). false: only the `to` addresses may answer.",
    )

    @field_validator("to")
    @classmethod
    def _recipients(cls, value: list[str]) -> list[str]:
        cleaned = []
        for index, item in enumerate(value):
            try:
                cleaned.append(_address(item))
            except ValueError as exc:
                raise ValueError(f"item {index}: {exc}") from None
        return cleaned

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        return _address(value)

    @field_validator("from_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return one_line(value, 80)

    @field_validator("reply_to")
    @classmethod
    def _reply_to(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = _address(value)
        if "+" in value.split("@", 1)[0]:
            raise ValueError("must not contain '+': the handoff token is added after a '+'")
        return value

    @field_validator("reply_token_secret", mode="before")
    @classmethod
    def _empty_secret(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def reply_mailbox(self) -> str:
        """The address replies go to, before the token is added."""
        return self.reply_to or (self.inbound.address if self.inbound and self.inbound.address else None) or self.from_address

    @property
    def receiving_mailbox(self) -> str:
        """The address the built-in receiver accepts (with or without a token)."""
        return (self.inbound.address if self.inbound and self.inbound.address else None) or self.reply_mailbox


# --------------------------------------------------------------------------- text helpers

_CONTROL_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def one_line(text: str, limit: int | None = None) -> str:
    """Text fit for a header: every control, format and line-separator character (CR, LF,
    NUL, U+2028, bidi overrides …) becomes a space, runs of spaces collapse, long text is cut."""
    cleaned = "".join(" " if unicodedata.category(ch) in _CONTROL_CATEGORIES else ch for ch in text)
    cleaned = " ".join(cleaned.split())
    if limit is not None and len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds // 3600} hour{'s' if seconds != 3600 else ''}"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} minute{'s' if seconds != 60 else ''}"
    return f"{seconds} seconds"


# Where quoted history starts, line by line (checked on each line of the reply).
_QUOTE_HEADERS = [
    re.compile(r"^\s*-{2,}\s*(original message|forwarded message|ursprüngliche nachricht|message d'origine)\s*-{2,}\s*$", re.I),
    re.compile(r"^\s*_{10,}\s*$"),  # Outlook on the web draws a line above the quoted header block
    re.compile(r"^\s*begin forwarded message:\s*$", re.I),
]
# An attribution names a date or time ("On Mon, 3 Jun 2024 at 10:00, Sam <…> wrote:"): the
# digit keeps "On second thought, here is what Sam wrote:" in the reply.
_ON_WROTE = re.compile(r"^\s*(on|am|le|el|op)\s(?=[^\n]*\d).{0,300}?(wrote|schrieb|a écrit|escribió|schreef)\s*:\s*$", re.I | re.S)
_HEADER_BLOCK_START = re.compile(r"^\s*\**(from|von|de|van)\s*:\**\s", re.I)
_HEADER_BLOCK_FIELD = re.compile(r"^\s*\**(sent|date|gesendet|datum|envoyé|enviado|to|an|à|para|subject|betreff|objet|asunto)\s*:", re.I)
_SIGNATURE = re.compile(r"^(-- ?|--)$")
_MOBILE_SIGNATURE = re.compile(r"^\s*(sent from my |get outlook for |sent from (mail|yahoo mail) for )", re.I)


def strip_reply(text: str) -> str:
    """The new words of an email reply: quoted history and the signature removed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    for index, line in enumerate(lines):
        if _SIGNATURE.match(line) or any(p.match(line) for p in _QUOTE_HEADERS):
            break
        if _ON_WROTE.match(line):
            break
        # Gmail wraps a long attribution: "On Mon, 3 Jun 2024 at 10:00, Sam Lee <sam@…>" / "wrote:"
        if index + 1 < len(lines) and re.match(r"^\s*(on|am|le|el|op)\s", line, re.I) and _ON_WROTE.match(line + " " + lines[index + 1]):
            break
        if _HEADER_BLOCK_START.match(line) and sum(
            1 for following in lines[index + 1 : index + 5] if _HEADER_BLOCK_FIELD.match(following)
        ) >= 2:
            break  # Outlook: "From: …" / "Sent: …" / "To: …" / "Subject: …"
        if line.lstrip().startswith(">"):
            continue  # quoted lines, also between the answers of an inline reply
        kept.append(line.rstrip())
    while kept and not kept[-1].strip():
        kept.pop()
    if kept and _MOBILE_SIGNATURE.match(kept[-1]):
        kept.pop()
    result = "\n".join(kept).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", result).strip()


class _HtmlText(HTMLParser):
    """HTML to readable text: block elements end lines, quoted parts and non-content are dropped."""

    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "hr", "pre"}
    SKIP = {"script", "style", "head", "title", "blockquote"}
    QUOTE_CLASSES = ("gmail_quote", "yahoo_quoted", "moz-cite-prefix", "protonmail_quote")
    VOID = {"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, skipping) for elements that matter
        self._ended = False  # past Outlook's header block of the quoted message: the rest is history

    @property
    def _skipping(self) -> bool:
        return self._ended or any(skip for _tag, skip in self._stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        css = (attributes.get("class") or "") + " " + (attributes.get("id") or "")
        if "divRplyFwdMsg" in css or "appendonsend" in css:
            self._ended = True  # Outlook puts the quoted message *after* this block, not inside it
        skip = tag in self.SKIP or any(name in css for name in self.QUOTE_CLASSES)
        if tag in self.BLOCKS and not self._skipping:
            self.parts.append("\n")
        if tag == "li" and not self._skipping:
            self.parts.append("• ")
        if tag not in self.VOID:
            self._stack.append((tag, skip))

    def handle_endtag(self, tag: str) -> None:
        for position in range(len(self._stack) - 1, -1, -1):
            if self._stack[position][0] == tag:
                del self._stack[position:]
                break
        if tag in self.BLOCKS and not self._skipping:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(re.sub(r"[ \t\r\n\f]+", " ", data))


def html_to_text(markup: str) -> str:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.parts).replace("\xa0", " ")
    lines = [line.strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def _b32(data: bytes, length: int) -> str:
    return base64.b32encode(data).decode().lower()[:length]


def message_ids_in(value: str | None) -> list[str]:
    return re.findall(r"<[^<>\s]+>", value or "")


# --------------------------------------------------------------------------- the adapter


@dataclass
class _Verdict:
    """What the receiver decided about one incoming message."""

    reply: str  # the SMTP answer
    message: InboundMessage | None = None


class EmailChannel(ChannelAdapter):
    kind = "email"
    config_model = EmailConfig
    # threads: replies map to their handoff by token; reconcile: SMTP cannot look a sent
    # message up, so a send that timed out mid-transfer is retried (maybe delivered twice).
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=False, reconcile=False)
    config: EmailConfig

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: ChannelContext | None = None
        self._server: asyncio.base_events.Server | None = None
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._recipients = {address.lower() for address in self.config.to}
        self._mac_key = self._reply_token_key(b"")
        self._domain = self.config.from_address.rsplit("@", 1)[1].lower()
        self._approval_subjects: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ tokens

    def _reply_token_key(self, desk_secret: bytes) -> bytes:
        """`reply_token_secret` if set, else the desk's per-channel secret, else (outside a
        desk) the SMTP password or, unkeyed, the sender address."""
        configured = self.config.reply_token_secret or (None if desk_secret else self.config.smtp.password)
        if configured is not None:
            material = configured.get_secret_value().encode()
        else:
            material = desk_secret or self.config.from_address.lower().encode()
        return hmac.new(material, b"handoff-desk email reply token", hashlib.sha256).digest()

    @staticmethod
    def thread_key_of(handoff_session_id: str) -> str:
        """Stable for the handoff, lower-case base32 (mail systems may fold case), one-way."""
        digest = hashlib.sha256(b"handoff-desk email thread\0" + handoff_session_id.encode()).digest()
        return _b32(digest, THREAD_KEY_LENGTH)

    def token_of(self, handoff_session_id: str) -> str:
        key = self.thread_key_of(handoff_session_id)
        return key + _b32(hmac.new(self._mac_key, key.encode(), hashlib.sha256).digest(), MAC_LENGTH)

    def thread_key_from_token(self, token: str) -> str | None:
        """The thread key a token carries, or None when its MAC is wrong."""
        token = token.lower()
        if not _TOKEN.fullmatch(token):
            return None
        key, mac = token[:THREAD_KEY_LENGTH], token[THREAD_KEY_LENGTH:]
        expected = _b32(hmac.new(self._mac_key, key.encode(), hashlib.sha256).digest(), MAC_LENGTH)
        return key if hmac.compare_digest(mac, expected) else None

    def reply_address(self, handoff_session_id: str) -> str:
        local, domain = self.config.reply_mailbox.rsplit("@", 1)
        return f"{local}+{self.token_of(handoff_session_id)}@{domain}"

    def _new_message_id(self, handoff_session_id: str) -> str:
        return f"<hd.{self.token_of(handoff_session_id)}.{secrets.token_hex(8)}@{self._domain}>"

    def approval_message_id(self, approval_id: str, part: Literal["prompt", "closed"] = "prompt") -> str:
        """Derived from the approval id alone: the closing mail names the prompt it answers
        without stored state, and a retried send carries the same id (clients collapse it)."""
        return f"<ap.{self.thread_key_of(approval_id)}.{part}@{self._domain}>"

    def approval_reply_address(self) -> str:
        local, domain = self.config.reply_mailbox.rsplit("@", 1)
        return f"{local}+{APPROVAL_TAG}@{domain}"

    # ------------------------------------------------------------------ lifecycle

    @property
    def inbound_port(self) -> int | None:
        """The port the receiver listens on (useful with `inbound.port: 0`)."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

    async def start(self, ctx: ChannelContext) -> None:
        self._ctx = ctx
        self._mac_key = self._reply_token_key(ctx.secret)
        await self.probe()  # refused credentials or a wrong security mode: unavailable, with the reason
        if not ctx.secret and self.config.reply_token_secret is None and self.config.smtp.password is None:
            log.warning("email_reply_tokens_unkeyed", channel_id=self.id,
                        hint="set reply_token_secret: without it (and without an SMTP password) reply tokens are "
                             "only as secret as the handoff ids")
        if self.config.inbound is not None:
            await self._start_receiver(self.config.inbound)
        log.info("email_started", channel_id=self.id, smtp=f"{self.config.smtp.host}:{self.config.smtp.effective_port}",
                 receiver=f"{self.config.inbound.host}:{self.inbound_port}" if self.config.inbound else None,
                 reply_to=self.config.reply_mailbox)

    async def _start_receiver(self, settings: InboundSettings) -> None:
        from aiosmtpd.smtp import SMTP

        handler = _Receiver(self)
        loop = asyncio.get_running_loop()

        def session() -> SMTP:
            protocol = SMTP(handler, data_size_limit=settings.max_message_size, hostname=self._domain,
                            ident="Handoff Desk", enable_SMTPUTF8=True, decode_data=False, timeout=60, loop=loop)
            self._sessions.add(protocol)
            return protocol

        try:
            self._server = await loop.create_server(session, host=settings.host, port=settings.port)
        except OSError as exc:
            raise TransientChannelError(
                f"the email receiver cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}",
                hint=f"inbound.port {settings.port} on {settings.host} is not available ({exc.strerror or exc}); "
                     "pick a free port or stop whatever holds it",
            ) from exc

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            # Open SMTP sessions too, so stop() never waits on a slow sender.
            for protocol in self._sessions:
                if protocol.transport is not None and not protocol.transport.is_closing():
                    protocol.transport.close()
            self._sessions.clear()
            await self._server.wait_closed()
            self._server = None

    async def probe(self) -> str:
        """Connect, EHLO (STARTTLS / implicit TLS), log in when configured, QUIT."""
        smtp = self._client()
        await self._run("connect", smtp.connect())
        try:
            await smtp.quit()
        except Exception:  # the check passed; a clumsy goodbye is not a failure
            smtp.close()
        settings = self.config.smtp
        login = f" as {settings.username}" if settings.username else " without login"
        secure = {"starttls": "STARTTLS", "tls": "TLS", "none": "no encryption"}[settings.security]
        return f"{settings.host}:{settings.effective_port} ({secure}){login}, sending as {self.config.from_address}"

    def _client(self) -> aiosmtplib.SMTP:
        import aiosmtplib

        settings = self.config.smtp
        context = None
        if settings.security != "none":
            context = ssl.create_default_context()
            if settings.ca_file:
                try:
                    context.load_verify_locations(cafile=settings.ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise PermanentChannelError(f"cannot read smtp.ca_file: {exc}",
                                                hint=f"smtp.ca_file ({settings.ca_file}) is not a readable PEM file: {exc}") from exc
        return aiosmtplib.SMTP(
            hostname=settings.host, port=settings.effective_port, timeout=settings.timeout,
            use_tls=settings.security == "tls", start_tls=True if settings.security == "starttls" else False,
            tls_context=context, username=settings.username,
            password=settings.password.get_secret_value() if settings.password else None,
            local_hostname=settings.helo_name or self._domain,
        )

    # ------------------------------------------------------------------ sending

    async def send(self, outbound: Outbound) -> Receipt:
        if self._ctx is None:
            raise TransientChannelError("the email channel is not started", hint="the email channel is not running")
        if outbound.notice in ("approval", "approval_closed"):
            return await self._send_approval(outbound)
        message_id = self._new_message_id(outbound.handoff_session_id)
        if outbound.purpose == "dispatch":
            message, subject = self._dispatch_message(outbound)
            thread = {"message_id": message_id, "subject": subject}
        else:
            message = self._follow_up_message(outbound)
            thread = dict(outbound.thread)
        message["Message-ID"] = message_id
        await self._deliver(message)
        return Receipt(message_id=message_id, thread_key=self.thread_key_of(outbound.handoff_session_id), thread=thread)

    def _envelope(self, outbound: Outbound, subject: str, *, reply_to: str | None = None) -> EmailMessage:
        message = EmailMessage(policy=_WIRE)
        message["From"] = formataddr((self.config.from_name, self.config.from_address))
        message["To"] = ", ".join(self.config.to)
        message["Reply-To"] = reply_to or self.reply_address(outbound.handoff_session_id)
        message["Subject"] = subject
        message["Date"] = formatdate(usegmt=True)
        # Vacation responders and ticket systems leave auto-generated mail alone (RFC 3834),
        # so an out-of-office answer does not land in the subscriber's chat.
        message["Auto-Submitted"] = "auto-generated"
        message["X-Auto-Response-Suppress"] = "All"
        message["X-Handoff-Desk"] = outbound.short_code
        return message

    def _dispatch_message(self, outbound: Outbound) -> tuple[EmailMessage, str]:
        brief = outbound.brief
        if brief is None:
            raise PermanentChannelError("a dispatch without its brief", hint="internal error: the dispatch carried no brief")
        subject = one_line(outbound.subject or f"[Handoff {brief.short_code}] {brief.summary}", SUBJECT_LIMIT)
        if brief.urgency == "high" and "URGENT" not in subject:
            subject = one_line("[URGENT] " + subject, SUBJECT_LIMIT)
        message = self._envelope(outbound, subject)
        variables = self._dispatch_variables(brief)
        message.set_content(self._render("dispatch.txt", **variables))
        message.add_alternative(self._render("dispatch.html", **variables), subtype="html")
        return message, subject

    def _dispatch_variables(self, brief: HandoffBrief) -> dict[str, Any]:
        return {
            "brief": brief,
            "who": brief.subscriber_name or "A subscriber",
            "fields": [preview_line(f) for f in brief.expected_return],
            "transcript": [(line.author or line.role, clip(line.text, TRANSCRIPT_LINE)) for line in brief.transcript],
            "idle": duration(brief.idle_timeout_seconds),
        }

    def _follow_up_message(self, outbound: Outbound) -> EmailMessage:
        """A relay or notice: a reply in the handoff's thread."""
        root = outbound.thread.get("message_id")
        subject = outbound.thread.get("subject") or f"[Handoff {outbound.short_code}]"
        message = self._envelope(outbound, one_line("Re: " + str(subject).removeprefix("Re: "), SUBJECT_LIMIT))
        if root:
            message["In-Reply-To"] = str(root)
            message["References"] = str(root)
        body = (outbound.body if outbound.body is not None else outbound.text).strip()
        variables = {"author": one_line(outbound.author or "Subscriber", 200), "body": body, "short_code": outbound.short_code}
        name = "relay" if outbound.purpose == "relay" else "notice"
        message.set_content(self._render(f"{name}.txt", **variables))
        message.add_alternative(self._render(f"{name}.html", **variables), subtype="html")
        return message

    # ------------------------------------------------------------------ approvals

    async def _send_approval(self, outbound: Outbound) -> Receipt:
        """An approval prompt as a new mail (not in any handoff thread), or the mail that
        closes it, answering the prompt by its derived Message-ID."""
        approval_id = outbound.handoff_session_id
        prompt_id = self.approval_message_id(approval_id, "prompt")
        if outbound.notice == "approval":
            brief = outbound.approval
            if brief is None:
                raise PermanentChannelError("an approval prompt without its brief",
                                            hint="internal error: the approval prompt carried no approval")
            subject = one_line(f"[Approval needed] {brief.action_id} ({brief.risk} risk)", SUBJECT_LIMIT)
            message = self._envelope(outbound, subject, reply_to=self.approval_reply_address())
            variables = self._approval_variables(brief)
            message.set_content(self._render("approval.txt", **variables))
            message.add_alternative(self._render("approval.html", **variables), subtype="html")
            message_id = prompt_id
            self._approval_subjects[approval_id] = subject
            while len(self._approval_subjects) > APPROVAL_SUBJECTS:
                self._approval_subjects.popitem(last=False)
        else:
            body = (outbound.body if outbound.body is not None else outbound.text).strip()
            # Mail clients that thread by subject want the prompt's; after a restart it is
            # unknown here (the closing notice carries only its text) and the headers still thread it.
            prompt_subject = self._approval_subjects.pop(approval_id, None)
            subject = one_line("Re: " + prompt_subject if prompt_subject else f"[Approval closed] {body}", SUBJECT_LIMIT)
            message = self._envelope(outbound, subject, reply_to=self.approval_reply_address())
            message["In-Reply-To"] = prompt_id
            message["References"] = prompt_id
            variables = {"body": body, "approval_id": approval_id}
            message.set_content(self._render("approval_closed.txt", **variables))
            message.add_alternative(self._render("approval_closed.html", **variables), subtype="html")
            message_id = self.approval_message_id(approval_id, "closed")
        del message["X-Handoff-Desk"]
        message["X-Handoff-Approval"] = approval_id
        message["Message-ID"] = message_id
        await self._deliver(message)
        return Receipt(message_id=message_id, thread={"message_id": prompt_id})

    def _approval_variables(self, brief: ApprovalBrief) -> dict[str, Any]:
        # cut visibly, never replaced: the page shows them all
        arguments, left_out = pretty_arguments(brief.arguments, ARGUMENTS_LIMIT)
        return {
            "a": brief,
            "who": one_line(brief.subscriber_name, 200) if brief.subscriber_name else None,
            "arguments": arguments,
            "left_out": left_out,
            "deadline": _deadline(brief.expires_at),
        }

    def _render(self, name: str, **variables: Any) -> str:
        assert self._ctx is not None
        # .html templates are autoescaped: every value from the brief is escaped; .txt are plain.
        return self._ctx.render(f"messages/email/{name}", **variables).strip() + "\n"

    async def _deliver(self, message: EmailMessage) -> None:
        """One SMTP session for one message: connect, MAIL, RCPT per recipient, DATA, QUIT."""
        import aiosmtplib

        smtp = self._client()
        await self._run("connect", smtp.connect())
        try:
            await self._run("MAIL FROM", smtp.mail(self.config.from_address))
            refused: dict[str, aiosmtplib.SMTPRecipientRefused] = {}
            for recipient in self.config.to:
                try:
                    await self._run("RCPT TO", smtp.rcpt(recipient), passthrough=(aiosmtplib.SMTPRecipientRefused,))
                except aiosmtplib.SMTPRecipientRefused as exc:
                    refused[recipient] = exc
            if len(refused) == len(self.config.to):
                raise self._refused(refused)
            await self._run("DATA", smtp.data(message.as_bytes(policy=_WIRE)), body_sent=True)
            if refused:  # delivered to the others; a retry would repeat it for them
                log.warning("email_some_recipients_refused", channel_id=self.id,
                            refused={r: f"{e.code} {e.message}" for r, e in refused.items()})
        finally:
            if smtp.is_connected:
                try:
                    await smtp.quit()
                except Exception:  # the message is handed over; the goodbye does not matter
                    smtp.close()

    def _refused(self, refused: dict[str, Any]) -> ChannelError:
        words = "; ".join(f"{r}: {e.code} {e.message}" for r, e in refused.items())
        if all(400 <= e.code < 500 for e in refused.values()):
            return TransientChannelError(f"SMTP RCPT TO: {words}", hint=f"the SMTP server deferred every recipient ({words})")
        return PermanentChannelError(f"SMTP RCPT TO: {words}", hint=f"the SMTP server refused the recipients: {words}")

    # ------------------------------------------------------------------ errors

    async def _run(self, stage: str, call: Any, *, body_sent: bool = False, passthrough: tuple[type[BaseException], ...] = ()) -> Any:
        """Await one SMTP step and turn every failure into a typed channel error."""
        try:
            return await call
        except passthrough:
            raise
        except Exception as exc:
            error = self._error(stage, exc, body_sent=body_sent)
            if error is None:
                raise
            raise error from exc

    def _error(self, stage: str, exc: Exception, *, body_sent: bool) -> ChannelError | None:
        import aiosmtplib

        settings = self.config.smtp
        where = f"{settings.host}:{settings.effective_port}"
        if isinstance(exc, ChannelError):
            return exc
        if isinstance(exc, aiosmtplib.SMTPAuthenticationError) and not 400 <= exc.code < 500:
            return ChannelAuthError(f"SMTP login refused: {exc.code} {exc.message}", hint=(
                f"the SMTP server refused smtp.username / smtp.password ({exc.code} {one_line(exc.message, 300)})"))
        if isinstance(exc, aiosmtplib.SMTPResponseException):
            words = f"{exc.code} {one_line(exc.message, 500)}"
            if 400 <= exc.code < 500:
                return TransientChannelError(f"SMTP {stage}: {words}", hint=f"the SMTP server said to try later ({words})")
            if stage == "DATA" or exc.code >= 500:
                return PermanentChannelError(f"SMTP {stage}: {words}", hint=f"the SMTP server refused the message at {stage}: {words}")
        if isinstance(exc, aiosmtplib.SMTPTimeoutError | aiosmtplib.SMTPServerDisconnected) and body_sent:
            return UncertainDeliveryError(f"SMTP {stage}: {type(exc).__name__}: {exc}", hint=(
                f"the connection to {where} ended while the message was being handed over; it may have been sent"))
        if isinstance(exc, aiosmtplib.SMTPConnectTimeoutError | aiosmtplib.SMTPReadTimeoutError | TimeoutError):
            return TransientChannelError(f"SMTP {stage}: timed out", hint=f"the SMTP server {where} did not answer in time")
        cause = exc.__cause__ or exc.__context__
        if isinstance(exc, ssl.SSLCertVerificationError) or isinstance(cause, ssl.SSLCertVerificationError):
            detail = getattr(exc if isinstance(exc, ssl.SSLCertVerificationError) else cause, "verify_message", "") or str(exc)
            return PermanentChannelError(f"SMTP {stage}: certificate not trusted: {detail}", hint=(
                f"the certificate of {where} is not trusted ({detail}); fix the server's certificate, or set smtp.ca_file "
                "to the CA that signed it"))
        if isinstance(exc, ssl.SSLError) or isinstance(cause, ssl.SSLError):
            return PermanentChannelError(f"SMTP {stage}: TLS failed: {exc}", hint=(
                f"TLS with {where} failed ({exc}); check smtp.security: tls for port 465, starttls for 587"))
        if isinstance(exc, aiosmtplib.SMTPNotSupported) or (
            isinstance(exc, aiosmtplib.SMTPException) and not isinstance(exc, aiosmtplib.SMTPServerDisconnected | aiosmtplib.SMTPConnectError)
        ):
            return PermanentChannelError(f"SMTP {stage}: {exc}", hint=(
                f"the SMTP server {where} cannot do what the config asks ({exc}); check smtp.security and smtp.username"))
        if isinstance(exc, aiosmtplib.SMTPConnectError | aiosmtplib.SMTPServerDisconnected | ConnectionError | OSError):
            return TransientChannelError(f"SMTP {stage}: {exc}", hint=f"could not talk to the SMTP server {where} ({exc})")
        return None

    # ------------------------------------------------------------------ inbound

    def _accepts_recipient(self, address: str) -> str | None:
        """None when `address` is our mailbox (with or without a +token), else the refusal."""
        local, _, domain = address.strip().strip("<>").rpartition("@")
        written_to = f"{local.split('+', 1)[0]}@{domain}".lower()
        if written_to in (self.config.receiving_mailbox.lower(), self.config.reply_mailbox.lower()):
            return None
        return f"550 5.1.1 <{one_line(address, 200)}>: no such mailbox here (this server takes replies to handoff emails only)"

    def _token_key(self, envelope_recipients: list[str], message: EmailMessage) -> str | None:
        """The thread key of a valid token in the address written to, or in the thread headers;
        APPROVAL_TAG when the message answers an approval mail instead (first found wins:
        the address written to, then the direct parent, then the older references)."""
        for address in envelope_recipients:
            local = address.strip("<>").rpartition("@")[0]
            if "+" in local:
                tag = local.split("+", 1)[1]
                if tag.lower() == APPROVAL_TAG:
                    return APPROVAL_TAG
                key = self.thread_key_from_token(tag)
                if key:
                    return key
        for header in ("In-Reply-To", "References"):
            for message_id in reversed(message_ids_in(str(message.get(header, "")))):
                if _APPROVAL_MESSAGE_ID.match(message_id) and message_id.lower().endswith(f"@{self._domain}>"):
                    return APPROVAL_TAG
                match = _MESSAGE_ID_TOKEN.match(message_id)
                key = self.thread_key_from_token(match.group(1)) if match else None
                if key:
                    return key
        return None

    def judge(self, raw: bytes, mail_from: str, envelope_recipients: list[str]) -> _Verdict:
        """Decide what to do with one received message (the SMTP answer, and what to relay)."""
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        mail_from = "" if mail_from.strip() in ("", "<>") else mail_from.strip()  # aiosmtpd keeps "<>" for a bounce
        name, sender = parseaddr(str(message.get("From", "")))
        sender = sender.lower() or mail_from.lower()
        message_id = (message_ids_in(str(message.get("Message-ID", ""))) or [""])[0]

        if not mail_from or _is_automatic(message):
            return _Verdict("250 2.0.0 accepted (an automatic message: not relayed)")
        if message_id.lower().startswith(("<hd.", "<ap.")) and message_id.lower().endswith(f"@{self._domain}>"):
            return _Verdict("250 2.0.0 accepted (our own message: not relayed)")
        key = self._token_key(envelope_recipients, message)
        if key == APPROVAL_TAG:  # decisions are made on the signed page, never by a reply
            return _Verdict(APPROVAL_REFUSAL)
        known = sender in self._recipients
        if key is None:
            if known:
                return _Verdict("550 5.7.1 no handoff found for this message: answer by replying to a handoff email "
                                "(its reply address carries the handoff's token)")
            return _Verdict(f"550 5.7.1 <{one_line(sender, 200)}> may not write to this desk")
        if not known and not self.config.accept_forwarded:
            return _Verdict(f"550 5.7.1 <{one_line(sender, 200)}> is not a recipient of this desk's handoffs")

        text = _reply_text(message)
        if not text:
            return _Verdict("550 5.6.0 the reply is empty once the quoted message is removed: nothing to relay")
        # The Message-ID is the sender's promise of identity (a retry carries the same one);
        # without one, the exact bytes. Hashed when long: the core keeps keys of 200 characters.
        dedupe = f"message-id:{message_id}" if message_id else "sha256:" + hashlib.sha256(raw).hexdigest()
        if len(dedupe) > 200:
            dedupe = "message-id-sha256:" + hashlib.sha256(message_id.encode()).hexdigest()
        author = one_line(name, 200) or sender
        return _Verdict("250 2.0.0 reply accepted", InboundMessage(thread_key=key, text=text, author=author, dedupe_key=dedupe))


def _deadline(expires_at: str) -> str:
    """"14 Mar 2026, 10:05 UTC" from the brief's ISO time (the desk keeps UTC)."""
    try:
        return datetime.fromisoformat(expires_at).strftime("%d %b %Y, %H:%M UTC")
    except ValueError:
        return one_line(expires_at, 40)


def _is_automatic(message: EmailMessage) -> bool:
    """Bounces, vacation notices and list mail: never a person answering (RFC 3834)."""
    auto = str(message.get("Auto-Submitted", "no")).strip().lower()
    if auto and not auto.startswith("no"):
        return True
    if str(message.get("Precedence", "")).strip().lower() in AUTO_PRECEDENCE:
        return True
    if any(message.get(h) for h in ("X-Autoreply", "X-Autorespond")):
        return True
    return str(message.get_content_type()) == "multipart/report"  # delivery status notifications


def _reply_text(message: EmailMessage) -> str:
    """The new words of a reply: the text/plain part (else the HTML one as text), stripped of
    quoted history and signature, with a note about attachments that were not forwarded."""
    part = message.get_body(preferencelist=("plain", "html"))
    text = ""
    if part is not None:
        try:
            content = part.get_content()
        except (LookupError, ValueError):  # an unknown charset: decode what can be decoded
            payload = part.get_payload(decode=True)
            content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
        if part.get_content_type() == "text/html":
            content = html_to_text(str(content))
        text = strip_reply(str(content))
    names = [p.get_filename() or p.get_content_type() for p in message.iter_attachments()]
    if names:
        note = f"[{len(names)} attachment(s) not forwarded: {', '.join(one_line(n, 80) for n in names)}]"
        text = f"{text}\n{note}" if text else note
    return text.replace("\x00", "\ufffd")


class _Receiver:
    """aiosmtpd handler of the built-in receiver; runs in the desk's own event loop."""

    def __init__(self, channel: EmailChannel) -> None:
        self.channel = channel

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: list[str]) -> str:
        refusal = self.channel._accepts_recipient(address)
        if refusal is not None:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        channel = self.channel
        raw = envelope.original_content or envelope.content or b""
        try:
            verdict = channel.judge(bytes(raw), envelope.mail_from or "", list(envelope.rcpt_tos))
        except Exception:  # a message we cannot parse is the sender's problem, not a crash
            log.exception("email_inbound_unparseable", channel_id=channel.id)
            return "550 5.6.0 the message could not be read"
        if verdict.message is None:
            log.info("email_inbound_refused" if verdict.reply.startswith("5") else "email_inbound_dropped",
                     channel_id=channel.id, mail_from=envelope.mail_from, reply=verdict.reply)
            return verdict.reply
        if channel._ctx is None:
            return "451 4.3.0 the desk is starting; try again later"
        try:
            # Stored before we answer 250: a crash now means the sender retries (deduplicated).
            await channel._ctx.deliver_inbound(verdict.message)
        except Exception:
            log.exception("email_inbound_store_failed", channel_id=channel.id)
            return "451 4.3.0 the desk could not store the message; try again later"
        return verdict.reply


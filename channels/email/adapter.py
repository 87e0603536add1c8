"""EmailChannel: the adapter the desk runs. It renders each outbound message from the
templates in templates/messages/email/ and hands it to the SMTP client; the receiver, the
reply parser and the tokens are its bases and modules beside it."""

from __future__ import annotations

import asyncio
import weakref
from datetime import datetime
from email.message import EmailMessage
from email.utils import formataddr, formatdate
from typing import Any, Literal

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import (
    ApprovalBrief,
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelConfig,
    ChannelContext,
    Dispatch,
    HandoffBrief,
    HandoffMessage,
    Notice,
    PermanentChannelError,
    Receipt,
    Relay,
    TransientChannelError,
    pretty_arguments,
    short_code_of,
)
from channels.email.config import EmailConfig, _address
from channels.email.receiver import ReplyReceiving
from channels.email.smtp import _WIRE, SmtpSending
from channels.email.text import duration, one_line
from channels.text import clip

log = structlog.get_logger(__name__)

SUBJECT_LIMIT = 160
TRANSCRIPT_LINE = 2000  # characters of one transcript message in the dispatch
ARGUMENTS_LIMIT = 50_000  # characters of pretty JSON shown in an approval prompt; the page shows all
APPROVAL_SUBJECTS = 10_000  # approval id -> prompt subject, so the closing mail threads in clients that match subjects


class EmailChannel(SmtpSending, ReplyReceiving):
    """The email adapter: renders and sends; its bases are the SMTP client, the reply
    receiver and the reply tokens (channels/email/smtp.py, receiver.py, tokens.py)."""

    kind = "email"
    config_model = EmailConfig
    # threads: replies map to their handoff by token; reconcile: SMTP cannot look a sent
    # message up, so a send that timed out mid-transfer is retried (maybe delivered twice).
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=False, reconcile=False, approvals=True,
                                direct=True)
    config: EmailConfig

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: ChannelContext | None = None
        self._server: asyncio.base_events.Server | None = None
        self._sessions: weakref.WeakSet[Any] = weakref.WeakSet()
        self._recipients = {address.lower() for address in self.config.to}
        self._mac_key = self._reply_token_key(b"")
        self._domain = self.config.from_address.rsplit("@", 1)[1].lower()
        self._approval_subjects: BoundedDict[str, str] = BoundedDict(APPROVAL_SUBJECTS)

    # ------------------------------------------------------------------ lifecycle

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

    # ------------------------------------------------------------------ sending

    def _require_started(self) -> None:
        if self._ctx is None:
            raise TransientChannelError("the email channel is not started", hint="the email channel is not running")

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        self._require_started()
        person = _person_address(dispatch.direct) if dispatch.direct is not None else None
        message, subject = self._dispatch_message(dispatch, person)
        thread: dict[str, Any] = {"subject": subject} if person is None else {"subject": subject, "direct": person}
        return await self._send_in_thread(dispatch, message, thread)

    async def send_relay(self, relay: Relay) -> Receipt:
        self._require_started()
        author = one_line(relay.author or "Subscriber", 200)
        return await self._send_in_thread(relay, self._follow_up_message(relay, "relay", relay.body, author), dict(relay.thread))

    async def send_notice(self, notice: Notice) -> Receipt:
        self._require_started()
        return await self._send_in_thread(notice, self._follow_up_message(notice, "notice", notice.text), dict(notice.thread))

    async def _send_in_thread(self, outbound: HandoffMessage, message: EmailMessage, thread: dict[str, Any]) -> Receipt:
        """Send a handoff's mail under a new Message-ID; a dispatch's is the thread's root. A
        handoff mailed to one person (`thread["direct"]`) goes to them alone, on a thread of
        its own (channels/email/tokens.py)."""
        person = thread.get("direct")
        message_id = self._new_message_id(outbound.handoff_id, person)
        message["Message-ID"] = message_id
        await self._deliver(message, [person] if person else None)
        if isinstance(outbound, Dispatch):
            thread = {"message_id": message_id, **thread}
        key = self.thread_key_of(outbound.handoff_id) if not person else self.direct_thread_key_of(outbound.handoff_id, person)
        return Receipt(message_id=message_id, thread_key=key, thread=thread)

    def _envelope(self, about: str, subject: str, *, reply_to: str | None = None, person: str | None = None) -> EmailMessage:
        """The headers every mail has; `about` is the handoff (or approval) it belongs to,
        `person` the one address a direct mail goes to (else the channel's `to`)."""
        message = EmailMessage(policy=_WIRE)
        message["From"] = formataddr((self.config.from_name, self.config.from_address))
        message["To"] = person or ", ".join(self.config.to)
        message["Reply-To"] = reply_to or self.reply_address(about, person)
        message["Subject"] = subject
        message["Date"] = formatdate(usegmt=True)
        # Vacation responders and ticket systems leave auto-generated mail alone (RFC 3834),
        # so an out-of-office answer does not land in the subscriber's chat.
        message["Auto-Submitted"] = "auto-generated"
        message["X-Auto-Response-Suppress"] = "All"
        message["X-Handoff-Desk"] = short_code_of(about)
        return message

    def _dispatch_message(self, dispatch: Dispatch, person: str | None) -> tuple[EmailMessage, str]:
        brief = dispatch.brief
        subject = one_line(dispatch.subject or f"[Handoff {brief.short_code}] {brief.summary}", SUBJECT_LIMIT)
        if brief.urgency == "high" and "URGENT" not in subject:
            subject = one_line("[URGENT] " + subject, SUBJECT_LIMIT)
        message = self._envelope(dispatch.handoff_id, subject, person=person)
        variables = self._dispatch_variables(brief)
        message.set_content(self._render("dispatch.txt", **variables))
        message.add_alternative(self._render("dispatch.html", **variables), subtype="html")
        return message, subject

    def _dispatch_variables(self, brief: HandoffBrief) -> dict[str, Any]:
        return {
            "brief": brief,
            "who": brief.subscriber_name or "A subscriber",
            "fields": brief.field_lines,
            "transcript": [(line.author or line.role, clip(line.text, TRANSCRIPT_LINE)) for line in brief.transcript],
            "idle": duration(brief.idle_timeout_seconds),
        }

    def _follow_up_message(self, outbound: Relay | Notice, name: str, body: str, author: str = "Subscriber") -> EmailMessage:
        """A relay or notice (template `name`): a reply in the handoff's thread."""
        root = outbound.thread.get("message_id")
        subject = outbound.thread.get("subject") or f"[Handoff {outbound.short_code}]"
        message = self._envelope(outbound.handoff_id, one_line("Re: " + str(subject).removeprefix("Re: "), SUBJECT_LIMIT),
                                 person=outbound.thread.get("direct") or None)
        if root:
            message["In-Reply-To"] = str(root)
            message["References"] = str(root)
        variables = {"author": author, "body": body.strip(), "short_code": outbound.short_code}
        message.set_content(self._render(f"{name}.txt", **variables))
        message.add_alternative(self._render(f"{name}.html", **variables), subtype="html")
        return message

    # ------------------------------------------------------------------ approvals

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        """An approval prompt as a new mail (not in any handoff thread)."""
        self._require_started()
        brief = prompt.approval
        subject = one_line(f"[Approval needed] {brief.action_id} ({brief.risk} risk)", SUBJECT_LIMIT)
        message = self._envelope(brief.approval_id, subject, reply_to=self.approval_reply_address())
        variables = self._approval_variables(brief)
        message.set_content(self._render("approval.txt", **variables))
        message.add_alternative(self._render("approval.html", **variables), subtype="html")
        self._approval_subjects[brief.approval_id] = subject
        return await self._send_about_approval(brief.approval_id, message, "prompt")

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        """The mail that closes an approval, answering the prompt by its derived Message-ID."""
        self._require_started()
        approval_id, body = closed.approval.approval_id, closed.text.strip()
        prompt_id = self.approval_message_id(approval_id, "prompt")
        # Mail clients that thread by subject want the prompt's; after a restart it is
        # unknown here (the closing notice carries only its text) and the headers still thread it.
        prompt_subject = self._approval_subjects.pop(approval_id, None)
        subject = one_line("Re: " + prompt_subject if prompt_subject else f"[Approval closed] {body}", SUBJECT_LIMIT)
        message = self._envelope(approval_id, subject, reply_to=self.approval_reply_address())
        message["In-Reply-To"] = prompt_id
        message["References"] = prompt_id
        variables = {"body": body, "approval_id": approval_id}
        message.set_content(self._render("approval_closed.txt", **variables))
        message.add_alternative(self._render("approval_closed.html", **variables), subtype="html")
        return await self._send_about_approval(approval_id, message, "closed")

    async def _send_about_approval(
        self, approval_id: str, message: EmailMessage, which: Literal["prompt", "closed"],
    ) -> Receipt:
        prompt_id = self.approval_message_id(approval_id, "prompt")
        message_id = self.approval_message_id(approval_id, which)
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


def _person_address(address: str) -> str:
    """The address a direct dispatch goes to (`Dispatch.direct`), as the person's config has
    it; refused, never repaired, when it is not one address."""
    try:
        return _address(address, "one person's e-mail address")
    except ValueError as exc:
        raise PermanentChannelError(f"e-mail direct dispatch to {address!r}: {exc}", hint=(
            f"the person's e-mail address {address!r} is not one the desk can mail ({exc}); fix it in their people: entry"
        )) from None


def _deadline(expires_at: str) -> str:
    """"14 Mar 2026, 10:05 UTC" from the brief's ISO time (the desk keeps UTC)."""
    try:
        return datetime.fromisoformat(expires_at).strftime("%d %b %Y, %H:%M UTC")
    except ValueError:
        return one_line(expires_at, 40)

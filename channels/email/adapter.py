"""EmailChannel: the adapter the desk runs. It renders each outbound message from the
templates in templates/messages/email/ and hands it to the SMTP client; the receiver, the
reply parser and the tokens are its bases and modules beside it."""

from __future__ import annotations

import asyncio
import weakref
from datetime import datetime
from email.message import EmailMessage
from email.utils import formataddr, formatdate
from typing import Any

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import (
    ApprovalBrief,
    Capabilities,
    ChannelConfig,
    ChannelContext,
    HandoffBrief,
    Outbound,
    PermanentChannelError,
    Receipt,
    TransientChannelError,
    pretty_arguments,
)
from channels.email.config import EmailConfig
from channels.email.receiver import ReplyReceiving
from channels.email.smtp import _WIRE, SmtpSending
from channels.email.text import duration, one_line
from channels.text import clip
from forms.fields import preview_line

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


def _deadline(expires_at: str) -> str:
    """"14 Mar 2026, 10:05 UTC" from the brief's ISO time (the desk keeps UTC)."""
    try:
        return datetime.fromisoformat(expires_at).strftime("%d %b %Y, %H:%M UTC")
    except ValueError:
        return one_line(expires_at, 40)

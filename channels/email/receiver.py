"""The built-in SMTP receiver (aiosmtpd, in the desk's event loop) and its verdict on each
message: whose it is, which handoff it answers, and whether to relay, drop or refuse it
during the SMTP dialogue."""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from dataclasses import dataclass
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import parseaddr
from typing import Any

import structlog

from channels.base import ChannelContext, DeliveryFailure, RecipientText, TransientChannelError
from channels.email.config import InboundSettings
from channels.email.replies import _is_automatic, _reply_text, bounced, message_ids_in
from channels.email.text import one_line
from channels.email.tokens import _APPROVAL_MESSAGE_ID, _MESSAGE_ID_TOKEN, APPROVAL_TAG, ReplyTokens

log = structlog.get_logger(__name__)

APPROVAL_REFUSAL = ("550 5.7.1 approval requests are not answered by email: open the decision link in the request "
                    "to approve or deny (this reply was not passed on to anyone)")


@dataclass
class _Verdict:
    """What the receiver decided about one incoming message."""

    reply: str  # the SMTP answer
    message: RecipientText | DeliveryFailure | None = None


class ReplyReceiving(ReplyTokens):
    """The receiving half of EmailChannel; the adapter sets `_ctx` (at start), `_server`,
    `_sessions` and `_recipients` (the `to` addresses, lower-case)."""

    _ctx: ChannelContext | None
    _server: asyncio.base_events.Server | None
    _sessions: weakref.WeakSet[Any]
    _recipients: set[str]

    @property
    def inbound_port(self) -> int | None:
        """The port the receiver listens on (useful with `inbound.port: 0`)."""
        if self._server is None or not self._server.sockets:
            return None
        return int(self._server.sockets[0].getsockname()[1])

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

    def _accepts_recipient(self, address: str) -> str | None:
        """None when `address` is our mailbox (with or without a +token), else the refusal."""
        local, _, domain = address.strip().strip("<>").rpartition("@")
        written_to = f"{local.split('+', 1)[0]}@{domain}".lower()
        if written_to in (self.config.receiving_mailbox.lower(), self.config.reply_mailbox.lower()):
            return None
        return f"550 5.1.1 <{one_line(address, 200)}>: no such mailbox here (this server takes replies to handoff emails only)"

    def _token_key(self, envelope_recipients: list[str], message: EmailMessage, sender: str) -> tuple[str, bool] | None:
        """The thread key of a valid token in the address written to, or in the thread headers,
        and whether it is of a mail sent directly to `sender`; APPROVAL_TAG when the message
        answers an approval mail instead (first found wins: the address written to, then the
        direct parent, then the older references)."""
        for address in envelope_recipients:
            local = address.strip("<>").rpartition("@")[0]
            if "+" in local:
                tag = local.split("+", 1)[1]
                if tag.lower() == APPROVAL_TAG:
                    return APPROVAL_TAG, False
                verified = self.verified_token(tag, sender)
                if verified:
                    return verified
        for header in ("In-Reply-To", "References"):
            for message_id in reversed(message_ids_in(str(message.get(header, "")))):
                if _APPROVAL_MESSAGE_ID.match(message_id) and message_id.lower().endswith(f"@{self._domain}>"):
                    return APPROVAL_TAG, False
                match = _MESSAGE_ID_TOKEN.match(message_id)
                verified = self.verified_token(match.group(1), sender) if match else None
                if verified:
                    return verified
        return None

    def judge(self, raw: bytes, mail_from: str, envelope_recipients: list[str]) -> _Verdict:
        """Decide what to do with one received message (the SMTP answer, and what to relay)."""
        message = BytesParser(policy=policy.default).parsebytes(raw)
        assert isinstance(message, EmailMessage)
        mail_from = "" if mail_from.strip() in ("", "<>") else mail_from.strip()  # aiosmtpd keeps "<>" for a bounce
        name, sender = parseaddr(str(message.get("From", "")))
        sender = sender.lower() or mail_from.lower()
        message_id = (message_ids_in(str(message.get("Message-ID", ""))) or [""])[0]

        bounce = bounced(message)
        if bounce is not None and bounce.message_id.lower().startswith("<hd.") and bounce.message_id.lower().endswith(f"@{self._domain}>"):
            # One of our handoff mails never arrived: the core marks its delivery failed (a
            # route's ladder moves on at once). Never relayed as anyone's words.
            failure = DeliveryFailure(
                message_id=bounce.message_id, error=f"bounced {bounce.status or ''}".strip(), dedupe_key=f"bounce:{bounce.message_id}"[:200],
                hint=f"the mail to {bounce.recipient or 'the recipient'} bounced: {bounce.diagnostic or 'no reason given'}",
            )
            return _Verdict("250 2.0.0 delivery status accepted", failure)
        if not mail_from or _is_automatic(message):
            return _Verdict("250 2.0.0 accepted (an automatic message: not relayed)")
        if message_id.lower().startswith(("<hd.", "<ap.")) and message_id.lower().endswith(f"@{self._domain}>"):
            return _Verdict("250 2.0.0 accepted (our own message: not relayed)")
        found = self._token_key(envelope_recipients, message, sender)
        key, direct = found if found is not None else (None, False)
        if key == APPROVAL_TAG:  # decisions are made on the signed page, never by a reply
            return _Verdict(APPROVAL_REFUSAL)
        # A direct mail's token is valid only from the address it was sent to: that person
        known = direct or sender in self._recipients
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
        # Who wrote, by the address the checks above went by (None past what the port keeps,
        # rather than a shortened address that could be someone else's).
        user_id = sender if len(sender) <= 200 else None
        reply = RecipientText(thread_key=key, text=text, author=author, user_id=user_id, dedupe_key=dedupe)
        return _Verdict("250 2.0.0 reply accepted", reply)


class _Receiver:
    """aiosmtpd handler of the built-in receiver; runs in the desk's own event loop."""

    def __init__(self, channel: ReplyReceiving) -> None:
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

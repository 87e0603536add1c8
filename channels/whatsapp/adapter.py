"""WhatsAppChannel: one Twilio sender, the staff numbers on one shared line, and the
subscribers who write to the same number when it is a front.

The class puts the package's halves together as its bases (Twilio calls and their errors
in `transport`, the webhook in `webhooks`, the rendering in `formatting`) and keeps what
spans them: starting and stopping, and which numbers each outbound message goes to (a
handoff's and an approval's to every staff number, never from a front of its own; a
subscriber's to their chat) in which form (the dispatch as the template when `content_sid`
is set).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import structlog

from bot.runtime.bounded import BoundedDict
from channels import base
from channels.text import SentParts
from channels.whatsapp.config import WhatsAppConfig, WhatsAppConnection, normalise_number, number_or_none
from channels.whatsapp.formatting import WhatsAppFormatting
from channels.whatsapp.transport import TwilioMessage, WhatsAppTransport
from channels.whatsapp.webhooks import LINE_KEY, WhatsAppWebhooks

if TYPE_CHECKING:
    from twilio.rest import Client

log = structlog.get_logger(__name__)

SENT_MEMORY = 10_000  # (delivery key, number, part) → MessageSid, so a retry skips numbers already reached
DIRECT_LINES = 10_000  # people's numbers remembered as lines of their own


class WhatsAppChannel(WhatsAppTransport, WhatsAppWebhooks, WhatsAppFormatting):
    kind = "whatsapp"
    config_model = WhatsAppConfig
    front_model = WhatsAppConnection
    # No threads: every handoff shares the line (thread_key "whatsapp"); the core routes replies.
    # reconcile=False: a lost answer is retried (possibly sent twice) rather than lost.
    capabilities = base.Capabilities(buttons=False, threads=False, inbound=True, webhook=True, reconcile=False, front=True,
                                     approvals=True, direct=True)
    webhook_media_types = frozenset({"application/x-www-form-urlencoded"})  # Twilio posts forms
    config: WhatsAppConnection  # a WhatsAppConfig unless it is a front of its own (no staff numbers)

    def __init__(self, config: base.ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: base.ChannelContext | None = None
        self._client: Client | None = None
        self._validator: Any = None
        self._sent = SentParts(SENT_MEMORY)  # (delivery key, number, part) → MessageSid
        # number → {handoff id: short code} of the handoffs sent to it directly and still open
        # there, as this process saw them go out (channels/whatsapp/webhooks.py says why)
        self._direct_lines: BoundedDict[str, dict[str, str]] = BoundedDict(DIRECT_LINES)
        self.account_name: str | None = None

    @classmethod
    def same_connection(cls, channel: base.ChannelConfig, front: base.ChannelConfig) -> bool:
        """One account's one sender: Twilio calls one webhook per sender, so one adapter
        takes both the staff's answers and the subscribers' messages."""
        return (isinstance(channel, WhatsAppConnection) and isinstance(front, WhatsAppConnection)
                and channel.account_sid == front.account_sid and channel.from_number == front.from_number)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: base.ChannelContext) -> None:
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
        for line in await ctx.open_lines():  # people's numbers with open handoffs, as the desk stored them
            number = line.thread.get("direct")
            if isinstance(number, str) and number:
                self._direct_lines.setdefault(number, {})[line.handoff_id] = str(line.thread.get("code") or line.short_code)
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

    # ------------------------------------------------------------------ sending

    def _staff_numbers(self) -> tuple[str, ...]:
        """The numbers handoffs and approvals go to, or why there are none: a front of its
        own is never offered to handoff_request or approvals."""
        if not self.staff:
            raise base.PermanentChannelError(f"WhatsApp front {self.id} has no staff numbers",
                                             hint="this WhatsApp front only serves subscribers: handoffs need a channel with `to`")
        return self.staff

    async def send_dispatch(self, dispatch: base.Dispatch) -> base.Receipt:
        return await self._on_the_line(dispatch, [self._dispatch_message(dispatch.brief)])

    async def send_relay(self, relay: base.Relay) -> base.Receipt:
        return await self._on_the_line(relay, [TwilioMessage(body=part) for part in self._relay_parts(relay)])

    async def send_notice(self, notice: base.Notice) -> base.Receipt:
        return await self._on_the_line(notice, [TwilioMessage(body=part) for part in self._notice_parts(notice)])

    async def _on_the_line(self, outbound: base.HandoffMessage, messages: list[TwilioMessage]) -> base.Receipt:
        """A handoff's message to every staff number: they share one line (no threads); or,
        sent to one person directly, to their number alone, on the line of their own."""
        person = self._person_of(outbound)
        if person is not None:
            return await self._to_person(outbound, person, messages)
        staff = self._staff_numbers()
        sids = await self._to_everyone(self._require_client(), outbound, staff, messages)
        first = next((sids[n] for n in staff if n in sids), None)
        return base.Receipt(message_id=first, thread_key=LINE_KEY, thread={"line": LINE_KEY})

    def _person_of(self, outbound: base.HandoffMessage) -> str | None:
        """The number a handoff's message goes to directly (`Dispatch.direct`, then its
        thread's `direct`), normalised as linking stores it; None: the staff's line."""
        address = outbound.direct if isinstance(outbound, base.Dispatch) else outbound.thread.get("direct")
        if address is None:
            return None
        try:
            return normalise_number(str(address))
        except ValueError as exc:
            raise base.PermanentChannelError(f"WhatsApp direct dispatch: {exc}", hint=(
                f"the person's WhatsApp identity {address!r} is not a number in E.164 form; link it again from their phone"
            )) from None

    async def _to_person(self, outbound: base.HandoffMessage, number: str, messages: list[TwilioMessage]) -> base.Receipt:
        """To one person's own number: its thread_key is the number, a line of its own, so
        their replies go to their handoffs (#CODE picks one) and never to the staff's line."""
        try:
            sid = await self._to_one(self._require_client(), outbound, number, messages)
        except base.PermanentChannelError as exc:
            if isinstance(exc, base.ChannelAuthError):
                raise
            raise base.PermanentChannelError(str(exc), hint=(
                f"{exc.hint.removesuffix(': check `to`')}: the person's linked WhatsApp number cannot be reached; "
                "they can link the right one with /link")) from None
        # The handoff's code as the core addresses it on a line (the brief's; kept in the thread)
        code = str(outbound.brief.short_code if isinstance(outbound, base.Dispatch) else outbound.thread.get("code")
                   or outbound.short_code)
        line = self._direct_lines.get(number) or {}
        if isinstance(outbound, base.Notice) and outbound.about in ("released", "taken"):
            line.pop(outbound.handoff_id, None)
        else:
            line[outbound.handoff_id] = code
        if line:
            self._direct_lines[number] = line
        else:
            self._direct_lines.pop(number, None)
        return base.Receipt(message_id=sid, thread_key=number, thread={"line": number, "direct": number, "code": code})

    # Approvals are not a handoff's: no short code, not on the line's thread (replies route to handoffs).
    async def send_approval_prompt(self, prompt: base.ApprovalPrompt) -> base.Receipt:
        return await self._to_staff(prompt, self.approval_text(prompt.approval))

    async def send_approval_closed(self, closed: base.ApprovalClosed) -> base.Receipt:
        return await self._to_staff(closed, self._closed_text(closed))

    async def _to_staff(self, outbound: base.ApprovalPrompt | base.ApprovalClosed, text: str) -> base.Receipt:
        staff = self._staff_numbers()
        sids = await self._to_everyone(self._require_client(), outbound, staff, [TwilioMessage(body=text)])
        return base.Receipt(message_id=next((sids[n] for n in staff if n in sids), None))

    async def send_to_subscriber(self, message: base.ToSubscriber) -> base.Receipt:
        """A message to one subscriber's chat: the words defused, a person's name in bold,
        in numbered parts when longer than one message (a part that went out is not sent
        again when the outbox retries the rest)."""
        chat = number_or_none(message.chat)
        if chat is None:
            raise base.PermanentChannelError(f"no WhatsApp number in the subscriber's chat {message.chat!r}",
                                             hint="internal error: the message to a subscriber named no WhatsApp number")
        parts = [TwilioMessage(body=part) for part in self.subscriber_parts(message)]
        sid = await self._to_one(self._require_client(), message, chat, parts, subscriber=True)
        return base.Receipt(message_id=sid, thread={"chat": chat})

    def _dispatch_message(self, brief: base.HandoffBrief) -> TwilioMessage:
        config = self.config
        if isinstance(config, WhatsAppConfig) and config.content_sid:  # a front of its own dispatches nothing
            variables = self._template_values(brief, config.content_variables)
            return TwilioMessage(content_sid=config.content_sid, content_variables=json.dumps(variables))
        return TwilioMessage(body=self.dispatch_text(brief))

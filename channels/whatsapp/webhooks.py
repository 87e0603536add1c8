"""The WhatsApp channel's webhook: what Twilio POSTs to `/webhooks/{channel id}` (a form),
verified before anything is taken, then turned into typed events.

- **Forged calls.** Every call must carry a valid `X-Twilio-Signature` (HMAC-SHA1 of the
  public URL and the form parameters with the auth token, compared in constant time by the
  SDK's RequestValidator), checked on the raw body's parameters, a repeated key with each
  of its values: otherwise 403 and nothing is stored.
- **People reached directly.** A handoff sent to one person's own number (`Dispatch.direct`)
  is on a line of its own, whose thread_key is the number ("whatsapp:+E.164"): while this
  process knows the number has open direct handoffs (from the messages it sent there), what
  it writes goes to that line, where the core routes it like the staff's (`#CODE` picks one),
  except a `#CODE` of none of them from a staff number, which goes to the staff's line. The
  knowledge comes from what is sent, so after a restart it returns with the next message to
  the number; until then its messages are what they were (staff line, subscriber or ignored).
- **Strangers.** Only messages from the staff numbers (`to`) to our sender are answers to
  the handoffs (RecipientText on the shared line); anyone else who writes is a subscriber
  with a conversation of their own (SubscriberText) when the adapter serves a front, and
  ignored (and logged) otherwise, so a stranger can never talk to another subscriber. A
  call for another account or another sender is ignored too.
- **Redeliveries.** Twilio retries a webhook it thinks failed: MessageSid is the dedupe key.
- **Failures after acceptance.** With `status_callback`, Twilio reports a message it
  accepted but could not deliver (63016 usually arrives this way): a DeliveryFailure.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import (
    ChannelAdapter,
    ChannelContext,
    DeliveryFailure,
    InboundMessage,
    RecipientText,
    SubscriberText,
    WebhookReply,
    WebhookRequest,
)
from channels.whatsapp.config import WhatsAppConnection, number_or_none
from channels.whatsapp.transport import hint_for_code

log = structlog.get_logger(__name__)

_ADDRESS = re.compile(r"^\s*#([A-Za-z0-9]{4})(?=[\s:,]|$)")  # a shared line's `#CODE` (bot/flow/shared_lines.py)
LINE_KEY = "whatsapp"  # the thread_key of every handoff on a WhatsApp channel: one shared line
SIGNATURE_HEADER = "x-twilio-signature"
EMPTY_TWIML = b'<?xml version="1.0" encoding="UTF-8"?><Response/>'


class _Multi(dict[str, str]):
    """Form parameters for RequestValidator, which signs every value of a repeated key."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._pairs = pairs

    def getall(self, key: str) -> list[str]:
        return [v for k, v in self._pairs if k == key]


class WhatsAppWebhooks(ChannelAdapter):
    """The inbound half of WhatsAppChannel; the adapter sets `_validator` (the SDK's
    RequestValidator, at start) and `_ctx`."""

    config: WhatsAppConnection  # a WhatsAppConfig unless it is a front of its own (no staff numbers)
    _validator: Any
    _ctx: ChannelContext | None
    _direct_lines: BoundedDict[str, dict[str, str]]

    @property
    def staff(self) -> tuple[str, ...]:
        """The recipients' numbers; none on a front of its own."""
        return tuple(getattr(self.config, "to", ()))

    @property
    def _serves_subscribers(self) -> bool:
        return self._ctx is not None and self._ctx.subscribers

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
        sender, receiver = number_or_none(params.get("From")), number_or_none(params.get("To"))
        if sender == self.config.from_number:  # a status callback about a message we sent
            return self._status(params)
        if receiver != self.config.from_number:
            log.warning("whatsapp_webhook_ignored", channel_id=self.id, reason=f"addressed to {params.get('To')}, not to our sender")
            return None
        line = self._line_of(sender, params)
        if line is None and sender is not None and sender not in self.staff and self._serves_subscribers:
            return self._subscriber_message(params)
        if line is None and sender not in self.staff:
            log.warning("whatsapp_unknown_sender", channel_id=self.id, sender=params.get("From"),
                        hint="only the numbers in `to` can answer handoffs; add it there to let it answer")
            return None
        sid = params.get("MessageSid") or params.get("SmsMessageSid")
        extras = []
        for i in range(_media_count(params)):
            kind = (params.get(f"MediaContentType{i}") or "file").split("/", 1)[0]
            extras.append(f"({kind} attachment, not forwarded)")
        if params.get("Latitude") and params.get("Longitude"):
            extras.append(f"(location: {params['Latitude']}, {params['Longitude']})")
        text = _text(params, extras)
        if not sid or not text:
            return None
        author = _profile_name(params) or (sender or "").removeprefix("whatsapp:")
        return RecipientText(thread_key=line or LINE_KEY, text=text, author=author, user_id=sender, dedupe_key=f"message:{sid}")

    def _line_of(self, sender: str | None, params: dict[str, str]) -> str | None:
        """The person's own line when `sender` has open direct handoffs (the number is its
        thread_key), unless a staff number addresses a `#CODE` of none of them; else None."""
        line = self._direct_lines.get(sender) if sender else None
        if not line:
            return None
        address = _ADDRESS.match(params.get("Body") or "")
        if address is not None and sender in self.staff and address.group(1).upper() not in line.values():
            return None  # a handoff of the staff's line
        return sender

    def _subscriber_message(self, params: dict[str, str]) -> SubscriberText | None:
        """A subscriber writing to the sender: their number is their chat (one conversation),
        their WhatsApp profile name their name. An attachment is named in brackets ("[image]"),
        since the desk relays text only."""
        raw = (params.get("From") or "").strip()
        sid = params.get("MessageSid") or params.get("SmsMessageSid")
        if not raw.startswith("whatsapp:") or not sid:  # an SMS to the same number is not a WhatsApp chat
            log.warning("whatsapp_webhook_ignored", channel_id=self.id, reason="not a WhatsApp message", sender=raw)
            return None
        chat = number_or_none(raw)
        assert chat is not None
        extras = [f"[{_media_kind(params.get(f'MediaContentType{i}'))}]" for i in range(_media_count(params))]
        if params.get("Latitude") and params.get("Longitude"):
            extras.append(f"[location: {params['Latitude']}, {params['Longitude']}]")
        text = _text(params, extras)
        if not text:
            return None
        author = _profile_name(params) or None
        return SubscriberText(chat=chat, text=text, author=author, user_id=chat, dedupe_key=f"message:{sid}")

    def _status(self, params: dict[str, str]) -> DeliveryFailure | None:
        """A status callback: a message Twilio accepted was not delivered after all (63016
        usually arrives this way). Reported to the core, which marks the delivery failed and
        says why in the audit trail; other statuses (sent, delivered, read) need nothing."""
        status, sid = params.get("MessageStatus") or params.get("SmsStatus"), params.get("MessageSid")
        if status not in ("failed", "undelivered") or not sid:
            return None
        code = params.get("ErrorCode")
        hint = hint_for_code(code, params.get("To") or "", self.config,
                             subscriber=number_or_none(params.get("To")) not in self.staff)
        log.warning("whatsapp_message_failed", channel_id=self.id, message_sid=sid, to=params.get("To"), status=status,
                    error_code=code, hint=hint)
        return DeliveryFailure(message_id=sid, error=f"{status} (Twilio error {code or 'unknown'})", hint=hint,
                               dedupe_key=f"status:{sid}:{status}")


def _text(params: dict[str, str], extras: list[str]) -> str:
    """A message's words (a button's text when it has none), then what it carries besides
    words (attachments, a location), each on a line of its own."""
    text = (params.get("Body") or params.get("ButtonText") or "").replace("\x00", "\ufffd").strip()
    return "\n".join([text, *extras] if text else extras)


def _profile_name(params: dict[str, str]) -> str:
    """The sender's WhatsApp profile name on one line (empty when they have none)."""
    return " ".join((params.get("ProfileName") or "").split())[:100]


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

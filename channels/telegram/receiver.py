"""How updates reach the adapter, in one of two modes, and how presses are answered.

- `mode: webhook`: at start the webhook is registered at `{public_url}/webhooks/{channel
  id}` (unless Telegram could not reach that URL: then a warning says why and nothing is
  registered), with a secret token. Each call's `X-Telegram-Bot-Api-Secret-Token` header is
  compared in constant time (403 and nothing stored otherwise); without `webhook_secret`
  the secret is an HMAC of the bot token, so every restart and instance registers and
  expects the same. A button press is answered in the webhook response itself, so only once
  the core has stored it.
- `mode: polling` (a laptop without a public URL): one getUpdates long poll in the
  background; its offset moves past an update only once the core has stored it, so a crash
  means a redelivery (deduplicated), not a loss. A first short poll at start turns a 409
  (another poller, or a webhook still set) into an unavailable channel with its reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

import structlog

from channels.base import MalformedWebhook, TransientChannelError, WebhookReply, WebhookRequest, json_object
from channels.telegram.inbound import Parsed, TelegramInbound
from channels.telegram.protocol import ALLOWED_UPDATES, SECRET_HEADER, webhook_unreachable_reason
from channels.telegram.transport import TelegramTransport

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    from telegram import Bot

log = structlog.get_logger(__name__)


class TelegramReceiver(TelegramInbound, TelegramTransport):
    """The receiving half of TelegramChannel; the adapter sets `_poller` (None unless polling)."""

    _poller: asyncio.Task[None] | None

    @property
    def webhook_secret(self) -> str:
        """The configured secret, or one derived from the token so restarts agree."""
        if self.config.webhook_secret is not None:
            return self.config.webhook_secret.get_secret_value()
        token = self.config.bot_token.get_secret_value().encode()
        return hmac.new(token, b"handoff-desk telegram webhook secret", hashlib.sha256).hexdigest()

    async def _register_webhook(self, bot: Bot, public_url: str) -> None:
        url = f"{public_url.rstrip('/')}/webhooks/{self.id}"
        reason = webhook_unreachable_reason(url)
        if reason is not None:
            log.warning("telegram_webhook_not_registered", channel_id=self.id, url=url, reason=reason,
                        hint="replies from Telegram will not arrive: give server.public_url an https address "
                             "Telegram can reach, or set mode: polling")
            return
        await self._call(bot.set_webhook(url=url, secret_token=self.webhook_secret, allowed_updates=ALLOWED_UPDATES),
                         "setWebhook")
        log.info("telegram_webhook_registered", channel_id=self.id, url=url)

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        if self.config.mode != "webhook" or self._app is None or not self._ready:
            return WebhookReply(status=404, body=b"this Telegram channel polls getUpdates; it takes no webhooks")
        given = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(given.encode(), self.webhook_secret.encode()):
            return WebhookReply(status=403, body=b"wrong secret token")
        from telegram import Update

        data = json_object(request.body)
        try:
            update = Update.de_json(data, self._app.bot)
        except Exception:  # PTB raises whatever its constructors raise on a malformed update
            update = None
        if update is None:
            log.warning("telegram_webhook_unparseable", channel_id=self.id)
            raise MalformedWebhook("the body is JSON but not a Telegram update")
        parsed = self._parse(update)
        if parsed.spent_prompt is not None:
            await self._take_buttons_away(self._app.bot, parsed.spent_prompt)
        reply = WebhookReply(status=200, messages=[parsed.message] if parsed.message else [])
        if parsed.callback_query_id:
            # Answered in the webhook response itself: no extra round trip, and only once the
            # core has stored the click (it stores before it answers).
            answer: dict[str, Any] = {"method": "answerCallbackQuery", "callback_query_id": parsed.callback_query_id}
            if parsed.callback_text:
                answer["text"] = parsed.callback_text
            reply.body, reply.content_type = json.dumps(answer).encode(), "application/json"
        return reply

    async def _start_polling(self, bot: Bot) -> None:
        # One short poll now, so a 409 (another poller on this token, or a webhook still set)
        # makes the channel unavailable with a clear reason instead of failing quietly later.
        # Without an offset it confirms nothing; the loop fetches the same updates again.
        await self._call(bot.get_updates(timeout=0, limit=1, allowed_updates=ALLOWED_UPDATES), "getUpdates")
        self._poller = asyncio.create_task(self._poll(bot), name=f"telegram-poll-{self.id}")

    async def _poll(self, bot: Bot) -> None:
        """Long-poll getUpdates. The offset moves past an update only once the core has
        stored it, so a crash or a database error means a redelivery (deduplicated), not a loss."""
        from telegram.error import TelegramError

        assert self._ctx is not None
        offset: int | None = None
        failures = 0
        while True:
            try:
                updates = await bot.get_updates(offset=offset, timeout=self.config.poll_timeout, allowed_updates=ALLOWED_UPDATES)
                for update in updates:
                    parsed = self._parse(update)
                    if parsed.message is not None:
                        await self._ctx.deliver_inbound(parsed.message)
                    offset = update.update_id + 1
                    if parsed.callback_query_id:
                        await self._answer_callback(bot, parsed)
                    if parsed.spent_prompt is not None:
                        await self._take_buttons_away(bot, parsed.spent_prompt)
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                error = self._error(exc, "getUpdates") if isinstance(exc, TelegramError) else None
                hint = error.hint if error else f"internal error ({type(exc).__name__})"
                delay = min(60.0, 2.0 ** failures)
                if isinstance(error, TransientChannelError) and error.retry_after:
                    delay = max(delay, error.retry_after)
                log.error("telegram_poll_failed", channel_id=self.id, hint=hint, retry_in_seconds=delay)
                # The poller's own pace, not a delivery retry: without a pause a refused poll
                # would spin. Cancelled at once by stop().
                await asyncio.sleep(delay)

    async def _stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None

    async def _answer_callback(self, bot: Bot, parsed: Parsed) -> None:
        from telegram.error import TelegramError

        try:
            await bot.answer_callback_query(parsed.callback_query_id or "", text=parsed.callback_text)
        except TelegramError as exc:  # cosmetic (the button spins a while); the click itself is stored
            log.warning("telegram_callback_answer_failed", channel_id=self.id, error=self._redact(str(exc)))

    async def _take_buttons_away(self, bot: Bot, prompt: tuple[int, int]) -> None:
        from telegram.error import TelegramError

        chat_id, message_id = prompt
        try:
            await bot.edit_message_reply_markup(chat_id=chat_id, message_id=message_id, reply_markup=None)
        except TelegramError as exc:  # cosmetic: a second press is answered and changes nothing
            log.warning("telegram_user_action_buttons_kept", channel_id=self.id, error=self._redact(str(exc)))

"""python-telegram-bot as this adapter needs it: the Application built once against the
configured `api_base_url` with every timeout bounded, each Bot API call awaited in one
place, and every failure mapped onto the ChannelError tree (never retried here: the core's
outbox owns retries). PTB puts the bot token into some error texts (InvalidToken), so every
hint and message is scrubbed of it, and errors are raised `from None`."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from channels.base import (
    ChannelAdapter,
    ChannelAuthError,
    ChannelError,
    Notice,
    PermanentChannelError,
    Relay,
    ToSubscriber,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.telegram.config import TelegramConnection
from channels.text import SentParts

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    from telegram import Bot, Message
    from telegram.ext import Application, ExtBot


class TelegramTransport(ChannelAdapter):
    """The Bot API half of TelegramChannel: connecting, where to send (`_bot`, `_staff_group`),
    sending a message in parts and mapping errors. The adapter sets `_app` (None until connected),
    `_ready`, `_staff` (the configured group, None for a front of its own), `_chat_id` (its
    number, from getChat) and `_parts_sent`; `_connect` sets `_bot_id` and `_username`."""

    config: TelegramConnection
    # Its context and data types are PTB's defaults; this adapter keeps no per-chat data there.
    _app: Application[ExtBot[None], Any, Any, Any, Any, Any] | None
    _ready: bool
    _staff: int | str | None
    _chat_id: int | None
    _bot_id: int
    _username: str
    _parts_sent: SentParts

    async def _connect(self) -> Bot:
        """Build the PTB application once and check the token (initialize() calls getMe)."""
        if self._app is None:
            from telegram.ext import ApplicationBuilder
            from telegram.warnings import PTBDeprecationWarning

            # PTB warns about RetryAfter.retry_after's future type each time it builds one;
            # _error() handles both types, so the warning would only be noise in the logs.
            warnings.filterwarnings("ignore", r"Deprecated since version v22\.2: In a future major version attribute `retry_after`",
                                    PTBDeprecationWarning)

            t = self.config.request_timeout
            self._app = (
                ApplicationBuilder().token(self.config.bot_token.get_secret_value()).base_url(self.config.api_base_url)
                .updater(None).connect_timeout(t).read_timeout(t).write_timeout(t).pool_timeout(t).build()
            )
        if not self._ready:
            await self._call(self._app.initialize(), "getMe")
            self._bot_id, self._username = self._app.bot.id, self._app.bot.username or ""
            self._ready = True
        return self._app.bot

    async def _staff_chat(self, bot: Bot, staff: int | str) -> Any:
        try:
            return await self._call(bot.get_chat(staff), "getChat")
        except ChannelAuthError:
            raise
        except PermanentChannelError as exc:
            raise PermanentChannelError(str(exc), hint=(
                f"{exc.hint}; check chat_id ({staff}) and that the bot is a member of that group")) from None

    def _bot(self) -> Bot:
        if self._app is None or not self._ready or (self._staff is not None and self._chat_id is None):
            raise TransientChannelError("the Telegram channel is not started", hint="the Telegram channel is not running")
        return self._app.bot

    def _staff_group(self) -> int | str:
        """The staff group, or why there is none: a front of its own is never offered to
        handoff_request or approvals, so only a misrouted message meets this."""
        if self._chat_id is None:
            raise PermanentChannelError("this Telegram bot has no staff group", hint=(
                f"Telegram front '{self.label}' serves subscribers only; give a channel with this bot_token a chat_id"))
        return self._chat_id

    async def _disconnect(self) -> None:
        if self._app is not None:
            await self._app.shutdown()
            await self._app.bot.shutdown()  # also when initialize() failed half-way (bad token)
            self._app, self._ready = None, False

    async def _send_parts(
        self, outbound: Relay | Notice | ToSubscriber, parts: list[str], send: Callable[[int, str], Awaitable[Message]], *,
        subscriber: str | None = None, direct: int | None = None,
    ) -> str:
        """Send one message's parts in order and return the first part's message id. The
        parts that went out are remembered by the outbox's delivery key (in this process), so
        when a later part fails the outbox's retry sends only the rest, not all again."""
        async def one(index: int, part: str) -> str:
            return str((await self._call(send(index, part), "sendMessage", subscriber=subscriber, direct=direct)).message_id)

        sent = [await self._parts_sent.send((outbound.delivery_key, index) if outbound.delivery_key else None,
                                            partial(one, index, part))
                for index, part in enumerate(parts)]
        return sent[0]

    @staticmethod
    def _no_preview() -> Any:
        from telegram import LinkPreviewOptions

        return LinkPreviewOptions(is_disabled=True)  # no preview card of the form link in the group

    async def _call(self, awaitable: Any, method: str, *, subscriber: str | None = None, direct: int | None = None) -> Any:
        from telegram.error import TelegramError

        try:
            return await awaitable
        except TelegramError as exc:
            # `from None`: PTB's text may hold the token
            raise self._error(exc, method, subscriber=subscriber, direct=direct) from None

    def _redact(self, text: str) -> str:
        token = self.config.bot_token.get_secret_value()
        return text.replace(token, "<bot_token>").replace(token.split(":", 1)[-1], "<bot_token>")

    def _error(self, exc: Exception, method: str, *, subscriber: str | None = None, direct: int | None = None) -> ChannelError:
        """Map a python-telegram-bot error to the core's typed errors (hints never hold the token).
        `subscriber`: the request went to that subscriber's private chat, not the staff group;
        `direct`: to that person's own private chat (a direct dispatch and what follows it)."""
        import httpx
        from telegram import error as tg

        detail = self._redact(str(exc))
        if isinstance(exc, tg.RetryAfter):
            wait = exc.retry_after  # seconds now, a timedelta in PTB's next major version (or with PTB_TIMEDELTA)
            seconds = wait.total_seconds() if isinstance(wait, timedelta) else float(wait)
            return TransientChannelError(f"Telegram flood control: retry in {seconds:g} s", retry_after=seconds,
                                         hint=f"Telegram asked us to slow down for {seconds:g} s")
        if isinstance(exc, tg.InvalidToken):
            return ChannelAuthError("Telegram refused the bot token", hint=(
                "Telegram refused bot_token (401/404): copy the token of the bot from @BotFather again "
                "(or revoke and paste a new one)"))
        if isinstance(exc, tg.ChatMigrated):
            return PermanentChannelError(f"the group moved to {exc.new_chat_id}", hint=(
                f"the group became a supergroup with a new id; set chat_id: {exc.new_chat_id}"))
        if direct is not None and (isinstance(exc, tg.Forbidden) or (
                isinstance(exc, tg.BadRequest) and "chat not found" in detail.lower())):
            # Permanent: the core tries the person's next way to be reached.
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=(
                f"Telegram cannot deliver to the private chat of user {direct} ({detail}): they have not started the bot, "
                f"blocked it or deleted their account; they can open @{self._username} and press Start (or /link again)"))
        if isinstance(exc, tg.Forbidden) and subscriber is not None:
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=(
                f"Telegram refused to deliver to subscriber chat {subscriber} ({detail}): they blocked the bot or deleted "
                "their account; nothing reaches them until they unblock it and write again"))
        if isinstance(exc, tg.BadRequest) and subscriber is not None and "chat not found" in detail.lower():
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=(
                f"Telegram does not know subscriber chat {subscriber} ({detail}); the account may be gone"))
        if isinstance(exc, tg.Forbidden):
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=(
                f"Telegram refused ({detail}): add the bot to chat {self._staff} again and let it post there"))
        if isinstance(exc, tg.Conflict):
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=(
                f"Telegram answered 409 Conflict ({detail}). Only one process may poll getUpdates per bot token, "
                "and none while a webhook is set: stop the other instance or delete the webhook, "
                "or run every instance with mode: webhook"))
        if isinstance(exc, tg.BadRequest):
            return PermanentChannelError(f"Telegram {method}: {detail}", hint=f"Telegram refused the request: {detail}")
        if isinstance(exc, tg.TimedOut):
            if isinstance(exc.__cause__, httpx.ConnectTimeout | httpx.PoolTimeout):
                return TransientChannelError(f"Telegram {method}: could not connect in time",
                                             hint="could not reach Telegram in time")
            return UncertainDeliveryError(f"Telegram {method}: no answer in time (it may have arrived)",
                                          hint="Telegram did not answer in time; a message being sent may have been posted")
        if isinstance(exc, tg.NetworkError):
            cause = exc.__cause__
            if cause is None or isinstance(cause, tg.TelegramError):  # Telegram answered with an error status (5xx)
                return TransientChannelError(f"Telegram {method}: {detail}", hint=f"Telegram had a problem: {detail}")
            if isinstance(cause, httpx.ConnectError):
                return TransientChannelError(f"Telegram {method}: could not connect", hint="could not connect to Telegram")
            return UncertainDeliveryError(f"Telegram {method}: the connection broke ({type(cause).__name__})",
                                          hint="the connection to Telegram broke mid-request; a message being sent may have been posted")
        return TransientChannelError(f"Telegram {method}: {detail}", hint=f"Telegram error: {detail}")

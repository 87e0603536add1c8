"""The gateway: discord.py's websocket client run in the background, how its failures make
the channel unavailable, and which messages in it are a person answering in a handoff thread
(or, in their direct message with the bot, to a dispatch sent to them)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import structlog

from channels import base
from channels.discord.sdk import SdkClient

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import discord


log = structlog.get_logger(__name__)


class DiscordGateway(SdkClient):
    """The gateway half of DiscordChannel; the adapter sets `_ctx` (at start), `_client`,
    `_gateway_task`, `bot_id` and `_threads` (the threads this process started)."""

    _ctx: base.ChannelContext | None
    _client: discord.Client | None
    _gateway_task: asyncio.Task[None] | None
    bot_id: int | None
    _threads: set[int]

    async def _start_gateway(self, client: discord.Client) -> None:
        """Connect in the background; wait for the session (READY) up to request_timeout, so a
        refused intent or token makes the channel unavailable with its reason."""
        self._gateway_task = asyncio.create_task(client.connect(reconnect=True), name=f"discord-gateway-{self.id}")
        ready = asyncio.create_task(self._session_ready.wait())
        try:
            await asyncio.wait({self._gateway_task, ready}, timeout=self.config.request_timeout,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        if self._gateway_task.done():
            raise self._gateway_error(self._gateway_task.exception())
        if not self._session_ready.is_set():
            log.warning("discord_gateway_slow", channel_id=self.id,
                        hint="the Discord gateway did not answer in time; still connecting in the background")
        self._gateway_task.add_done_callback(self._gateway_ended)

    def _gateway_error(self, exc: BaseException | None) -> base.ChannelError:
        import discord

        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return base.PermanentChannelError("the Message Content intent is not enabled", hint=(
                "Discord refused the gateway intents: enable the Message Content Intent for the bot "
                "(Developer Portal → your application → Bot → Privileged Gateway Intents), or set gateway: false"))
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            return base.ChannelAuthError("the gateway refused the bot token", hint=(
                f"Discord's gateway refused bot_token of channel {self.id}: reset the token in the Developer Portal"))
        detail = f"{type(exc).__name__}: {exc}" if exc else "closed"
        return base.TransientChannelError(f"the Discord gateway connection ended ({detail})",
                                          hint=f"could not stay connected to the Discord gateway ({detail})")

    def _gateway_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._client is None:
            return  # stopped by us
        error = self._gateway_error(task.exception())
        log.error("discord_gateway_stopped", channel_id=self.id, hint=error.hint)
        if self._ctx is not None:
            self._ctx.lost(error)  # out of handoff_request until the sweep has it reconnected

    async def _on_gateway_message(self, message: discord.Message) -> None:
        """A MESSAGE_CREATE from the gateway: relay it when a person wrote it in one of our
        handoff threads. Errors are logged by discord.py's on_error; the gateway has no
        redelivery, so a message that could not be stored is lost (and logged)."""
        import discord

        author = message.author
        if author.bot or message.webhook_id is not None or author.id == self.bot_id:
            return  # bots and webhooks, our own posts included, are never relayed
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, "thread created" … are not replies
        if isinstance(message.channel, discord.DMChannel):
            inbound = await self._direct_inbound(message)  # a person reached directly (channels/discord/direct.py)
        elif self._is_handoff_thread(message.channel):
            inbound = self._recipient_text(message, str(message.channel.id))
        else:
            return
        if inbound is not None and self._ctx is not None:
            await self._ctx.deliver_inbound(inbound)

    async def _direct_inbound(self, message: discord.Message) -> base.RecipientText | None:
        """A person's message in their direct message with the bot: DiscordDirect maps it."""
        raise NotImplementedError

    def _recipient_text(self, message: discord.Message, thread_key: str) -> base.RecipientText | None:
        """A person's words in a handoff's line, as the core relays them; None when empty."""
        author = message.author
        text = message.clean_content.strip()  # mentions as @name / #channel, as the person saw them
        files = [a.filename for a in message.attachments]
        if files:  # files are not forwarded; say so rather than drop the message silently
            text = (text + "\n" if text else "") + f"[sent {len(files)} file(s) in Discord: {', '.join(files)}]"
        if not text:
            return None
        name = getattr(author, "display_name", None) or author.name
        return base.RecipientText(thread_key=thread_key, text=text.replace("\x00", "\ufffd"),
                                  author=" ".join(str(name).split())[:80], user_id=str(author.id), dedupe_key=f"message:{message.id}")

    def _is_handoff_thread(self, channel: Any) -> bool:
        import discord

        if isinstance(channel, discord.Thread):
            return channel.parent_id == self.config.channel_id
        # A thread discord.py has not cached (it learns threads from GUILD_CREATE and
        # THREAD_CREATE): only the ones this process started are known to be ours.
        return isinstance(channel, discord.PartialMessageable) and channel.id in self._threads

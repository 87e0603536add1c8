"""One person reached directly: the dispatch in their direct message with the bot, and what
they write there.

A direct dispatch (`Dispatch.direct`, the person's Discord user id as their linked identity
holds it) opens the direct message (POST /users/@me/channels, the same channel every time)
and posts the brief there with its buttons, like a room's dispatch. A direct message has no
threads, and several handoffs may be offered to one person at once, so a handoff's line in
it is its dispatch message: thread_key `"{DM channel id}:{dispatch message id}"`. Relays
and notices are posted as replies to the dispatch; the person's message comes back under
that key when it is a reply to the dispatch or to one of our messages that reply to it,
and a message that replies to nothing goes to the newest dispatch in that direct message
(remembered, or after a restart read back from the conversation's newest messages).

Discord refusing the conversation (no such user, or one who takes no direct messages from
the bot: code 50007) is permanent, with a hint saying so: that is what makes the core try
the person's next contact method.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from bot.runtime.bounded import BoundedDict
from channels import base
from channels.discord.gateway import DiscordGateway
from channels.discord.protocol import CANNOT_MESSAGE_USER, DIRECT_LOOKUP_LIMIT, UNKNOWN_USER
from channels.discord.rest import DiscordRest

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import discord

log = structlog.get_logger(__name__)



class DiscordDirect(DiscordGateway, DiscordRest):
    """The direct half of DiscordChannel; the adapter sets `_directs` (user id -> their
    direct message's channel id) and `_newest` (direct message -> its newest dispatch)."""

    _directs: BoundedDict[str, int]
    _newest: BoundedDict[int, int]
    _require_client: Callable[[], discord.Client]  # the adapter's: its started client

    async def _send_direct(self, dispatch: base.Dispatch, payload: dict[str, Any]) -> base.Receipt:
        """The dispatch, rendered as for the room (`payload`), in the person's direct message."""
        client, user = self._require_client(), str(dispatch.direct)
        channel_id = await self._direct_channel(client, user)
        try:
            message = await self._post(client, channel_id, payload, what="direct dispatch")
        except base.ChannelAuthError:
            raise
        except base.PermanentChannelError as exc:
            raise _refused(user, exc) from exc
        message_id = int(message["id"])
        self._newest[channel_id] = message_id
        thread = {"channel_id": str(channel_id), "message_id": str(message_id), "direct": user}
        return base.Receipt(message_id=str(message_id), thread_key=f"{channel_id}:{message_id}", thread=thread)

    async def _direct_channel(self, client: discord.Client, user: str) -> int:
        if not re.fullmatch(r"\d{15,21}", user):
            raise base.PermanentChannelError(f"not a Discord user id: {user!r}", hint=(
                f"cannot reach {user!r} directly on Discord: a Discord user id (a snowflake such as "
                "123456789012345678) was expected, as the person's linked Discord identity holds it"))
        known = self._directs.get(user)
        if known is not None:
            return known
        try:
            channel = await self._call("open direct message", client.http.start_private_message(int(user)), target="person")
        except base.ChannelAuthError:
            raise
        except base.PermanentChannelError as exc:
            raise _refused(user, exc) from exc
        self._directs[user] = channel_id = int(channel["id"])
        return channel_id

    async def _direct_inbound(self, message: discord.Message) -> base.RecipientText | None:
        """A person's message in their direct message with the bot, under the thread_key of
        the dispatch it answers."""
        import discord

        channel_id = message.channel.id
        dispatch: int | None = None
        reference = message.reference
        if reference is not None and reference.message_id:
            replied = reference.resolved
            if isinstance(replied, discord.Message) and replied.author.id == self.bot_id:
                # the dispatch itself, or one of our relays and notices, which reply to it
                upper = replied.reference.message_id if replied.reference is not None else None
                dispatch = upper or replied.id
        if dispatch is None:
            dispatch = self._newest.get(channel_id) or await self._newest_dispatch(channel_id)
        if dispatch is None:
            return None  # no handoff was ever offered here
        return self._recipient_text(message, f"{channel_id}:{dispatch}")

    async def _newest_dispatch(self, channel_id: int) -> int | None:
        """The newest dispatch among the newest messages of a direct message: ours, with an
        embed, replying to nothing (relays and notices reply to their dispatch)."""
        from discord.http import Route

        client = self._require_client()
        route = Route("GET", "/channels/{channel_id}/messages", channel_id=channel_id)
        try:
            recent = await self._call("list direct messages", client.http.request(route, params={"limit": DIRECT_LOOKUP_LIMIT}))
        except base.ChannelError as exc:
            log.warning("discord_direct_dispatch_not_found", channel_id=self.id, hint=exc.hint)
            return None
        for item in recent or []:
            if (str((item.get("author") or {}).get("id")) == str(self.bot_id) and item.get("embeds")
                    and not item.get("message_reference")):
                self._newest[channel_id] = found = int(item["id"])
                return found
        return None


def direct_target(thread: dict[str, Any]) -> tuple[int, str, dict[str, Any] | None] | None:
    """Where a handoff's later message goes in a direct message: the channel, the thread_key,
    and the reply to the dispatch; None for a handoff in a room's thread."""
    if not thread.get("direct"):
        return None
    channel_id, message_id = int(thread["channel_id"]), int(thread["message_id"])
    reference = {"message_id": message_id, "channel_id": channel_id, "fail_if_not_exists": False}
    return channel_id, f"{channel_id}:{message_id}", reference


def _refused(user: str, exc: base.PermanentChannelError) -> base.PermanentChannelError:
    """Discord's refusal, with a hint that names the person and what it means for them."""
    import discord

    cause = exc.__cause__
    code = cause.code if isinstance(cause, discord.HTTPException) else None
    if code == CANNOT_MESSAGE_USER:
        why = ("they take no direct messages from the bot (they share no server with it, or turned off direct "
               "messages from server members)")
    elif code == UNKNOWN_USER:
        why = "Discord has no such user: check the person's linked Discord identity"
    else:
        why = exc.hint
    return base.PermanentChannelError(str(exc), hint=f"cannot send a direct message to Discord user {user}: {why}")

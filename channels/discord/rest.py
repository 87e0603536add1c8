"""Discord's REST API through discord.py's HTTP client: one bounded call at a time, every
failure mapped onto the ChannelError tree, posts that never ping anyone and carry a nonce."""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING, Any

from channels.base import (
    ChannelAdapter,
    ChannelAuthError,
    ChannelError,
    Outbound,
    PermanentChannelError,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.discord.config import DiscordConfig
from channels.discord.protocol import NONCE_LENGTH
from channels.discord.sdk import _ATTEMPT, ProviderTrouble, _Attempt

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import discord


def nonce_of(outbound: Outbound, part: int = 0) -> str | None:
    """Discord nonces are at most 25 characters; derive one from the delivery key (and the
    message's stream, since keys are unique only within one desk's database)."""
    if not outbound.delivery_key:
        return None
    digest = hashlib.blake2b(f"{outbound.stream}:{outbound.delivery_key}:{part}".encode(), digest_size=12)
    return digest.hexdigest()[:NONCE_LENGTH]


class DiscordRest(ChannelAdapter):
    """The REST half of DiscordChannel."""

    config: DiscordConfig

    async def _post(self, client: discord.Client, channel_id: int, payload: dict[str, Any], *, what: str) -> dict[str, Any]:
        from discord.http import Route

        payload = {k: v for k, v in payload.items() if v is not None}
        payload["allowed_mentions"] = {"parse": []}  # nothing we post may ping anyone
        if "nonce" in payload:
            payload["enforce_nonce"] = True
        route = Route("POST", "/channels/{channel_id}/messages", channel_id=channel_id)
        posted: dict[str, Any] = await self._call(f"post {what}", client.http.request(route, json=payload), may_have_landed=True,
                                                  target="channel" if what == "dispatch" else "thread")
        return posted

    async def _call(self, what: str, call: Any, *, may_have_landed: bool = False, target: str | None = None) -> Any:
        """Await one discord.py call (bounded by request_timeout) and turn every failure into a
        typed channel error. `may_have_landed`: the call writes, so an answer lost after the
        request went out is uncertain. `target`: what a 403/404 is about (channel or thread)."""
        import aiohttp
        import discord

        attempt = _Attempt()
        token = _ATTEMPT.set(attempt)
        try:
            async with asyncio.timeout(self.config.request_timeout):
                return await call
        except ProviderTrouble as exc:
            raise self._trouble(what, exc, may_have_landed) from None
        except discord.RateLimited as exc:  # discord.py's own bucket would wait longer than 30 s
            raise TransientChannelError(f"{what}: rate limited for {exc.retry_after:.1f} s", retry_after=exc.retry_after,
                                        hint=f"Discord rate limit: retrying after {exc.retry_after:.0f} s") from None
        except discord.LoginFailure:
            raise self._auth_error() from None
        except discord.HTTPException as exc:
            raise self._http_error(what, exc, target) from exc
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            connect = isinstance(exc, aiohttp.ClientConnectorError) or not attempt.sent
            detail = type(exc).__name__
            if connect:  # never sent: nothing can have landed, a retry is safe
                raise TransientChannelError(f"{what}: could not reach Discord ({detail})",
                                            hint=f"could not reach the Discord API at {self.config.api_base_url}") from None
            if may_have_landed:
                raise UncertainDeliveryError(f"{what}: no complete answer from Discord ({detail})", hint=(
                    "Discord did not answer in time; the message may have been posted (a retry carries the same nonce)")) from None
            raise TransientChannelError(f"{what}: no complete answer from Discord ({detail})",
                                        hint="Discord did not answer in time") from None
        finally:
            _ATTEMPT.reset(token)

    def _auth_error(self) -> ChannelAuthError:
        return ChannelAuthError("Discord refused the bot token (401)", hint=(
            f"Discord refused bot_token of channel {self.id} (401 Unauthorized): copy the bot's token again "
            "(Developer Portal → Bot → Reset Token)"))

    def _trouble(self, what: str, exc: Any, may_have_landed: bool) -> ChannelError:
        data = exc.data()
        if exc.status == 429:
            wait = exc.retry_after()
            scope = "global " if data.get("global") else ""
            return TransientChannelError(f"{what}: {scope}rate limited (429)", retry_after=wait, hint=(
                f"Discord {scope}rate limit on {what}; retrying after {wait:g} s" if wait is not None
                else f"Discord {scope}rate limit on {what}"))
        message = f"{what}: Discord answered {exc.status}"
        if may_have_landed and exc.status != 503:  # 503: not processed; 500/502/504: it may have been
            return UncertainDeliveryError(message, hint=(
                f"Discord failed ({exc.status}); the message may have been posted (a retry carries the same nonce)"))
        return TransientChannelError(message, hint=f"Discord is having trouble ({exc.status})")

    def _http_error(self, what: str, exc: Any, target: str | None) -> ChannelError:
        status, code, text = exc.status, exc.code, exc.text or ""
        detail = f"{status} {text} (code {code})" if code else f"{status} {text}".strip()
        message = f"{what}: {detail}"
        channel = self.config.channel_id
        if status == 401:
            return self._auth_error()
        if status == 403:
            hint = (f"the bot may not do this in channel {channel} ({text or 'Missing Permissions'}): give it View Channel, "
                    "Send Messages, Create Public Threads, Send Messages in Threads and Embed Links there")
            if code == 50001:
                hint = (f"the bot cannot see channel {channel} (Missing Access): invite it to the server and let it view "
                        "that channel")
            return PermanentChannelError(message, hint=hint)
        if status == 404:
            if target == "thread":
                return PermanentChannelError(message, hint="the handoff's Discord thread no longer exists (deleted?)")
            return PermanentChannelError(message, hint=(
                f"Discord has no channel {channel} the bot can see (Unknown Channel): check channel_id "
                "(Developer Mode → right click the channel → Copy Channel ID)"))
        if status >= 500:
            return TransientChannelError(message, hint=f"Discord is having trouble ({status})")
        return PermanentChannelError(message, hint=f"Discord refused {what}: {detail}")

"""discord.py as this adapter needs it, without global state: an aiohttp trace that turns
429 and 5xx answers into an exception before discord.py sleeps and retries (the outbox owns
retries), the client built with the REST and gateway URLs rewritten for this adapter only,
and discord.py's warnings that do not apply here kept out of the logs."""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from channels.base import ChannelAdapter
from channels.discord.config import DiscordConfig

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import aiohttp
    import discord


class ProviderTrouble(Exception):
    """A 429 or 5xx answer, raised from our aiohttp trace before discord.py can sleep and retry.

    It subclasses aiohttp.ClientError (set up in `_trouble_class`) so that discord.py's gateway
    loop treats it like any connection error (reconnect with backoff), while its REST loop,
    which only retries OSError, lets it through to us."""


_TROUBLE: type[Exception] | None = None


def _trouble_class() -> type[Exception]:
    global _TROUBLE
    if _TROUBLE is None:
        import aiohttp

        class _Trouble(ProviderTrouble, aiohttp.ClientError):
            def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
                super().__init__(f"HTTP {status}")
                self.status, self.headers, self.body = status, headers, body

            def data(self) -> dict[str, Any]:
                try:
                    value = json.loads(self.body)
                except ValueError:
                    return {}
                return value if isinstance(value, dict) else {}

            def retry_after(self) -> float | None:
                for candidate in (self.data().get("retry_after"), self.headers.get("Retry-After")):
                    if candidate is None:
                        continue
                    try:
                        return max(0.0, float(candidate))
                    except (TypeError, ValueError):
                        continue
                return None

        _TROUBLE = _Trouble
    return _TROUBLE


@dataclass
class _Attempt:
    """Whether the current call's request left this machine (headers written)."""

    sent: bool = False


_ATTEMPT: contextvars.ContextVar[_Attempt | None] = contextvars.ContextVar("discord_attempt", default=None)


def _trace_config() -> aiohttp.TraceConfig:
    import aiohttp

    trace = aiohttp.TraceConfig()

    async def headers_sent(_session: Any, _ctx: Any, _params: Any) -> None:
        attempt = _ATTEMPT.get()
        if attempt is not None:
            attempt.sent = True

    async def request_end(_session: Any, _ctx: Any, params: Any) -> None:
        status = params.response.status
        if status == 429 or status >= 500:
            body = await params.response.read()
            raise _trouble_class()(status, dict(params.response.headers), body)

    trace.on_request_headers_sent.append(headers_sent)
    trace.on_request_end.append(request_end)
    return trace


def _quiet_irrelevant_sdk_warnings(record: logging.LogRecord) -> bool:
    """discord.py warns at every client creation that voice is unsupported, and at every
    login that an Interactions Endpoint URL is set (so *its* app commands would not work).
    We use neither voice nor its app commands; the endpoint is ours. Operators should not
    have to learn to ignore those lines."""
    message = str(record.msg)
    return not (message.startswith("davey is not installed") or message.startswith("Application has an interaction endpoint URL"))


_SDK_LOGGER = "discord.client"


class SdkClient(ChannelAdapter):
    """The discord.py client of DiscordChannel; the adapter sets `_session_ready`, and the
    gateway (channels/discord/gateway.py) handles the messages."""

    config: DiscordConfig
    _session_ready: asyncio.Event

    def _build(self) -> discord.Client:
        import discord
        from discord.gateway import DiscordWebSocket
        from discord.http import Route

        sdk_log = logging.getLogger(_SDK_LOGGER)
        if _quiet_irrelevant_sdk_warnings not in sdk_log.filters:
            sdk_log.addFilter(_quiet_irrelevant_sdk_warnings)
        intents = discord.Intents.none()
        # dm_messages: a person reached directly answers in their direct message (no
        # privileged intent needed: message content is always sent for direct messages).
        intents.guilds = intents.guild_messages = intents.dm_messages = intents.message_content = True
        client = discord.Client(
            intents=intents, http_trace=_trace_config(), max_ratelimit_timeout=30.0,  # 30 s is discord.py's minimum
            max_messages=None, chunk_guilds_at_startup=False, member_cache_flags=discord.MemberCacheFlags.none(),
        )
        http = client.http
        base, default_base = self.config.api_base_url, Route.BASE
        if base != default_base:
            original_request = http.request

            async def request(route: Any, **kwargs: Any) -> Any:
                if route.url.startswith(default_base):
                    route.url = base + route.url[len(default_base):]
                return await original_request(route, **kwargs)

            http.request = request  # type: ignore[method-assign]  # discord.py has no base-URL option: wrap its one HTTP entry

        gateway = self.config.gateway_url
        default_gateway = DiscordWebSocket.DEFAULT_GATEWAY
        if gateway != str(default_gateway):
            import yarl

            original_connect = http.ws_connect

            async def ws_connect(url: str, *, compress: int = 0) -> Any:
                target = yarl.URL(url)
                if (target.scheme, target.host, target.path) == (default_gateway.scheme, default_gateway.host, default_gateway.path):
                    url = str(yarl.URL(gateway).with_query(target.query))
                return await original_connect(url, compress=compress)

            http.ws_connect = ws_connect  # type: ignore[method-assign]  # nor a gateway-URL option: wrap its connect

        async def on_socket_event_type(event_type: str) -> None:
            if event_type in ("READY", "RESUMED"):
                self._session_ready.set()

        async def on_disconnect() -> None:
            self._session_ready.clear()

        # discord.py dispatches an event to the `on_<event>` attribute of the client
        # (`client.event` would need each function to bear that name).
        client.on_message = self._on_gateway_message  # type: ignore[attr-defined]  # a hook Client does not declare
        client.on_socket_event_type = on_socket_event_type  # type: ignore[attr-defined]  # a hook Client does not declare
        client.on_disconnect = on_disconnect  # type: ignore[attr-defined]  # a hook Client does not declare
        return client

    async def _on_gateway_message(self, message: discord.Message) -> None:
        """A MESSAGE_CREATE from the gateway: DiscordGateway relays it."""
        raise NotImplementedError

"""The Discord channel: each handoff is an embed in a staff text channel, with a thread of its own.

A dispatch is one message in the configured channel (`channel_id`): an embed with the brief
(urgency and short code, summary, what to do, subscriber, the fields to hand back, the
recent transcript), a link button to the return form and, when the interactions endpoint is
configured, a Release button. A thread is started from that message; every relay and notice
goes into it, and every human message in it goes back to the subscriber. The thread id is
the handoff's thread_key (Discord gives a thread started from a message the message's id).

Discord delivers human messages only over the gateway (a websocket), so `start()` logs in
over REST, checks the channel, and runs a discord.py `Client` in the background with the
GUILDS, GUILD_MESSAGES and MESSAGE_CONTENT intents. Button clicks come over HTTP instead:
Discord POSTs interactions to `{public_url}/webhooks/{channel id}`.

What it guards against:
- pings: every message carries `allowed_mentions: {"parse": []}`, so a summary or a relayed
  message saying `@everyone` or `<@123>` notifies nobody; such text is also defused for the
  eye (a zero-width space after `@`, `<` escaped), and embeds never ping anyway;
- markup injection: user-derived text is escaped for Discord markdown (`discord.utils.
  escape_markdown` plus line-start markers and `<…>` pills), so it shows exactly as typed;
- forged interactions: the Ed25519 signature (PyNaCl `VerifyKey`) over timestamp + raw body
  is checked before anything is parsed; a bad, missing or stale signature gets 401;
- echo loops: messages from bots and webhooks, ours included, are never relayed;
- double posts: messages are sent with a `nonce` derived from the outbox's delivery key and
  `enforce_nonce`, so Discord itself answers a retry of a post that landed (within a few
  minutes) with the message it already has; a dispatch whose thread could not be started
  is completed on retry instead of posted again;
- the SDK's own retries: discord.py sleeps and retries 429s and 5xx inside a request (up to
  five times, tens of seconds). An aiohttp trace on our client's session turns those
  answers into an exception before discord.py sees them, so `send()` returns at once with
  a typed error and the core's outbox owns the retry. discord.py's pre-emptive bucket waits
  are capped by `max_ratelimit_timeout` and every call by `request_timeout`.

Test knobs without global state: discord.py keeps the REST base (`discord.http.Route.BASE`)
and the gateway (`DiscordWebSocket.DEFAULT_GATEWAY`) as class attributes. Setting them would
repoint every discord.py client in the process (two channels with different bases would
fight). Instead each adapter rewrites the URLs of its own client only: `api_base_url`
replaces the default prefix of each route's URL in its HTTPClient's `request`, and
`gateway_url` the default gateway in its `ws_connect`. The globals are never touched.

Approval prompts are messages in the staff channel itself (no thread: they
belong to no handoff): an embed with the question, the risk, the deadline (also as a
Discord timestamp, in each reader's time zone) and the exact arguments in a code block
(backticks and invisible characters shown as JSON escapes, so nothing can break out or
hide; cut with a note when too long, never silently), Approve / Deny / Always allow
buttons (custom_id `approval:<id>:approve|deny|always`) when the interactions endpoint is
configured, and the decision page as a link button always. A press is verified like every
interaction, answered privately at once and becomes a `Decision` (deduplicated on the
interaction id); the core decides whether it counts. When the approval ends, the prompt
is edited in place (no buttons, the outcome in its embed), found by the id remembered at
send or press or, after a restart, among the channel's newest messages; only when it is
gone is the closing text posted anew.

Discord setup: create an application and a bot (Developer Portal); enable the **Message
Content** privileged intent (Bot tab); invite the bot with the permissions View Channel,
Send Messages, Create Public Threads, Send Messages in Threads, Embed Links and Read
Message History; copy the channel id (Developer Mode → right click → Copy Channel ID).
For the Release button set the application's Interactions Endpoint URL to
`{public_url}/webhooks/{channel id}` and `application_public_key` to its Public Key.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import re
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlparse

import structlog
from pydantic import Field, SecretStr, field_validator

from channels.base import (
    ApprovalBrief,
    Capabilities,
    ChannelAdapter,
    ChannelAuthError,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    Decision,
    HandoffBrief,
    InboundMessage,
    Outbound,
    PermanentChannelError,
    Receipt,
    TranscriptLine,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
    pretty_arguments,
)
from channels.text import clip
from forms.fields import preview_line

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    import aiohttp
    import discord

log = structlog.get_logger(__name__)

DEFAULT_API = "https://discord.com/api/v10"
DEFAULT_GATEWAY = "wss://gateway.discord.gg/"
RELEASE_ID = "handoff_release"

# Discord's limits (https://discord.com/developers/docs/resources/message#embed-object-embed-limits)
CONTENT_LIMIT = 2000
TITLE_LIMIT = 256
DESCRIPTION_LIMIT = 4096
FIELD_NAME_LIMIT = 256
FIELD_VALUE_LIMIT = 1024
FOOTER_LIMIT = 2048
EMBED_TOTAL_LIMIT = 6000
THREAD_NAME_LIMIT = 100
SUMMARY_BUDGET, ACTION_BUDGET = 2000, 1000  # escaped characters in the description
TRANSCRIPT_LINE = 400  # raw characters of one transcript message
TRANSCRIPT_RESERVE = 900  # characters of the embed kept for the transcript before the context is shown
NONCE_LENGTH = 25

# Interaction and response types, message flags, component types.
PING, COMPONENT = 1, 3
PONG, MESSAGE_REPLY = 1, 4
EPHEMERAL, SUPPRESS_EMBEDS = 1 << 6, 1 << 2
ACTION_ROW, BUTTON = 1, 2
SECONDARY, SUCCESS, DANGER, LINK = 2, 3, 4, 5
TEXT_CHANNEL_TYPES = {0: "text", 5: "announcement"}
CHANNEL_KINDS = {2: "voice channel", 4: "category", 13: "stage channel", 15: "forum", 16: "media channel"}
THREAD_ALREADY_EXISTS = 160004
SIGNATURE_MAX_AGE = 300  # seconds; interactions are answered within 3 s, so older ones are replays
COLOURS = {"high": 0xED4245, "normal": 0x5865F2, "low": 0x99AAB5}
RISK_COLOURS = {"high": 0xED4245, "medium": 0xFEE75C, "low": 0x99AAB5}
CLOSED_COLOUR = 0x4F545C
# Approval buttons: custom_id `approval:<approval id>:approve|deny|always`.
APPROVAL_ID = "approval"
_APPROVAL_CUSTOM_ID = re.compile(r"^approval:(ap_[A-Za-z0-9_-]{1,80}):(approve|deny|always)$")
APPROVAL_CHOICES = {"approve": (True, False), "deny": (False, False), "always": (True, True)}
ARGUMENTS_LIMIT = 2800  # characters of pretty JSON in a prompt's embed (the rest is announced, never dropped silently)
PROMPT_CACHE_LIMIT = 1000
PROMPT_LOOKUP_LIMIT = 100  # newest channel messages searched for a prompt this process did not send


# --------------------------------------------------------------------------- config


class DiscordConfig(ChannelConfig):
    kind: Literal["discord"] = "discord"
    bot_token: SecretStr = Field(
        description="The bot's token: discord.com/developers/applications → your application → Bot → Reset Token.",
    )
    channel_id: int = Field(description="Id of the staff text channel handoffs are posted to (a snowflake such as 1234567890123456789).")
    application_public_key: str | None = Field(
        default=None,
        description="The application's Public Key (hex, General Information). Enables the interactions endpoint "
        "POST /webhooks/{id} and the Release button; set the Interactions Endpoint URL to that address.",
    )
    gateway: bool = Field(default=True, description="Receive replies over the gateway (needs the Message Content intent).")
    api_base_url: str = Field(default=DEFAULT_API, description="Discord REST API base URL (for a local or test server).")
    gateway_url: str = Field(default=DEFAULT_GATEWAY, description="Discord gateway websocket URL (for a local or test server).")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to wait for one Discord REST call.")

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value().strip().removeprefix("Bot ").strip()
        # Never repeat the value: it is a secret even when it is the wrong one.
        if len(token) < 20 or any(c.isspace() for c in token):
            raise ValueError("does not look like a Discord bot token: copy it from the Developer Portal (Bot → Reset Token)")
        return SecretStr(token)

    @field_validator("channel_id", mode="before")
    @classmethod
    def _snowflake(cls, value: Any) -> Any:
        text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else None
        if text is None or not re.fullmatch(r"\d{15,21}", text):
            raise ValueError("must be the channel's numeric id (Developer Mode → right click the channel → Copy Channel ID)")
        return int(text)

    @field_validator("application_public_key", mode="before")
    @classmethod
    def _public_key(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value.strip()):
            raise ValueError("must be the application's Public Key: 64 hex characters (General Information page)")
        return value.strip().lower()

    @field_validator("api_base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"must be an http(s) URL such as {DEFAULT_API}")
        return value.rstrip("/")

    @field_validator("gateway_url")
    @classmethod
    def _ws(cls, value: str) -> str:
        parsed = urlparse(value)
        if parsed.scheme not in ("ws", "wss") or not parsed.netloc:
            raise ValueError(f"must be a ws(s) URL such as {DEFAULT_GATEWAY}")
        return value


# --------------------------------------------------------------------------- text helpers


_NUMBERED = re.compile(r"^(\s*\d+)\.(?=\s)", re.MULTILINE)


def escape(text: str) -> str:
    """Escape user-derived text for Discord markdown so it shows exactly as typed:
    emphasis, code, spoilers, quotes, headings, lists and masked links via discord.py's
    escape_markdown (bare URLs stay clickable); `<@id>`, `<#id>`, `<t:…>` pills via `\\<`;
    `@everyone` / `@here` defused with a zero-width space (they ping nobody anyway)."""
    from discord.utils import escape_markdown, escape_mentions

    text = escape_markdown(text.replace("\x00", "\ufffd"))
    # Numbered lists: Discord only honours a backslash before punctuation, so escape the dot.
    text = _NUMBERED.sub(r"\1\\.", text)
    return escape_mentions(text.replace("<", "\\<"))


def clip_escaped(text: str, limit: int) -> str:
    """Clip escaped markdown without leaving a dangling backslash (it would escape the `…`)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    trailing = len(cut) - len(cut.rstrip("\\"))
    if trailing % 2:
        cut = cut[:-1]
    return cut + "…"


def hang(text: str) -> str:
    """Indent continuation lines, so a line a person wrote cannot pass for another speaker's."""
    return "\n\u2003".join(text.splitlines() or [""])


def split_for_messages(text: str, limit: int) -> list[str]:
    """Escaped parts of `text`, each at most `limit` characters, cut at a line break or space
    near the end where there is one (raw text is cut, then escaped, so no escape is split)."""
    parts: list[str] = []
    rest = text.strip()
    while rest:
        if len(escape(rest)) <= limit:
            parts.append(escape(rest))
            break
        low, high = 1, min(len(rest), limit)  # the longest raw prefix whose escaped form fits
        while low < high:
            middle = (low + high + 1) // 2
            if len(escape(rest[:middle])) <= limit:
                low = middle
            else:
                high = middle - 1
        cut = low
        soft = max(rest.rfind("\n", 0, cut), rest.rfind(" ", 0, cut))
        if soft > cut // 2:
            cut = soft + 1
        parts.append(escape(rest[:cut].rstrip()))
        rest = rest[cut:].lstrip()
    return [p for p in parts if p] or [""]


def nonce_of(outbound: Outbound, part: int = 0) -> str | None:
    """Discord nonces are at most 25 characters; derive one from the delivery key (and the
    handoff, since keys are unique only within one desk's database)."""
    if not outbound.delivery_key:
        return None
    digest = hashlib.blake2b(f"{outbound.handoff_session_id}:{outbound.delivery_key}:{part}".encode(), digest_size=12)
    return digest.hexdigest()[:NONCE_LENGTH]


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


# --------------------------------------------------------------------------- the SDK's retries


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


# --------------------------------------------------------------------------- the adapter


class DiscordChannel(ChannelAdapter):
    kind = "discord"
    config_model = DiscordConfig
    # reconcile=False: a lost answer is retried, and the nonce makes Discord answer that
    # retry with the message it already has (within its nonce window of a few minutes).
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=False)
    config: DiscordConfig

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: ChannelContext | None = None
        self._client: discord.Client | None = None
        self._gateway_task: asyncio.Task[None] | None = None
        self._session_ready = asyncio.Event()
        self.bot_id: int | None = None
        self.bot_name: str | None = None
        self.guild_id: int | None = None
        self.channel_name: str | None = None
        self._threads: set[int] = set()  # threads this process started (known even if not cached)
        # A dispatch posted whose thread could not be started: the retry starts the thread
        # instead of posting the message again.
        self._posted: dict[str, dict[str, Any]] = {}
        # approval id -> its prompt message id (sent or pressed in this process), so the
        # closing notice edits it without a lookup.
        self._prompts: OrderedDict[str, str] = OrderedDict()

    # ------------------------------------------------------------------ the SDK client

    def _build(self) -> discord.Client:
        import discord
        from discord.gateway import DiscordWebSocket
        from discord.http import Route

        sdk_log = logging.getLogger(_SDK_LOGGER)
        if _quiet_irrelevant_sdk_warnings not in sdk_log.filters:
            sdk_log.addFilter(_quiet_irrelevant_sdk_warnings)
        intents = discord.Intents.none()
        intents.guilds = intents.guild_messages = intents.message_content = True
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

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: ChannelContext) -> None:
        self._ctx = ctx
        try:
            self._client = client = self._build()
            await self._call("login", client.login(self.config.bot_token.get_secret_value()))
            assert client.user is not None
            self.bot_id, self.bot_name = client.user.id, client.user.name
            self._check_public_key(client)
            await self._check_channel(client)
            if self.config.gateway:
                await self._start_gateway(client)
        except BaseException:
            await self.stop()  # the core only stops channels that started
            raise
        log.info("discord_started", channel_id=self.id, bot=self.bot_name, discord_channel=self.config.channel_id,
                 gateway=self.config.gateway, interactions=self.config.application_public_key is not None)

    def _check_public_key(self, client: discord.Client) -> None:
        app = client.application
        key = self.config.application_public_key
        if key and app is not None and app.verify_key and app.verify_key.lower() != key:
            raise PermanentChannelError("application_public_key is not this bot's application key", hint=(
                f"application_public_key does not match the Public Key of the bot's application '{app.name}' "
                "(Developer Portal → General Information); Release button clicks would all be refused"))

    async def _check_channel(self, client: discord.Client) -> dict[str, Any]:
        from discord.http import Route

        route = Route("GET", "/channels/{channel_id}", channel_id=self.config.channel_id)
        data: dict[str, Any] = await self._call("get channel", client.http.request(route), target="channel")
        kind = data.get("type")
        if kind not in TEXT_CHANNEL_TYPES:
            known = CHANNEL_KINDS.get(kind) if isinstance(kind, int) else None
            what = known or ("thread or direct message" if kind in (1, 3, 10, 11, 12) else f"channel of type {kind}")
            raise PermanentChannelError(f"channel {self.config.channel_id} is a {what}", hint=(
                f"channel_id {self.config.channel_id} is a {what}; handoffs need a text channel (threads are started in it)"))
        self.guild_id = int(data["guild_id"]) if data.get("guild_id") else None
        self.channel_name = data.get("name")
        return data

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

    def _gateway_error(self, exc: BaseException | None) -> ChannelError:
        import discord

        if isinstance(exc, discord.PrivilegedIntentsRequired):
            return PermanentChannelError("the Message Content intent is not enabled", hint=(
                "Discord refused the gateway intents: enable the Message Content Intent for the bot "
                "(Developer Portal → your application → Bot → Privileged Gateway Intents), or set gateway: false"))
        if isinstance(exc, discord.ConnectionClosed) and exc.code == 4004:
            return ChannelAuthError("the gateway refused the bot token", hint=(
                f"Discord's gateway refused bot_token of channel {self.id}: reset the token in the Developer Portal"))
        detail = f"{type(exc).__name__}: {exc}" if exc else "closed"
        return TransientChannelError(f"the Discord gateway connection ended ({detail})",
                                     hint=f"could not stay connected to the Discord gateway ({detail})")

    def _gateway_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled() or self._client is None:
            return  # stopped by us
        error = self._gateway_error(task.exception())
        log.error("discord_gateway_stopped", channel_id=self.id, hint=error.hint)
        if self._ctx is not None:
            self._ctx.lost(error)  # out of handoff_request until the sweep has it reconnected

    async def stop(self) -> None:
        client, task = self._client, self._gateway_task
        self._client = self._gateway_task = None
        self._session_ready.clear()
        if client is not None:
            await client.close()  # closes the websocket (the connect task returns) and the HTTP session
        if task is not None:
            if not task.done():
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def probe(self) -> str:
        own = self._client is None  # `check-config --probe` calls this without start()
        client = self._build() if own else self._client
        assert client is not None
        try:
            user = await self._call("users/@me", client.http.static_login(self.config.bot_token.get_secret_value()))
            await self._check_channel(client)
        finally:
            if own:
                await client.close()
        guild = f" (guild {self.guild_id})" if self.guild_id else ""
        return f"bot @{user.get('username')} ({user.get('id')}), posting to #{self.channel_name}{guild}"

    def _require_client(self) -> discord.Client:
        if self._client is None or self.bot_id is None:
            raise TransientChannelError("the Discord channel is not started", hint="the Discord channel is not running")
        return self._client

    # ------------------------------------------------------------------ sending

    async def send(self, outbound: Outbound) -> Receipt:
        client = self._require_client()
        if outbound.notice == "approval":
            return await self._send_prompt(client, outbound)
        if outbound.notice == "approval_closed":
            return await self._close_prompt(client, outbound)
        if outbound.purpose == "dispatch":
            return await self._send_dispatch(client, outbound)
        thread_id = outbound.thread.get("thread_id")
        if not thread_id:
            raise PermanentChannelError("no Discord thread for this handoff",
                                        hint="the handoff has no Discord thread to post into (its dispatch receipt lacks thread_id)")
        body = (outbound.body if outbound.body is not None else outbound.text).strip()
        if outbound.purpose == "relay":
            label = self._render("relay.txt", author=escape(clip(outbound.author or "Subscriber", 80)))
            parts = split_for_messages(body, CONTENT_LIMIT - len(label) - 12)
            contents = [f"{label}{f' ({i}/{len(parts)})' if len(parts) > 1 else ''} {part}"
                        for i, part in enumerate(parts, 1)]
        else:
            contents = split_for_messages(body, CONTENT_LIMIT)
        first: dict[str, Any] | None = None
        for i, content in enumerate(contents):  # a failure after part 1: the retry resends all (nonces dedupe)
            message = await self._post(client, int(thread_id), {
                "content": content, "flags": SUPPRESS_EMBEDS, "nonce": nonce_of(outbound, i),
            }, what="thread message")
            first = first or message
        assert first is not None
        if outbound.notice == "released":
            await self._retire_release_button(client, outbound)
        return Receipt(message_id=str(first["id"]), thread_key=str(thread_id), thread=dict(outbound.thread))

    async def _send_dispatch(self, client: discord.Client, outbound: Outbound) -> Receipt:
        from discord.http import Route

        brief = outbound.brief
        if brief is None:
            raise PermanentChannelError("a dispatch without its brief", hint="internal error: the dispatch carried no brief")
        channel_id = self.config.channel_id
        message = self._posted.get(brief.handoff_session_id)
        if message is None:
            message = await self._post(client, channel_id, {
                "content": clip_escaped(escape(self._render("title.txt", brief=brief, who=brief.subscriber_name or "A subscriber")),
                                        CONTENT_LIMIT),
                "embeds": [self._dispatch_embed(brief)],
                "components": self._components(brief, release=True),
                "nonce": nonce_of(outbound),
            }, what="dispatch")
            self._posted[brief.handoff_session_id] = message
        message_id = int(message["id"])
        name = clip(f"{brief.short_code} · {brief.subscriber_name or 'subscriber'}", THREAD_NAME_LIMIT)
        route = Route("POST", "/channels/{channel_id}/messages/{message_id}/threads", channel_id=channel_id, message_id=message_id)
        import discord

        try:
            thread = await self._call("start thread", client.http.request(
                route, json={"name": name, "auto_archive_duration": 1440}), may_have_landed=True, target="channel")
            thread_id = int(thread["id"])
        except PermanentChannelError as exc:
            cause = exc.__cause__
            if not (isinstance(cause, discord.HTTPException) and cause.code == THREAD_ALREADY_EXISTS):
                raise
            thread_id = message_id  # an earlier attempt started it; its id is the message's
        self._posted.pop(brief.handoff_session_id, None)
        self._threads.add(thread_id)
        return Receipt(message_id=str(message_id), thread_key=str(thread_id),
                       thread={"channel_id": str(channel_id), "message_id": str(message_id), "thread_id": str(thread_id)})

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

    async def _retire_release_button(self, client: discord.Client, outbound: Outbound) -> None:
        """After a release, leave only the form link on the dispatch. Cosmetic: a failure is
        logged, never raised (the notice itself was posted)."""
        from discord.http import Route

        channel_id, message_id = outbound.thread.get("channel_id"), outbound.thread.get("message_id")
        if not (channel_id and message_id and self.config.application_public_key):
            return
        route = Route("PATCH", "/channels/{channel_id}/messages/{message_id}", channel_id=int(channel_id), message_id=int(message_id))
        try:
            # Only the Release button goes: rebuild the row from the message as Discord has it.
            message = await self._call("get dispatch", client.http.request(
                Route("GET", "/channels/{channel_id}/messages/{message_id}", channel_id=int(channel_id), message_id=int(message_id))))
            rows = []
            for row in message.get("components") or []:
                kept = [c for c in row.get("components") or [] if not str(c.get("custom_id", "")).startswith(RELEASE_ID)]
                if kept:
                    rows.append({"type": ACTION_ROW, "components": kept})
            await self._call("edit dispatch", client.http.request(route, json={"components": rows}))
        except ChannelError as exc:
            log.warning("discord_release_button_not_removed", channel_id=self.id, hint=exc.hint)

    # ------------------------------------------------------------------ approvals

    async def _send_prompt(self, client: discord.Client, outbound: Outbound) -> Receipt:
        """An approval prompt: a message in the staff channel itself (no thread: it belongs
        to no handoff) with an embed, and Approve / Deny (/ Always allow) buttons when the
        interactions endpoint is configured; the decision page link always."""
        approval = outbound.approval
        if approval is None:
            raise PermanentChannelError("an approval prompt without its brief", hint="internal error: the prompt carried no approval")
        buttons = bool(self.config.application_public_key)
        title = self._render("approval_title.txt", approval=approval, who=approval.subscriber_name)
        message = await self._post(client, self.config.channel_id, {
            "content": clip_escaped(escape(title), CONTENT_LIMIT),
            "embeds": [self._prompt_embed(approval, buttons=buttons)],
            "components": self._prompt_components(approval, buttons=buttons),
            "nonce": nonce_of(outbound),
        }, what="approval prompt")
        self._remember_prompt(approval.approval_id, str(message["id"]))
        return Receipt(message_id=str(message["id"]),
                       thread={"channel_id": str(self.config.channel_id), "message_id": str(message["id"])})

    async def _close_prompt(self, client: discord.Client, outbound: Outbound) -> Receipt:
        """How an approval ended: the prompt is edited in place (buttons gone, the outcome in
        its embed). When it cannot be found or edited, the closing text is posted instead."""
        from discord.http import Route

        approval_id = outbound.handoff_session_id
        text = (outbound.body if outbound.body is not None else outbound.text).strip()
        channel_id = self.config.channel_id
        prompt = await self._find_prompt(client, approval_id, outbound.thread)
        if prompt is not None:
            embeds = [dict(e) for e in prompt.get("embeds") or []][:1]
            if embeds:
                embed = embeds[0]
                embed.pop("type", None)
                embed["color"] = CLOSED_COLOUR
                embed["fields"] = [*(embed.get("fields") or []), {
                    "name": "Outcome", "value": clip_escaped(escape(text), FIELD_VALUE_LIMIT), "inline": False}][:25]
            route = Route("PATCH", "/channels/{channel_id}/messages/{message_id}", channel_id=channel_id,
                          message_id=int(prompt["id"]))
            try:
                await self._call("edit approval prompt", client.http.request(route, json={
                    "embeds": embeds, "components": [], "allowed_mentions": {"parse": []}}))
            except TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except ChannelError as exc:  # deleted, or its embed no longer acceptable: say it anew
                log.warning("discord_approval_prompt_not_updated", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            else:
                self._prompts.pop(approval_id, None)
                return Receipt(message_id=str(prompt["id"]), thread={"channel_id": str(channel_id), "message_id": str(prompt["id"])})
        parts = split_for_messages(text, CONTENT_LIMIT)
        message = await self._post(client, channel_id, {"content": parts[0], "flags": SUPPRESS_EMBEDS,
                                                        "nonce": nonce_of(outbound)}, what="approval outcome")
        return Receipt(message_id=str(message["id"]), thread={"channel_id": str(channel_id), "message_id": str(message["id"])})

    async def _find_prompt(self, client: discord.Client, approval_id: str, thread: dict[str, Any]) -> dict[str, Any] | None:
        """The prompt as Discord has it: by the id remembered at send (or press) or given in
        the notice's `thread` (the prompt's receipt, should the core pass it), else among
        the channel's newest messages (after a restart), by the approval id on its buttons
        or in its footer. A transient failure is raised (the core retries the notice)."""
        from discord.http import Route

        channel_id = self.config.channel_id
        known = self._prompts.get(approval_id) or thread.get("message_id")
        try:
            if known is not None:
                prompt: dict[str, Any] = await self._call("get approval prompt", client.http.request(Route(
                    "GET", "/channels/{channel_id}/messages/{message_id}", channel_id=channel_id, message_id=int(known))))
                return prompt
            recent: list[dict[str, Any]] | None = await self._call("list messages", client.http.request(
                Route("GET", "/channels/{channel_id}/messages", channel_id=channel_id), params={"limit": PROMPT_LOOKUP_LIMIT}))
        except TransientChannelError:
            raise
        except ChannelError as exc:
            log.warning("discord_approval_prompt_not_found", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            return None
        for message in recent or []:
            if str((message.get("author") or {}).get("id")) == str(self.bot_id) and _is_prompt_of(message, approval_id):
                return message
        return None

    def _remember_prompt(self, approval_id: str, message_id: str) -> None:
        self._prompts[approval_id] = message_id
        self._prompts.move_to_end(approval_id)
        while len(self._prompts) > PROMPT_CACHE_LIMIT:
            self._prompts.popitem(last=False)

    def _prompt_embed(self, approval: ApprovalBrief, *, buttons: bool) -> dict[str, Any]:
        """Readable on a phone: the question, the description, the exact arguments in a code
        block (markdown and mentions inert there), risk and deadline, within embed limits."""
        title = clip_escaped(escape(self._render("approval_title.txt", approval=approval, who=approval.subscriber_name)),
                             TITLE_LIMIT)
        shown, left_out = pretty_arguments(approval.arguments, ARGUMENTS_LIMIT, also_escape="`")
        cut = f"\n*[… cut here: {left_out} more characters. The decision page shows every argument.]*" if left_out else ""
        question = escape(f"May the assistant run {approval.action_id}"
                          + (f" for {approval.subscriber_name}?" if approval.subscriber_name else "?"))
        head = f"{clip_escaped(question, 400)}\n\n{clip_escaped(escape(approval.description), 500)}\n\n**Exactly these arguments:**\n"
        description = f"{head}```json\n{shown}\n```{cut}"
        expires = approval.expires_at[:16].replace("T", " ")
        try:
            unix = int(datetime.fromisoformat(approval.expires_at).timestamp())
            answer_by = f"{expires} UTC (<t:{unix}:R>)"  # Discord shows each reader how long is left
        except ValueError:
            answer_by = f"{expires} UTC"
        return {
            "title": title, "description": description, "url": approval.decision_url,
            "color": RISK_COLOURS.get(approval.risk, COLOURS["normal"]),
            "fields": [{"name": "Risk", "value": approval.risk, "inline": True},
                       {"name": "Answer by", "value": answer_by, "inline": True}],
            "footer": {"text": clip(self._render("approval_footer.txt", approval=approval, buttons=buttons), FOOTER_LIMIT)},
        }

    @staticmethod
    def _prompt_components(approval: ApprovalBrief, *, buttons: bool) -> list[dict[str, Any]]:
        row: list[dict[str, Any]] = []
        if buttons:
            custom = f"{APPROVAL_ID}:{approval.approval_id}"
            row += [{"type": BUTTON, "style": SUCCESS, "label": "Approve", "custom_id": f"{custom}:approve"},
                    {"type": BUTTON, "style": DANGER, "label": "Deny", "custom_id": f"{custom}:deny"}]
            if approval.allow_always:
                row.append({"type": BUTTON, "style": SECONDARY, "label": "Always allow", "custom_id": f"{custom}:always"})
        row.append({"type": BUTTON, "style": LINK, "label": "Decision page", "url": approval.decision_url})
        return [{"type": ACTION_ROW, "components": row}]

    # ------------------------------------------------------------------ rendering

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/discord/{name}", **context).strip()

    def _components(self, brief: HandoffBrief | None, *, release: bool) -> list[dict[str, Any]]:
        buttons: list[dict[str, Any]] = []
        if brief is not None and brief.form_url:
            buttons.append({"type": BUTTON, "style": LINK, "label": "Fill return form", "url": brief.form_url})
        if release and brief is not None and self.config.application_public_key:
            # Clicks come to our interactions endpoint; the custom_id names the handoff for people
            # reading logs, the thread (the message the button is on) routes it.
            buttons.append({"type": BUTTON, "style": DANGER, "label": "Release",
                            "custom_id": f"{RELEASE_ID}:{brief.handoff_session_id}"[:100]})
        return [{"type": ACTION_ROW, "components": buttons}] if buttons else []

    def _dispatch_embed(self, brief: HandoffBrief) -> dict[str, Any]:
        """The brief as one embed within Discord's limits: 256 title, 4096 description,
        1024 per field, 6000 in all. The transcript gets what is left, newest lines first."""
        import discord

        who = brief.subscriber_name or "A subscriber"
        title = clip_escaped(escape(self._render("title.txt", brief=brief, who=who)), TITLE_LIMIT)
        summary = clip_escaped(escape(brief.summary), SUMMARY_BUDGET)
        action = clip_escaped(escape(brief.expected_action), ACTION_BUDGET)
        core = f"**Summary**\n{summary}\n\n**What to do**\n{action}"
        footer = clip(self._render("footer.txt", who=who, idle=_duration(brief.idle_timeout_seconds),
                                   release_button=bool(self.config.application_public_key)), FOOTER_LIMIT)

        embed = discord.Embed(title=title, description=core, colour=COLOURS.get(brief.urgency, COLOURS["normal"]),
                              url=brief.form_url or None)
        subscriber = who if not brief.subscriber_email else f"{who} ({brief.subscriber_email})"
        embed.add_field(name="Subscriber", value=clip_escaped(escape(subscriber), FIELD_VALUE_LIMIT), inline=True)
        embed.add_field(name="Urgency", value=brief.urgency, inline=True)
        if brief.contact_back_email:
            embed.add_field(name="Contact back", value=clip_escaped(escape(brief.contact_back_email), FIELD_VALUE_LIMIT), inline=True)
        if brief.expected_return:
            lines = [f"• {escape(preview_line(f))}" for f in brief.expected_return]
            embed.add_field(name="Please hand back", value=_lines_within(lines, FIELD_VALUE_LIMIT, "on the return form"), inline=False)
        embed.set_footer(text=footer)
        if brief.extra_context:
            # What is left, less a share kept for the transcript (the newest lines matter more).
            room = EMBED_TOTAL_LIMIT - len(embed) - len("Context") - (TRANSCRIPT_RESERVE if brief.transcript else 0)
            if room > 40:
                lines = [f"• **{escape(clip(k, 60))}**: {escape(clip(v, 300))}" for k, v in brief.extra_context.items()]
                embed.add_field(name="Context", value=_lines_within(lines, min(FIELD_VALUE_LIMIT, room), "not shown"), inline=False)
        if brief.transcript:
            room = min(DESCRIPTION_LIMIT - len(core), EMBED_TOTAL_LIMIT - len(embed)) - 4
            text = self._transcript(brief.transcript, room)
            if text:
                embed.description = f"{core}\n\n{text}"
        data: dict[str, Any] = {**embed.to_dict()}
        data.pop("type", None)
        return data

    def _transcript(self, lines: list[TranscriptLine], room: int) -> str:
        """The newest transcript lines that fit `room`, under a label saying how many were left out."""
        rendered = [f"**{escape(clip(line.author or line.role, 60))}:** {hang(escape(clip(line.text, TRANSCRIPT_LINE)))}"
                    for line in lines]
        kept: list[str] = []
        for count in range(len(rendered), -1, -1):
            kept = rendered[len(rendered) - count:]
            label = self._render("transcript_label.txt", omitted=len(rendered) - count)
            text = label + "\n" + "\n".join(kept)
            if len(text) <= room:
                return text if kept else ""
        return ""


    # ------------------------------------------------------------------ inbound: the gateway

    async def _on_gateway_message(self, message: discord.Message) -> None:
        """A MESSAGE_CREATE from the gateway: relay it when a person wrote it in one of our
        handoff threads. Errors are logged by discord.py's on_error; the gateway has no
        redelivery, so a message that could not be stored is lost (and logged)."""
        inbound = self._inbound_from(message)
        if inbound is not None and self._ctx is not None:
            await self._ctx.deliver_inbound(inbound)

    def _inbound_from(self, message: discord.Message) -> InboundMessage | None:
        import discord

        author = message.author
        if author.bot or message.webhook_id is not None or author.id == self.bot_id:
            return None  # bots and webhooks, our own posts included, are never relayed
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return None  # joins, pins, "thread created" … are not replies
        if not self._is_handoff_thread(message.channel):
            return None
        text = message.clean_content.strip()  # mentions as @name / #channel, as the person saw them
        files = [a.filename for a in message.attachments]
        if files:  # files are not forwarded; say so rather than drop the message silently
            text = (text + "\n" if text else "") + f"[sent {len(files)} file(s) in Discord: {', '.join(files)}]"
        if not text:
            return None
        name = getattr(author, "display_name", None) or author.name
        return InboundMessage(thread_key=str(message.channel.id), text=text.replace("\x00", "\ufffd"),
                              author=" ".join(str(name).split())[:80], dedupe_key=f"message:{message.id}")

    def _is_handoff_thread(self, channel: Any) -> bool:
        import discord

        if isinstance(channel, discord.Thread):
            return channel.parent_id == self.config.channel_id
        # A thread discord.py has not cached (it learns threads from GUILD_CREATE and
        # THREAD_CREATE): only the ones this process started are known to be ours.
        return isinstance(channel, discord.PartialMessageable) and channel.id in self._threads

    # ------------------------------------------------------------------ inbound: interactions

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        if not self.config.application_public_key:
            return WebhookReply(status=404, body=b"this Discord channel has no interactions endpoint (application_public_key)")
        if not self._signed_by_discord(request.body, request.headers):
            log.warning("discord_interaction_rejected", channel_id=self.id, reason="bad, missing or stale signature")
            return WebhookReply(status=401, body=b"invalid request signature")
        try:
            data = json.loads(request.body)
        except (UnicodeDecodeError, ValueError):
            return WebhookReply(status=400, body=b"malformed body")
        if not isinstance(data, dict):
            return WebhookReply(status=400, body=b"malformed body")
        if data.get("type") == PING:
            return _json_reply({"type": PONG})
        if data.get("type") == COMPONENT:
            custom_id = str((data.get("data") or {}).get("custom_id") or "")
            if custom_id.startswith(APPROVAL_ID + ":"):
                return self._approval_press(data, custom_id)
            if custom_id == RELEASE_ID or custom_id.startswith(RELEASE_ID + ":"):
                message = self._release_click(data)
                if message is None:
                    return _ephemeral("This button does not belong to a handoff of this desk.")
                return WebhookReply(status=200, body=json.dumps(_ephemeral_body(
                    "Releasing the handoff… the assistant takes the conversation back.")).encode(),
                    content_type="application/json", messages=[message])
        return _ephemeral("Nothing to do here: reply in the handoff's thread, or type /release there when you are done.")

    def _signed_by_discord(self, body: bytes, headers: Any) -> bool:
        from nacl.exceptions import BadSignatureError
        from nacl.signing import VerifyKey

        signature = headers.get("x-signature-ed25519", "")
        timestamp = headers.get("x-signature-timestamp", "")
        if not signature or not timestamp.isdigit() or not timestamp.isascii():
            return False
        if abs(time.time() - int(timestamp)) > SIGNATURE_MAX_AGE:
            return False  # a replay of an old, validly signed request
        try:
            key = VerifyKey(bytes.fromhex(self.config.application_public_key or ""))
            key.verify(timestamp.encode() + body, bytes.fromhex(signature))
        except (BadSignatureError, ValueError, TypeError):
            return False
        return True

    def _approval_press(self, data: dict[str, Any], custom_id: str) -> WebhookReply:
        """Approve / Deny / Always allow on a prompt in our channel; answered privately at
        once, decided by the core (pending, asked in this channel, the first answer)."""
        match = _APPROVAL_CUSTOM_ID.match(custom_id)
        channel_id = str(data.get("channel_id") or (data.get("channel") or {}).get("id") or "")
        member = data.get("member") or {}
        user = member.get("user") or data.get("user") or {}
        if match is None or channel_id != str(self.config.channel_id) or not user.get("id") or user.get("bot"):
            return _ephemeral("This button does not belong to an approval prompt of this desk.")
        approval_id, choice = match.group(1), match.group(2)
        approve, always = APPROVAL_CHOICES[choice]
        message_id = (data.get("message") or {}).get("id")
        if message_id:
            self._remember_prompt(approval_id, str(message_id))  # so the closing notice finds it
        name = member.get("nick") or user.get("global_name") or user.get("username") or f"Discord user {user['id']}"
        decision = InboundMessage(
            thread_key=f"approval:{approval_id}", text="", author=" ".join(str(name).split())[:80],
            dedupe_key=f"interaction:{data.get('id')}",
            decision=Decision(approval_id=approval_id, approve=approve, always_allow=always),
        )
        word = {"approve": "approve", "deny": "deny", "always": "always allow"}[choice]
        return WebhookReply(status=200, content_type="application/json", messages=[decision], body=json.dumps(_ephemeral_body(
            f"Your answer ({word}) is recorded; the first answer counts. The prompt changes once it is decided.")).encode())

    def _release_click(self, data: dict[str, Any]) -> InboundMessage | None:
        """A Release click on a dispatch (in our channel) or inside a handoff thread."""
        channel = data.get("channel") or {}
        channel_id = str(data.get("channel_id") or channel.get("id") or "")
        message = data.get("message") or {}
        if channel_id == str(self.config.channel_id):
            # On the dispatch: its thread has the message's id.
            thread_id = str((message.get("thread") or {}).get("id") or message.get("id") or "")
        elif str(channel.get("parent_id") or "") == str(self.config.channel_id):
            thread_id = channel_id
        else:
            return None
        member = data.get("member") or {}
        user = member.get("user") or data.get("user") or {}
        if not thread_id or not user.get("id") or user.get("bot"):
            return None
        name = member.get("nick") or user.get("global_name") or user.get("username") or f"Discord user {user['id']}"
        return InboundMessage(thread_key=thread_id, text="/release", author=" ".join(str(name).split())[:80],
                              dedupe_key=f"interaction:{data.get('id')}")

    # ------------------------------------------------------------------ errors

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




def _is_prompt_of(message: dict[str, Any], approval_id: str) -> bool:
    for row in message.get("components") or []:
        for component in row.get("components") or []:
            if str(component.get("custom_id", "")).startswith(f"{APPROVAL_ID}:{approval_id}:"):
                return True
    footer = ((message.get("embeds") or [{}])[0].get("footer") or {}).get("text") or ""
    return footer.startswith(f"Approval {approval_id} ")


def _json_reply(body: dict[str, Any]) -> WebhookReply:
    return WebhookReply(status=200, body=json.dumps(body).encode(), content_type="application/json")


def _ephemeral_body(text: str) -> dict[str, Any]:
    return {"type": MESSAGE_REPLY, "data": {"content": text, "flags": EPHEMERAL, "allowed_mentions": {"parse": []}}}


def _ephemeral(text: str) -> WebhookReply:
    return _json_reply(_ephemeral_body(text))


def _lines_within(lines: list[str], limit: int, left_out_word: str) -> str:
    """As many whole lines as fit `limit`, then "… N more <left_out_word>"."""
    reserve = len(f"\n… {len(lines)} more {left_out_word}")
    kept: list[str] = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        budget = limit - (0 if last else reserve)
        candidate = "\n".join([*kept, line])
        if len(candidate) > budget:
            if not kept:  # not even the first line fits whole: show it cut
                kept = [clip_escaped(line, budget)]
            left = len(lines) - len(kept)
            return "\n".join(kept) + (f"\n… {left} more {left_out_word}" if left else "")
        kept.append(line)
    return "\n".join(kept)

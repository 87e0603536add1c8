"""The Telegram channel: handoffs land in a staff group, and the group's replies come back.

A dispatch is one HTML message in the staff group (`chat_id`) with a "Return form" URL
button and a "Release" callback button; the subscriber's messages are relayed as replies to
it; a person answers by replying to any of those messages (or, in a forum group, by writing
in the handoff's own topic), types `/release`, or presses Release. Replies arrive through
the core's webhook route (`mode: webhook`) or a getUpdates long poll (`mode: polling`, for
a laptop without a public URL), built with python-telegram-bot against `api_base_url`.

What it guards against:
- **Broken markup.** Telegram refuses a whole HTML message over one stray `<` or `&`
  ("can't parse entities"), so a hostile or merely unlucky summary would fail the dispatch.
  Message bodies come from autoescaped templates (templates/messages/telegram/*.html), so
  every user-derived string is escaped by construction, not by remembering to.
- **The 4096-character limit.** The dispatch keeps the newest transcript lines that fit and
  says how many were left out; when even the bare brief is too long its longest parts are
  shortened step by step. Relays longer than a message are sent in parts.
- **Replies reaching the wrong handoff.** Routing is stateless, so it survives restarts and
  works across instances: a handoff's thread_key is `"{chat}:{dispatch message id}"` (or
  `"{chat}:topic:{topic id}"` in a forum group, where every message of the topic belongs to
  it). Telegram tells us which message a reply answers, one level deep, including that
  message's buttons; every bot message of a handoff carries a Release button whose
  callback_data names the dispatch (`release:<id>`, or just `release` on the dispatch
  itself), so a reply to a relay maps back to its handoff without a lookup table. Only
  replies to *our bot's* messages count, so staff talking among themselves are not relayed.
- **Forged webhook calls.** The `X-Telegram-Bot-Api-Secret-Token` header is compared in
  constant time (403 and nothing stored otherwise). Without `webhook_secret` the secret is
  an HMAC of the bot token, so every restart and instance registers and expects the same.
- **Echo loops.** Messages from bots (ours included) are never relayed.
- **Leaking the token.** python-telegram-bot puts the token into some error texts
  (InvalidToken); every hint and message is scrubbed of it.

Approval prompts are messages of their own in the staff chat (no handoff's reply
chain, no topic): the question, the risk, the exact arguments in a <pre> block (cut with a
note when they would not fit, never silently), the deadline and the decision page link,
with Approve / Deny / Always allow callback buttons (`ap:<approval id>:y|n|a`, well within
Telegram's 64 bytes). A press is answered with a short confirmation and becomes a
`Decision` (deduplicated on the update id); the core decides whether it counts. When the
approval ends, the prompt's keyboard is removed when this process knows the prompt (it sent
it, or someone pressed on it) and the closing text is posted, replying to the prompt then.

As a front (`ctx.subscribers`), the same bot also talks to subscribers: each private
chat is one conversation (thread_key = the chat id, author = the profile name), `/start`
opens it (the core greets), a photo or sticker arrives as "[photo] caption" so nobody is left
wondering, and the desk's messages come back as HTML in that chat, a person's name in bold.
A user-action prompt gets Done / Cancel (and step) buttons, `ua:<id>:d|c|n|p`, reported as a
`UserActionAnswer`; a pressed prompt loses its buttons (what follows is a new message). One token is one connection (`same_connection`): a front and a channel with
the same bot_token are one adapter, one poller or webhook. A front of its own is built from
`TelegramConnection` (no chat_id): it never dispatches and ignores every group. Private chats
are ignored when the bot serves no front, as before.

Setup: create the bot with @BotFather and add it to the staff group. With privacy mode on
(the default) a bot still receives replies to its own messages, which is all a plain group
needs. A forum group needs the bot to be an admin with "Manage topics" (to create a topic
per handoff); admins receive every message, so plain messages in a topic arrive too.

Errors are mapped, never retried here (the core's outbox retries): RetryAfter → transient
with the provider's delay; a timeout or broken connection after the request went out →
UncertainDeliveryError. The Bot API cannot look a sent message up, so `reconcile` is False
and such a retry may post the message twice — better than losing it. BadRequest and
Forbidden (bot removed from the group) are permanent; a refused token is ChannelAuthError.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import html
import ipaddress
import json
import re
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal
from urllib.parse import urlparse

import structlog
from pydantic import BeforeValidator, Field, SecretStr, field_validator

from bot.runtime.bounded import BoundedDict
from channels.base import (
    ApprovalBrief,
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelAdapter,
    ChannelAuthError,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    ChatOpened,
    ClaimPress,
    Decision,
    Dispatch,
    HandoffBrief,
    InboundMessage,
    MalformedWebhook,
    Notice,
    PermanentChannelError,
    Receipt,
    RecipientText,
    Relay,
    ReleasePress,
    SatisfactionAnswer,
    SatisfactionPrompt,
    SubscriberText,
    ToSubscriber,
    TransientChannelError,
    UncertainDeliveryError,
    UserActionAnswer,
    UserActionPrompt,
    WebhookReply,
    WebhookRequest,
    json_object,
    pretty_arguments,
)
from channels.text import Budget, SentParts, TextLimit, clip, fit_brief, utf16_len

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    from telegram import Bot, Message, Update
    from telegram.ext import Application, ExtBot

log = structlog.get_logger(__name__)

MESSAGE_LIMIT = 4096  # visible characters (UTF-16 code units) after entity parsing
SECRET_HEADER = "x-telegram-bot-api-secret-token"
ALLOWED_UPDATES = ["message", "callback_query"]
WEBHOOK_PORTS = (80, 88, 443, 8443)  # the only ports Telegram delivers webhooks to
# A handoff's buttons: `release` / `claim` on the dispatch itself, or with the dispatch (or
# forum topic) they belong to: `release:<id>`, `release:topic:<id>`.
_HANDOFF_DATA = re.compile(r"^(release|claim)(?::(topic:\d+|\d+))?$")
HANDOFF_PRESSES: dict[str, tuple[type[ReleasePress | ClaimPress], str]] = {
    "release": (ReleasePress, "Releasing the handoff…"), "claim": (ClaimPress, "Claiming the handoff… the first claim takes it.")}
# Approval buttons: `ap:<approval id>:y|n|a` (approve, deny, always allow); Telegram allows
# 64 bytes of callback_data, an approval id ("ap_" + 16 characters) leaves plenty.
_APPROVAL_DATA = re.compile(r"^ap:(ap_[A-Za-z0-9_-]{1,56}):([yna])$")
APPROVAL_CHOICES = {"y": (True, False, "approve"), "n": (False, False, "deny"), "a": (True, True, "always allow")}
# User-action buttons in a subscriber's chat: `ua:<user action id>:d|c|n|p` (done, cancel,
# next step, previous step); a user action id ("ua_" + 16 characters) fits 64 bytes easily.
_USER_ACTION_DATA = re.compile(r"^ua:(ua_[A-Za-z0-9_-]{1,56}):([dcnp])$")
USER_ACTION_MOVES: dict[str, Literal["done", "cancelled", "next", "previous"]] = {
    "d": "done", "c": "cancelled", "n": "next", "p": "previous"}
# The satisfaction question's 👍 / 👎: `cs:<handoff id>:y|n` (a handoff id is "hs_" + 16 characters).
_SATISFACTION_DATA = re.compile(r"^cs:(hs_[A-Za-z0-9_-]{1,56}):([yn])$")
USER_ACTION_ANSWERS = {"done": "Got it: done.", "cancelled": "Got it: cancelled.", "next": "One moment…", "previous": "One moment…"}
# What a subscriber's message without text was, so the agent or person reads that something
# came ("[photo] look at this") instead of nothing; the media themselves are not passed on.
ATTACHMENTS = (("photo", "photo"), ("video", "video"), ("video_note", "video message"), ("voice", "voice message"),
               ("audio", "audio"), ("animation", "GIF"), ("document", "file"), ("sticker", "sticker"),
               ("venue", "place"), ("location", "location"), ("contact", "contact"), ("poll", "poll"), ("dice", "dice"))
_START = re.compile(r"^/start(?:@\w+)?(?:\s|$)")
ARGUMENTS_LIMIT = 3000  # characters of pretty JSON shown in a prompt (the rest is announced, never dropped silently)
PROMPT_CACHE_LIMIT = 1000
DISPATCH_CACHE_LIMIT = 1000
_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")
_CHAT_NAME = re.compile(r"^@[A-Za-z][A-Za-z0-9_]{3,31}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")
_TAGS = re.compile(r"<[^>]*>")


# --------------------------------------------------------------------------- config


def _empty_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


class TelegramConnection(ChannelConfig):
    """The bot itself: what a front of its own needs (`fronts: [{kind: telegram, …}]`).
    One token is one connection: a front and a channel with the same token share an adapter."""

    kind: Literal["telegram"] = "telegram"
    bot_token: SecretStr = Field(
        description="The bot's token (123456:ABC…): in Telegram, @BotFather gives it on /newbot and shows it again on /token.",
    )
    mode: Literal["webhook", "polling"] = Field(
        default="webhook", description="webhook (needs an https public_url) or polling (one instance per token)."
    )
    api_base_url: str = Field(default="https://api.telegram.org/bot", description="Bot API base; the token is appended.")
    webhook_secret: Annotated[SecretStr | None, BeforeValidator(_empty_to_none)] = Field(
        default=None, description="Secret Telegram sends with each webhook call; derived from the token when empty."
    )
    poll_timeout: int = Field(default=10, ge=0, le=50, description="Seconds each getUpdates long poll may wait (polling mode).")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to connect, send or wait for an answer.")

    @field_validator("bot_token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        if not _TOKEN.match(value.get_secret_value().strip()):
            raise ValueError("does not look like a Telegram bot token (digits, a colon, then letters); copy it from @BotFather")
        return SecretStr(value.get_secret_value().strip())

    @field_validator("api_base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        if urlparse(value).scheme not in ("http", "https") or not urlparse(value).netloc:
            raise ValueError("must be an http(s) URL such as https://api.telegram.org/bot")
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _SECRET.match(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
        return value


class TelegramConfig(TelegramConnection):
    """A channel: the bot plus the staff group handoffs go to."""

    chat_id: int | str = Field(description="The staff group: its numeric id (-100…) or @public_name.")

    @field_validator("chat_id")
    @classmethod
    def _chat(cls, value: int | str) -> int | str:
        if isinstance(value, str):
            value = value.strip()
            if re.fullmatch(r"-?\d+", value):  # from ${VAR}, numbers arrive as text
                return int(value)
            if not _CHAT_NAME.match(value):
                raise ValueError("must be the group's numeric id (such as -1001234567890) or its @public_name")
        return value


# --------------------------------------------------------------------------- helpers


def visible_length(markup: str) -> int:
    """Length of an HTML message as Telegram counts it: tags removed, entities decoded.
    Safe to compute this way because user text is escaped, so every `<` left is our tag."""
    return utf16_len(html.unescape(_TAGS.sub("", markup)))


_MENTION = re.compile(r"(?<![\w@])@(?=\w)")
_COMMAND = re.compile(r"(?<!\S)/(?=[A-Za-z])")
WORD_JOINER = "\u2060"


def defuse(text: str) -> str:
    """Telegram turns `@name` in any message into a mention (a notification to that member)
    and `/word` into a tappable command — in a forum topic, tapping `/release` in a relayed
    message would release the handoff. An invisible word joiner after `@` and `/` keeps the
    text readable and inert. Applied to everything people (or the agent) wrote."""
    return _COMMAND.sub("/" + WORD_JOINER, _MENTION.sub("@" + WORD_JOINER, text))





def _is_loopback_or_private(host: str) -> bool:
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def webhook_unreachable_reason(url: str) -> str | None:
    """Why Telegram could not deliver to this webhook URL, or None when it could."""
    parsed = urlparse(url)
    if parsed.scheme != "https":
        return "Telegram only calls https:// webhooks"
    if _is_loopback_or_private(parsed.hostname or ""):
        return f"Telegram cannot reach {parsed.hostname} from the internet"
    if parsed.port not in (None, *WEBHOOK_PORTS):
        return f"Telegram only calls webhooks on ports {', '.join(map(str, WEBHOOK_PORTS))}"
    return None


def button_url_ok(url: str) -> bool:
    """Telegram refuses a URL button to a loopback address ("Wrong HTTP URL"), which would
    fail the whole dispatch; the link is in the text either way."""
    parsed = urlparse(url)
    return parsed.scheme in ("http", "https") and not _is_loopback_or_private(parsed.hostname or "")


_BUDGETS = (
    Budget(),
    Budget(context_items=10, context_key=60, context_value=200, field_items=10, field_line=150),
    Budget(summary=1500, action=700, context_items=5, context_key=60, context_value=120, field_items=5, field_line=120),
    Budget(summary=800, action=400, context_items=0, field_items=0),
)
TRANSCRIPT_LINE = 400  # characters of one transcript message, so one essay cannot push out the rest


@dataclass
class _Parsed:
    """What one update means for us."""

    message: InboundMessage | None = None
    callback_query_id: str | None = None
    callback_text: str | None = None
    # A pressed user-action prompt (chat id, message id): its buttons are taken away, since
    # the answer (or the next step, with buttons of its own) follows as a new message.
    spent_prompt: tuple[int, int] | None = None


# --------------------------------------------------------------------------- the adapter


class TelegramChannel(ChannelAdapter):
    kind = "telegram"
    config_model = TelegramConfig
    front_model = TelegramConnection
    # reconcile=False: the Bot API has no way to find a message we sent, so a timed-out
    # send is retried blind (possibly posting twice) rather than lost.
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=False, front=True,
                                approvals=True, edits=True)
    text_limit = TextLimit(MESSAGE_LIMIT)
    config: TelegramConnection  # a TelegramConfig unless it is a front of its own (no staff group)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        # The staff group from config; None for a front of its own (built from TelegramConnection).
        self._staff: int | str | None = config.chat_id if isinstance(config, TelegramConfig) else None
        # Its context and data types are PTB's defaults; this adapter keeps no per-chat data there.
        self._app: Application[ExtBot[None], Any, Any, Any, Any, Any] | None = None
        self._ready = False
        self._ctx: ChannelContext | None = None
        self._chat_id: int | None = None  # numeric, from getChat: updates carry the number even when config says @name
        self._is_forum = False
        self._bot_id = 0
        self._username = ""
        self._poller: asyncio.Task[None] | None = None
        # A forum topic made by a dispatch attempt that then failed: the retry posts into it
        # instead of leaving an empty topic behind per attempt.
        self._topics: dict[str, int] = {}
        # approval id -> message id of its prompt (from the send, or from a press on it), so
        # the closing notice can take the buttons away; the Bot API cannot look it up.
        self._prompts: BoundedDict[str, int] = BoundedDict(PROMPT_CACHE_LIMIT)
        self._parts_sent = SentParts()  # parts of long messages already sent, for a retry of the rest
        # (chat id, message id) of a dispatch -> its HTML and keyboard, so a notice about a claim
        # can edit it: the Bot API cannot read a message back, and an edit replaces the whole text.
        self._dispatches: BoundedDict[tuple[int, int], _Posted] = BoundedDict(DISPATCH_CACHE_LIMIT)

    @classmethod
    def same_connection(cls, channel: ChannelConfig, front: ChannelConfig) -> bool:
        """One bot token is one bot: Telegram allows it one poller or one webhook."""
        token = getattr(channel, "bot_token", None)
        return isinstance(token, SecretStr) and isinstance(front, TelegramConnection) and (
            token.get_secret_value() == front.bot_token.get_secret_value())

    @property
    def _subscribers(self) -> bool:
        return self._ctx is not None and self._ctx.subscribers

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: ChannelContext) -> None:
        self._ctx = ctx
        try:
            bot = await self._connect()
            if self._staff is not None:
                chat = await self._staff_chat(bot, self._staff)
                self._chat_id, self._is_forum = chat.id, bool(chat.is_forum)
            if self.config.mode == "webhook":
                await self._register_webhook(bot, ctx.public_url)
            else:
                await self._start_polling(bot)
        except BaseException:
            await self.stop()  # the core only stops channels that started
            raise
        log.info("telegram_started", channel_id=self.id, bot=f"@{self._username}", chat_id=self._chat_id,
                 forum=self._is_forum, mode=self.config.mode, subscribers=ctx.subscribers)

    async def stop(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self._app is not None:
            await self._app.shutdown()
            await self._app.bot.shutdown()  # also when initialize() failed half-way (bad token)
            self._app, self._ready = None, False

    async def probe(self) -> str:
        bot = await self._connect()
        if self._staff is None:
            return f"@{self._username}, serving subscribers in private chats"
        chat = await self._staff_chat(bot, self._staff)
        forum = ", a forum: one topic per handoff" if chat.is_forum else ""
        return f"@{self._username}, posting to '{chat.title or chat.id}'{forum}"

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

    # ------------------------------------------------------------------ sending

    def _staff_group(self) -> int | str:
        """The staff group, or why there is none: a front of its own is never offered to
        handoff_request or approvals, so only a misrouted message meets this."""
        if self._chat_id is None:
            raise PermanentChannelError("this Telegram bot has no staff group", hint=(
                f"Telegram front '{self.label}' serves subscribers only; give a channel with this bot_token a chat_id"))
        return self._chat_id

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        from telegram.constants import ParseMode

        bot, staff, brief = self._bot(), self._staff_group(), dispatch.brief
        topic_id = None
        if self._is_forum:
            topic_id = self._topics.get(brief.handoff_session_id)
            if topic_id is None:
                name = clip(f"{brief.short_code} · {brief.subscriber_name or 'subscriber'}", 128)
                topic = await self._call(bot.create_forum_topic(chat_id=staff, name=name), "createForumTopic")
                topic_id = self._topics[brief.handoff_session_id] = topic.message_thread_id
        suffix = f"topic:{topic_id}" if topic_id else None
        buttons = []
        if brief.form_url and button_url_ok(brief.form_url):
            buttons.append(self._url_button("Return form", brief.form_url))
        buttons.append(self._release_button(suffix))  # plain "release" here: the dispatch is its own thread root
        # The Claim button in a row of its own above, so it goes without moving the others.
        rows = [[self._claim_button(suffix)], buttons] if brief.claimable else [buttons]
        text = self._dispatch_html(brief, in_topic=topic_id is not None)
        message = await self._call(bot.send_message(
            chat_id=staff, text=text, parse_mode=ParseMode.HTML, message_thread_id=topic_id, reply_markup=self._inline(rows),
            link_preview_options=self._no_preview(),
        ), "sendMessage")
        self._topics.pop(brief.handoff_session_id, None)
        self._dispatches[(message.chat.id, message.message_id)] = _Posted(text, rows)
        return Receipt(
            message_id=str(message.message_id),
            thread_key=f"{message.chat.id}:{suffix or message.message_id}",
            thread={"chat_id": message.chat.id, "message_id": message.message_id, "topic_id": topic_id},
        )

    async def send_relay(self, relay: Relay) -> Receipt:
        """A subscriber's words as a reply to the dispatch (inside its topic in a forum), in
        parts when long, each with a Release button that names the dispatch: a reply to this
        relay maps back to its handoff (Telegram shows us the replied message's buttons, not
        its reply chain)."""
        body = defuse(relay.body)
        author = defuse(clip(relay.author or "Subscriber", 100))
        chunks = self.text_limit.split(body, reserve=utf16_len(author) + 16)
        parts = [self._render("relay", author=author, body=chunk, part=f"{i}/{len(chunks)}" if len(chunks) > 1 else None)
                 for i, chunk in enumerate(chunks, 1)]
        suffix = _thread_suffix(relay.thread)
        return await self._reply_in_thread(relay, relay.thread, parts, self._keyboard([self._release_button(suffix)]) if suffix else None)

    async def send_notice(self, notice: Notice) -> Receipt:
        """Notices (released, new form link) as replies to the dispatch, without a button: a
        Release under "released" is noise. On a route, "taken" edits the dispatch instead
        (the notice under its text, its buttons gone) when this process knows its text, and
        "claimed" also takes the Claim button away."""
        parts = [self._render("notice", body=chunk) for chunk in self.text_limit.split(notice.text.strip(), reserve=8)]
        dispatch = self._dispatch_of(notice.thread)
        if notice.about == "taken" and dispatch is not None:
            posted = self._dispatches.get(dispatch)
            text = f"{posted.text}\n\n{parts[0]}" if posted is not None and len(parts) == 1 else None
            if text is not None and visible_length(text) <= MESSAGE_LIMIT and await self._edit_dispatch(dispatch, text):
                return Receipt(message_id=str(dispatch[1]), thread_key=self._thread_key(notice.thread), thread=dict(notice.thread))
        receipt = await self._reply_in_thread(notice, notice.thread, parts, None)
        if dispatch is not None and notice.about in ("taken", "claimed"):
            await self._drop_dispatch_buttons(dispatch, notice.thread, keep_release=notice.about == "claimed")
        return receipt

    @staticmethod
    def _dispatch_of(thread: dict[str, Any]) -> tuple[int, int] | None:
        """(chat id, message id) of the handoff's dispatch, from its receipt's thread."""
        chat_id, message_id = thread.get("chat_id"), thread.get("message_id")
        return (int(chat_id), int(message_id)) if chat_id and message_id else None

    async def _edit_dispatch(self, dispatch: tuple[int, int], text: str) -> bool:
        """editMessageText of the dispatch, without its keyboard; False when Telegram will not
        (deleted, too old), so the caller posts instead. A transient failure is raised: nothing
        was posted yet, the core retries the notice."""
        from telegram.constants import ParseMode

        try:
            await self._call(self._bot().edit_message_text(
                text, chat_id=dispatch[0], message_id=dispatch[1], parse_mode=ParseMode.HTML, reply_markup=None,
                link_preview_options=self._no_preview()), "editMessageText")
        except TransientChannelError:
            raise
        except ChannelError as exc:
            if not _unchanged(exc):  # else a retry of an edit that went through
                log.warning("telegram_dispatch_not_edited", channel_id=self.id, hint=exc.hint)
                return False
        self._dispatches.pop(dispatch, None)
        return True

    async def _drop_dispatch_buttons(self, dispatch: tuple[int, int], thread: dict[str, Any], *, keep_release: bool) -> None:
        """Take the Claim button (or, with `keep_release` False, every button) off the dispatch.
        Cosmetic: the notice itself was posted, so a failure is logged and a press on a
        button left behind is answered by the core like any late press."""
        posted = self._dispatches.get(dispatch)
        if not keep_release:
            rows: list[list[Any]] = []
        elif posted is not None:
            rows = [kept for row in posted.rows if (kept := [b for b in row if not _is_claim(b)])]
        else:  # a dispatch this process neither sent nor saw pressed: Release alone (the form link is in its text)
            rows = [[self._release_button(_thread_topic(thread))]]
        if posted is not None and rows == posted.rows:
            return  # nothing to take away (a retry)
        try:
            await self._call(self._bot().edit_message_reply_markup(
                chat_id=dispatch[0], message_id=dispatch[1], reply_markup=self._inline(rows) if rows else None),
                "editMessageReplyMarkup")
        except ChannelError as exc:
            if not _unchanged(exc):
                log.warning("telegram_dispatch_buttons_kept", channel_id=self.id, hint=exc.hint)
            return
        if posted is not None:
            self._dispatches[dispatch] = _Posted(posted.text, rows)

    def _remember_dispatch(self, message: Any) -> None:
        """A dispatch as a press on it shows it (its text and keyboard), for the notice that
        follows the claim when this process did not send it (a restart, another instance)."""
        key = (message.chat.id, message.message_id)
        markup, text = getattr(message, "reply_markup", None), getattr(message, "text_html", None)
        if key not in self._dispatches and markup is not None and text:
            self._dispatches[key] = _Posted(text, [list(row) for row in markup.inline_keyboard])

    def _thread_key(self, thread: dict[str, Any]) -> str | None:
        """The key replies in the handoff's thread come back under (as its dispatch's receipt said)."""
        suffix = _thread_suffix(thread)
        return f"{thread.get('chat_id') or self._staff_group()}:{suffix}" if suffix else None

    async def _reply_in_thread(self, message: Relay | Notice, thread: dict[str, Any], parts: list[str], markup: Any) -> Receipt:
        from telegram import ReplyParameters
        from telegram.constants import ParseMode

        bot, staff = self._bot(), self._staff_group()
        chat_id = thread.get("chat_id") or staff
        dispatch_id, topic_id = thread.get("message_id"), thread.get("topic_id")
        reply = ReplyParameters(message_id=dispatch_id, allow_sending_without_reply=True) if dispatch_id else None
        first = await self._send_parts(message, parts, lambda _index, part: bot.send_message(
            chat_id=chat_id, text=part, parse_mode=ParseMode.HTML, message_thread_id=topic_id, reply_parameters=reply,
            reply_markup=markup, link_preview_options=self._no_preview(),
        ))
        return Receipt(message_id=first, thread_key=self._thread_key(thread), thread=dict(thread))

    # ------------------------------------------------------------------ subscribers (the front)

    async def send_to_subscriber(self, message: ToSubscriber) -> Receipt:
        """The assistant's or a person's words in the subscriber's private chat with the bot:
        HTML with the person's name in bold, escaped by the template, in parts when longer
        than a message; a user-action prompt gets its buttons under the last part."""
        from telegram.constants import ParseMode

        bot, chat = self._bot(), message.chat
        if not re.fullmatch(r"\d{1,20}", chat):  # private chats have the user's (positive) id
            raise PermanentChannelError(f"not a Telegram private chat: {chat!r}", hint=(
                f"internal error: subscriber chat {chat!r} is not a Telegram private chat id"))
        body = message.body.replace("\x00", "\ufffd")
        author = clip(message.author, 100) if message.author else None
        chunks = self.text_limit.split(body.strip() or body, reserve=utf16_len(author) + 4 if author else 0)
        parts = [self._render("subscriber", author=author, body=chunk) for chunk in chunks]
        markup = (self._user_action_keyboard(message.user_action) if message.user_action
                  else self._satisfaction_keyboard(message.satisfaction) if message.satisfaction else None)
        first = await self._send_parts(message, parts, lambda index, part: bot.send_message(
            chat_id=int(chat), text=part, parse_mode=ParseMode.HTML, link_preview_options=self._no_preview(),
            reply_markup=markup if index == len(parts) - 1 else None,
        ), subscriber=chat)
        return Receipt(message_id=first, thread={"chat": chat})

    async def _send_parts(
        self, outbound: Relay | Notice | ToSubscriber, parts: list[str], send: Callable[[int, str], Awaitable[Message]], *,
        subscriber: str | None = None,
    ) -> str:
        """Send one message's parts in order and return the first part's message id. The
        parts that went out are remembered by the outbox's delivery key (in this process), so
        when a later part fails the outbox's retry sends only the rest, not all again."""
        async def one(index: int, part: str) -> str:
            return str((await self._call(send(index, part), "sendMessage", subscriber=subscriber)).message_id)

        sent = [await self._parts_sent.send((outbound.delivery_key, index) if outbound.delivery_key else None,
                                            partial(one, index, part))
                for index, part in enumerate(parts)]
        return sent[0]

    def _user_action_keyboard(self, prompt: UserActionPrompt) -> Any:
        """Done / Cancel, and the step buttons that lead somewhere (no Previous on the first
        step); None when the id would not fit callback_data (the text names the keywords)."""
        from telegram import InlineKeyboardButton

        def button(label: str, move: str) -> Any:
            return InlineKeyboardButton(label, callback_data=f"ua:{prompt.user_action_id}:{move}")

        rows = [[button("Done", "d"), button("Cancel", "c")]]
        if prompt.steps > 1:
            steps = ([button("← Previous step", "p")] if prompt.step > 0 else []) + (
                [button("Next step →", "n")] if prompt.step < prompt.steps - 1 else [])
            rows.insert(0, steps)
        if not _USER_ACTION_DATA.match(f"ua:{prompt.user_action_id}:d"):
            log.warning("telegram_user_action_without_buttons", channel_id=self.id, user_action_id=prompt.user_action_id)
            return None
        return self._inline([row for row in rows if row])

    def _satisfaction_keyboard(self, prompt: SatisfactionPrompt) -> Any:
        """👍 / 👎 under the satisfaction question; None when the id would not fit callback_data."""
        from telegram import InlineKeyboardButton

        if not _SATISFACTION_DATA.match(f"cs:{prompt.handoff_id}:y"):
            log.warning("telegram_satisfaction_without_buttons", channel_id=self.id, handoff_id=prompt.handoff_id)
            return None
        return self._inline([[InlineKeyboardButton(label, callback_data=f"cs:{prompt.handoff_id}:{code}")
                              for label, code in (("👍", "y"), ("👎", "n"))]])

    # ------------------------------------------------------------------ approvals

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        """An approval prompt: a new message in the staff chat (it belongs to no handoff),
        with Approve / Deny (/ Always allow) callback buttons."""
        from telegram import InlineKeyboardButton
        from telegram.constants import ParseMode

        bot, staff, approval = self._bot(), self._staff_group(), prompt.approval
        choices = [("Approve", "y"), ("Deny", "n")] + ([("Always allow", "a")] if approval.allow_always else [])
        rows = [[InlineKeyboardButton(label, callback_data=f"ap:{approval.approval_id}:{code}") for label, code in choices[:2]]]
        if len(choices) > 2:
            rows.append([InlineKeyboardButton(choices[2][0], callback_data=f"ap:{approval.approval_id}:a")])
        fits = all(len(f"ap:{approval.approval_id}:{code}".encode()) <= 64 for _label, code in choices)  # else: the link alone
        message = await self._call(bot.send_message(
            chat_id=staff, text=self._prompt_html(approval, buttons=fits), parse_mode=ParseMode.HTML,
            reply_markup=self._inline(rows) if fits else None, link_preview_options=self._no_preview(),
        ), "sendMessage")
        self._remember_prompt(approval.approval_id, message.message_id)
        return Receipt(message_id=str(message.message_id), thread={"chat_id": message.chat.id, "message_id": message.message_id})

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        """How an approval ended: the prompt's buttons are taken away when we know which
        message it is (sent or pressed in this process), and the closing text is posted, as
        a reply to the prompt when known."""
        from telegram import ReplyParameters
        from telegram.constants import ParseMode

        bot, staff, approval_id = self._bot(), self._staff_group(), closed.approval.approval_id
        # Remembered from the send or a press; or the prompt's receipt, which the core passes.
        prompt_id = self._prompts.get(approval_id) or closed.prompt.get("message_id")
        if prompt_id is not None:
            try:
                await self._call(bot.edit_message_reply_markup(chat_id=staff, message_id=prompt_id, reply_markup=None),
                                 "editMessageReplyMarkup")
            except TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except ChannelError as exc:  # already without buttons (a retry), deleted, too old …
                log.info("telegram_approval_buttons_not_removed", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
        body = defuse(closed.text.strip())
        reply = ReplyParameters(message_id=prompt_id, allow_sending_without_reply=True) if prompt_id else None
        message = await self._call(bot.send_message(
            chat_id=staff, text=self._render("notice", body=clip(body, MESSAGE_LIMIT - 8)), parse_mode=ParseMode.HTML,
            reply_parameters=reply, link_preview_options=self._no_preview(),
        ), "sendMessage")
        self._prompts.pop(approval_id, None)
        return Receipt(message_id=str(message.message_id), thread={"chat_id": message.chat.id, "message_id": message.message_id})

    def _prompt_html(self, approval: ApprovalBrief, *, buttons: bool) -> str:
        """The prompt within one message: the arguments get what the rest leaves, and what
        does not fit is announced (the decision page shows everything)."""
        limit = ARGUMENTS_LIMIT
        while True:
            shown, left_out = pretty_arguments(approval.arguments, limit)
            text = self._render(
                "approval", approval=approval, buttons=buttons, arguments=shown, left_out=left_out,
                subscriber=defuse(clip(approval.subscriber_name, 200)) if approval.subscriber_name else None,
                description=defuse(clip(approval.description, 1000)), deadline=approval.expires_at[:16].replace("T", " "),
            )
            if visible_length(text) <= MESSAGE_LIMIT or limit < 200:
                return text
            limit -= visible_length(text) - MESSAGE_LIMIT + 50

    def _remember_prompt(self, approval_id: str, message_id: int) -> None:
        self._prompts[approval_id] = message_id

    @staticmethod
    def _inline(rows: list[list[Any]]) -> Any:
        from telegram import InlineKeyboardMarkup

        return InlineKeyboardMarkup(rows)

    # ------------------------------------------------------------------ rendering

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        # .html templates are autoescaped: every value passed in is escaped for Telegram's HTML.
        return self._ctx.render(f"messages/telegram/{name}.html", **context)

    def _dispatch_html(self, brief: HandoffBrief, *, in_topic: bool) -> str:
        """The dispatch message, fitted to one Telegram message: the newest transcript lines
        that fit, and when the brief alone is too long, its long parts shortened."""
        lines = [(defuse(line.author or line.role), defuse(clip(line.text, TRANSCRIPT_LINE))) for line in brief.transcript]
        context = [(defuse(k), defuse(v)) for k, v in brief.extra_context.items()]
        fields = [defuse(line) for line in brief.field_lines]
        fitted = fit_brief(
            summary=brief.summary, action=brief.expected_action, context=context, fields=fields, lines=lines,
            budgets=_BUDGETS, fits=lambda html: visible_length(html) <= MESSAGE_LIMIT,
            render=lambda cut: self._render(
                "dispatch",
                brief=brief,
                subscriber=defuse(brief.subscriber_name) if brief.subscriber_name else None,
                summary=defuse(cut.summary),
                action=defuse(cut.action),
                **cut.shown(),
                in_topic=in_topic,
                idle_minutes=max(1, round(brief.idle_timeout_seconds / 60)),
            ),
        )
        if fitted is not None:
            return fitted
        raise PermanentChannelError("the dispatch does not fit one Telegram message", hint="the brief is too long for Telegram")

    @staticmethod
    def _keyboard(buttons: list[Any]) -> Any:
        from telegram import InlineKeyboardMarkup

        return InlineKeyboardMarkup([buttons])

    @staticmethod
    def _url_button(label: str, url: str) -> Any:
        from telegram import InlineKeyboardButton

        return InlineKeyboardButton(label, url=url)

    @staticmethod
    def _release_button(suffix: str | None) -> Any:
        from telegram import InlineKeyboardButton

        return InlineKeyboardButton("Release", callback_data=f"release:{suffix}" if suffix else "release")

    @staticmethod
    def _claim_button(suffix: str | None) -> Any:
        from telegram import InlineKeyboardButton

        return InlineKeyboardButton("I'm on it", callback_data=f"claim:{suffix}" if suffix else "claim")

    @staticmethod
    def _no_preview() -> Any:
        from telegram import LinkPreviewOptions

        return LinkPreviewOptions(is_disabled=True)  # no preview card of the form link in the group

    # ------------------------------------------------------------------ inbound

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

    def _parse(self, update: Update) -> _Parsed:
        """Turn an update into the recipient (or subscriber) message it carries, if any."""
        dedupe_key = f"update:{update.update_id}"
        query = update.callback_query
        if query is not None and isinstance(query.data, str) and query.data.startswith("ap:"):
            return self._approval_press(query, dedupe_key)
        if query is not None and isinstance(query.data, str) and query.data.startswith("ua:"):
            return self._user_action_press(query, dedupe_key)
        if query is not None and isinstance(query.data, str) and query.data.startswith("cs:"):
            return self._satisfaction_press(query, dedupe_key)
        if update.message is not None and update.message.chat.type == "private" and update.message.chat.id != self._chat_id:
            return self._from_subscriber(update.message, dedupe_key)  # (a staff "group" may be someone's own chat)
        if query is not None:
            chat = query.message.chat if query.message else None
            suffix = _suffix_from_data(query.data, query.message.message_id) if query.message else None
            if query.from_user.is_bot or chat is None or chat.id != self._chat_id or suffix is None:
                return _Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
            press, answer = HANDOFF_PRESSES[str(query.data).split(":", 1)[0]]
            if press is ClaimPress:
                self._remember_dispatch(query.message)
            message = press(thread_key=f"{chat.id}:{suffix}", author=_person(query.from_user), user_id=str(query.from_user.id),
                            dedupe_key=dedupe_key)
            return _Parsed(message, query.id, answer)
        msg = update.message
        if msg is None or msg.chat.id != self._chat_id:
            return _Parsed()
        author = self._author(msg)
        text = msg.text or msg.caption  # service messages (joins, topic created, pins) have neither
        if author is None or not text or self._addressed_elsewhere(text):
            return _Parsed()
        suffix = self._suffix_of(msg)
        if suffix is None:
            return _Parsed()
        return _Parsed(RecipientText(thread_key=f"{msg.chat.id}:{suffix}", text=text.replace("\x00", "\ufffd"),
                                     author=author, user_id=_person_id(msg), dedupe_key=dedupe_key))

    def _approval_press(self, query: Any, dedupe_key: str) -> _Parsed:
        """Approve / Deny / Always allow on a prompt in the staff chat; the core decides
        whether it counts (pending, asked in this channel, the first answer)."""
        match = _APPROVAL_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if match is None or query.from_user.is_bot or chat is None or chat.id != self._chat_id:
            return _Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        approval_id, (approve, always, word) = match.group(1), APPROVAL_CHOICES[match.group(2)]
        self._remember_prompt(approval_id, query.message.message_id)  # so the closing notice finds it
        message = Decision(approval_id=approval_id, approve=approve, always_allow=always, author=_person(query.from_user),
                           user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return _Parsed(message, query.id, f"Your answer ({word}) is recorded; the prompt changes once it is decided.")

    def _from_subscriber(self, msg: Message, dedupe_key: str) -> _Parsed:
        """A message in someone's private chat with the bot: a subscriber talking to the
        front, when this bot serves one (else ignored, as a staff bot always did)."""
        user = msg.from_user
        if not self._subscribers or user is None or user.is_bot:
            return _Parsed()
        chat, author, user_id = str(msg.chat.id), _person(user), str(user.id)
        text = (msg.text or "").replace("\x00", "\ufffd")
        if _START.match(text):  # opening the chat (also `/start <payload>` from a t.me link): the core greets
            return _Parsed(ChatOpened(chat=chat, author=author, user_id=user_id, dedupe_key=dedupe_key))
        if not text.strip():
            kind = next((label for attribute, label in ATTACHMENTS if getattr(msg, attribute, None)), None)
            if kind is None:
                return _Parsed()  # a service message (pinned, payment, …): nothing a person wrote
            if kind == "sticker" and msg.sticker is not None and msg.sticker.emoji:
                kind = f"sticker {msg.sticker.emoji}"
            caption = (msg.caption or "").replace("\x00", "\ufffd").strip()
            text = f"[{kind}] {caption}" if caption else f"[{kind}]"
        return _Parsed(SubscriberText(chat=chat, text=text, author=author, user_id=user_id, dedupe_key=dedupe_key))

    def _user_action_press(self, query: Any, dedupe_key: str) -> _Parsed:
        """Done / Cancel / a step button under a user-action prompt in a subscriber's chat;
        the core checks that the action is this chat's and still pending."""
        match = _USER_ACTION_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if (match is None or not self._subscribers or query.from_user.is_bot or chat is None
                or chat.type != "private" or chat.id == self._chat_id):
            return _Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        move = USER_ACTION_MOVES[match.group(2)]
        message = UserActionAnswer(chat=str(chat.id), user_action_id=match.group(1), move=move, author=_person(query.from_user),
                                   user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return _Parsed(message, query.id, USER_ACTION_ANSWERS[move], spent_prompt=(chat.id, query.message.message_id))

    def _satisfaction_press(self, query: Any, dedupe_key: str) -> _Parsed:
        """👍 / 👎 under the satisfaction question in a subscriber's chat; the core checks that
        the question is this chat's and still open."""
        match = _SATISFACTION_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if (match is None or not self._subscribers or query.from_user.is_bot or chat is None
                or chat.type != "private" or chat.id == self._chat_id):
            return _Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        message = SatisfactionAnswer(chat=str(chat.id), handoff_id=match.group(1), satisfied=match.group(2) == "y",
                                     author=_person(query.from_user), user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return _Parsed(message, query.id, "Thanks!", spent_prompt=(chat.id, query.message.message_id))

    def _suffix_of(self, msg: Message) -> str | None:
        """Which handoff thread a staff message belongs to, from the message alone."""
        if self._is_forum and msg.is_topic_message and msg.message_thread_id:
            return f"topic:{msg.message_thread_id}"
        replied = msg.reply_to_message
        if replied is None or replied.from_user is None or replied.from_user.id != self._bot_id:
            return None  # not an answer to us: staff talking among themselves
        for row in replied.reply_markup.inline_keyboard if replied.reply_markup else ():
            for button in row:
                suffix = _suffix_from_data(button.callback_data, replied.message_id)
                if suffix is not None:
                    return suffix
        # Our message without a button (a notice, itself a reply to the dispatch): in a
        # supergroup the reply thread's root is the dispatch; otherwise the replied id.
        return str(msg.message_thread_id or replied.message_id)

    def _author(self, msg: Message) -> str | None:
        """The person who wrote, or None when it was a bot (ours or another)."""
        user = msg.from_user
        if user is None:
            return None
        if user.is_bot:
            # An admin posting anonymously appears as a bot speaking for the group itself.
            if msg.sender_chat is not None and msg.sender_chat.id == self._chat_id and user.id != self._bot_id:
                return msg.author_signature or "Group admin"
            return None
        return _person(user)

    def _addressed_elsewhere(self, text: str) -> bool:
        """`/release@other_bot` is for another bot in the group."""
        head = text.split(maxsplit=1)[0] if text.strip() else ""
        return head.startswith("/") and "@" in head and head.split("@", 1)[1].lower() != self._username.lower()

    # ------------------------------------------------------------------ polling

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

    async def _answer_callback(self, bot: Bot, parsed: _Parsed) -> None:
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

    # ------------------------------------------------------------------ errors

    async def _call(self, awaitable: Any, method: str, *, subscriber: str | None = None) -> Any:
        from telegram.error import TelegramError

        try:
            return await awaitable
        except TelegramError as exc:
            raise self._error(exc, method, subscriber=subscriber) from None  # `from None`: PTB's text may hold the token

    def _redact(self, text: str) -> str:
        token = self.config.bot_token.get_secret_value()
        return text.replace(token, "<bot_token>").replace(token.split(":", 1)[-1], "<bot_token>")

    def _error(self, exc: Exception, method: str, *, subscriber: str | None = None) -> ChannelError:
        """Map a python-telegram-bot error to the core's typed errors (hints never hold the token).
        `subscriber`: the request went to that subscriber's private chat, not the staff group."""
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


def _thread_suffix(thread: dict[str, Any]) -> str | None:
    """What names a handoff's thread in the staff chat: its forum topic, or the dispatch a
    reply chain hangs from (None: the dispatch's receipt said neither)."""
    dispatch_id, topic_id = thread.get("message_id"), thread.get("topic_id")
    return f"topic:{topic_id}" if topic_id else (str(dispatch_id) if dispatch_id else None)


def _suffix_from_data(data: Any, message_id: int) -> str | None:
    """`release` / `claim` (on a dispatch: its own id) or `release:<dispatch id>` / `release:topic:<id>`."""
    match = _HANDOFF_DATA.match(data) if isinstance(data, str) else None
    if match is None:
        return None
    return match.group(2) or str(message_id)


def _thread_topic(thread: dict[str, Any]) -> str | None:
    """What a button on the dispatch names: its forum topic, or nothing (the dispatch is the thread)."""
    return f"topic:{thread['topic_id']}" if thread.get("topic_id") else None


def _is_claim(button: Any) -> bool:
    data = getattr(button, "callback_data", None)
    return isinstance(data, str) and data.split(":", 1)[0] == "claim"


def _unchanged(error: ChannelError) -> bool:
    """Telegram refuses an edit that changes nothing: a retry of an edit that went through."""
    return "message is not modified" in str(error).lower()


@dataclass(frozen=True)
class _Posted:
    """A dispatch as sent: its HTML and its keyboard's rows (the Claim row first, when it has one)."""

    text: str
    rows: list[list[Any]]




def _person_id(msg: Message) -> str | None:
    """The Telegram user id of who wrote: None for an admin posting anonymously, since the
    sender is then Telegram's stand-in bot for the whole group, not a person."""
    user = msg.from_user
    return None if user is None or user.is_bot else str(user.id)


def _person(user: Any) -> str:
    return user.full_name or (f"@{user.username}" if user.username else f"Telegram user {user.id}")

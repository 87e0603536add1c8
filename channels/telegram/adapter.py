"""TelegramChannel: the adapter the desk runs. It starts and stops the bot, and renders and
sends what goes to a handoff's thread (dispatch, relays, notices, the edit of a taken
dispatch) and to a subscriber's private chat; receiving updates, reading them, approval
prompts and the Bot API calls are its bases in the modules beside it."""

from __future__ import annotations

import re
from typing import Any

import structlog
from pydantic import SecretStr

from bot.runtime.bounded import BoundedDict
from channels.base import (
    Answer,
    Capabilities,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    DirectLine,
    Dispatch,
    Notice,
    PermanentChannelError,
    Receipt,
    Relay,
    ToSubscriber,
    TransientChannelError,
)
from channels.telegram.approvals import TelegramApprovals
from channels.telegram.config import TelegramConfig, TelegramConnection
from channels.telegram.direct import PersonChats, direct_chat
from channels.telegram.formatting import defuse, dispatch_html, visible_length
from channels.telegram.keyboards import (
    Posted,
    claim_button,
    inline,
    release_button,
    satisfaction_keyboard,
    url_button,
    user_action_keyboard,
)
from channels.telegram.protocol import MESSAGE_LIMIT, button_url_ok
from channels.telegram.receiver import TelegramReceiver
from channels.text import SentParts, TextLimit, clip, utf16_len

log = structlog.get_logger(__name__)

PROMPT_CACHE_LIMIT = 1000  # approval prompts remembered (sent or pressed) for their closing notice
DISPATCH_CACHE_LIMIT = 1000


class TelegramChannel(TelegramReceiver, TelegramApprovals):  # the receiver brings inbound and transport
    """The Telegram adapter (channels/telegram/__init__.py describes the channel)."""

    kind = "telegram"
    config_model = TelegramConfig
    front_model = TelegramConnection
    # reconcile=False: the Bot API has no way to find a message we sent, so a timed-out
    # send is retried blind (possibly posting twice) rather than lost.
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=False, front=True,
                                approvals=True, edits=True, direct=True)
    text_limit = TextLimit(MESSAGE_LIMIT)
    config: TelegramConnection  # a TelegramConfig unless it is a front of its own (no staff group)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        # The staff group from config; None for a front of its own (built from TelegramConnection).
        self._staff: int | str | None = config.chat_id if isinstance(config, TelegramConfig) else None
        self._app = None
        self._ready = False
        self._ctx = None
        self._chat_id = None  # numeric, from getChat: updates carry the number even when config says @name
        self._is_forum = False
        self._bot_id = 0
        self._username = ""
        self._poller = None
        # A forum topic made by a dispatch attempt that then failed: the retry posts into it
        # instead of leaving an empty topic behind per attempt.
        self._topics: dict[str, int] = {}
        # approval id -> message id of its prompt (from the send, or from a press on it), so
        # the closing notice can take the buttons away; the Bot API cannot look it up.
        self._prompts = BoundedDict(PROMPT_CACHE_LIMIT)
        self._parts_sent = SentParts()  # parts of long messages already sent, for a retry of the rest
        # (chat id, message id) of a dispatch -> its HTML and keyboard, so a notice about a claim
        # can edit it: the Bot API cannot read a message back, and an edit replaces the whole text.
        self._dispatches = BoundedDict(DISPATCH_CACHE_LIMIT)
        # People's private chats with open direct handoffs (channels/telegram/direct.py)
        self._people = PersonChats()

    @classmethod
    def same_connection(cls, channel: ChannelConfig, front: ChannelConfig) -> bool:
        """One bot token is one bot: Telegram allows it one poller or one webhook."""
        token = getattr(channel, "bot_token", None)
        return isinstance(token, SecretStr) and isinstance(front, TelegramConnection) and (
            token.get_secret_value() == front.bot_token.get_secret_value())

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: ChannelContext) -> None:
        self._ctx = ctx
        try:
            bot = await self._connect()
            if self._staff is not None:
                chat = await self._staff_chat(bot, self._staff)
                self._chat_id, self._is_forum = chat.id, bool(chat.is_forum)
            self._recall_lines(await ctx.open_lines())
            if self.config.mode == "webhook":
                await self._register_webhook(bot, ctx.public_url)
            else:
                await self._start_polling(bot)
        except BaseException:
            await self.stop()  # the core only stops channels that started
            raise
        log.info("telegram_started", channel_id=self.id, bot=f"@{self._username}", chat_id=self._chat_id,
                 forum=self._is_forum, mode=self.config.mode, subscribers=ctx.subscribers)

    def _recall_lines(self, lines: list[DirectLine]) -> None:
        """People's private chats with open handoffs, as the desk stored them: their plain
        messages route to those handoffs from the first one after a restart."""
        for line in lines:
            chat, dispatch_id = line.thread.get("chat_id"), line.thread.get("message_id")
            if line.thread.get("direct") and chat and dispatch_id:
                self._people.opened(int(chat), str(dispatch_id), str(line.thread.get("code") or line.short_code))

    async def stop(self) -> None:
        await self._stop_polling()
        await self._disconnect()

    async def probe(self) -> str:
        bot = await self._connect()
        if self._staff is None:
            return f"@{self._username}, serving subscribers in private chats"
        chat = await self._staff_chat(bot, self._staff)
        forum = ", a forum: one topic per handoff" if chat.is_forum else ""
        return f"@{self._username}, posting to '{chat.title or chat.id}'{forum}"

    # ------------------------------------------------------------------ sending

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        from telegram.constants import ParseMode

        bot, brief = self._bot(), dispatch.brief
        person = self._person_chat(dispatch.direct) if dispatch.direct is not None else None
        chat: int | str = person if person is not None else self._staff_group()
        topic_id = None
        if self._is_forum and person is None:
            topic_id = self._topics.get(brief.handoff_session_id)
            if topic_id is None:
                name = clip(f"{brief.short_code} · {brief.subscriber_name or 'subscriber'}", 128)
                topic = await self._call(bot.create_forum_topic(chat_id=chat, name=name), "createForumTopic")
                topic_id = self._topics[brief.handoff_session_id] = topic.message_thread_id
        suffix = f"topic:{topic_id}" if topic_id else None
        buttons = []
        if brief.form_url and button_url_ok(brief.form_url):
            buttons.append(url_button("Return form", brief.form_url))
        buttons.append(release_button(suffix))  # plain "release" here: the dispatch is its own thread root
        # The Claim button in a row of its own above, so it goes without moving the others.
        rows = [[claim_button(suffix)], buttons] if brief.claimable else [buttons]
        text = dispatch_html(self._render, brief, in_topic=topic_id is not None)
        message = await self._call(bot.send_message(
            chat_id=chat, text=text, parse_mode=ParseMode.HTML, message_thread_id=topic_id, reply_markup=inline(rows),
            link_preview_options=self._no_preview(),
        ), "sendMessage", direct=person)
        self._topics.pop(brief.handoff_session_id, None)
        self._dispatches[(message.chat.id, message.message_id)] = Posted(text, rows)
        thread: dict[str, Any] = {"chat_id": message.chat.id, "message_id": message.message_id, "topic_id": topic_id}
        if person is not None:  # the person's own chat: their plain messages there are their line
            thread.update(direct=True, code=brief.short_code)
            self._people.opened(message.chat.id, str(message.message_id), brief.short_code)
        return Receipt(message_id=str(message.message_id), thread_key=f"{message.chat.id}:{suffix or message.message_id}",
                       thread=thread)

    @staticmethod
    def _person_chat(address: str) -> int:
        try:
            return direct_chat(address)
        except ValueError as exc:
            raise PermanentChannelError(f"Telegram direct dispatch: {exc}", hint=(
                f"internal error: the person's Telegram identity {address!r} is not a user id; link it again with /link")) from None

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
        return await self._reply_in_thread(relay, relay.thread, parts, inline([[release_button(suffix)]]) if suffix else None)

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
                if notice.thread.get("direct"):
                    self._people.ended(dispatch[0], str(dispatch[1]))
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
            rows = posted.without_claim()
        else:  # a dispatch this process neither sent nor saw pressed: Release alone (the form link is in its text)
            rows = [[release_button(_thread_topic(thread))]]
        if posted is not None and rows == posted.rows:
            return  # nothing to take away (a retry)
        try:
            await self._call(self._bot().edit_message_reply_markup(
                chat_id=dispatch[0], message_id=dispatch[1], reply_markup=inline(rows) if rows else None),
                "editMessageReplyMarkup")
        except ChannelError as exc:
            if not _unchanged(exc):
                log.warning("telegram_dispatch_buttons_kept", channel_id=self.id, hint=exc.hint)
            return
        if posted is not None:
            self._dispatches[dispatch] = Posted(posted.text, rows)

    def _thread_key(self, thread: dict[str, Any]) -> str | None:
        """The key replies in the handoff's thread come back under (as its dispatch's receipt said)."""
        suffix = _thread_suffix(thread)
        return f"{thread.get('chat_id') or self._staff_group()}:{suffix}" if suffix else None

    async def _reply_in_thread(self, message: Relay | Notice, thread: dict[str, Any], parts: list[str], markup: Any) -> Receipt:
        from telegram import ReplyParameters
        from telegram.constants import ParseMode

        bot = self._bot()
        chat_id = thread.get("chat_id") or self._staff_group()
        dispatch_id, topic_id = thread.get("message_id"), thread.get("topic_id")
        person = int(chat_id) if thread.get("direct") else None
        reply = ReplyParameters(message_id=dispatch_id, allow_sending_without_reply=True) if dispatch_id else None
        first = await self._send_parts(message, parts, lambda _index, part: bot.send_message(
            chat_id=chat_id, text=part, parse_mode=ParseMode.HTML, message_thread_id=topic_id, reply_parameters=reply,
            reply_markup=markup, link_preview_options=self._no_preview(),
        ), direct=person)
        if person is not None and dispatch_id:  # what this process knows of the person's line (after a restart too)
            if isinstance(message, Notice) and message.about in ("released", "taken"):
                self._people.ended(person, str(dispatch_id))
            else:
                self._people.opened(person, str(dispatch_id), str(thread.get("code") or message.short_code))
        return Receipt(message_id=first, thread_key=self._thread_key(thread), thread=dict(thread))

    async def send_answer(self, answer: Answer) -> Receipt:
        """The desk's answer to a `/link` written outside a handoff's thread, as a plain-text
        reply to it (`answer.to`: its chat, message and topic, as `_link_request` kept them)."""
        from telegram import ReplyParameters

        to = answer.to
        message_id = to.get("message_id")
        reply = ReplyParameters(message_id=int(message_id), allow_sending_without_reply=True) if message_id else None
        sent = await self._call(self._bot().send_message(
            chat_id=int(to["chat_id"]), text=clip(answer.text, MESSAGE_LIMIT), message_thread_id=to.get("topic_id"),
            reply_parameters=reply, link_preview_options=self._no_preview(),
        ), "sendMessage")
        return Receipt(message_id=str(sent.message_id))

    def link_hint(self, code: str) -> str | None:
        """The t.me deep link that opens a private chat with the bot and sends `/start link-CODE`."""
        return f"https://t.me/{self._username}?start=link-{code}" if self._username else None

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
        markup = self._subscriber_keyboard(message)
        first = await self._send_parts(message, parts, lambda index, part: bot.send_message(
            chat_id=int(chat), text=part, parse_mode=ParseMode.HTML, link_preview_options=self._no_preview(),
            reply_markup=markup if index == len(parts) - 1 else None,
        ), subscriber=chat)
        return Receipt(message_id=first, thread={"chat": chat})

    def _subscriber_keyboard(self, message: ToSubscriber) -> Any:
        """A user-action prompt's or the satisfaction question's buttons (None without one, or
        when its id would not fit callback_data: the text still names the keywords)."""
        if message.user_action:
            markup = user_action_keyboard(message.user_action)
            if markup is None:
                log.warning("telegram_user_action_without_buttons", channel_id=self.id,
                            user_action_id=message.user_action.user_action_id)
            return markup
        if message.satisfaction:
            markup = satisfaction_keyboard(message.satisfaction)
            if markup is None:
                log.warning("telegram_satisfaction_without_buttons", channel_id=self.id, handoff_id=message.satisfaction.handoff_id)
            return markup
        return None


def _thread_suffix(thread: dict[str, Any]) -> str | None:
    """What names a handoff's thread in the staff chat: its forum topic, or the dispatch a
    reply chain hangs from (None: the dispatch's receipt said neither)."""
    dispatch_id, topic_id = thread.get("message_id"), thread.get("topic_id")
    return f"topic:{topic_id}" if topic_id else (str(dispatch_id) if dispatch_id else None)


def _thread_topic(thread: dict[str, Any]) -> str | None:
    """What a button on the dispatch names: its forum topic, or nothing (the dispatch is the thread)."""
    return f"topic:{thread['topic_id']}" if thread.get("topic_id") else None


def _unchanged(error: ChannelError) -> bool:
    """Telegram refuses an edit that changes nothing: a retry of an edit that went through."""
    return "message is not modified" in str(error).lower()

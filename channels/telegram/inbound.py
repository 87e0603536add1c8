"""What one Telegram update means: the recipient, subscriber or button event it carries,
typed for the core, or nothing. No I/O here (the receiver fetches and answers updates);
this is where routing is decided, so it is also where it is guarded.

- A staff message counts only in the staff group, from a person (bots, ours included, are
  never relayed: no echo loops; an admin posting anonymously is "Group admin"), and only
  when it answers one of *our bot's* messages (or is written in a handoff's forum topic):
  staff talking among themselves are not relayed. The handoff is read from the replied
  message's buttons (channels/telegram/keyboards.py), so no lookup table is needed.
- `/release@other_bot` is for another bot in the group, and is left alone.
- A press counts only from a person, in the chat its buttons belong to (the staff group for
  handoffs and approvals, a private chat for user actions and satisfaction); any other
  press is still answered, so its button stops spinning.
- A private chat is a subscriber only when this bot serves a front; `/start` opens the
  conversation, and a photo or sticker becomes "[photo] caption" so nobody is left
  wondering. NUL characters become U+FFFD before anything is stored.
- `/link CODE` (or the deep link's `/start link-CODE`) in a private chat with the bot, and
  `/link CODE` written in the staff group outside any handoff's thread, is a `LinkRequest`
  answered where it was written (bot/flow/linking.py); inside a handoff's thread it stays a
  `RecipientText`, which the core recognises.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bot.runtime.bounded import BoundedDict
from channels.base import (
    AvailabilityRequest,
    ChannelAdapter,
    ChannelContext,
    ChatOpened,
    ClaimPress,
    Decision,
    InboundMessage,
    LinkRequest,
    RecipientText,
    SatisfactionAnswer,
    SubscriberText,
    UserActionAnswer,
)
from channels.linking import availability_command, link_code
from channels.telegram.direct import PersonChats
from channels.telegram.keyboards import (
    APPROVAL_CHOICES,
    APPROVAL_DATA,
    HANDOFF_PRESSES,
    SATISFACTION_DATA,
    USER_ACTION_ANSWERS,
    USER_ACTION_DATA,
    USER_ACTION_MOVES,
    Posted,
    suffix_from_data,
)
from channels.text import clip

if TYPE_CHECKING:  # the SDK is imported where it is used, so config validation works without it
    from telegram import Message, Update

# What a subscriber's message without text was, so the agent or person reads that something
# came ("[photo] look at this") instead of nothing; the media themselves are not passed on.
ATTACHMENTS = (("photo", "photo"), ("video", "video"), ("video_note", "video message"), ("voice", "voice message"),
               ("audio", "audio"), ("animation", "GIF"), ("document", "file"), ("sticker", "sticker"),
               ("venue", "place"), ("location", "location"), ("contact", "contact"), ("poll", "poll"), ("dice", "dice"))
_START = re.compile(r"^/start(?:@\w+)?(?:\s|$)")


@dataclass
class Parsed:
    """What one update means for us."""

    message: InboundMessage | None = None
    callback_query_id: str | None = None
    callback_text: str | None = None
    # A pressed user-action prompt (chat id, message id): its buttons are taken away, since
    # the answer (or the next step, with buttons of its own) follows as a new message.
    spent_prompt: tuple[int, int] | None = None


class TelegramInbound(ChannelAdapter):
    """The parsing half of TelegramChannel; the adapter sets `_ctx` (at start), `_chat_id`
    and `_is_forum` (from getChat), `_bot_id` and `_username` (from getMe), and the caches a
    press fills in: `_prompts` (approval id → prompt message id) and `_dispatches`."""

    _ctx: ChannelContext | None
    _chat_id: int | None
    _is_forum: bool
    _bot_id: int
    _username: str
    _prompts: BoundedDict[str, int]
    _dispatches: BoundedDict[tuple[int, int], Posted]
    _people: PersonChats

    @property
    def _subscribers(self) -> bool:
        return self._ctx is not None and self._ctx.subscribers

    def _parse(self, update: Update) -> Parsed:
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
            return self._private(update.message, dedupe_key)  # (a staff "group" may be someone's own chat)
        if query is not None:
            chat = query.message.chat if query.message else None
            suffix = suffix_from_data(query.data, query.message.message_id) if query.message else None
            # In the staff group, or in a person's own chat, where a direct dispatch put the buttons
            ours = chat is not None and (chat.id == self._chat_id or chat.type == "private")
            if query.from_user.is_bot or chat is None or not ours or suffix is None:
                return Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
            press, answer = HANDOFF_PRESSES[str(query.data).split(":", 1)[0]]
            if press is ClaimPress:
                self._remember_dispatch(query.message)
            if chat.type == "private":
                self._people.focus(chat.id, suffix)
            message = press(thread_key=f"{chat.id}:{suffix}", author=_person(query.from_user), user_id=str(query.from_user.id),
                            dedupe_key=dedupe_key)
            return Parsed(message, query.id, answer)
        msg = update.message
        if msg is None or msg.chat.id != self._chat_id:
            return Parsed()
        author = self._author(msg)
        text = msg.text or msg.caption  # service messages (joins, topic created, pins) have neither
        if author is None or not text or self._addressed_elsewhere(text):
            return Parsed()
        availability = self._availability_request(msg, text, dedupe_key)
        if availability.message is not None:
            return availability
        suffix = self._suffix_of(msg)
        if suffix is None:
            return self._link_request(msg, text, dedupe_key)  # in the group, outside any handoff: only `/link` counts
        return Parsed(RecipientText(thread_key=f"{msg.chat.id}:{suffix}", text=text.replace("\x00", "\ufffd"),
                                     author=author, user_id=_person_id(msg), dedupe_key=dedupe_key))

    def _approval_press(self, query: Any, dedupe_key: str) -> Parsed:
        """Approve / Deny / Always allow on a prompt in the staff chat; the core decides
        whether it counts (pending, asked in this channel, the first answer)."""
        match = APPROVAL_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if match is None or query.from_user.is_bot or chat is None or chat.id != self._chat_id:
            return Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        approval_id, (approve, always, word) = match.group(1), APPROVAL_CHOICES[match.group(2)]
        self._prompts[approval_id] = query.message.message_id  # so the closing notice finds it
        message = Decision(approval_id=approval_id, approve=approve, always_allow=always, author=_person(query.from_user),
                           user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return Parsed(message, query.id, f"Your answer ({word}) is recorded; the prompt changes once it is decided.")

    def _private(self, msg: Message, dedupe_key: str) -> Parsed:
        """A message in someone's private chat with the bot: `/away`, `/back` or `/link` to
        the desk; a person's answer to a handoff sent to them directly (a reply to one of its
        messages, or a plain message on their line: channels/telegram/direct.py); else a
        subscriber talking to the front, when this bot serves one (else ignored, as a staff
        bot always did)."""
        user = msg.from_user
        if user is None or user.is_bot:
            return Parsed()
        text = (msg.text or "").replace("\x00", "\ufffd")
        for command in (self._availability_request(msg, text, dedupe_key), self._link_request(msg, text, dedupe_key, deep_link=True)):
            if command.message is not None:
                return command
        answer = self._direct_answer(msg, (text or msg.caption or "").replace("\x00", "\ufffd"), dedupe_key)
        if answer is not None or not self._subscribers:
            return answer or Parsed()  # a staff bot hears nothing else in private chats
        return self._from_subscriber(msg, text, dedupe_key)

    def _direct_answer(self, msg: Message, text: str, dedupe_key: str) -> Parsed | None:
        """A person's words in their own chat about a handoff sent to them there: a reply to
        one of its messages (named by their buttons), or a plain message on their line while
        it has open handoffs; Parsed() when it only focused one (`#CODE` alone); None when the
        message is about no handoff."""
        chat = msg.chat.id
        replied = msg.reply_to_message
        suffix = self._button_suffix(replied) if replied is not None else None
        if suffix is not None:
            self._people.focus(chat, suffix)
        elif _START.match(text):
            return None  # opening the chat again (`/start`): for the front, not an answer
        else:
            routed = self._people.route(chat, text)
            if routed is None:
                return None
            suffix, text = routed.suffix, routed.text
        if not text.strip():
            return Parsed()
        return Parsed(RecipientText(thread_key=f"{chat}:{suffix}", text=text, author=self._author(msg) or "Telegram user",
                                     user_id=_person_id(msg), dedupe_key=dedupe_key))

    def _from_subscriber(self, msg: Message, text: str, dedupe_key: str) -> Parsed:
        """A subscriber talking to the front in their private chat with the bot."""
        user = msg.from_user
        assert user is not None
        chat, author, user_id = str(msg.chat.id), _person(user), str(user.id)
        if _START.match(text):  # opening the chat (also `/start <payload>` from a t.me link): the core greets
            return Parsed(ChatOpened(chat=chat, author=author, user_id=user_id, dedupe_key=dedupe_key))
        if not text.strip():
            kind = next((label for attribute, label in ATTACHMENTS if getattr(msg, attribute, None)), None)
            if kind is None:
                return Parsed()  # a service message (pinned, payment, …): nothing a person wrote
            if kind == "sticker" and msg.sticker is not None and msg.sticker.emoji:
                kind = f"sticker {msg.sticker.emoji}"
            caption = (msg.caption or "").replace("\x00", "\ufffd").strip()
            text = f"[{kind}] {caption}" if caption else f"[{kind}]"
        return Parsed(SubscriberText(chat=chat, text=text, author=author, user_id=user_id, dedupe_key=dedupe_key))

    def _link_request(self, msg: Message, text: str, dedupe_key: str, *, deep_link: bool = False) -> Parsed:
        """`/link CODE` written to the bot outside a handoff's thread, answered as a reply to
        it in its chat (and topic); anything else: nothing."""
        code = link_code(text, deep_link=deep_link)
        if code is None:
            return Parsed()
        reply_to = {"chat_id": msg.chat.id, "message_id": msg.message_id,
                    "topic_id": msg.message_thread_id if msg.is_topic_message else None}
        author = self._author(msg) or "Telegram user"
        return Parsed(LinkRequest(code=code, reply_to=reply_to, author=author, user_id=_person_id(msg), dedupe_key=dedupe_key))

    def _availability_request(self, msg: Message, text: str, dedupe_key: str) -> Parsed:
        """`/away [note]` or `/back` written to the bot (in a private chat or the staff
        group), answered as a reply to it in its chat; anything else: nothing."""
        command = availability_command(text)
        if command is None:
            return Parsed()
        reply_to = {"chat_id": msg.chat.id, "message_id": msg.message_id,
                    "topic_id": msg.message_thread_id if msg.is_topic_message else None}
        return Parsed(AvailabilityRequest(away=command.away, note=clip(command.note, 200) if command.note else None,
                                          reply_to=reply_to, author=self._author(msg) or "Telegram user",
                                          user_id=_person_id(msg), dedupe_key=dedupe_key))

    def _user_action_press(self, query: Any, dedupe_key: str) -> Parsed:
        """Done / Cancel / a step button under a user-action prompt in a subscriber's chat;
        the core checks that the action is this chat's and still pending."""
        match = USER_ACTION_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if (match is None or not self._subscribers or query.from_user.is_bot or chat is None
                or chat.type != "private" or chat.id == self._chat_id):
            return Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        move = USER_ACTION_MOVES[match.group(2)]
        message = UserActionAnswer(chat=str(chat.id), user_action_id=match.group(1), move=move, author=_person(query.from_user),
                                   user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return Parsed(message, query.id, USER_ACTION_ANSWERS[move], spent_prompt=(chat.id, query.message.message_id))

    def _satisfaction_press(self, query: Any, dedupe_key: str) -> Parsed:
        """👍 / 👎 under the satisfaction question in a subscriber's chat; the core checks that
        the question is this chat's and still open."""
        match = SATISFACTION_DATA.match(query.data)
        chat = query.message.chat if query.message else None
        if (match is None or not self._subscribers or query.from_user.is_bot or chat is None
                or chat.type != "private" or chat.id == self._chat_id):
            return Parsed(callback_query_id=query.id)  # still answered, so the button stops spinning
        message = SatisfactionAnswer(chat=str(chat.id), handoff_id=match.group(1), satisfied=match.group(2) == "y",
                                     author=_person(query.from_user), user_id=str(query.from_user.id), dedupe_key=dedupe_key)
        return Parsed(message, query.id, "Thanks!", spent_prompt=(chat.id, query.message.message_id))

    def _suffix_of(self, msg: Message) -> str | None:
        """Which handoff thread a staff message belongs to, from the message alone."""
        if self._is_forum and msg.is_topic_message and msg.message_thread_id:
            return f"topic:{msg.message_thread_id}"
        replied = msg.reply_to_message
        if replied is None or replied.from_user is None or replied.from_user.id != self._bot_id:
            return None  # not an answer to us: staff talking among themselves
        # Our message without a button (a notice, itself a reply to the dispatch): in a
        # supergroup the reply thread's root is the dispatch; otherwise the replied id.
        return self._button_suffix(replied) or str(msg.message_thread_id or replied.message_id)

    def _button_suffix(self, replied: Message) -> str | None:
        """The handoff thread one of our bot's messages belongs to, by its buttons; None for
        anyone else's message, or ours without a handoff's button."""
        if replied.from_user is None or replied.from_user.id != self._bot_id:
            return None
        for row in replied.reply_markup.inline_keyboard if replied.reply_markup else ():
            for button in row:
                suffix = suffix_from_data(button.callback_data, replied.message_id)
                if suffix is not None:
                    return suffix
        return None

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

    def _remember_dispatch(self, message: Any) -> None:
        """A dispatch as a press on it shows it (its text and keyboard), for the notice that
        follows the claim when this process did not send it (a restart, another instance)."""
        key = (message.chat.id, message.message_id)
        markup, text = getattr(message, "reply_markup", None), getattr(message, "text_html", None)
        if key not in self._dispatches and markup is not None and text:
            self._dispatches[key] = Posted(text, [list(row) for row in markup.inline_keyboard])


def _person_id(msg: Message) -> str | None:
    """The Telegram user id of who wrote: None for an admin posting anonymously, since the
    sender is then Telegram's stand-in bot for the whole group, not a person."""
    user = msg.from_user
    return None if user is None or user.is_bot else str(user.id)


def _person(user: Any) -> str:
    return user.full_name or (f"@{user.username}" if user.username else f"Telegram user {user.id}")

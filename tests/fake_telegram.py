"""A fake Telegram Bot API server on 127.0.0.1, for the Telegram channel tests and the bench.

It stands in for Telegram (the far side of python-telegram-bot), never for our code: the
adapter runs the real SDK against it over real HTTP. It speaks the subset of the Bot API the
channel uses — getMe, getChat, sendMessage, editMessageText, editMessageReplyMarkup, createForumTopic,
answerCallbackQuery, setWebhook, deleteWebhook, getUpdates — with form-encoded requests (JSON-typed fields such
as `reply_markup` arrive as JSON strings), and records every request it receives.

It is strict where Telegram is strict, so the tests catch what production would refuse:
- HTML parse mode: an unsupported tag, an unbalanced tag or a stray `<`, `>` or `&` is a 400
  "can't parse entities", and the visible text (after parsing) must be 1-4096 characters;
- inline keyboards: callback_data is 1-64 bytes, URL buttons need an http(s) URL that is
  not loopback ("Wrong HTTP URL");
- replies to a missing message fail unless `allow_sending_without_reply`; a topic must exist;
- one getUpdates poller per token: a new request terminates the one in flight with
  409 Conflict, and getUpdates is refused while a webhook is set (`peak_pollers` and
  `conflicts` tell a test how many pollers there were);
- a wrong token gets 401 Unauthorized;
- private chats (subscribers of a front) exist once the user has written to the bot; a send
  to one the user blocked (`block`) is 403 "bot was blocked by the user", to an unknown one
  400 "chat not found".

Test hooks: `fail(...)` scripts error answers, `hold(method)` keeps requests of a method
unanswered until `release()` (a timeout after sending), `latency` delays every answer,
`message_update` / `private_update` / `callback_update` build updates as Telegram would send
them (the replied message embedded one level deep, with its reply_markup), and `wait_for`
waits on recorded traffic instead of sleeping.
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from aiohttp import web

from tests.fake_server import LocalHttpServer

BOT_USER = {"id": 7000001, "is_bot": True, "first_name": "Handoff Desk", "username": "handoff_desk_bot",
            "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}
SAM = {"id": 501, "is_bot": False, "first_name": "Sam", "last_name": "Lee", "username": "samlee"}
KIM = {"id": 502, "is_bot": False, "first_name": "Kim", "username": "kim_ops"}
OTHER_BOT = {"id": 7000099, "is_bot": True, "first_name": "Other bot", "username": "other_bot"}
# Subscribers, writing to the bot in their private chats.
ANA = {"id": 601, "is_bot": False, "first_name": "Ana", "last_name": "Silva", "username": "anasilva", "language_code": "en"}
BEN = {"id": 602, "is_bot": False, "first_name": "Ben"}
STAFF_CHAT_ID = -1001234567890

# Telegram's HTML parse mode: these tags and nothing else.
SUPPORTED_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "span", "tg-spoiler", "a", "code", "pre",
                  "blockquote", "tg-emoji"}
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)((?:\s+[A-Za-z-]+(?:=\"[^\"]*\"|='[^']*')?)*)\s*>")
_ENTITY = re.compile(r"&(?:lt|gt|amp|quot|#\d+|#x[0-9A-Fa-f]+);")
_TEXT_PARAMS = {"text", "name", "url", "secret_token", "callback_query_id", "parse_mode", "chat_id"}


class ParseError(ValueError):
    pass


def utf16_len(text: str) -> int:
    """Telegram counts message length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def parse_html(text: str) -> str:
    """The visible text of an HTML-parse-mode message, or ParseError as Telegram would say it."""
    out: list[str] = []
    stack: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        offset = len(text[:i].encode())
        if char == "<":
            match = _TAG.match(text, i)
            name = match.group(2).lower() if match else text[i + 1:i + 10].split(">")[0]
            if not match or name not in SUPPORTED_TAGS:
                raise ParseError(f'Unsupported start tag "{name}" at byte offset {offset}')
            if match.group(1):
                if not stack or stack[-1] != name:
                    raise ParseError(f'Unmatched end tag at byte offset {offset}, expected "</{stack[-1] if stack else ""}>"')
                stack.pop()
            else:
                stack.append(name)
            i = match.end()
        elif char == ">":
            raise ParseError(f"Unexpected \">\" at byte offset {offset}")
        elif char == "&":
            match = _ENTITY.match(text, i)
            if not match:
                raise ParseError(f"Can't find end of the entity starting at byte offset {offset}")
            out.append(html.unescape(match.group()))
            i = match.end()
        else:
            out.append(char)
            i += 1
    if stack:
        raise ParseError(f'Can\'t find end tag corresponding to start tag "{stack[-1]}"')
    return "".join(out)


@dataclass
class Call:
    method: str
    params: dict[str, Any]
    token: str
    at: float = field(default_factory=time.monotonic)


class BotApiError(Exception):
    def __init__(self, status: int, description: str, parameters: dict[str, Any] | None = None) -> None:
        super().__init__(description)
        self.status, self.description, self.parameters = status, description, parameters


class FakeTelegram(LocalHttpServer):
    def __init__(self, *, token: str, is_forum: bool = False, latency: float = 0.0, chat_title: str = "Support staff") -> None:
        super().__init__()
        self.token, self.latency = token, latency
        self.chat = {"id": STAFF_CHAT_ID, "type": "supergroup", "title": chat_title, "username": "support_staff"}
        if is_forum:
            self.chat["is_forum"] = True
        self.calls: list[Call] = []
        self.messages: dict[tuple[int, int], dict[str, Any]] = {}  # every message in the chat, by (chat, id)
        self.topics: dict[int, str] = {}
        self.webhook: dict[str, Any] | None = None
        self.updates: list[dict[str, Any]] = []  # waiting for getUpdates
        self.private: dict[int, dict[str, Any]] = {}  # private chats, by user id, once the user wrote
        self.blocked: set[int] = set()
        self.pollers_in_flight = self.peak_pollers = self.conflicts = 0
        self._failures: list[list[Any]] = []  # [method, error, calls to let through first]
        self._held: set[str] = set()
        self._release = asyncio.Event()
        self._poller: asyncio.Future[None] | None = None  # the getUpdates request in flight
        self._ids = itertools.count(100)
        self._update_ids = itertools.count(9000)
        self._callback_ids = itertools.count(1)

    # ------------------------------------------------------------------ server

    @property
    def base_url(self) -> str:
        """What the adapter's `api_base_url` should be (the SDK appends the token)."""
        return f"http://127.0.0.1:{self.port}/bot"

    async def start(self) -> FakeTelegram:
        app = web.Application()
        app.router.add_post("/bot{token}/{method}", self._handle)
        await self._serve(app)
        return self

    async def stop(self) -> None:
        self.release()
        if self._poller and not self._poller.done():
            self._poller.set_result(None)
        await self._stop_serving()

    # ------------------------------------------------------------------ test hooks

    def fail(self, method: str, status: int, description: str, *, times: int = 1, after: int = 0, **parameters: Any) -> None:
        """The next `times` calls of `method` (once `after` more have gone through) get this
        error (parameters: retry_after, migrate_to_chat_id)."""
        for n in range(times):
            self._failures.append([method, BotApiError(status, description, parameters or None), after if n == 0 else 0])

    def hold(self, method: str) -> None:
        """Record calls of `method` but do not answer them until `release()`."""
        self._held.add(method)
        self._release.clear()

    def release(self) -> None:
        self._held.clear()
        self._release.set()

    def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        return [c.params for c in self.calls if method is None or c.method == method]

    def sent(self) -> list[dict[str, Any]]:
        """Messages the bot posted, in order."""
        return [m for m in self.messages.values() if m.get("from", {}).get("id") == BOT_USER["id"] and "text" in m]

    def sent_to(self, chat_id: int) -> list[dict[str, Any]]:
        """Messages the bot posted in one chat, in order."""
        return [m for m in self.sent() if m["chat"]["id"] == chat_id]

    def block(self, user: dict[str, Any]) -> None:
        """The user blocks the bot: sends to their chat fail with 403."""
        self.blocked.add(user["id"])

    async def queue(self, update: dict[str, Any]) -> dict[str, Any]:
        """Offer an update to getUpdates (polling mode)."""
        self.updates.append(update)
        await self._notify()
        return update

    def message_update(
        self, text: str | None, *, user: dict[str, Any] = SAM, reply_to: int | None = None, topic_id: int | None = None,
        chat: dict[str, Any] | None = None, update_id: int | None = None, **extra: Any,
    ) -> dict[str, Any]:
        """A person writes in the chat (optionally replying to a message, or in a topic)."""
        chat = chat or self.chat
        message: dict[str, Any] = {"message_id": next(self._ids), "date": int(time.time()), "chat": chat, "from": user, **extra}
        if text is not None:
            message["text"] = text
        target = self.messages.get((chat["id"], reply_to)) if reply_to else None
        if topic_id is not None:
            message["message_thread_id"], message["is_topic_message"] = topic_id, True
            # Telegram makes a message in a topic a reply to the topic's creation message.
            target = target or self.messages.get((chat["id"], topic_id))
        if target is not None:
            message["reply_to_message"] = {k: v for k, v in target.items() if k != "reply_to_message"}
        self.messages[(chat["id"], message["message_id"])] = message
        return {"update_id": update_id if update_id is not None else next(self._update_ids), "message": message}

    def private_update(self, text: str | None, *, user: dict[str, Any] = ANA, **extra: Any) -> dict[str, Any]:
        """A subscriber writes to the bot in their private chat (which exists from then on)."""
        chat = self.private.setdefault(user["id"], {"id": user["id"], "type": "private", **{
            k: user[k] for k in ("first_name", "last_name", "username") if k in user}})
        return self.message_update(text, user=user, chat=chat, **extra)

    def callback_update(
        self, message_id: int, *, user: dict[str, Any] = SAM, data: str | None = None, chat_id: int | None = None,
    ) -> dict[str, Any]:
        """A person presses the callback button of one of the bot's messages (in the staff chat,
        or in the chat `chat_id`)."""
        message = self.messages[(self.chat["id"] if chat_id is None else chat_id, message_id)]
        if data is None:
            buttons = [b for row in message["reply_markup"]["inline_keyboard"] for b in row if "callback_data" in b]
            data = buttons[0]["callback_data"]
        return {"update_id": next(self._update_ids), "callback_query": {
            "id": str(next(self._callback_ids)), "from": user, "chat_instance": "ci-1",
            "message": {k: v for k, v in message.items() if k != "reply_to_message"}, "data": data,
        }}

    # ------------------------------------------------------------------ the Bot API

    async def _handle(self, request: web.Request) -> web.Response:
        method, token = request.match_info["method"], request.match_info["token"]
        form = await request.post()
        params = {key: self._decode(key, str(value)) for key, value in form.items()}
        self.calls.append(Call(method, params, token))
        await self._notify()
        if self.latency:
            await asyncio.sleep(self.latency)  # the simulated network, not a test waiting
        if method in self._held:
            await self._release.wait()
        try:
            if token != self.token:
                raise BotApiError(401, "Unauthorized")
            failure = next((f for f in self._failures if f[0] == method), None)
            if failure is not None and failure[2] > 0:
                failure[2] -= 1
            elif failure is not None:
                self._failures.remove(failure)
                raise failure[1]
            handler = getattr(self, f"_api_{method}", None)
            if handler is None:
                raise BotApiError(404, "Not Found")
            result = await handler(params)
        except BotApiError as exc:
            body: dict[str, Any] = {"ok": False, "error_code": exc.status, "description": exc.description}
            if exc.parameters:
                body["parameters"] = exc.parameters
            return web.json_response(body, status=exc.status)
        finally:
            await self._notify()
        return web.json_response({"ok": True, "result": result})

    @staticmethod
    def _decode(key: str, value: str) -> Any:
        if key in _TEXT_PARAMS:
            return int(value) if key == "chat_id" and re.fullmatch(r"-?\d+", value) else value
        try:
            return json.loads(value)
        except ValueError:
            return value

    def _check_chat(self, chat_id: Any) -> dict[str, Any]:
        if chat_id in self.private:
            if chat_id in self.blocked:
                raise BotApiError(403, "Forbidden: bot was blocked by the user")
            return self.private[chat_id]
        if chat_id not in (self.chat["id"], f"@{self.chat['username']}"):
            raise BotApiError(400, "Bad Request: chat not found")
        return self.chat

    async def _api_getMe(self, params: dict[str, Any]) -> dict[str, Any]:
        return BOT_USER

    async def _api_getChat(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._check_chat(params.get("chat_id"))
        return {**chat, "accent_color_id": 0, "max_reaction_count": 11, "accepted_gift_types": {
            "unlimited_gifts": False, "limited_gifts": False, "unique_gifts": False, "premium_subscription": False, "gifts_from_channels": False}}

    async def _api_createForumTopic(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._check_chat(params.get("chat_id"))
        if not chat.get("is_forum"):
            raise BotApiError(400, "Bad Request: the chat is not a forum")
        name = params.get("name", "")
        if not 1 <= len(name) <= 128:
            raise BotApiError(400, "Bad Request: TOPIC_NAME_INVALID")
        # The topic id is the id of its creation (service) message, as in Telegram.
        topic_id = next(self._ids)
        self.topics[topic_id] = name
        self.messages[(chat["id"], topic_id)] = {
            "message_id": topic_id, "date": int(time.time()), "chat": chat, "from": BOT_USER, "message_thread_id": topic_id,
            "is_topic_message": True, "forum_topic_created": {"name": name, "icon_color": 7322096},
        }
        return {"message_thread_id": topic_id, "name": name, "icon_color": 7322096}

    @staticmethod
    def _visible_text(params: dict[str, Any]) -> str:
        """The text of a send or an edit as Telegram would show it, or its refusal."""
        raw = params.get("text", "")
        try:
            text = parse_html(raw) if params.get("parse_mode") == "HTML" else raw
        except ParseError as exc:
            raise BotApiError(400, f"Bad Request: can't parse entities: {exc}") from None
        if not text.strip():
            raise BotApiError(400, "Bad Request: message text is empty")
        if utf16_len(text) > 4096:
            raise BotApiError(400, "Bad Request: message is too long")
        return text

    async def _api_sendMessage(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._check_chat(params.get("chat_id"))
        text = self._visible_text(params)
        markup = params.get("reply_markup")
        if markup is not None:
            self._check_keyboard(markup)
        message: dict[str, Any] = {"message_id": next(self._ids), "date": int(time.time()), "chat": chat, "from": BOT_USER,
                                   "text": text}
        if markup is not None:
            message["reply_markup"] = markup
        topic_id = params.get("message_thread_id")
        if topic_id is not None:
            if topic_id not in self.topics:
                raise BotApiError(400, "Bad Request: message thread not found")
            message["message_thread_id"], message["is_topic_message"] = topic_id, True
        reply = params.get("reply_parameters")
        if reply:
            target = self.messages.get((chat["id"], reply["message_id"]))
            if target is None and not reply.get("allow_sending_without_reply"):
                raise BotApiError(400, "Bad Request: message to be replied not found")
            if target is not None:
                message["reply_to_message"] = {k: v for k, v in target.items() if k != "reply_to_message"}
        self.messages[(chat["id"], message["message_id"])] = message
        return message

    @staticmethod
    def _check_keyboard(markup: dict[str, Any]) -> None:
        for row in markup.get("inline_keyboard", []):
            for button in row:
                if "callback_data" in button and not 1 <= len(button["callback_data"].encode()) <= 64:
                    raise BotApiError(400, "Bad Request: BUTTON_DATA_INVALID")
                if "url" in button:
                    parsed = urlparse(button["url"])
                    if parsed.scheme not in ("http", "https", "tg") or parsed.hostname in ("localhost", "127.0.0.1", "::1"):
                        raise BotApiError(400, f"Bad Request: inline keyboard button URL '{button['url']}' is invalid: Wrong HTTP URL")

    def _message_to_edit(self, params: dict[str, Any]) -> dict[str, Any]:
        chat = self._check_chat(params.get("chat_id"))
        message = self.messages.get((chat["id"], params.get("message_id")))
        if message is None or message.get("from", {}).get("id") != BOT_USER["id"]:
            raise BotApiError(400, "Bad Request: message to edit not found")
        return message

    async def _api_editMessageText(self, params: dict[str, Any]) -> dict[str, Any]:
        """The new text replaces the old one whole; without reply_markup the keyboard goes, as in Telegram."""
        message = self._message_to_edit(params)
        return self._edited(message, self._visible_text(params), params.get("reply_markup"))

    async def _api_editMessageReplyMarkup(self, params: dict[str, Any]) -> dict[str, Any]:
        message = self._message_to_edit(params)
        return self._edited(message, message.get("text"), params.get("reply_markup"))

    def _edited(self, message: dict[str, Any], text: Any, markup: dict[str, Any] | None) -> dict[str, Any]:
        """The message with its new text and keyboard (none: the keyboard goes), or Telegram's
        refusal of an edit that changes nothing."""
        if markup is not None:
            self._check_keyboard(markup)
        if text == message.get("text") and (markup or None) == (message.get("reply_markup") or None):
            raise BotApiError(400, "Bad Request: message is not modified: specified new message content and reply markup "
                                   "are exactly the same as a current content and reply markup of the message")
        if text is not None:
            message["text"] = text
        if markup:
            message["reply_markup"] = markup
        else:
            message.pop("reply_markup", None)
        message["edit_date"] = int(time.time())
        return message

    async def _api_answerCallbackQuery(self, params: dict[str, Any]) -> bool:
        return True

    async def _api_setWebhook(self, params: dict[str, Any]) -> bool:
        if not str(params.get("url", "")).startswith("https://"):
            raise BotApiError(400, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
        self.webhook = params
        return True

    async def _api_deleteWebhook(self, params: dict[str, Any]) -> bool:
        self.webhook = None
        return True

    async def _api_getUpdates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        self.pollers_in_flight += 1
        self.peak_pollers = max(self.peak_pollers, self.pollers_in_flight)
        try:
            return await self._get_updates(params)
        except BotApiError as exc:
            self.conflicts += exc.status == 409
            raise
        finally:
            self.pollers_in_flight -= 1

    async def _get_updates(self, params: dict[str, Any]) -> list[dict[str, Any]]:
        if self.webhook:
            raise BotApiError(409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first")
        if self._poller and not self._poller.done():  # the newer request wins, as in Telegram
            self._poller.set_exception(BotApiError(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"))
        offset = params.get("offset")
        if offset:
            self.updates = [u for u in self.updates if u["update_id"] >= offset]  # confirmed ones are forgotten
        if not self.updates and params.get("timeout"):
            self._poller = asyncio.get_running_loop().create_future()
            waiter = asyncio.create_task(self._wait_for_updates())
            try:
                await asyncio.wait({self._poller, waiter}, timeout=float(params["timeout"]), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
            if self._poller.done() and self._poller.exception():
                raise self._poller.exception()  # type: ignore[misc]
            self._poller.cancel()
        limit = int(params.get("limit") or 100)
        return self.updates[:limit]

    async def _wait_for_updates(self) -> None:
        async with self._changed:
            await self._changed.wait_for(lambda: bool(self.updates))

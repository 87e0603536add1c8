"""Provider fronts: subscribers talk to the bot in their own chats with it (a private chat
with the bot, a phone number), not only through the HTTP API or the web chat.

A front is served by a channel adapter (bot/delivery/channel_set.py says which), so no provider code
is written twice. Its messages arrive like a recipient's, through the inbound store
(deduplicated, recovered after a crash), as subscriber events (`SubscriberText`, `ChatOpened`,
`UserActionAnswer`, `SatisfactionAnswer`); here each chat
becomes one conversation and its messages go to the router, exactly as the API's would.

The other way, every message a subscriber should read (the assistant's replies, a person's
replies during a handoff, the desk's own notices) is queued for their chat by a hook in
`conversations.add_message`, in the transaction that stores it. The outbox then delivers
them in order per conversation, with its retries and audit trail, whoever wrote them.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import structlog
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from bot.config import ProviderFront
from bot.delivery.outbox import Outbox
from bot.domain import conversations
from bot.domain.rendering import Renderer
from bot.domain.satisfaction import Satisfaction
from bot.domain.user_actions import UserActions
from bot.errors import DeskError
from bot.flow.router import Router
from bot.runtime.bounded import BoundedDict
from bot.runtime.clock import Clock
from bot.runtime.ratelimit import TokenBuckets
from bot.store import audit
from bot.store.db import Database
from bot.store.models import Message
from bot.store.vocabulary import Role
from channels.base import (
    ChatOpened,
    SatisfactionAnswer,
    SatisfactionPrompt,
    SubscriberEvent,
    SubscriberText,
    ToSubscriber,
    UserActionAnswer,
    UserActionPrompt,
)

log = structlog.get_logger(__name__)

KNOWN_CHATS = 10_000  # chats whose conversation id is remembered (the most recently active)
SHOWN_ROLES = (Role.AGENT, Role.HUMAN)  # system messages are for the agent; the subscriber's own are already there


class Fronts:
    def __init__(
        self, *, db: Database, clock: Clock, fronts: list[ProviderFront], outbox: Outbox, renderer: Renderer,
        router: Router, user_actions: UserActions, satisfaction: Satisfaction,
    ) -> None:
        self.db, self.clock, self.outbox, self.renderer = db, clock, outbox, renderer
        self.router, self.user_actions, self.satisfaction = router, user_actions, satisfaction
        self._by_name = {f.name: f for f in fronts}
        self._by_channel = {f.channel_id: f for f in fronts}
        self._known: BoundedDict[tuple[str, str], str] = BoundedDict(KNOWN_CHATS, refresh_on_read=True)  # (front, chat) -> conversation id
        # Each message may cost an agent turn (an LLM call) or a person's attention: a chat
        # sending faster than `max_messages_per_minute` is told to slow down, once, and the
        # rest is kept in the inbound record but not answered.
        self._limits = {f.name: TokenBuckets(f.max_messages_per_minute, clock) for f in fronts}
        self._slowed: dict[tuple[str, str], datetime] = {}  # told to slow down, until
        if fronts:  # without provider fronts, storing a message costs nothing extra
            db.message_hooks.append(self.deliver)

    # ------------------------------------------------------------------ from the subscriber

    async def handle(self, channel_id: int, message: SubscriberEvent) -> str:
        """One subscriber event from a front's adapter (stored and deduplicated already).
        Returns what happened, for the inbound record."""
        front = self._by_channel.get(channel_id)
        if front is None:
            return "ignored: this channel serves no front"
        cid, created = await self._conversation(front, message)
        match message:
            case UserActionAnswer():
                return await self._answer(cid, message, front)
            case SatisfactionAnswer():
                result = await self.satisfaction.answer(
                    message.handoff_id, message.satisfied, conversation_id=cid, via=f"front:{front.name}", by=message.author,
                    comment_in_chat=True,
                )
                return "satisfaction answered" if result.recorded else "ignored: the satisfaction question is closed"
            case ChatOpened():
                await self._say(cid, front.greeting or self.renderer.render(
                    "messages/front_greeting.txt", subscriber=message.author).strip())
                return "greeted"
            case SubscriberText():
                return await self._read(front, cid, created, message)

    async def _read(self, front: ProviderFront, cid: str, created: bool, message: SubscriberText) -> str:
        """A subscriber's words: to the router, unless the chat is over its rate limit."""
        if not message.text.strip():
            return "ignored: nothing to read"
        wait = self._limits[front.name].take(message.chat)
        if wait:
            return await self._slow_down(front, message.chat, cid, wait)
        if created and front.greeting:
            # A provider without an "opened" event: the owner's greeting comes
            # before the answer to the first message, which is still the agent's to give.
            await self._say(cid, front.greeting)
        if await self.satisfaction.take_words(cid, message.text, via=f"front:{front.name}", by=message.author):
            return "satisfaction answered"  # never a message of the conversation: the agent does not read it
        result = await self.router.subscriber_message(cid, message.text)
        return f"routed to {result.routed_to}"

    async def _conversation(self, front: ProviderFront, message: SubscriberEvent) -> tuple[str, bool]:
        """The chat's conversation, created on its first message. Two instances may both
        try: the unique index lets one win, and the other reads the winner's. A chat's
        conversation never changes (conversations are not deleted), so the answer is kept
        in memory: a busy chat costs no transaction of its own per message."""
        chat, name = message.chat, (message.author or "").strip()[:200] or None
        known = self._known.get((front.name, chat))
        if known is not None:
            return known, False
        cid, created = await self._find_or_create(front, chat, name)
        self._known[(front.name, chat)] = cid
        return cid, created

    async def _find_or_create(self, front: ProviderFront, chat: str, name: str | None) -> tuple[str, bool]:
        for _ in range(2):
            try:
                async with self.db.transaction() as session:
                    conversation = await conversations.at_front(session, front.name, chat)
                    created = conversation is None
                    if conversation is None:
                        conversation = await conversations.create(
                            session, now=self.clock.now(), name=name, external_id=chat, front=front.name,
                        )
                        await audit.note(session, "conversation_started", at=self.clock.now(), actor=f"front:{front.name}",
                                         conversation_id=conversation.id, front=front.name)
                    elif name and conversation.subscriber_name is None:
                        conversation.subscriber_name = name
                    return conversation.id, created
            except IntegrityError:
                continue
        raise RuntimeError(f"could not create the conversation of a chat on front {front.name}")

    async def _slow_down(self, front: ProviderFront, chat: str, cid: str, wait: float) -> str:
        """Over the chat's limit: say so once per spell, drop the rest (still recorded)."""
        now = self.clock.now()
        until = self._slowed.get((front.name, chat))
        if until is None or until <= now:
            seconds = max(1, math.ceil(wait))
            self._slowed[(front.name, chat)] = now + timedelta(seconds=seconds)
            for key in [k for k, end in self._slowed.items() if end <= now]:
                del self._slowed[key]
            await self._say(cid, self.renderer.render("messages/front_slow_down.txt", seconds=seconds).strip())
        return f"ignored: over {front.max_messages_per_minute} messages a minute"

    async def _answer(self, cid: str, answer: UserActionAnswer, front: ProviderFront) -> str:
        """A button pressed on a user-action prompt; a stale button (another action, or
        one already answered) changes nothing."""
        try:
            if answer.move == "done" or answer.move == "cancelled":  # `==` narrows the Literal for move() below
                result = await self.user_actions.respond(
                    answer.user_action_id, answer.move, via=f"front:{front.name}", conversation_id=cid,
                )
                return "user action already answered" if result.already else f"user action {answer.move}"
            action = await self.user_actions.get(answer.user_action_id)
            if action.conversation_id != cid:
                return "ignored: not this chat's user action"
            await self.user_actions.move(action.id, answer.move)
            return f"user action step {answer.move}"
        except DeskError as exc:
            return f"ignored: {exc.message}"

    async def _say(self, cid: str, text: str) -> None:
        async with self.db.transaction() as session:
            await conversations.add_message(session, cid, role=Role.AGENT, text=text, now=self.clock.now())

    # ------------------------------------------------------------------ to the subscriber

    async def deliver(
        self, session: AsyncSession, message: Message, user_action: UserActionPrompt | None,
        satisfaction: SatisfactionPrompt | None = None,
    ) -> None:
        """The message hook: queue a message the subscriber should read for their chat, in
        the transaction that stored it."""
        if message.role not in SHOWN_ROLES:
            return
        on_front = await conversations.front_chat(session, message.conversation_id)
        if on_front is None:
            return  # the API or the web chat: their clients read the conversation themselves
        name, chat = on_front
        front = self._by_name.get(name)
        if front is None:
            log.warning("front_not_configured", conversation_id=message.conversation_id, front=name,
                        hint="this conversation's front was removed or renamed in the config; its subscriber "
                             "does not receive this message")
            return
        author = message.author if message.role == Role.HUMAN else None
        outbound = ToSubscriber(
            conversation_id=message.conversation_id, chat=chat, author=author, body=message.text,
            text=self.renderer.render("messages/to_subscriber.txt", author=author, text=message.text).strip(),
            user_action=user_action, satisfaction=satisfaction,
        )
        await self.outbox.queue(session, channel_id=front.channel_id, outbound=outbound, now=message.created_at,
                                message_id=message.id)

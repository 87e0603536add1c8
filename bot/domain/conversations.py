"""Conversations and their messages: the record every other part reads from."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlmodel import col

from bot.errors import NotFound
from bot.runtime.bus import ConversationBus
from bot.runtime.clock import Clock
from bot.runtime.signals import Changed, record
from bot.runtime.text import scrub
from bot.store import prepared
from bot.store.db import MESSAGE_HOOKS, Database
from bot.store.models import Conversation, Message, new_id
from bot.store.rows import Rows
from bot.store.vocabulary import Role
from channels.base import SatisfactionPrompt, TranscriptLine, UserActionPrompt

T = TypeVar("T")


class InConversation(Protocol):
    """A row that belongs to one conversation."""

    @property
    def conversation_id(self) -> str: ...


R = TypeVar("R", bound=InConversation)

# session.info key: the `last_message_at` each conversation was given in this session, so a
# transaction storing several messages at one moment (a release: the subscriber's notice and
# the resume) updates the conversation row once.
_LAST_MESSAGE_AT = "handoff_desk_last_message_at"

ROLE_LABELS = {"subscriber": "Subscriber", "agent": "Assistant", "human": "Human", "system": "System"}

_MESSAGES = Rows(Message)
_CONVERSATIONS = Rows(Conversation)
_INSERT_CONVERSATION = prepared.Prepared(insert(_CONVERSATIONS.table))

# Prepared once: storing and reading messages is on every relay's and every answer's path,
# where an ORM flush or load cost several times the statement (bot/store/prepared.py).
_INSERT_MESSAGE = prepared.Prepared(insert(_MESSAGES.table).returning(_MESSAGES.table.c.id))
_TOUCH_CONVERSATION = prepared.Prepared(
    update(_CONVERSATIONS.table).where(_CONVERSATIONS.table.c.id == bindparam("cid")).values(last_message_at=bindparam("now")))
_CONVERSATION = prepared.Prepared(select(*_CONVERSATIONS.columns).where(_CONVERSATIONS.table.c.id == bindparam("cid")))
_FRONT_CHAT = prepared.Prepared(
    select(_CONVERSATIONS.table.c.front, _CONVERSATIONS.table.c.subscriber_external_id)
    .where(_CONVERSATIONS.table.c.id == bindparam("cid")))
_MESSAGES_AFTER = prepared.Prepared(
    select(*_MESSAGES.columns)
    .where(_MESSAGES.table.c.conversation_id == bindparam("cid"), _MESSAGES.table.c.id > bindparam("after"))
    .order_by(_MESSAGES.table.c.id).limit(bindparam("limit")))
_RECENT_LINES = prepared.Prepared(
    select(_MESSAGES.table.c.id, _MESSAGES.table.c.role, _MESSAGES.table.c.text, _MESSAGES.table.c.author)
    .where(_MESSAGES.table.c.conversation_id == bindparam("cid"))
    .order_by(_MESSAGES.table.c.id.desc()).limit(bindparam("limit")))
_RECENT_MESSAGES = prepared.Prepared(
    select(*_MESSAGES.columns).where(_MESSAGES.table.c.conversation_id == bindparam("cid"))
    .order_by(_MESSAGES.table.c.id.desc()).limit(bindparam("limit")))


async def create(
    session: AsyncSession,
    *,
    now: datetime,
    name: str | None = None,
    email: str | None = None,
    external_id: str | None = None,
    serves_handoff_session_id: str | None = None,
    background: bool = False,
    front: str | None = None,
) -> Conversation:
    """Store a new conversation in the caller's transaction: one prepared INSERT; the object
    handed back is detached (as one read in a closed session), not kept in the session."""
    row = {
        "id": new_id("c"),
        "subscriber_name": name,
        "subscriber_email": email,
        "subscriber_external_id": external_id,
        "front": front,
        "serves_handoff_session_id": serves_handoff_session_id,
        "background": background,
        "created_at": now,
        "last_message_at": now,
        "first_handoff_at": None,
    }
    await prepared.execute(session, _INSERT_CONVERSATION, row)
    return _CONVERSATIONS.of(row)


async def get(session: AsyncSession, conversation_id: str) -> Conversation:
    """The conversation as stored (a copy: changes to it are not saved)."""
    return _conversation_of(await prepared.fetch_one(session, _CONVERSATION, {"cid": conversation_id}), conversation_id)


async def read(db: Database, conversation_id: str) -> Conversation:
    """The conversation as stored, read on its own (`Database.fetch_one`: one statement,
    no transaction around it); for a caller that reads nothing else with it, such as the
    tool context each agent round trip builds."""
    return _conversation_of(await db.fetch_one(_CONVERSATION, {"cid": conversation_id}), conversation_id)


def _conversation_of(row: prepared.Row | None, conversation_id: str) -> Conversation:
    if row is None:
        raise NotFound("conversation", conversation_id)
    return _CONVERSATIONS.one(row)


async def add_message(
    session: AsyncSession,
    conversation_id: str,
    *,
    role: Role,
    text: str,
    now: datetime,
    author: str | None = None,
    person_id: str | None = None,
    handoff_session_id: str | None = None,
    user_action: UserActionPrompt | None = None,
    satisfaction: SatisfactionPrompt | None = None,
) -> Message:
    """Store a message in the caller's transaction. The database's message hooks run in the
    same transaction (a front queues its delivery to the subscriber's chat there), so a
    message is never stored without being sent, nor sent without being stored. Whoever
    waits on the conversation is woken once the transaction commits (a `Changed` signal).
    `user_action`: this message asks the subscriber for it (a front may offer buttons);
    `satisfaction`: this message is the satisfaction question (a front may offer 👍 / 👎);
    `person_id`: a person of the directory wrote it (`author` is then their name)."""
    row: dict[str, Any] = {
        "conversation_id": conversation_id,
        "role": role,
        "text": scrub(text),
        "author": scrub(author)[:200] if author else None,
        "person_id": person_id,
        "handoff_session_id": handoff_session_id,
        "created_at": now,
    }
    ((message_id,),) = await prepared.fetch_all(session, _INSERT_MESSAGE, row)
    message = _MESSAGES.of({"id": message_id, **row})
    bumped = session.info.setdefault(_LAST_MESSAGE_AT, {})
    if bumped.get(conversation_id) != now:  # a second message of the same moment sets the same value
        await prepared.execute(session, _TOUCH_CONVERSATION, {"cid": conversation_id, "now": now})
        bumped[conversation_id] = now
    record(session.info, Changed(conversation_id))
    for hook in session.info.get(MESSAGE_HOOKS, ()):
        await hook(session, message, user_action, satisfaction)
    return message


async def at_front(session: AsyncSession, front: str, chat: str) -> Conversation | None:
    """The conversation of one chat on a front."""
    query = select(Conversation).where(col(Conversation.front) == front, col(Conversation.subscriber_external_id) == chat)
    return (await session.scalars(query)).first()


async def front_chat(session: AsyncSession, conversation_id: str) -> tuple[str, str] | None:
    """The front and the chat on it a conversation's subscriber talks through; None for the
    API and the web chat, whose clients read the conversation themselves."""
    row = await prepared.fetch_one(session, _FRONT_CHAT, {"cid": conversation_id})
    if row is None or row[0] is None or row[1] is None:
        return None
    return row[0], row[1]


async def messages_after(session: AsyncSession, conversation_id: str, after: int = 0, limit: int = 200) -> list[Message]:
    """Messages with an id above `after`, oldest first."""
    rows = await prepared.fetch_all(session, _MESSAGES_AFTER, {"cid": conversation_id, "after": after, "limit": limit})
    return _MESSAGES.all(rows)


async def recent_messages(session: AsyncSession, conversation_id: str, limit: int) -> list[Message]:
    """The last `limit` messages, oldest first."""
    if limit <= 0:
        return []
    rows = await prepared.fetch_all(session, _RECENT_MESSAGES, {"cid": conversation_id, "limit": limit})
    return _MESSAGES.all(rows[::-1])


class Line(NamedTuple):
    """What an agent reads of a message: who said what (no timestamps, nothing to convert)."""

    id: int
    role: str
    text: str
    author: str | None


async def recent_lines(session: AsyncSession, conversation_id: str, limit: int) -> list[Line]:
    """The last `limit` messages as lines, oldest first: an agent's history, read every turn."""
    if limit <= 0:
        return []
    rows = await prepared.fetch_all(session, _RECENT_LINES, {"cid": conversation_id, "limit": limit})
    return [Line(*row) for row in reversed(rows)]


def speaker(message: Message, conversation: Conversation) -> str:
    if message.role == Role.SUBSCRIBER:
        return conversation.subscriber_name or "Subscriber"
    if message.role == Role.HUMAN:
        return message.author or "Human"
    return ROLE_LABELS.get(message.role, message.role)


def transcript(messages: list[Message], conversation: Conversation) -> list[TranscriptLine]:
    """Transcript lines for a dispatch; system messages are for the agent, not people."""
    return [
        TranscriptLine(role=m.role, author=speaker(m, conversation), text=m.text, at=m.created_at.isoformat())
        for m in messages
        if m.role != Role.SYSTEM
    ]


def message_view(message: Message) -> dict[str, Any]:
    return {
        "id": message.id,
        "role": message.role,
        "text": message.text,
        "author": message.author,
        "handoff_session_id": message.handoff_session_id,
        "created_at": message.created_at.isoformat(),
    }


class Conversations:
    """The conversation record as the API and the pages use it: start one, read it, and wait
    for what is new. Each call opens its own session; the flow layer, which writes inside
    larger transactions, uses the functions above instead."""

    def __init__(self, db: Database, clock: Clock, bus: ConversationBus) -> None:
        self.db, self.clock, self.bus = db, clock, bus

    async def start(self, **subscriber: Any) -> str:
        """A new conversation (keywords as for `create`); returns its id."""
        async with self.db.transaction(effect=True) as session:
            conversation = await create(session, now=self.clock.now(), **subscriber)
        return conversation.id

    async def get(self, conversation_id: str) -> Conversation:
        return await read(self.db, conversation_id)

    async def messages(self, conversation_id: str, after: int = 0, limit: int = 200) -> list[Message]:
        """Messages with an id above `after`, oldest first; NotFound for an unknown conversation.
        Messages found prove the conversation exists, so only an empty answer looks it up.
        Each is one statement on its own: conversations are never deleted, so the two need
        no common snapshot."""
        found = await self._messages_after(conversation_id, after, limit)
        if not found:
            await read(self.db, conversation_id)
        return found

    async def _messages_after(self, conversation_id: str, after: int, limit: int) -> list[Message]:
        rows = await self.db.fetch_all(_MESSAGES_AFTER, {"cid": conversation_id, "after": after, "limit": limit})
        return _MESSAGES.all(rows)

    async def wait_for_messages(self, conversation_id: str, after: int, limit: int, wait: float) -> list[Message]:
        """Messages after `after`, waiting up to `wait` seconds for one to arrive. The first
        check settles that the conversation exists; the re-checks are the one indexed message
        query (conversations are never deleted while polled), a statement on its own with no
        transaction around it."""
        return await self.wait_until(conversation_id, await self.messages(conversation_id, after, limit),
                                     lambda: self._messages_after(conversation_id, after, limit), bool, wait)

    async def wait_for(self, read: Callable[[], Awaitable[R]], settled: Callable[[R], bool], wait: float) -> R:
        """`read()` a thing of one conversation (a handoff, an approval, a user action) until
        `settled`, waiting up to `wait` seconds on its conversation (`wait_until`)."""
        current = await read()
        return await self.wait_until(current.conversation_id, current, read, settled, wait)

    async def wait_until(self, conversation_id: str, current: T, read: Callable[[], Awaitable[T]],
                         settled: Callable[[T], bool], wait: float) -> T:
        """`current` (a first read), or `read()` again until `settled(…)` holds or `wait`
        seconds pass; the last read. Every write to the conversation (a message; a handoff's,
        approval's or user action's end writes one) wakes the wait at once in this process;
        it re-reads every 2 s anyway, for what other instances wrote. Every long-poll of the
        API (GET …?wait=) waits this way."""
        remaining = wait
        while not settled(current) and remaining > 0:
            step = min(2.0, remaining)
            await self.bus.wait(conversation_id, timeout=step)
            remaining -= step
            current = await read()
        return current

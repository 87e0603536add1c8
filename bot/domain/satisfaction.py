"""The satisfaction question asked after a handoff ends ("Did that solve it?"), and its answer.

Asked when `csat.enabled` and the release's reason is one of `csat.ask_after`, on the front
the subscriber uses (the web chat or a provider front; a conversation of the HTTP API is
never asked, its client shows what it likes). The question is a message of the
conversation, so every front delivers it the usual way and the agent's history shows the
desk asked; the answer is not: it is a row of `handoff_satisfaction` (who, when, through
what, an optional comment), audited and counted, and never becomes a subscriber message, so
the agent cannot read it as something to act on.

A question stays open until it is answered, a day has passed, or the subscriber writes
anything else (a stored subscriber message after the question closes it): an unanswered
question expires quietly and the next message goes to the agent as usual. After an answer,
a comment is offered for a while on the same terms.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from sqlalchemy import bindparam, exists, select, update
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import col

from bot.config import CsatConfig
from bot.domain import conversations
from bot.domain.handoffs import HandoffReleased
from bot.domain.rendering import Renderer
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.runtime.text import iso
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import HandoffSatisfaction, HandoffSession, Message
from bot.store.prepared import Prepared
from bot.store.rows import Rows
from bot.store.vocabulary import Role
from channels.base import SatisfactionPrompt

QUESTION_OPEN = timedelta(days=1)
COMMENT_OPEN = timedelta(hours=1)
COMMENT_LIMIT = 500
# What a front without buttons takes as an answer ("Reply 1 for yes, 2 for no").
WORDS = {"1": True, "yes": True, "y": True, "👍": True, "2": False, "no": False, "n": False, "👎": False}
_PUNCTUATION = re.compile(r"[\s.!]+$")


@dataclass(frozen=True)
class OpenQuestion:
    """What the subscriber is asked right now: the question itself (`stage="question"`) or,
    once answered, the optional comment (`stage="comment"`)."""

    handoff_id: str
    stage: Literal["question", "comment"]
    in_words: bool


@dataclass(frozen=True)
class Recorded:
    """The result of an answer or a comment: `recorded` is False when the question was
    closed already (answered, expired, or the subscriber moved on)."""

    recorded: bool
    satisfaction: HandoffSatisfaction | None


def words_answer(text: str) -> bool | None:
    """The answer a message in words gives (True for yes, False for no), or None."""
    return WORDS.get(_PUNCTUATION.sub("", text.strip().lower()))


class Satisfaction:
    def __init__(
        self, *, db: Database, clock: Clock, settings: CsatConfig, renderer: Renderer, metrics: Metrics,
        background: Background, has_buttons: Callable[[str], bool],
    ) -> None:
        """`has_buttons(front)`: whether that front can offer 👍 / 👎 (else the question is
        answered in words)."""
        self.db, self.clock, self.settings, self.renderer = db, clock, settings, renderer
        self.metrics, self.background, self.has_buttons = metrics, background, has_buttons

    # ------------------------------------------------------------------ asking

    def on_released(self, released: HandoffReleased) -> None:
        """The `HandoffReleased` handler: ask, when this release's reason asks."""
        handoff = released.handoff
        if self.settings.enabled and handoff.release_reason in self.settings.ask_after:
            self.background.spawn(self.ask(handoff), name=f"csat:{handoff.id}")

    async def ask(self, handoff: HandoffSession) -> HandoffSatisfaction | None:
        """Ask the subscriber of a released handoff; None when their conversation is on no
        front (the HTTP API) or the question was asked already."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            conversation = await conversations.get(session, handoff.conversation_id)
            if conversation.front is None or await session.get(HandoffSatisfaction, handoff.id) is not None:
                return None
            in_words = not self.has_buttons(conversation.front)
            question = await conversations.add_message(
                session, conversation.id, role=Role.AGENT, now=now,
                text=self.renderer.render("messages/satisfaction_question.txt", in_words=in_words).strip(),
                satisfaction=SatisfactionPrompt(handoff_id=handoff.id),
            )
            row = HandoffSatisfaction(
                handoff_session_id=handoff.id, conversation_id=conversation.id, asked_at=now, asked_on=conversation.front,
                in_words=in_words, question_message_id=int(question.id or 0),
            )
            session.add(row)
            await audit.note(session, "satisfaction_asked", at=now, actor="desk", handoff_session_id=handoff.id,
                             conversation_id=conversation.id, front=conversation.front)
        return row

    # ------------------------------------------------------------------ answers

    async def answer(
        self, handoff_id: str, satisfied: bool, *, conversation_id: str, via: str, by: str | None = None,
        comment_in_chat: bool = False,
    ) -> Recorded:
        """Record 👍 (True) or 👎 (False): once, while the question is open. `comment_in_chat`: the
        subscriber is on a provider front, where the comment is their next message (the web
        chat has a comment box), so the thanks says so."""
        now = self.clock.now()
        word = "yes" if satisfied else "no"
        async with self.db.transaction() as session:
            changed = await execute_dml(session, update(HandoffSatisfaction).where(
                col(HandoffSatisfaction.handoff_session_id) == handoff_id,
                col(HandoffSatisfaction.conversation_id) == conversation_id,
                col(HandoffSatisfaction.answer).is_(None),
                col(HandoffSatisfaction.asked_at) > now - QUESTION_OPEN,
                _not_moved_on(),
            ).values(answer=word, answered_at=now, answered_by=(by or "")[:200] or None, answered_via=via[:40]))
            if not changed.rowcount:
                return Recorded(False, await session.get(HandoffSatisfaction, handoff_id))
            row = await session.get(HandoffSatisfaction, handoff_id, populate_existing=True)
            assert row is not None
            await audit.note(session, "satisfaction_answered", at=now, actor=by or "subscriber", handoff_session_id=handoff_id,
                             conversation_id=conversation_id, answer=word, via=via)
            offer = self.settings.comment and comment_in_chat
            await conversations.add_message(
                session, conversation_id, role=Role.AGENT, now=now,
                text=self.renderer.render("messages/satisfaction_thanks.txt", comment_in_words=offer).strip(),
            )
        self.metrics.satisfaction.labels(word).inc()
        return Recorded(True, row)

    async def comment(self, handoff_id: str, text: str, *, conversation_id: str, comment_in_chat: bool = False) -> Recorded:
        """Add the optional comment to an answer: once, while the comment is offered. One
        sent `comment_in_chat` (a message on a provider front) is acknowledged in the chat."""
        now = self.clock.now()
        text = text.strip()
        if not self.settings.comment or not text or len(text) > COMMENT_LIMIT:
            return Recorded(False, None)
        async with self.db.transaction() as session:
            changed = await execute_dml(session, update(HandoffSatisfaction).where(
                col(HandoffSatisfaction.handoff_session_id) == handoff_id,
                col(HandoffSatisfaction.conversation_id) == conversation_id,
                col(HandoffSatisfaction.answer).is_not(None),
                col(HandoffSatisfaction.comment).is_(None),
                col(HandoffSatisfaction.answered_at) > now - COMMENT_OPEN,
                _not_moved_on(),
            ).values(comment=text))
            if not changed.rowcount:
                return Recorded(False, await session.get(HandoffSatisfaction, handoff_id))
            row = await session.get(HandoffSatisfaction, handoff_id, populate_existing=True)
            await audit.note(session, "satisfaction_commented", at=now, actor=(row.answered_by if row else None) or "subscriber",
                             handoff_session_id=handoff_id, conversation_id=conversation_id)
            if comment_in_chat:
                await conversations.add_message(
                    session, conversation_id, role=Role.AGENT, now=now,
                    text=self.renderer.render("messages/satisfaction_comment_thanks.txt").strip(),
                )
        return Recorded(True, row)

    async def take_words(self, conversation_id: str, text: str, *, via: str, by: str | None) -> bool:
        """A message on a provider front: True when it answered the open question in words
        ("1" / "2", on a front without buttons) or was the comment offered after the answer,
        so it is not a message to route."""
        if not self.settings.enabled:
            return False
        open_question = await self.open_for(conversation_id)
        if open_question is None:
            return False
        if open_question.stage == "comment":
            commented = await self.comment(open_question.handoff_id, text, conversation_id=conversation_id, comment_in_chat=True)
            return commented.recorded
        satisfied = words_answer(text) if open_question.in_words else None
        if satisfied is None:
            return False
        answered = await self.answer(open_question.handoff_id, satisfied, conversation_id=conversation_id, via=via, by=by,
                                     comment_in_chat=True)
        return answered.recorded

    # ------------------------------------------------------------------ reading

    async def open_for(self, conversation_id: str) -> OpenQuestion | None:
        """The question (or comment) the conversation's subscriber is asked now, if any."""
        if not self.settings.enabled:
            return None
        now = self.clock.now()
        async with self.db.read() as session:
            row = (await session.scalars(
                select(HandoffSatisfaction).where(col(HandoffSatisfaction.conversation_id) == conversation_id, _not_moved_on())
                .order_by(col(HandoffSatisfaction.asked_at).desc()).limit(1)
            )).first()
        if row is None:
            return None
        if row.answer is None and row.asked_at > now - QUESTION_OPEN:
            return OpenQuestion(row.handoff_session_id, "question", row.in_words)
        if (self.settings.comment and row.answer is not None and row.comment is None and row.answered_at is not None
                and row.answered_at > now - COMMENT_OPEN):
            return OpenQuestion(row.handoff_session_id, "comment", row.in_words)
        return None

    async def of(self, handoff_id: str) -> HandoffSatisfaction | None:
        """What was asked after this handoff and how it was answered (None: never asked). Every
        read of a handoff asks: one prepared SELECT on its own, no read transaction."""
        row = await self.db.fetch_one(_SATISFACTION_OF, {"sid": handoff_id})
        return None if row is None else _SATISFACTION_ROWS.one(row)


_SATISFACTION_ROWS = Rows(HandoffSatisfaction)
_SATISFACTION_OF = Prepared(select(*_SATISFACTION_ROWS.columns)
                            .where(_SATISFACTION_ROWS.table.c.handoff_session_id == bindparam("sid")))


def _not_moved_on() -> ColumnElement[bool]:
    """No subscriber message after the question: writing anything else closes it."""
    return ~exists().where(
        col(Message.conversation_id) == col(HandoffSatisfaction.conversation_id),
        col(Message.role) == Role.SUBSCRIBER,
        col(Message.id) > col(HandoffSatisfaction.question_message_id),
    )


def satisfaction_view(row: HandoffSatisfaction | None) -> dict[str, object] | None:
    """The API's `satisfaction` of a handoff."""
    if row is None:
        return None
    return {
        "asked_at": iso(row.asked_at), "asked_on": row.asked_on,
        "answer": row.answer, "comment": row.comment,
        "answered_at": iso(row.answered_at),
        "answered_by": row.answered_by, "answered_via": row.answered_via,
    }

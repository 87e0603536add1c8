"""Routing a subscriber's message: to the agent, or — during a handoff — to the recipient.

The decision and the storing happen in one transaction: the message is written (and, when
bypassed, its relay queued in the outbox) before anything is sent, so a crash after this
point loses nothing. Agent turns for one conversation run one at a time, so two quick
messages cannot make the agent answer twice in parallel or escalate twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import structlog

from bot.agents import Agent, Turn, TurnMessage
from bot.agents.base import Trigger
from bot.delivery.channel_set import ChannelSet
from bot.delivery.outbox import Outbox
from bot.domain import conversations
from bot.domain.approvals import ApprovalSettled
from bot.domain.handoffs import HandoffReleased, Handoffs, HeldMessagesOrphaned
from bot.domain.user_actions import UserActions, UserActionSettled, keyword_outcome, pending_in
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.runtime.locks import KeyedLocks
from bot.runtime.metrics import Metrics
from bot.store.db import Database
from bot.store.models import Conversation, Message
from bot.store.vocabulary import HandoffState, Role
from bot.tools import ToolContext, ToolRegistry, ToolSpec

log = structlog.get_logger(__name__)

AGENT_HISTORY = 50
FALLBACK_REPLY = "Sorry, I ran into a problem answering that. Please try again in a moment."


@dataclass
class RouteResult:
    message_id: int
    routed_to: Literal["agent", "human"]
    handoff_session_id: str | None
    replies: list[Message] = field(default_factory=list)


class Router:
    def __init__(
        self,
        *,
        db: Database,
        clock: Clock,
        handoffs: Handoffs,
        channels: ChannelSet,
        outbox: Outbox,
        tools: ToolRegistry,
        agent: Agent,
        background: Background,
        metrics: Metrics,
        user_actions: UserActions,
    ) -> None:
        self.db, self.clock, self.handoffs, self.channels = db, clock, handoffs, channels
        self.user_actions = user_actions
        self.outbox, self.tools, self.agent = outbox, tools, agent
        self.background, self.metrics = background, metrics
        self._locks = KeyedLocks()  # one agent turn per conversation at a time

    async def subscriber_message(self, conversation_id: str, text: str) -> RouteResult:
        # One message of a conversation at a time: a message arriving while the agent is
        # escalating is routed after the turn ends, to the human if the handoff started.
        async with self._locks[conversation_id]:
            now = self.clock.now()
            async with self.db.transaction(effect=True) as session:
                conversation = await conversations.get(session, conversation_id)
                waiting = await pending_in(session, conversation_id)
                redaction = self.user_actions.redact(waiting, text)
                text = redaction.text  # a code or password is never stored, relayed or shown to the agent
                routed = await self.handoffs.route_subscriber_message(session, conversation, text, now)
                if routed is None:
                    stored = await conversations.add_message(session, conversation_id, role=Role.SUBSCRIBER, text=text, now=now)
                reminder = None
                if redaction.redacted and waiting is not None:
                    reminder = await conversations.add_message(
                        session, conversation_id, role=Role.AGENT, text=self.user_actions.reminder(waiting), now=now,
                        author="Assistant",
                    )
            if routed is not None:
                message, handoff = routed
                return RouteResult(int(message.id or 0), "human", handoff.id, [reminder] if reminder else [])
            if reminder is not None:
                return RouteResult(int(stored.id or 0), "agent", None, [reminder])
            answer = keyword_outcome(text) if waiting is not None else None
            if waiting is not None and answer is not None:
                # "done" / "cancel" answers the pending user action; its outcome starts the agent's turn
                await self.user_actions.respond(waiting.id, answer, via="subscriber")
                return RouteResult(int(stored.id or 0), "agent", None, [])
            replies, started = await self._agent_turn(conversation_id, trigger="message")
            return RouteResult(int(stored.id or 0), "agent", started, replies)

    def tool_context(self, conversation: Any, actor: str = "agent") -> ToolContext:
        return ToolContext(conversation=conversation, handoffs=self.handoffs, channels=self.channels, actor=actor)

    async def tool_specs(self, conversation_id: str) -> list[ToolSpec]:
        """The tools a conversation's agent may call now, for an agent run outside the desk."""
        return self.tools.specs(self.tool_context(await self._conversation(conversation_id)))

    async def call_tool(self, conversation_id: str, name: str, args: Any, actor: str = "agent") -> dict[str, Any]:
        """One tool call from outside an agent turn (the HTTP API, a sibling run elsewhere)."""
        return await self.tools.call(self.tool_context(await self._conversation(conversation_id), actor=actor), name, args)

    async def _conversation(self, conversation_id: str) -> Conversation:
        return await conversations.read(self.db, conversation_id)

    async def agent_turn(
        self, conversation_id: str, *, trigger: Trigger, agent: Agent | None = None,
    ) -> tuple[list[Message], str | None]:
        """Run one agent turn and store its replies. Returns the replies and the id of a
        handoff the agent started during the turn, if any. `agent` replaces the desk's own
        agent for this turn (a sibling agent in the conversation it serves)."""
        async with self._locks[conversation_id]:
            return await self._agent_turn(conversation_id, trigger=trigger, agent=agent)

    async def _agent_turn(
        self, conversation_id: str, *, trigger: Trigger, agent: Agent | None = None,
    ) -> tuple[list[Message], str | None]:
        async with self.db.read() as session:
            conversation = await conversations.get(session, conversation_id)
            history = await conversations.recent_lines(session, conversation_id, AGENT_HISTORY)
            open_handoff = await self.handoffs.open_session(session, conversation_id)
        if open_handoff is not None and open_handoff.state == HandoffState.ACTIVE:
            return [], None  # a person has the conversation now (e.g. a new handoff began before a resume turn)
        ctx = self.tool_context(conversation)
        turn = Turn(
            conversation_id=conversation_id,
            subscriber_name=conversation.subscriber_name,
            subscriber_email=conversation.subscriber_email,
            history=[TurnMessage(m.role, m.text, m.author) for m in history],
            tools=self.tools.specs(ctx),
            call_tool=lambda name, args: self._call_tool(ctx, turn, name, args),
            trigger=trigger,
        )
        started = time.perf_counter()
        try:
            texts = await (agent or self.agent).respond(turn)
        except Exception:
            log.exception("agent_turn_failed", conversation_id=conversation_id)
            texts = [FALLBACK_REPLY]
        finally:
            self.metrics.agent_turn_seconds.observe(time.perf_counter() - started)
        replies = await self._store_replies(conversation_id, [t for t in texts if t and t.strip()])
        if turn.tool_calls:  # a tool may have told the subscriber something too (the desk's handoff notice)
            replies = await self._said_since(conversation_id, history[-1].id if history else 0)
        started_handoff = next(
            (result.get("handoff_session_id") for name, _, result in turn.tool_calls
             if name == "handoff_request" and result.get("ok")),
            None,
        )
        return replies, started_handoff

    async def _call_tool(self, ctx: ToolContext, turn: Turn, name: str, args: dict[str, Any]) -> dict[str, Any]:
        result = await self.tools.call(ctx, name, args)
        turn.tool_calls.append((name, args, result))
        return result

    async def _said_since(self, conversation_id: str, after: int) -> list[Message]:
        """What the subscriber was told after message `after`, in order."""
        async with self.db.read() as session:
            said = await conversations.messages_after(session, conversation_id, after, limit=AGENT_HISTORY)
        return [m for m in said if m.role == Role.AGENT]

    async def _store_replies(self, conversation_id: str, texts: list[str]) -> list[Message]:
        if not texts:
            return []
        now = self.clock.now()
        async with self.db.transaction() as session:
            replies = [
                await conversations.add_message(session, conversation_id, role=Role.AGENT, text=text, now=now)
                for text in texts
            ]
        return replies

    # ------------------------------------------------------------------ after-commit signals (wired by the desk)

    def after_failed_dispatch(self, orphaned: HeldMessagesOrphaned) -> None:
        """Messages held for a person whose dispatch then failed go to the agent after all."""
        cid = orphaned.handoff.conversation_id
        self.background.spawn(self.agent_turn(cid, trigger="message"), name=f"held:{cid}")

    def after_user_action(self, settled: UserActionSettled) -> None:
        """The agent reads how the user action ended and carries on."""
        cid = settled.conversation_id
        self.background.spawn(self.agent_turn(cid, trigger="user_action"), name=f"user-action:{cid}")

    def after_approval(self, settled: ApprovalSettled) -> None:
        """The agent reads how its approval request ended and tells the subscriber."""
        cid = settled.conversation_id
        self.background.spawn(self.agent_turn(cid, trigger="approval"), name=f"approval:{cid}")

    def after_release(self, released: HandoffReleased) -> None:
        """The agent picks the conversation up as soon as a handoff ends, instead of
        waiting for the subscriber to say something."""
        cid = released.handoff.conversation_id
        self.background.spawn(self.agent_turn(cid, trigger="resumed"), name=f"resume:{cid}")

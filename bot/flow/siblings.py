"""Sibling agents: a handoff that goes to another agent instead of a person.

A channel of kind `agent` carries its own agent config (`agent: {kind: openai, …}`). The
dispatch opens a *sibling conversation* that serves the handoff: its first message is the
brief (summary, expected action, context, `[EXPECTED RETURN SCHEMA]`, transcript), and the
sibling agent speaks first. During the bypass each subscriber message is stored in the
sibling conversation and the sibling answers it; its replies reach the subscriber as the
recipient's messages, exactly like a person's. The sibling ends the handoff with the
`handoff_release` tool (outcome, note, return values), which only it has in that
conversation; it never has `handoff_request`, so two agents cannot bounce a subscriber
between them. The idle timer applies as for people.

Everything is stored first: the sibling conversation is ordinary rows, so the owner inbox
and the audit trail show what the sibling was told and said.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Literal

import structlog
from pydantic import Field
from sqlalchemy import select
from sqlmodel import col

from bot.agents import Agent, build_agent
from bot.config import AgentConfig
from bot.domain import conversations
from bot.domain.rendering import Renderer
from bot.errors import DeskError
from bot.runtime.background import Background
from bot.runtime.clock import Clock
from bot.store.db import Database
from bot.store.models import Conversation, HandoffSession
from bot.store.vocabulary import Role
from channels import register_kind
from channels.base import (
    Capabilities,
    ChannelAdapter,
    ChannelConfig,
    ChannelError,
    Dispatch,
    HandoffMessage,
    Notice,
    Receipt,
    Relay,
)

if TYPE_CHECKING:
    from bot.domain.handoffs import Handoffs
    from bot.flow.router import Router

log = structlog.get_logger(__name__)


class AgentChannelConfig(ChannelConfig):
    kind: Literal["agent"] = "agent"
    agent: AgentConfig = Field(description="The sibling's own agent: {kind: openai, base_url, model, …} or {kind: rules}.")
    estimated_response: str = Field(default="right away", min_length=1, max_length=200)


Deliver = Callable[["AgentChannel", HandoffMessage], Awaitable[Receipt]]


@register_kind  # the "agent" kind: the registry in channels/ never names this layer
class AgentChannel(ChannelAdapter):
    """The channel side of a sibling agent. The work is done by `Siblings`, which the desk
    binds before start: a sibling needs the router and the conversation store, which a
    provider adapter never touches."""

    kind = "agent"
    config_model = AgentChannelConfig
    capabilities = Capabilities(threads=True, inbound=True)
    config: AgentChannelConfig

    def __init__(self, config: AgentChannelConfig) -> None:
        super().__init__(config)
        self.agent: Agent = build_agent(config.agent)
        self._deliver: Deliver | None = None

    def bind(self, deliver: Deliver) -> None:
        self._deliver = deliver

    async def start(self, ctx: object) -> None:
        if self._deliver is None:
            raise ChannelError("the sibling agent channel was not bound to a desk")

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        return await self._bound(dispatch)

    async def send_relay(self, relay: Relay) -> Receipt:
        return await self._bound(relay)

    async def send_notice(self, notice: Notice) -> Receipt:
        return await self._bound(notice)

    async def _bound(self, message: HandoffMessage) -> Receipt:
        assert self._deliver is not None, "start() checks the binding"
        return await self._deliver(self, message)

    async def stop(self) -> None:
        await self.agent.aclose()


class Siblings:
    def __init__(
        self, *, db: Database, clock: Clock, handoffs: Handoffs, router: Router, background: Background,
        renderer: Renderer,
    ) -> None:
        self.db, self.clock, self.handoffs, self.router = db, clock, handoffs, router
        self.background, self.renderer = background, renderer

    def bind(self, adapters: list[ChannelAdapter]) -> None:
        for adapter in adapters:
            if isinstance(adapter, AgentChannel):
                adapter.bind(self.deliver)

    async def deliver(self, channel: AgentChannel, message: HandoffMessage) -> Receipt:
        if isinstance(message, Dispatch):
            cid = await self._open(channel, message)
            return Receipt(message_id=cid, thread_key=cid, thread={"conversation_id": cid})
        cid = str(message.thread.get("conversation_id") or "")
        if not cid:
            raise ChannelError(f"handoff {message.handoff_id} has no sibling conversation")
        if isinstance(message, Relay):
            message_id = await self._store(cid, role=Role.SUBSCRIBER, text=message.body or message.text)
            self._answer(channel, cid, message.handoff_id)
        else:  # notices: what happened to the handoff, for the sibling's record
            message_id = await self._store(cid, role=Role.SYSTEM, text=message.text)
        return Receipt(message_id=f"{cid}:{message_id}", thread_key=cid)

    def on_activated(self, handoff: HandoffSession) -> None:
        """The sibling speaks first: it has the brief and may already know the answer."""
        channel = self.router.channels.get(handoff.channel_id)
        cid = (handoff.thread or {}).get("conversation_id")
        if isinstance(channel, AgentChannel) and cid:
            self._answer(channel, cid, handoff.id)

    # ------------------------------------------------------------------ internals

    async def _open(self, channel: AgentChannel, dispatch: Dispatch) -> str:
        """The sibling conversation for this handoff; a retried dispatch finds the one it made."""
        brief = dispatch.brief
        now = self.clock.now()
        async with self.db.transaction() as session:
            existing = await session.scalar(
                select(col(Conversation.id)).where(col(Conversation.serves_handoff_session_id) == brief.handoff_session_id)
            )
            if existing:
                return existing
            conversation = await conversations.create(
                session, now=now, name=brief.subscriber_name, email=brief.subscriber_email,
                serves_handoff_session_id=brief.handoff_session_id,
            )
            text = self.renderer.render("messages/sibling_brief.txt", brief=brief, label=channel.label).strip()
            await conversations.add_message(session, conversation.id, role=Role.SYSTEM, text=text, now=now)
            return conversation.id

    async def _store(self, cid: str, *, role: Role, text: str) -> int:
        async with self.db.transaction() as session:
            message = await conversations.add_message(session, cid, role=role, text=text, now=self.clock.now())
            return int(message.id or 0)

    def _answer(self, channel: AgentChannel, cid: str, sid: str) -> None:
        self.background.spawn(self._turn(channel, cid, sid), name=f"sibling:{cid}")

    async def _turn(self, channel: AgentChannel, cid: str, sid: str) -> None:
        """One sibling turn; its replies go to the subscriber as the recipient's words. Turns
        of one sibling conversation run one at a time (the router's lock), in order."""
        replies, _ = await self.router.agent_turn(cid, trigger="message", agent=channel.agent)
        for reply in replies:
            try:
                await self.handoffs.recipient_message(
                    sid, reply.text, author=channel.config.public_name, via=f"agent:{channel.id}")
            except DeskError as exc:
                # It released the handoff in this very turn: its last words stay in its own
                # conversation; the note it released with reaches the first agent instead.
                log.info("sibling_reply_after_release", handoff_session_id=sid, reason=exc.message)
                break

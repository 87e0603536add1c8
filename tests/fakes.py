"""A scriptable channel for failure paths the real owner inbox cannot produce.

It stands in for a *provider* (the far side of the adapter interface), never for the core
under test: the outbox, the state machine and the audit trail all run for real against it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from channels.base import (
    Capabilities,
    ChannelAdapter,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    InboundMessage,
    Outbound,
    Receipt,
    UncertainDeliveryError,
)


class ScriptedChannel(ChannelAdapter):
    kind = "scripted"
    config_model = ChannelConfig
    capabilities = Capabilities(threads=True, inbound=True)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self.sent: list[Outbound] = []
        self._script: deque[ChannelError | Exception] = deque()
        self.gate: asyncio.Event | None = None  # when set to an unset Event, send() waits on it
        self.entered = asyncio.Event()

    def fail_next(self, *errors: ChannelError | Exception) -> None:
        self._script.extend(errors)

    async def send(self, outbound: Outbound) -> Receipt:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self._script:
            raise self._script.popleft()
        self.sent.append(outbound)
        n = len(self.sent)
        return Receipt(message_id=f"msg-{n}", thread_key=f"thread-{outbound.handoff_session_id}", thread={"ts": n})

    def texts(self, purpose: str | None = None) -> list[str]:
        return [o.text for o in self.sent if purpose is None or o.purpose == purpose]


class ReconcilingChannel(ScriptedChannel):
    """A provider whose sends can time out after landing, and which can look a message up
    by its delivery key (as Slack can through message metadata)."""

    capabilities = Capabilities(threads=True, inbound=True, reconcile=True)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self.land_then_time_out = 0
        self.lookups: list[str | None] = []

    async def send(self, outbound: Outbound) -> Receipt:
        receipt = await super().send(outbound)
        if self.land_then_time_out:
            self.land_then_time_out -= 1
            raise UncertainDeliveryError("read timed out after sending")
        return receipt

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        self.lookups.append(outbound.delivery_key)
        for n, earlier in enumerate(self.sent, start=1):
            if earlier.delivery_key == outbound.delivery_key:
                return Receipt(message_id=f"msg-{n}", thread_key=f"thread-{outbound.handoff_session_id}", thread={"ts": n})
        return None


class LineChannel(ScriptedChannel):
    """A provider without threads (like a WhatsApp number): every handoff it carries lives
    in the recipient's one chat, so all receipts share one thread key."""

    capabilities = Capabilities(inbound=True)
    LINE = "line:+15550001111"

    async def send(self, outbound: Outbound) -> Receipt:
        receipt = await super().send(outbound)
        return receipt.model_copy(update={"thread_key": self.LINE, "thread": {}})

    def routing(self) -> list[str]:
        return [o.text for o in self.sent if o.notice == "routing"]


class FrontChannel(ScriptedChannel):
    """A provider that also serves subscribers (a front): the test hands it their messages
    with `from_subscriber`, as a poller would, and reads what it was asked to send to each
    chat."""

    capabilities = Capabilities(threads=True, inbound=True, front=True)

    async def start(self, ctx: ChannelContext) -> None:
        self.ctx = ctx

    async def from_subscriber(self, chat: str, text: str = "", **fields: object) -> None:
        await self.ctx.deliver_inbound(InboundMessage(sender="subscriber", thread_key=chat, text=text, **fields))

    def to_chat(self, chat: str) -> list[Outbound]:
        return [o for o in self.sent if o.purpose == "subscriber" and o.thread.get("chat") == chat]

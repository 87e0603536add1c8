"""A scriptable channel for failure paths the real owner inbox cannot produce, and the
context for a real adapter driven without a desk.

It stands in for a *provider* (the far side of the adapter interface), never for the core
under test: the outbox, the state machine and the audit trail all run for real against it.
"""

from __future__ import annotations

import asyncio
from collections import deque

from bot.domain.rendering import Renderer
from channels.base import (
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelAdapter,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    Dispatch,
    InboundMessage,
    Notice,
    Outbound,
    Receipt,
    Relay,
    SubscriberEvent,
    SubscriberText,
    ToSubscriber,
    UncertainDeliveryError,
)


async def _nothing_delivered(message: InboundMessage) -> None:
    raise AssertionError(f"nothing is delivered in this test, yet the adapter delivered {message!r}")


def standalone_context() -> ChannelContext:
    """What `start()` needs to run an adapter without a desk, in a test where nothing may come in."""
    return ChannelContext(public_url="http://desk.test", deliver_inbound=_nothing_delivered, render=Renderer().render)


class ScriptedChannel(ChannelAdapter):
    kind = "scripted"
    config_model = ChannelConfig
    capabilities = Capabilities(threads=True, inbound=True, approvals=True)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self.sent: list[Outbound] = []
        self._script: deque[ChannelError | Exception] = deque()
        self.gate: asyncio.Event | None = None  # when set to an unset Event, send() waits on it
        self.entered = asyncio.Event()

    def fail_next(self, *errors: ChannelError | Exception) -> None:
        self._script.extend(errors)

    # Every kind of message is recorded the same way: the provider is scripted, not rendered.
    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        return await self.record(dispatch)

    async def send_relay(self, relay: Relay) -> Receipt:
        return await self.record(relay)

    async def send_notice(self, notice: Notice) -> Receipt:
        return await self.record(notice)

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        return await self.record(prompt)

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        return await self.record(closed)

    async def send_to_subscriber(self, message: ToSubscriber) -> Receipt:
        return await self.record(message)

    async def record(self, outbound: Outbound) -> Receipt:
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        if self._script:
            raise self._script.popleft()
        self.sent.append(outbound)
        n = len(self.sent)
        return Receipt(message_id=f"msg-{n}", thread_key=f"thread-{outbound.stream}", thread={"ts": n})

    def texts(self, purpose: str | None = None) -> list[str]:
        return [o.text for o in self.sent if purpose is None or o.purpose == purpose]


class ReconcilingChannel(ScriptedChannel):
    """A provider whose sends can time out after landing, and which can look a message up
    by its delivery key (as Slack can through message metadata)."""

    capabilities = Capabilities(threads=True, inbound=True, reconcile=True, approvals=True)

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self.land_then_time_out = 0
        self.lookups: list[str | None] = []

    async def record(self, outbound: Outbound) -> Receipt:
        receipt = await super().record(outbound)
        if self.land_then_time_out:
            self.land_then_time_out -= 1
            raise UncertainDeliveryError("read timed out after sending")
        return receipt

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        self.lookups.append(outbound.delivery_key)
        for n, earlier in enumerate(self.sent, start=1):
            if earlier.delivery_key == outbound.delivery_key:
                return Receipt(message_id=f"msg-{n}", thread_key=f"thread-{outbound.stream}", thread={"ts": n})
        return None


class LineChannel(ScriptedChannel):
    """A provider without threads (like a WhatsApp number): every handoff it carries lives
    in the recipient's one chat, so all receipts share one thread key."""

    capabilities = Capabilities(inbound=True, approvals=True)
    LINE = "line:+15550001111"

    async def record(self, outbound: Outbound) -> Receipt:
        receipt = await super().record(outbound)
        return receipt.model_copy(update={"thread_key": self.LINE, "thread": {}})

    def routing(self) -> list[str]:
        return [o.text for o in self.sent if isinstance(o, Notice) and o.about == "routing"]


class FrontChannel(ScriptedChannel):
    """A provider that also serves subscribers (a front): the test hands it their messages
    with `from_subscriber`, as a poller would, and reads what it was asked to send to each
    chat."""

    capabilities = Capabilities(threads=True, inbound=True, front=True, approvals=True)

    async def start(self, ctx: ChannelContext) -> None:
        self.ctx = ctx

    async def from_subscriber(self, chat: str, text: str = "", *, event: type[SubscriberEvent] = SubscriberText,
                              **fields: object) -> None:
        """A subscriber's event in `chat`: their text by default, or `event` (ChatOpened, a
        UserActionAnswer) with its own fields."""
        if event is SubscriberText:
            fields["text"] = text
        await self.ctx.deliver_inbound(event(chat=chat, **fields))

    def to_chat(self, chat: str) -> list[ToSubscriber]:
        return [o for o in self.sent if isinstance(o, ToSubscriber) and o.chat == chat]


class DirectScriptedChannel(ScriptedChannel):
    """A scripted channel that can send to one person (`Capabilities.direct`): configured
    under a provider's kind (telegram, slack …), it is one of a person's contact methods."""

    capabilities = Capabilities(threads=True, inbound=True, direct=True)

"""The owner inbox channel: the handoff waits in the owner's web inbox (`/inbox`).

Nothing leaves the machine, so this channel works offline and is the default in
`config.example.yaml`. The session, its transcript and its messages already live in the
database the inbox reads, so `send` only has to return a receipt; the owner replies and
releases through the inbox pages, which feed the same core paths as any other channel.

It is an approval channel too (`approval_channels: [<its id>]`): the inbox lists pending
approvals from the database ("Waiting for approval") and decides them with its own
CSRF-protected buttons, so an approval prompt or its closing notice only needs a receipt.
"""

from __future__ import annotations

from typing import Literal

from channels.base import (
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelAdapter,
    ChannelConfig,
    Dispatch,
    Notice,
    Receipt,
    Relay,
)


class OwnerInboxConfig(ChannelConfig):
    kind: Literal["owner_inbox"] = "owner_inbox"


class OwnerInboxChannel(ChannelAdapter):
    kind = "owner_inbox"
    config_model = OwnerInboxConfig
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, approvals=True)

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        return Receipt(message_id=f"inbox:{dispatch.handoff_id}", thread_key=dispatch.handoff_id)

    async def send_relay(self, relay: Relay) -> Receipt:
        return Receipt(message_id=None, thread_key=relay.handoff_id)

    async def send_notice(self, notice: Notice) -> Receipt:
        return Receipt(message_id=None, thread_key=notice.handoff_id)

    # The inbox reads approvals from the database; there is no thread to reply in.
    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        return Receipt(message_id=f"inbox:{prompt.approval.approval_id}")

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        return Receipt(message_id=None)

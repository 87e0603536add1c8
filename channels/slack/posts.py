"""Our posts and how they are found again. Every chat.postMessage carries message metadata
that marks it ours and holds the outbox's delivery key (and the handoff or approval it is
about), so a post whose answer was lost is found by `find_sent` instead of repeated, and a
dispatch or an approval prompt this process has forgotten (a restart) is found in its
thread or in the channel's history. Receipts name the thread: `"{channel}:{thread_ts}"`,
where the channel is the room or, for a direct dispatch, the person's D… conversation."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import structlog

from channels.base import (
    Answer,
    ApprovalClosed,
    ApprovalPrompt,
    ChannelError,
    Dispatch,
    Notice,
    Outbound,
    PermanentChannelError,
    Receipt,
    Relay,
    ToSubscriber,
    TransientChannelError,
    UncertainDeliveryError,
)
from channels.slack.direct import SlackDirect
from channels.slack.mrkdwn import Blocks, fallback_text
from channels.slack.protocol import EVENT_TYPE, HISTORY_PAGE_SIZE, HISTORY_PAGES, REPLIES_PAGE_SIZE, REPLIES_PAGES

if TYPE_CHECKING:
    from slack_sdk.web.async_client import AsyncWebClient

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Posted:
    """A dispatch as posted: its notification text and its blocks, which chat.update replaces whole."""

    text: str
    blocks: Blocks


class SlackPosts(SlackDirect):
    """The posting half of SlackChannel: posts, receipts and finding posts again."""

    async def _post(self, message: Outbound, channel: str, thread_ts: str | None, blocks: Blocks) -> tuple[str, str]:
        """chat.postMessage with the delivery key in its metadata; the channel and ts posted to."""
        response = await self._call(
            "chat.postMessage",
            self._require_client().chat_postMessage(
                channel=channel,
                thread_ts=thread_ts,
                text=fallback_text(message.text),  # notifications and old clients
                blocks=blocks,
                metadata=self._metadata(message),
                # Nothing we post may turn text into mentions or previews by itself.
                parse="none", link_names=False, unfurl_links=False, unfurl_media=False,
            ),
            may_have_landed=True,
        )
        return str(response.get("channel") or channel), str(response["ts"])

    @staticmethod
    def _metadata(outbound: Outbound) -> dict[str, Any]:
        # "handoff" is the message's stream (the approval id for approvals), as it always was
        # in messages already posted: a closing notice after an upgrade still finds its prompt.
        payload = {"delivery_key": outbound.delivery_key or "", "handoff": outbound.stream}
        if isinstance(outbound, ApprovalPrompt):
            payload["notice"] = "approval"  # how a closing notice finds its prompt again
        elif isinstance(outbound, ApprovalClosed):
            payload["notice"] = "approval_closed"
        return {"event_type": EVENT_TYPE, "event_payload": payload}

    @staticmethod
    def _receipt(outbound: Outbound, channel: str, ts: str) -> Receipt:
        match outbound:
            case Dispatch():
                return Receipt(message_id=ts, thread_key=f"{channel}:{ts}", thread={"channel": channel, "thread_ts": ts})
            case Relay() | Notice():
                thread_ts = str(outbound.thread.get("thread_ts"))
                return Receipt(message_id=ts, thread_key=f"{channel}:{thread_ts}", thread=dict(outbound.thread))
        return Receipt(message_id=ts, thread={"channel": channel, "ts": ts})  # a top-level post of an approval

    async def _room(self, outbound: Outbound) -> str:
        """Where a top-level post goes: the channel's room, or for a direct dispatch the
        person's direct message with the app."""
        if isinstance(outbound, Dispatch) and outbound.direct is not None:
            return await self._direct_channel(outbound.direct)
        return self.config.channel

    def _thread_of(self, thread: dict[str, Any]) -> tuple[str, str]:
        thread_ts = thread.get("thread_ts")
        if not thread_ts:
            raise PermanentChannelError(
                "no Slack thread for this handoff", hint="the handoff has no Slack thread to post into (its dispatch receipt lacks thread_ts)"
            )
        return str(thread.get("channel") or self.config.channel), str(thread_ts)

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        """Look for an earlier attempt at `outbound` among the newest messages of the channel
        (dispatch) or of its thread (relay, notice), by the delivery key in its metadata."""
        if not outbound.delivery_key:
            return None
        client = self._require_client()
        channel: str | None
        match outbound:
            case Relay() | Notice():
                channel, thread_ts = self._thread_of(outbound.thread)
                method, pages = "conversations.replies", REPLIES_PAGES
                fetch = partial(client.conversations_replies, channel=channel, ts=thread_ts, limit=REPLIES_PAGE_SIZE)
            case ToSubscriber():
                return None  # Slack serves no front
            case Answer():
                return None  # a one-line answer to a link command: posting it twice is harmless, a lookup is not worth it
            case _:
                # Dispatches and approval prompts (and a closing notice posted because its prompt
                # was not found) are top-level messages of the room, or of the person's direct
                # message; a closing notice that edited its prompt is idempotent.
                method, pages, channel = "conversations.history", HISTORY_PAGES, None
                fetch = partial(client.conversations_history, limit=HISTORY_PAGE_SIZE)
        try:
            if channel is None:
                channel = await self._room(outbound)
                fetch = partial(fetch, channel=channel)
            found = await self._first_of_ours(method, fetch, pages, lambda payload: (
                # The handoff id too: delivery keys are only unique within one desk's database,
                # and two desks (staging, production) may post into the same channel.
                payload.get("delivery_key") == outbound.delivery_key and payload.get("handoff") == outbound.stream))
        except TransientChannelError as exc:
            # Still unknown whether the earlier attempt landed: keep it "uncertain", so the
            # next attempt looks again instead of posting blindly.
            raise UncertainDeliveryError(str(exc), retry_after=exc.retry_after, hint=exc.hint) from exc
        except ChannelError as exc:
            # We may not look (missing_scope, not_in_channel): better a possible double
            # post than a message given up while a person waits for it.
            log.warning("slack_lookup_unavailable", channel_id=self.id, hint=exc.hint)
            return None
        return None if found is None else self._receipt(outbound, channel, str(found["ts"]))

    async def _find_prompt(self, client: AsyncWebClient, approval_id: str) -> tuple[str, str, Blocks] | None:
        """The prompt of an approval among the channel's newest messages (after a restart),
        by the approval id in its metadata. A failed look is "not found", except a transient
        one, which the core retries (the edit is worth a retry, a duplicate text is not)."""
        fetch = partial(client.conversations_history, channel=self.config.channel, limit=HISTORY_PAGE_SIZE)
        try:
            found = await self._first_of_ours("conversations.history", fetch, HISTORY_PAGES, lambda payload: (
                payload.get("notice") == "approval" and payload.get("handoff") == approval_id))
        except TransientChannelError:
            raise
        except ChannelError as exc:
            log.warning("slack_lookup_unavailable", channel_id=self.id, hint=exc.hint)
            return None
        return None if found is None else (self.config.channel, str(found["ts"]), list(found.get("blocks") or []))

    async def _find_dispatch(self, client: AsyncWebClient, channel: str, ts: str) -> Posted | None:
        """A dispatch this process did not post (or has forgotten): the first message of its thread."""
        response = await self._call("conversations.replies", client.conversations_replies(channel=channel, ts=ts, limit=1))
        message = next(iter(response.get("messages") or []), None)
        if message is None or str(message.get("ts")) != ts or (self.bot_id is not None and message.get("bot_id") != self.bot_id):
            return None
        return Posted(str(message.get("text") or ""), list(message.get("blocks") or []))

    async def _first_of_ours(self, method: str, fetch: Callable[..., Any], pages: int,
                             wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """The first message, over at most `pages` pages of `fetch`, that we posted (by its
        metadata) with a metadata payload that is `wanted`; None when there is none."""
        cursor = None
        for _ in range(pages):
            response = await self._call(method, fetch(include_all_metadata=True, cursor=cursor))
            for message in response.get("messages") or []:
                meta = message.get("metadata") or {}
                ours = self.bot_id is None or message.get("bot_id") == self.bot_id
                if ours and meta.get("event_type") == EVENT_TYPE and wanted(meta.get("event_payload") or {}):
                    return dict(message)
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        return None

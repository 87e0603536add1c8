"""The Slack channel: each handoff is one message in a channel, and its thread is the conversation.

Support teams already live in Slack. A dispatch is a Block Kit message in the configured
channel (what happened, what to do, the fields to hand back, the recent transcript, a
"Fill return form" and a "Release" button); every relay and notice after it goes into that
message's thread, and every human reply in that thread goes back to the subscriber. Several
handoffs share one channel without crossing, because a reply is mapped to a handoff only by
its `thread_ts` (thread_key `"{channel}:{thread_ts}"`).

What it guards against:
- forged callbacks: every webhook is verified first (HMAC-SHA256 of the raw body with the
  signing secret, compared in constant time; timestamps more than 5 minutes off are
  refused), so a forged or replayed request is answered 401 and nothing is stored;
- pings and markup injection: text people wrote goes into `plain_text` objects, or is
  escaped (`&`, `<`, `>`) inside `mrkdwn` marked `verbatim`, so a summary saying
  `<!channel>` or `<@U123>` notifies nobody;
- echo loops: messages from bots, our own included, are never relayed;
- redeliveries: Slack resends an event it thinks was not acked; the event id is the
  dedupe key, so the core drops the copies (and we still answer 200);
- double posts: every post carries message metadata with the outbox's delivery key, so a
  post whose answer was lost (timeout) is found again by `find_sent` instead of repeated;
- slow acks: Slack wants an answer within 3 s, so `handle_webhook` makes no Slack call;
  display names come from a cache filled at start and, for newcomers, in the background.

Approval prompts are top-level posts of their own, in no handoff's thread: what
the assistant wants to run, for whom, how risky, the exact arguments as preformatted rich
text (literal: nothing in them can ping or link), the deadline, Approve / Deny / Always
allow buttons (action_id says which, value carries the approval id) and the decision page
as a fallback. A press arrives as a signed block_actions callback and becomes a `Decision`
(deduplicated on its trigger_id); the core decides whether it counts. When the approval
ends, the prompt is edited in place (chat.update): the buttons give way to the closing text.
The prompt is found again by the approval id, from memory or, after a restart, in the
channel's history (message metadata); only when it cannot be found or edited is the
closing text posted as a new message.

Like every adapter it never retries or sleeps: failures become the typed errors of
`channels.base` and the core's outbox decides what happens next.

Slack app setup: bot token scopes `chat:write`, `channels:history` (`groups:history` for a
private channel; also used to find lost posts) and, for readable names, `users:read`;
Event Subscriptions and Interactivity both with the Request URL
`{public_url}/webhooks/{channel id}`, bot events `message.channels` (`message.groups`);
then invite the bot to the channel.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import parse_qs

import structlog
from pydantic import Field, SecretStr, field_validator

from bot.runtime.bounded import BoundedDict
from bot.runtime.text import hang
from channels.base import (
    ApprovalBrief,
    ApprovalClosed,
    ApprovalPrompt,
    Capabilities,
    ChannelAdapter,
    ChannelAuthError,
    ChannelConfig,
    ChannelContext,
    ChannelError,
    ClaimPress,
    Decision,
    Dispatch,
    HandoffBrief,
    InboundMessage,
    MalformedWebhook,
    Notice,
    Outbound,
    PermanentChannelError,
    Receipt,
    RecipientText,
    Relay,
    ReleasePress,
    ToSubscriber,
    TranscriptLine,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
    json_object,
    pretty_arguments,
)
from channels.text import short_duration

if TYPE_CHECKING:
    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient

log = structlog.get_logger(__name__)

RELEASE_ACTION = "handoff_release"
CLAIM_ACTION = "handoff_claim"
FORM_ACTION = "handoff_form"
HANDOFF_ACTIONS: dict[str, type[ReleasePress | ClaimPress]] = {RELEASE_ACTION: ReleasePress, CLAIM_ACTION: ClaimPress}
TAKEN_BLOCK = "handoff_taken"  # the "taken" line that replaces a dispatch's buttons
# Approval buttons: the action says what was pressed, the value carries the approval id.
APPROVAL_ACTIONS = {"approval_approve": (True, False), "approval_deny": (False, False), "approval_always": (True, True)}
APPROVAL_BLOCK = "approval_actions"
EVENT_TYPE = "handoff_desk_message"  # message metadata type that marks our posts

# Slack's limits (https://docs.slack.dev/reference/block-kit): section text 3000 characters,
# header 150, a section field 2000; the top-level `text` is cut by Slack after 40,000, and
# as a notification fallback a few thousand is plenty.
SECTION_LIMIT = 3000
HEADER_LIMIT = 150
FIELD_LIMIT = 2000
FALLBACK_LIMIT = 4000
NAME_CACHE_LIMIT = 5000
# The exact arguments of an approval prompt: preformatted blocks of at most this many
# characters, and at most this many in all (the rest is announced, never silently dropped).
ARGUMENTS_BLOCK, ARGUMENTS_LIMIT = 2900, 8700
PROMPT_CACHE_LIMIT = 1000
DISPATCH_CACHE_LIMIT = 1000
# find_sent looks this far back: a retry follows its lost attempt within minutes, so the
# message is among the newest of the channel (or the newest replies of its thread).
HISTORY_PAGES, HISTORY_PAGE_SIZE = 3, 100
REPLIES_PAGES, REPLIES_PAGE_SIZE = 10, 200

AUTH_ERRORS = {"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired", "org_login_required"}
# Slack's own words for these two: "it's possible some aspect of the operation succeeded".
MAYBE_DONE_ERRORS = {"internal_error", "fatal_error"}
TRANSIENT_ERRORS = {"ratelimited", "rate_limited", "service_unavailable", "team_added_to_org"} | MAYBE_DONE_ERRORS
# Messages people edit or delete, joins, topic changes … are not replies to relay.
RELAYED_SUBTYPES = {None, "thread_broadcast", "file_share"}


# --------------------------------------------------------------------------- config


class SlackConfig(ChannelConfig):
    kind: Literal["slack"] = "slack"
    bot_token: SecretStr = Field(
        description="The app's Bot User OAuth Token (xoxb-…): api.slack.com/apps → your app → OAuth & Permissions.",
    )
    signing_secret: SecretStr = Field(
        description="The app's Signing Secret, which verifies Slack's callbacks: api.slack.com/apps → your app → "
        "Basic Information → App Credentials.",
    )
    channel: str = Field(description="Id of the channel handoffs are posted to, such as C0123ABCD.")
    api_base_url: str = Field(default="https://slack.com/api/", description="Slack Web API base URL.")
    request_timeout: float = Field(
        default=10.0, gt=0, le=60,
        description="Seconds to wait for one Slack call. Keep it below handoff.dispatch_timeout, so a lost answer "
        "is reported as an uncertain delivery (and reconciled) rather than as a plain timeout.",
    )

    @field_validator("bot_token")
    @classmethod
    def _bot_token(cls, value: SecretStr) -> SecretStr:
        # Never repeat the value: it is a secret even when it is the wrong one.
        if not value.get_secret_value().startswith("xoxb-"):
            raise ValueError("must be a bot token starting with xoxb- (OAuth & Permissions → Bot User OAuth Token)")
        return value

    @field_validator("signing_secret")
    @classmethod
    def _signing_secret(cls, value: SecretStr) -> SecretStr:
        if not value.get_secret_value().strip():
            raise ValueError("required")  # check-config adds the description: what it is, where to find it
        return value

    @field_validator("channel")
    @classmethod
    def _channel_id(cls, value: str) -> str:
        if not re.fullmatch(r"[CG][A-Z0-9]{2,}", value):
            raise ValueError("must be a channel id such as C0123ABCD (channel details → About), not a #name")
        return value

    @field_validator("api_base_url")
    @classmethod
    def _base_url(cls, value: str) -> str:
        if not value.startswith(("https://", "http://")):
            raise ValueError("must be an http(s) URL such as https://slack.com/api/")
        return value if value.endswith("/") else value + "/"


# --------------------------------------------------------------------------- text helpers


def escape(text: str) -> str:
    """Escape text for Slack mrkdwn: only &, < and > are special (they form links and
    mentions); everything else shows as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_escaped(text: str, limit: int) -> str:
    """Clip already-escaped mrkdwn without cutting an entity such as `&amp;` in half."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp > cut.rfind(";"):
        cut = cut[:amp]
    return cut + "…"


def fallback_text(text: str) -> str:
    """A message's top-level `text`, what notifications and old clients show: escaped, clipped."""
    return clip_escaped(escape(text), FALLBACK_LIMIT)


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


_ANGLE = re.compile(r"<([^<>]*)>")


def plain_from_mrkdwn(text: str, name_of: Any = None) -> str:
    """Slack sends message text as mrkdwn: `<@U123>`, `<#C1|general>`, `<https://x|label>`,
    and `&amp;` for `&`. The subscriber should read what the person saw, as plain text."""

    def readable(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target.startswith("@"):
            return "@" + (label or (name_of(target[1:]) if name_of else None) or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):  # !here, !channel, !subteam^S1, !date^…
            return label or "@" + target[1:].split("^", 1)[0]
        url = target.removeprefix("mailto:")
        return f"{label} ({url})" if label and label != url else url

    text = _ANGLE.sub(readable, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


# --------------------------------------------------------------------------- the adapter


class SlackChannel(ChannelAdapter):
    kind = "slack"
    config_model = SlackConfig
    capabilities = Capabilities(buttons=True, threads=True, inbound=True, webhook=True, reconcile=True, approvals=True,
                                edits=True)
    # The Events API posts JSON; interactivity (button clicks) posts a form with `payload=<json>`.
    webhook_media_types = frozenset({"application/json", "application/x-www-form-urlencoded"})
    config: SlackConfig

    def __init__(self, config: ChannelConfig) -> None:
        super().__init__(config)
        self._ctx: ChannelContext | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client: AsyncWebClient | None = None
        self._verifier: Any = None
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.bot_name: str | None = None
        self.team: str | None = None
        self._names: dict[str, str] = {}
        self._lookups: dict[str, asyncio.Task[None]] = {}
        # approval id -> (channel, ts, blocks) of its prompt, so the closing notice can edit
        # it without a lookup; after a restart it is found in the channel's history instead.
        self._prompts: BoundedDict[str, tuple[str, str, list[dict[str, Any]]]] = BoundedDict(PROMPT_CACHE_LIMIT)
        # "{channel}:{ts}" of a dispatch -> what it was posted with, so a notice about a claim
        # can edit it without a lookup; after a restart it is read back from its thread.
        self._dispatches: BoundedDict[str, _Posted] = BoundedDict(DISPATCH_CACHE_LIMIT)

    # ------------------------------------------------------------------ lifecycle

    def _connect(self) -> tuple[aiohttp.ClientSession, AsyncWebClient]:
        import aiohttp
        from slack_sdk.web.async_client import AsyncWebClient

        # One session for every call (keep-alive); its total timeout bounds each call.
        # No SDK retry handlers: the core's outbox is the one place that retries.
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.config.request_timeout))
        client = AsyncWebClient(
            token=self.config.bot_token.get_secret_value(), base_url=self.config.api_base_url,
            session=session, retry_handlers=[],
        )
        return session, client

    async def start(self, ctx: ChannelContext) -> None:
        from slack_sdk.signature import SignatureVerifier

        self._ctx = ctx
        self._verifier = SignatureVerifier(self.config.signing_secret.get_secret_value())
        self._session, self._client = self._connect()
        try:
            auth = await self._call("auth.test", self._client.auth_test())
        except ChannelError:
            await self.stop()
            raise
        self.bot_user_id, self.bot_id = auth.get("user_id"), auth.get("bot_id")
        self.bot_name, self.team = auth.get("user"), auth.get("team")
        await self._learn_names()

    async def probe(self) -> str:
        own = self._client is None  # `check-config --probe` calls this without start()
        session, client = self._connect() if own else (self._session, self._client)
        assert session is not None and client is not None
        try:
            auth = await self._call("auth.test", client.auth_test())
        finally:
            if own:
                await session.close()
        return f"bot @{auth.get('user')} in team {auth.get('team')} ({auth.get('team_id')}), posting to {self.config.channel}"

    async def stop(self) -> None:
        for task in self._lookups.values():
            task.cancel()
        await asyncio.gather(*self._lookups.values(), return_exceptions=True)
        self._lookups.clear()
        if self._session is not None:
            await self._session.close()
        self._session = self._client = None

    async def settle(self) -> None:
        """Wait for background name lookups (tests, and anyone who wants names now)."""
        while self._lookups:
            await asyncio.gather(*list(self._lookups.values()), return_exceptions=True)

    def _require_client(self) -> AsyncWebClient:
        if self._client is None:
            raise TransientChannelError("the Slack channel is not started", hint="the Slack channel is not running")
        return self._client

    # ------------------------------------------------------------------ sending

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        """A top-level post: its ts is the handoff's thread."""
        blocks = self._dispatch_blocks(dispatch.brief)
        channel, ts = await self._post(dispatch, self.config.channel, None, blocks)
        self._dispatches[f"{channel}:{ts}"] = _Posted(fallback_text(dispatch.text), blocks)
        return self._receipt(dispatch, channel, ts)

    async def send_relay(self, relay: Relay) -> Receipt:
        return await self._post_in_thread(relay, self._relay_blocks(relay))

    async def send_notice(self, notice: Notice) -> Receipt:
        """Into the handoff's thread. On a route, "taken" edits the dispatch instead (its
        buttons give way to the notice) and "claimed" also takes the Claim button away."""
        if notice.about == "taken":
            edited = await self._edit_dispatch(notice, _taken(self._notice_block(notice)))
            if edited is not None:
                return edited
        receipt = await self._post_in_thread(notice, [self._notice_block(notice)])
        if notice.about == "claimed":
            await self._edit_dispatch(notice, _without_claim)
        return receipt

    async def _edit_dispatch(self, notice: Notice, change: _BlockChange) -> Receipt | None:
        """chat.update of the handoff's dispatch with `change(blocks)`; None when the dispatch
        cannot be found or edited (deleted, too old), so the caller can post instead. A
        transient failure is raised (nothing was posted yet: the core retries the notice);
        a change that leaves the blocks as they are makes no call (a retry)."""
        client = self._require_client()
        channel, ts = self._thread_of(notice.thread)
        try:
            posted = self._dispatches.get(f"{channel}:{ts}") or await self._find_dispatch(client, channel, ts)
            if posted is None:
                return None
            blocks = change(posted.blocks)
            if blocks != posted.blocks:
                await self._call("chat.update", client.chat_update(
                    channel=channel, ts=ts, text=posted.text, blocks=blocks, parse="none", link_names=False))
                self._dispatches[f"{channel}:{ts}"] = _Posted(posted.text, blocks)
        except TransientChannelError:
            raise
        except ChannelError as exc:
            log.warning("slack_dispatch_not_updated", channel_id=self.id, handoff_id=notice.handoff_id, hint=exc.hint)
            return None
        return self._receipt(notice, channel, ts)

    async def _find_dispatch(self, client: AsyncWebClient, channel: str, ts: str) -> _Posted | None:
        """A dispatch this process did not post (or has forgotten): the first message of its thread."""
        response = await self._call("conversations.replies", client.conversations_replies(channel=channel, ts=ts, limit=1))
        message = next(iter(response.get("messages") or []), None)
        if message is None or str(message.get("ts")) != ts or (self.bot_id is not None and message.get("bot_id") != self.bot_id):
            return None
        return _Posted(str(message.get("text") or ""), list(message.get("blocks") or []))

    async def _post_in_thread(self, message: Relay | Notice, blocks: list[dict[str, Any]]) -> Receipt:
        channel, thread_ts = self._thread_of(message.thread)
        channel, ts = await self._post(message, channel, thread_ts, blocks)
        return self._receipt(message, channel, ts)

    async def _post(self, message: Outbound, channel: str, thread_ts: str | None, blocks: list[dict[str, Any]]) -> tuple[str, str]:
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

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        """Look for an earlier attempt at `outbound` among the newest messages of the channel
        (dispatch) or of its thread (relay, notice), by the delivery key in its metadata."""
        if not outbound.delivery_key:
            return None
        client = self._require_client()
        match outbound:
            case Relay() | Notice():
                channel, thread_ts = self._thread_of(outbound.thread)
                method, pages = "conversations.replies", REPLIES_PAGES
                fetch = partial(client.conversations_replies, channel=channel, ts=thread_ts, limit=REPLIES_PAGE_SIZE)
            case ToSubscriber():
                return None  # Slack serves no front
            case _:
                # Approval prompts (and a closing notice posted because its prompt was not found)
                # are top-level messages; a closing notice that edited its prompt is idempotent.
                method, pages, channel = "conversations.history", HISTORY_PAGES, self.config.channel
                fetch = partial(client.conversations_history, channel=channel, limit=HISTORY_PAGE_SIZE)
        cursor = None
        for _ in range(pages):
            try:
                response = await self._call(method, fetch(include_all_metadata=True, cursor=cursor))
            except TransientChannelError as exc:
                # Still unknown whether the earlier attempt landed: keep it "uncertain", so the
                # next attempt looks again instead of posting blindly.
                raise UncertainDeliveryError(str(exc), retry_after=exc.retry_after, hint=exc.hint) from exc
            except ChannelError as exc:
                # We may not look (missing_scope, not_in_channel): better a possible double
                # post than a message given up while a person waits for it.
                log.warning("slack_lookup_unavailable", channel_id=self.id, hint=exc.hint)
                return None
            for message in response.get("messages") or []:
                if self._is_attempt_of(message, outbound):
                    return self._receipt(outbound, channel, str(message["ts"]))
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        return None

    def _is_attempt_of(self, message: dict[str, Any], outbound: Outbound) -> bool:
        meta = message.get("metadata") or {}
        payload = meta.get("event_payload") or {}
        ours = self.bot_id is None or message.get("bot_id") == self.bot_id
        # The handoff id too: delivery keys are only unique within one desk's database,
        # and two desks (staging, production) may post into the same channel.
        return (
            ours and meta.get("event_type") == EVENT_TYPE
            and payload.get("delivery_key") == outbound.delivery_key
            and payload.get("handoff") == outbound.stream
        )

    def _thread_of(self, thread: dict[str, Any]) -> tuple[str, str]:
        thread_ts = thread.get("thread_ts")
        if not thread_ts:
            raise PermanentChannelError(
                "no Slack thread for this handoff", hint="the handoff has no Slack thread to post into (its dispatch receipt lacks thread_ts)"
            )
        return str(thread.get("channel") or self.config.channel), str(thread_ts)

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

    # ------------------------------------------------------------------ blocks

    def _render(self, name: str, **context: Any) -> str:
        assert self._ctx is not None
        return self._ctx.render(f"messages/slack/{name}", **context).strip()

    def _dispatch_blocks(self, brief: HandoffBrief) -> list[dict[str, Any]]:
        who = brief.subscriber_name or "A subscriber"
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": plain(clip(self._render("header.txt", brief=brief, who=who), HEADER_LIMIT))},
            *([mrkdwn_block(f"_{escape(brief.outside_hours)}_")] if brief.outside_hours else []),
            mrkdwn_section("Summary", brief.summary),
            mrkdwn_section("What to do", brief.expected_action),
        ]
        fields = [("Subscriber", who if not brief.subscriber_email else f"{who} ({brief.subscriber_email})"),
                  ("Urgency", brief.urgency)]
        if brief.contact_back_email:
            fields.append(("Contact back", brief.contact_back_email))
        blocks.append({"type": "section", "fields": [
            {"type": "mrkdwn", "text": clip_escaped(f"*{label}*\n{escape(value)}", FIELD_LIMIT), "verbatim": True}
            for label, value in fields
        ]})
        if brief.extra_context:
            lines = [f"• *{escape(key)}*: {escape(value)}" for key, value in brief.extra_context.items()]
            blocks.append(mrkdwn_block("*Context*\n" + "\n".join(lines)))
        if brief.expected_return:
            lines = [f"• {escape(line)}" for line in brief.field_lines]
            blocks.append(mrkdwn_block("*Please hand back*\n" + "\n".join(lines)))
        if brief.transcript:
            text, omitted = transcript_text(brief.transcript)
            blocks.append({"type": "context", "elements": [
                {"type": "mrkdwn", "text": self._render("transcript_label.txt", omitted=omitted), "verbatim": True}
            ]})
            blocks.append({"type": "section", "text": plain(text)})
        blocks.append({"type": "actions", "block_id": "handoff_actions", "elements": self._buttons(brief)})
        help_text = self._render("help.txt", who=escape(who), idle=short_duration(brief.idle_timeout_seconds))
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": help_text, "verbatim": True}]})
        return blocks

    @staticmethod
    def _buttons(brief: HandoffBrief) -> list[dict[str, Any]]:
        buttons: list[dict[str, Any]] = []
        if brief.claimable:
            buttons.append({"type": "button", "action_id": CLAIM_ACTION, "text": plain("I'm on it"),
                            "value": brief.handoff_session_id})
        if brief.form_url:
            buttons.append({"type": "button", "action_id": FORM_ACTION, "text": plain("Fill return form"),
                            "url": brief.form_url, "style": "primary"})
        buttons.append({
            "type": "button", "action_id": RELEASE_ACTION, "text": plain("Release"), "value": brief.handoff_session_id,
            "confirm": {
                "title": plain("Release this handoff?"),
                "text": plain("The assistant takes the conversation back. Use the return form to hand back data."),
                "confirm": plain("Release"), "deny": plain("Cancel"),
            },
        })
        return buttons

    def _relay_blocks(self, relay: Relay) -> list[dict[str, Any]]:
        label = self._render("relay.txt", author=escape(relay.author or "Subscriber"))
        # The words themselves as plain_text: shown exactly as typed, never parsed.
        return [{"type": "context", "elements": [{"type": "mrkdwn", "text": label, "verbatim": True}]}] + [
            {"type": "section", "text": plain(part)} for part in chunks(relay.body, SECTION_LIMIT)
        ]

    def _notice_block(self, notice: Notice) -> dict[str, Any]:
        text = escape(notice.text.strip())
        # Notices are the desk's own words; make our links (a fresh return form) clickable.
        if self._ctx is not None and self._ctx.public_url:
            base = re.escape(escape(self._ctx.public_url.rstrip("/")))
            text = re.sub(rf"({base}/\S+)", r"<\1>", text)
        return mrkdwn_block(text)

    # ------------------------------------------------------------------ approvals

    async def send_approval_prompt(self, prompt: ApprovalPrompt) -> Receipt:
        """An approval prompt: a new top-level post (it belongs to no handoff thread)."""
        blocks = self._prompt_blocks(prompt.approval)
        channel, ts = await self._post(prompt, self.config.channel, None, blocks)
        self._remember_prompt(prompt.approval.approval_id, channel, ts, blocks)
        return self._receipt(prompt, channel, ts)

    async def send_approval_closed(self, closed: ApprovalClosed) -> Receipt:
        """How an approval ended: the prompt is edited in place (its buttons replaced by the
        closing text), so nobody presses a dead button. When the prompt cannot be found or
        edited any more (deleted, older than the history we look through), the closing
        text is posted as a new message instead."""
        client, approval_id, text = self._require_client(), closed.approval.approval_id, closed.text.strip()
        prompt = self._prompts.get(approval_id) or await self._find_prompt(client, approval_id)
        if prompt is not None:
            channel, ts, blocks = prompt
            kept = [b for b in blocks if b.get("type") != "actions" and b.get("block_id") != "approval_help"]
            kept.append({"type": "section", "block_id": "approval_closed", "text": plain(clip(text, SECTION_LIMIT))})
            try:
                await self._call("chat.update", client.chat_update(
                    channel=channel, ts=ts, text=fallback_text(text), blocks=kept,
                    parse="none", link_names=False,
                ))
            except TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except ChannelError as exc:  # deleted, too old to edit …: say it in a new message
                log.warning("slack_approval_prompt_not_updated", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            else:
                self._prompts.pop(approval_id, None)
                return self._receipt(closed, channel, ts)
        channel, ts = await self._post(closed, self.config.channel, None, [{"type": "section", "text": plain(clip(text, SECTION_LIMIT))}])
        return self._receipt(closed, channel, ts)

    async def _find_prompt(self, client: AsyncWebClient, approval_id: str) -> tuple[str, str, list[dict[str, Any]]] | None:
        """The prompt of an approval among the channel's newest messages (after a restart),
        by the approval id in its metadata. A failed look is "not found", except a transient
        one, which the core retries (the edit is worth a retry, a duplicate text is not)."""
        cursor = None
        for _ in range(HISTORY_PAGES):
            try:
                response = await self._call("conversations.history", client.conversations_history(
                    channel=self.config.channel, limit=HISTORY_PAGE_SIZE, include_all_metadata=True, cursor=cursor))
            except TransientChannelError:
                raise
            except ChannelError as exc:
                log.warning("slack_lookup_unavailable", channel_id=self.id, hint=exc.hint)
                return None
            for message in response.get("messages") or []:
                meta = message.get("metadata") or {}
                payload = meta.get("event_payload") or {}
                ours = self.bot_id is None or message.get("bot_id") == self.bot_id
                if (ours and meta.get("event_type") == EVENT_TYPE and payload.get("notice") == "approval"
                        and payload.get("handoff") == approval_id):
                    return self.config.channel, str(message["ts"]), list(message.get("blocks") or [])
            cursor = (response.get("response_metadata") or {}).get("next_cursor")
            if not cursor:
                break
        return None

    def _remember_prompt(self, approval_id: str, channel: str, ts: str, blocks: list[dict[str, Any]]) -> None:
        self._prompts[approval_id] = (channel, ts, blocks)

    def _prompt_blocks(self, approval: ApprovalBrief) -> list[dict[str, Any]]:
        """Readable on a phone: what, for whom, how risky, the exact arguments, until when,
        and the buttons. People's words (subscriber name, arguments) are plain_text or
        preformatted rich text, never mrkdwn, so nothing in them can ping or link."""
        deadline = approval.expires_at[:16].replace("T", " ")
        blocks: list[dict[str, Any]] = [
            {"type": "header", "text": plain(clip(self._render("approval_header.txt", approval=approval), HEADER_LIMIT))},
            {"type": "section", "text": plain(clip(self._render("approval_question.txt", approval=approval), SECTION_LIMIT))},
            {"type": "section", "fields": [plain(f"Risk: {approval.risk}"), plain(f"Answer by: {deadline} UTC")]},
        ]
        if approval.two_people_line:
            blocks.append({"type": "section", "text": plain(approval.two_people_line)})
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": "*Exactly these arguments:*", "verbatim": True}]})
        shown, left_out = pretty_arguments(approval.arguments, ARGUMENTS_LIMIT)
        for part in chunks(shown, ARGUMENTS_BLOCK):
            blocks.append({"type": "rich_text", "elements": [
                {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": part}]}]})
        if left_out:
            blocks.append({"type": "context", "elements": [plain(
                f"[… cut here: {left_out} more characters. The decision page shows every argument.]")]})
        buttons: list[dict[str, Any]] = [
            {"type": "button", "action_id": "approval_approve", "text": plain("Approve"), "style": "primary",
             "value": approval.approval_id},
            {"type": "button", "action_id": "approval_deny", "text": plain("Deny"), "style": "danger",
             "value": approval.approval_id},
        ]
        if approval.allow_always:
            buttons.append({
                "type": "button", "action_id": "approval_always", "text": plain("Always allow"), "value": approval.approval_id,
                "confirm": {
                    "title": plain("Always allow?"),
                    "text": plain(clip(f"Approve this call, and let the assistant run {approval.action_id} with the same "
                                       "argument names for the rest of this conversation without asking.", 300)),
                    "confirm": plain("Always allow"), "deny": plain("Cancel"),
                },
            })
        blocks.append({"type": "actions", "block_id": APPROVAL_BLOCK, "elements": buttons})
        help_text = self._render("approval_help.txt", deadline=escape(deadline), url=escape(approval.decision_url),
                                 approval_id=escape(approval.approval_id), two_people=approval.approvals_required > 1)
        blocks.append({"type": "context", "block_id": "approval_help",
                       "elements": [{"type": "mrkdwn", "text": help_text, "verbatim": True}]})
        return blocks

    # ------------------------------------------------------------------ inbound

    async def handle_webhook(self, request: WebhookRequest) -> WebhookReply:
        headers = {k.lower(): v for k, v in request.headers.items()}
        if not self._signed_by_slack(request.body, headers):
            log.warning("slack_webhook_rejected", channel_id=self.id, reason="bad or stale signature")
            return WebhookReply(status=401, body=b"invalid signature")
        if headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            # Interactivity (button clicks): form-encoded `payload=<json>`.
            try:
                form = parse_qs(request.body.decode(), keep_blank_values=True)
            except UnicodeDecodeError:
                raise MalformedWebhook("the form is not UTF-8") from None
            data = json_object((form.get("payload") or ["{}"])[0], "the payload field")
        else:
            data = json_object(request.body or b"{}")

        kind = data.get("type")
        if kind == "url_verification":
            body = json.dumps({"challenge": str(data.get("challenge", ""))}).encode()
            return WebhookReply(body=body, content_type="application/json")
        message = None
        if kind == "event_callback":
            message = self._from_event(data)
        elif kind == "block_actions":
            message = self._from_action(data)
        # Everything else is acknowledged and ignored; a retry (X-Slack-Retry-Num) is parsed
        # like the original and dropped by the core's dedup on the same key.
        return WebhookReply(messages=[message] if message else [])

    def _signed_by_slack(self, body: bytes, headers: dict[str, str]) -> bool:
        timestamp = headers.get("x-slack-request-timestamp", "")
        signature = headers.get("x-slack-signature", "")
        if self._verifier is None or not timestamp.isdigit() or not signature or not signature.isascii():
            return False  # (a non-ASCII signature would make compare_digest raise, not refuse)
        # slack_sdk's verifier: "v0=" + HMAC-SHA256(secret, "v0:{ts}:" + raw body), compared
        # with hmac.compare_digest; a timestamp more than 5 minutes off is refused (replays).
        return bool(self._verifier.is_valid(body=body, timestamp=timestamp, signature=signature))

    def _from_event(self, envelope: dict[str, Any]) -> InboundMessage | None:
        event = envelope.get("event") or {}
        if event.get("type") != "message" or event.get("channel") != self.config.channel:
            return None
        thread_ts, ts = event.get("thread_ts"), event.get("ts")
        if not thread_ts or thread_ts == ts:
            return None  # not a reply in a thread: no handoff to map it to
        if event.get("subtype") not in RELAYED_SUBTYPES:
            return None  # edits, deletions, joins, bot_message …
        user = event.get("user")
        if event.get("bot_id") or not user or user == self.bot_user_id:
            return None  # bots, our own posts included, are never relayed
        profile = event.get("user_profile") or {}
        if profile.get("display_name") or profile.get("real_name"):
            self._remember(user, profile.get("display_name") or profile.get("real_name"))
        text = plain_from_mrkdwn(event.get("text") or "", self._names.get).strip()
        files = [f.get("name") or f.get("title") or "file" for f in event.get("files") or []]
        if files:  # files are not forwarded; say so rather than drop the message silently
            text = (text + "\n" if text else "") + f"[sent {len(files)} file(s) in Slack: {', '.join(files)}]"
        if not text:
            return None
        event_id = envelope.get("event_id")
        return RecipientText(
            thread_key=f"{self.config.channel}:{thread_ts}", text=text, author=self._author(user), user_id=user,
            dedupe_key=f"event:{event_id}" if event_id else f"message:{self.config.channel}:{ts}",
        )

    def _from_action(self, payload: dict[str, Any]) -> InboundMessage | None:
        pressed = next((a for a in payload.get("actions") or [] if a.get("action_id") in APPROVAL_ACTIONS), None)
        if pressed is not None:
            return self._from_approval_press(payload, pressed)
        action = next((a for a in payload.get("actions") or [] if a.get("action_id") in HANDOFF_ACTIONS), None)
        if action is None:
            return None  # the form button only opens a link; nothing to do here
        channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
        message = payload.get("message") or {}
        thread_ts = message.get("thread_ts") or message.get("ts") or (payload.get("container") or {}).get("message_ts")
        user = payload.get("user") or {}
        if channel != self.config.channel or not thread_ts or not user.get("id"):
            return None
        key = payload.get("trigger_id") or action.get("action_ts") or f"{thread_ts}:{user['id']}"
        # Release or Claim: either names the handoff by the thread the button is in.
        return HANDOFF_ACTIONS[action["action_id"]](
            thread_key=f"{channel}:{thread_ts}",
            author=self._author(user["id"], fallback=user.get("name") or user.get("username")),
            user_id=user["id"], dedupe_key=f"action:{key}",
        )

    def _from_approval_press(self, payload: dict[str, Any], action: dict[str, Any]) -> InboundMessage | None:
        """Approve / Deny / Always allow on a prompt in our channel; the core decides whether
        it counts (pending, this channel was asked, first answer)."""
        container = payload.get("container") or {}
        channel = (payload.get("channel") or {}).get("id") or container.get("channel_id")
        user = payload.get("user") or {}
        approval_id = str(action.get("value") or "")
        if channel != self.config.channel or not user.get("id") or not approval_id:
            return None
        approve, always = APPROVAL_ACTIONS[action["action_id"]]
        # One press is one interaction: its trigger_id (else the action's own timestamp on
        # that message) is the dedupe key, so a redelivered callback decides nothing twice.
        key = payload.get("trigger_id") or f"{container.get('message_ts')}:{action.get('action_ts')}:{user['id']}"
        return Decision(
            approval_id=approval_id, approve=approve, always_allow=always,
            author=self._author(user["id"], fallback=user.get("name") or user.get("username")),
            user_id=user["id"], dedupe_key=f"action:{key}",
        )

    # ------------------------------------------------------------------ names

    def _author(self, user_id: str, fallback: str | None = None) -> str:
        """A readable name without waiting for Slack: the cache, else what the payload
        says, else the user id, with a lookup started so the next message has the name."""
        name = self._names.get(user_id)
        if name:
            return name
        if self._client is not None and user_id not in self._lookups:
            task = asyncio.create_task(self._look_up(user_id), name=f"slack-user:{user_id}")
            self._lookups[user_id] = task
            task.add_done_callback(lambda _t: self._lookups.pop(user_id, None))
        return fallback or user_id

    async def _look_up(self, user_id: str) -> None:
        try:
            response = await self._call("users.info", self._require_client().users_info(user=user_id))
        except ChannelError as exc:
            log.info("slack_user_lookup_failed", channel_id=self.id, user=user_id, hint=exc.hint)
            return
        self._remember(user_id, _display_name(response.get("user") or {}))

    async def _learn_names(self) -> None:
        """One page of users.list at start, so the first reply already carries a name.
        Optional: without the users:read scope names fall back to user ids."""
        assert self._client is not None
        try:
            response = await self._call("users.list", self._client.users_list(limit=200))
        except ChannelError as exc:
            log.warning("slack_names_unavailable", channel_id=self.id, hint=exc.hint)
            return
        for member in response.get("members") or []:
            if not member.get("is_bot") and not member.get("deleted") and member.get("id"):
                self._remember(member["id"], _display_name(member))

    def _remember(self, user_id: str, name: str | None) -> None:
        if not name:
            return
        if len(self._names) >= NAME_CACHE_LIMIT:
            self._names.pop(next(iter(self._names)))  # oldest first
        self._names[user_id] = " ".join(name.split())[:80]

    # ------------------------------------------------------------------ errors

    async def _call(self, method: str, call: Any, *, may_have_landed: bool = False) -> Any:
        """Await one SDK call and turn every failure into a typed channel error.
        `may_have_landed`: the call writes, so an answer lost after sending is uncertain."""
        import aiohttp
        from slack_sdk.errors import SlackApiError

        try:
            return await call
        except SlackApiError as exc:
            raise self._api_error(method, exc, may_have_landed) from exc
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as exc:
            # Never connected: nothing was sent, a retry is safe.
            raise TransientChannelError(
                f"{method}: could not connect to Slack ({type(exc).__name__})",
                hint=f"could not reach the Slack API at {self.config.api_base_url}",
            ) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            what = f"{method}: no complete answer from Slack ({type(exc).__name__})"
            if may_have_landed:
                raise UncertainDeliveryError(
                    what, hint="Slack did not answer in time; the message may have been posted (checked before a retry)"
                ) from exc
            raise TransientChannelError(what, hint="Slack did not answer in time") from exc

    def _api_error(self, method: str, exc: Any, may_have_landed: bool) -> ChannelError:
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        data = response.data if isinstance(getattr(response, "data", None), dict) else {}
        error = str(data.get("error") or f"HTTP {status}")
        message = f"{method}: {error}"
        channel = self.config.channel
        if status == 429 or error in ("ratelimited", "rate_limited"):
            return TransientChannelError(
                message, retry_after=_retry_after(response), hint=f"Slack rate-limited {method}; retrying after the wait it asked for"
            )
        if status >= 500 or error in TRANSIENT_ERRORS:
            if may_have_landed and (status >= 500 or error in MAYBE_DONE_ERRORS):
                return UncertainDeliveryError(message, hint=f"Slack failed ({error}); the message may have been posted (checked before a retry)")
            return TransientChannelError(message, hint=f"Slack is having trouble ({error})")
        if error in AUTH_ERRORS:
            return ChannelAuthError(
                message, hint=f"Slack refused the bot token ({error}): check bot_token of channel {self.id} "
                "and that the app is still installed in the workspace",
            )
        hints = {
            "channel_not_found": f"Slack has no channel {channel} the bot can see: check `channel` (an id such as "
                                 "C0123ABCD) and, for a private channel, invite the bot",
            "not_in_channel": f"the bot is not a member of {channel}: invite it (type /invite @{self.bot_name or 'the-bot'} there)",
            "is_archived": f"channel {channel} is archived",
            "msg_too_long": "the message is too long for Slack (msg_too_long)",
            "invalid_blocks": "Slack rejected the message layout (invalid_blocks)",
            "invalid_blocks_format": "Slack rejected the message layout (invalid_blocks_format)",
            "missing_scope": f"the bot token lacks the scope {data.get('needed') or '?'} for {method}: add it under "
                             "OAuth & Permissions and reinstall the app",
            "thread_not_found": "the handoff's Slack thread no longer exists",
            "restricted_action": f"the workspace does not let this bot post in {channel}",
            "invalid_metadata_format": "Slack rejected the message metadata (invalid_metadata_format)",
        }
        return PermanentChannelError(message, hint=hints.get(error, f"Slack refused {method} ({error})"))


# --------------------------------------------------------------------------- block helpers


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text or " ", "emoji": True}


def mrkdwn_block(text: str) -> dict[str, Any]:
    """`text` must already be escaped; `verbatim` stops Slack from linking names and URLs."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip_escaped(text, SECTION_LIMIT), "verbatim": True}}


def mrkdwn_section(label: str, value: str) -> dict[str, Any]:
    return mrkdwn_block(f"*{label}*\n{escape(value)}")


def transcript_text(lines: list[TranscriptLine], limit: int = SECTION_LIMIT) -> tuple[str, int]:
    """The newest transcript lines that fit one section, and how many older ones were left out."""
    rendered = [f"{line.author or line.role}: {hang(line.text)}" for line in lines]
    kept: list[str] = []
    size = 0
    for line in reversed(rendered):
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:  # the newest message alone is longer than a section
        kept = [clip(rendered[-1], limit)]
    return "\n".join(reversed(kept)), len(rendered) - len(kept)




@dataclass(frozen=True)
class _Posted:
    """A dispatch as posted: its notification text and its blocks, which chat.update replaces whole."""

    text: str
    blocks: list[dict[str, Any]]


_BlockChange = Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
"""How a notice changes a dispatch's blocks."""


def _without_claim(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The dispatch once its thread has claimed the handoff: the Claim button goes, the rest stays."""
    kept: list[dict[str, Any]] = []
    for block in blocks:
        if block.get("type") == "actions":
            elements = [e for e in block.get("elements") or [] if e.get("action_id") != CLAIM_ACTION]
            if not elements:
                continue
            block = {**block, "elements": elements}
        kept.append(block)
    return kept


def _taken(notice: dict[str, Any]) -> _BlockChange:
    """The dispatch once someone elsewhere took the handoff: no buttons, and the notice
    at the end (once: a retry replaces its own line)."""
    def change(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        kept = [b for b in blocks if b.get("type") != "actions" and b.get("block_id") != TAKEN_BLOCK]
        return [*kept, {**notice, "block_id": TAKEN_BLOCK}]
    return change


def _display_name(user: dict[str, Any]) -> str | None:
    profile = user.get("profile") or {}
    return profile.get("display_name") or profile.get("real_name") or user.get("real_name") or user.get("name")


def _retry_after(response: Any) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After")))
    except (AttributeError, TypeError, ValueError):
        return None



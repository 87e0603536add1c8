"""SlackChannel: the adapter the desk runs. It connects (auth.test, the names cache),
posts each outbound message as Block Kit into the channel or a handoff's thread, and edits
a dispatch or an approval prompt in place when a notice says so; the Web API client, the
posts and their lookups, the layouts, the names and the webhooks are its bases in the
modules beside it."""

from __future__ import annotations

import structlog

from bot.runtime.bounded import BoundedDict
from channels import base
from channels.slack.blocks import BlockChange, SlackBlocks, closed_prompt, taken, without_claim
from channels.slack.config import SlackConfig
from channels.slack.mrkdwn import Blocks, clip, escape, fallback_text, mrkdwn_block, plain
from channels.slack.posts import Posted, SlackPosts
from channels.slack.protocol import CAPABILITIES, DIRECT_CACHE_LIMIT, DISPATCH_CACHE_LIMIT, PROMPT_CACHE_LIMIT, SECTION_LIMIT
from channels.slack.webhooks import SlackWebhooks

log = structlog.get_logger(__name__)


class SlackChannel(SlackWebhooks, SlackPosts, SlackBlocks):
    """The Slack adapter (channels/slack/__init__.py describes the channel)."""

    kind = "slack"
    config_model = SlackConfig
    capabilities = CAPABILITIES
    # The Events API posts JSON; interactivity (button clicks) posts a form with `payload=<json>`.
    webhook_media_types = frozenset({"application/json", "application/x-www-form-urlencoded"})
    config: SlackConfig

    def __init__(self, config: base.ChannelConfig) -> None:
        super().__init__(config)
        # Declared by the halves that use them (blocks, transport, webhooks, names).
        self._ctx = self._session = self._client = self._verifier = None
        self.bot_user_id = self.bot_id = self.bot_name = self.team = None
        self._names = {}
        self._lookups = {}
        # approval id -> (channel, ts, blocks) of its prompt, so the closing notice can edit
        # it without a lookup; after a restart it is found in the channel's history instead.
        self._prompts: BoundedDict[str, tuple[str, str, Blocks]] = BoundedDict(PROMPT_CACHE_LIMIT)
        # "{channel}:{ts}" of a dispatch -> what it was posted with, so a notice about a claim
        # can edit it without a lookup; after a restart it is read back from its thread.
        self._dispatches: BoundedDict[str, Posted] = BoundedDict(DISPATCH_CACHE_LIMIT)
        self._directs = BoundedDict(DIRECT_CACHE_LIMIT)

    # ------------------------------------------------------------------ lifecycle

    async def start(self, ctx: base.ChannelContext) -> None:
        from slack_sdk.signature import SignatureVerifier

        self._ctx = ctx
        self._verifier = SignatureVerifier(self.config.signing_secret.get_secret_value())
        self._session, self._client = self._connect()
        try:
            auth = await self._call("auth.test", self._client.auth_test())
        except base.ChannelError:
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
        await self._stop_lookups()
        if self._session is not None:
            await self._session.close()
        self._session = self._client = None

    # ------------------------------------------------------------------ handoffs

    async def send_dispatch(self, dispatch: base.Dispatch) -> base.Receipt:
        """A top-level post in the room or, to one person (`dispatch.direct`), in their
        direct message with the app: its ts is the handoff's thread there."""
        blocks = self._dispatch_blocks(dispatch.brief)
        channel, ts = await self._post(dispatch, await self._room(dispatch), None, blocks)
        self._dispatches[f"{channel}:{ts}"] = Posted(fallback_text(dispatch.text), blocks)
        return self._receipt(dispatch, channel, ts)

    async def send_relay(self, relay: base.Relay) -> base.Receipt:
        return await self._post_in_thread(relay, self._relay_blocks(relay))

    async def send_notice(self, notice: base.Notice) -> base.Receipt:
        """Into the handoff's thread. On a route, "taken" edits the dispatch instead (its
        buttons give way to the notice) and "claimed" also takes the Claim button away."""
        if notice.about == "taken":
            edited = await self._edit_dispatch(notice, taken(self._notice_block(notice)))
            if edited is not None:
                return edited
        receipt = await self._post_in_thread(notice, [self._notice_block(notice)])
        if notice.about == "claimed":
            await self._edit_dispatch(notice, without_claim)
        return receipt

    async def _edit_dispatch(self, notice: base.Notice, change: BlockChange) -> base.Receipt | None:
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
                self._dispatches[f"{channel}:{ts}"] = Posted(posted.text, blocks)
        except base.TransientChannelError:
            raise
        except base.ChannelError as exc:
            log.warning("slack_dispatch_not_updated", channel_id=self.id, handoff_id=notice.handoff_id, hint=exc.hint)
            return None
        return self._receipt(notice, channel, ts)

    async def _post_in_thread(self, message: base.Relay | base.Notice, blocks: Blocks) -> base.Receipt:
        channel, thread_ts = self._thread_of(message.thread)
        channel, ts = await self._post(message, channel, thread_ts, blocks)
        return self._receipt(message, channel, ts)

    async def send_answer(self, answer: base.Answer) -> base.Receipt:
        """The desk's answer to a link command written outside a handoff's thread: in the
        thread of that message, or in the direct message (`answer.to`, from `_link_request`);
        to a slash command (`answer.to` has its response_url), only to the person who typed
        it, or in their direct message once the response_url takes no more answers."""
        blocks = [mrkdwn_block(escape(answer.text.strip()))]
        if "response_url" in answer.to:
            if await self._answer_by_hook(str(answer.to["response_url"]), answer.text.strip(), blocks):
                return base.Receipt()
            channel, thread_ts = await self._direct_channel(str(answer.to.get("user") or "")), None
        else:
            channel, thread_ts = str(answer.to["channel"]), answer.to.get("thread_ts")
        channel, ts = await self._post(answer, channel, thread_ts, blocks)
        return base.Receipt(message_id=ts)

    # ------------------------------------------------------------------ approvals

    async def send_approval_prompt(self, prompt: base.ApprovalPrompt) -> base.Receipt:
        """An approval prompt: a new top-level post (it belongs to no handoff thread)."""
        blocks = self._prompt_blocks(prompt.approval)
        channel, ts = await self._post(prompt, self.config.channel, None, blocks)
        self._remember_prompt(prompt.approval.approval_id, channel, ts, blocks)
        return self._receipt(prompt, channel, ts)

    async def send_approval_closed(self, closed: base.ApprovalClosed) -> base.Receipt:
        """How an approval ended: the prompt is edited in place (its buttons replaced by the
        closing text), so nobody presses a dead button. When the prompt cannot be found or
        edited any more (deleted, older than the history we look through), the closing
        text is posted as a new message instead."""
        client, approval_id, text = self._require_client(), closed.approval.approval_id, closed.text.strip()
        prompt = self._prompts.get(approval_id) or await self._find_prompt(client, approval_id)
        if prompt is not None:
            channel, ts, blocks = prompt
            try:
                await self._call("chat.update", client.chat_update(
                    channel=channel, ts=ts, text=fallback_text(text), blocks=closed_prompt(blocks, text),
                    parse="none", link_names=False,
                ))
            except base.TransientChannelError:
                raise  # nothing posted yet: the core retries the whole notice
            except base.ChannelError as exc:  # deleted, too old to edit …: say it in a new message
                log.warning("slack_approval_prompt_not_updated", channel_id=self.id, approval_id=approval_id, hint=exc.hint)
            else:
                self._prompts.pop(approval_id, None)
                return self._receipt(closed, channel, ts)
        channel, ts = await self._post(closed, self.config.channel, None, [{"type": "section", "text": plain(clip(text, SECTION_LIMIT))}])
        return self._receipt(closed, channel, ts)

    def _remember_prompt(self, approval_id: str, channel: str, ts: str, blocks: Blocks) -> None:
        self._prompts[approval_id] = (channel, ts, blocks)

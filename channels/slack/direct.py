"""One person reached directly: their direct message with the app, and the answer to a slash
command they typed.

A direct dispatch (`Dispatch.direct`, the person's Slack user id as their linked identity
holds it) opens the direct message with conversations.open (scope `im:write`), which
answers the same D… channel every time, and is posted there like a room's dispatch; its
ts is the handoff's thread in that conversation. Slack refusing the conversation (no such
user, a deactivated one, a bot) is permanent, with a hint saying so: that is what makes
the core try the person's next contact method.

A slash command (`/handoff away`) is answered through its `response_url` (ephemeral: only
the person sees it, in whichever conversation they typed it, even one the bot is not a
member of, where chat.postEphemeral would be refused). A response_url takes answers for
30 minutes; an answer that comes later, or a URL that is not Slack's, goes to the
person's direct message with the app instead.
"""

from __future__ import annotations

import math
import re
from urllib.parse import urlparse

import structlog

from bot.runtime.bounded import BoundedDict
from channels.base import ChannelAuthError, PermanentChannelError, TransientChannelError
from channels.slack.mrkdwn import Blocks, fallback_text
from channels.slack.protocol import HOOKS_URL, USER_ID
from channels.slack.transport import SlackTransport

log = structlog.get_logger(__name__)


class SlackDirect(SlackTransport):
    """The direct half of SlackChannel; the adapter sets `_directs` (user id -> the D… id of
    their direct message, so one conversations.open serves every later dispatch)."""

    _directs: BoundedDict[str, str]

    async def _direct_channel(self, user: str) -> str:
        """The id of `user`'s direct message with the app, opened when this process has not
        opened it yet."""
        if not re.fullmatch(USER_ID, user):
            raise PermanentChannelError(f"not a Slack user id: {user!r}", hint=(
                f"cannot reach {user!r} directly on Slack: a Slack user id such as U0123ABCD was expected "
                "(the person's linked Slack identity)"))
        known = self._directs.get(user)
        if known is not None:
            return known
        try:
            response = await self._call("conversations.open", self._require_client().conversations_open(users=user))
        except ChannelAuthError:
            raise
        except PermanentChannelError as exc:
            raise PermanentChannelError(str(exc), hint=f"cannot open a direct message with Slack user {user}: {exc.hint}") from exc
        channel = str((response.get("channel") or {}).get("id") or "")
        if not channel:
            raise PermanentChannelError("conversations.open: no channel in the answer",
                                        hint=f"Slack opened no direct message with user {user}")
        self._directs[user] = channel
        return channel

    def _slack_hook(self, url: str) -> bool:
        """Whether `url` is a response_url we may post to: on Slack's hooks host, or on the
        host of the configured API (a local or test Slack). Never any other: the URL is in
        the stored request, and we post the desk's words to it."""
        parsed, api = urlparse(url), urlparse(self.config.api_base_url)
        return url.startswith(HOOKS_URL) or (parsed.scheme in ("http", "https") and bool(parsed.netloc)
                                             and (parsed.scheme, parsed.netloc) == (api.scheme, api.netloc))

    async def _answer_by_hook(self, url: str, text: str, blocks: Blocks) -> bool:
        """Post an ephemeral answer to a slash command's response_url. False when the URL
        takes no answer (expired after 30 minutes or 5 answers, or not Slack's), so the
        caller answers elsewhere; a rate limit or a 5xx is transient, like every call."""
        from slack_sdk.webhook.async_client import AsyncWebhookClient

        if not self._slack_hook(url):
            log.warning("slack_response_url_refused", channel_id=self.id, reason="not a Slack URL")
            return False
        hook = AsyncWebhookClient(url, session=self._session, timeout=math.ceil(self.config.request_timeout), retry_handlers=[])
        response = await self._call("response_url", hook.send(text=fallback_text(text), blocks=blocks, response_type="ephemeral"),
                                    may_have_landed=True)
        status = int(response.status_code)
        if status == 429 or status >= 500:
            raise TransientChannelError(f"response_url: HTTP {status}", hint=f"Slack did not take the answer (HTTP {status})")
        if status >= 400:
            log.info("slack_response_url_expired", channel_id=self.id, status=status, body=str(response.body)[:100])
            return False
        return True

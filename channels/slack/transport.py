"""slack-sdk's AsyncWebClient against the configured base URL, and every failure of a call
turned into the ChannelError tree: the outbox, not the SDK, is the one place that retries,
and a write whose answer was lost is reported as uncertain so it is looked for first."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from channels import base
from channels.slack.config import SlackConfig
from channels.slack.protocol import AUTH_ERRORS, MAYBE_DONE_ERRORS, TRANSIENT_ERRORS

if TYPE_CHECKING:  # slack-sdk and aiohttp are imported in the calls, so loading a config needs neither
    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient


class SlackTransport(base.ChannelAdapter):
    """The Web API half of SlackChannel; the adapter sets the client and the bot's identity
    (from auth.test) in its `__init__` and `start`."""

    config: SlackConfig
    _session: aiohttp.ClientSession | None
    _client: AsyncWebClient | None
    bot_user_id: str | None
    bot_id: str | None
    bot_name: str | None
    team: str | None

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

    def _require_client(self) -> AsyncWebClient:
        if self._client is None:
            raise base.TransientChannelError("the Slack channel is not started", hint="the Slack channel is not running")
        return self._client

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
            raise base.TransientChannelError(
                f"{method}: could not connect to Slack ({type(exc).__name__})",
                hint=f"could not reach the Slack API at {self.config.api_base_url}",
            ) from exc
        except (TimeoutError, aiohttp.ClientError) as exc:
            what = f"{method}: no complete answer from Slack ({type(exc).__name__})"
            if may_have_landed:
                raise base.UncertainDeliveryError(
                    what, hint="Slack did not answer in time; the message may have been posted (checked before a retry)"
                ) from exc
            raise base.TransientChannelError(what, hint="Slack did not answer in time") from exc

    def _api_error(self, method: str, exc: Any, may_have_landed: bool) -> base.ChannelError:
        response = exc.response
        status = int(getattr(response, "status_code", 0) or 0)
        data = response.data if isinstance(getattr(response, "data", None), dict) else {}
        error = str(data.get("error") or f"HTTP {status}")
        message = f"{method}: {error}"
        if status == 429 or error in ("ratelimited", "rate_limited"):
            return base.TransientChannelError(
                message, retry_after=_retry_after(response), hint=f"Slack rate-limited {method}; retrying after the wait it asked for"
            )
        if status >= 500 or error in TRANSIENT_ERRORS:
            if may_have_landed and (status >= 500 or error in MAYBE_DONE_ERRORS):
                return base.UncertainDeliveryError(message, hint=f"Slack failed ({error}); the message may have been posted (checked before a retry)")
            return base.TransientChannelError(message, hint=f"Slack is having trouble ({error})")
        if error in AUTH_ERRORS:
            return base.ChannelAuthError(
                message, hint=f"Slack refused the bot token ({error}): check bot_token of channel {self.id} "
                "and that the app is still installed in the workspace",
            )
        return base.PermanentChannelError(message, hint=self._refusal_hint(method, error, data))

    def _refusal_hint(self, method: str, error: str, data: dict[str, Any]) -> str:
        """What to do about a refusal, in the words of the person who has to fix it."""
        channel = self.config.channel
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
            # conversations.open, a person's direct message
            "user_not_found": "Slack has no such user in this workspace (user_not_found): check the person's linked Slack identity",
            "user_not_visible": "the bot may not see this user (user_not_visible), as in a shared channel's other workspace",
            "user_disabled": "the person's Slack account is deactivated (user_disabled)",
            "cannot_dm_bot": "the linked Slack identity is a bot, which takes no direct messages (cannot_dm_bot)",
        }
        return hints.get(error, f"Slack refused {method} ({error})")


def _retry_after(response: Any) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After")))
    except (AttributeError, TypeError, ValueError):
        return None

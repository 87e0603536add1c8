"""SlackConfig: the keys of a `kind: slack` channel, checked at load so a wrong token, a
channel #name instead of its id or a base URL without a scheme is refused with a hint
before anything connects (and a secret is never repeated in the message)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator

from channels.base import ChannelConfig


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

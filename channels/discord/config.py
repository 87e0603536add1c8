"""The Discord channel's config model: the bot token, the staff channel, the interactions
endpoint's public key, and the REST and gateway base URLs (for a local or test server)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator

from channels.base import ChannelConfig
from channels.config_checks import service_url
from channels.discord.protocol import DEFAULT_API, DEFAULT_GATEWAY


class DiscordConfig(ChannelConfig):
    kind: Literal["discord"] = "discord"
    bot_token: SecretStr = Field(
        description="The bot's token: discord.com/developers/applications → your application → Bot → Reset Token.",
    )
    channel_id: int = Field(description="Id of the staff text channel handoffs are posted to (a snowflake such as 1234567890123456789).")
    application_public_key: str | None = Field(
        default=None,
        description="The application's Public Key (hex, General Information). Enables the interactions endpoint "
        "POST /webhooks/{id} and the Release button; set the Interactions Endpoint URL to that address.",
    )
    gateway: bool = Field(default=True, description="Receive replies over the gateway (needs the Message Content intent).")
    api_base_url: str = Field(default=DEFAULT_API, description="Discord REST API base URL (for a local or test server).")
    gateway_url: str = Field(default=DEFAULT_GATEWAY, description="Discord gateway websocket URL (for a local or test server).")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to wait for one Discord REST call.")

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: SecretStr) -> SecretStr:
        token = value.get_secret_value().strip().removeprefix("Bot ").strip()
        # Never repeat the value: it is a secret even when it is the wrong one.
        if len(token) < 20 or any(c.isspace() for c in token):
            raise ValueError("does not look like a Discord bot token: copy it from the Developer Portal (Bot → Reset Token)")
        return SecretStr(token)

    @field_validator("channel_id", mode="before")
    @classmethod
    def _snowflake(cls, value: Any) -> Any:
        text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else None
        if text is None or not re.fullmatch(r"\d{15,21}", text):
            raise ValueError("must be the channel's numeric id (Developer Mode → right click the channel → Copy Channel ID)")
        return int(text)

    @field_validator("application_public_key", mode="before")
    @classmethod
    def _public_key(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value.strip()):
            raise ValueError("must be the application's Public Key: 64 hex characters (General Information page)")
        return value.strip().lower()

    @field_validator("api_base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        return service_url(value, DEFAULT_API).rstrip("/")

    @field_validator("gateway_url")
    @classmethod
    def _ws(cls, value: str) -> str:
        return service_url(value, DEFAULT_GATEWAY, "ws")

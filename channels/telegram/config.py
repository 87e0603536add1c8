"""The Telegram settings: the bot (`TelegramConnection`, all a front of its own needs) and
the channel (`TelegramConfig`, the bot plus its staff group), each value checked where it is
read, so a token with a stray space or a chat given as text fails at load with a clear fix."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SecretStr, field_validator

from channels.base import ChannelConfig
from channels.config_checks import service_url

_TOKEN = re.compile(r"^\d+:[A-Za-z0-9_-]+$")
_CHAT_NAME = re.compile(r"^@[A-Za-z][A-Za-z0-9_]{3,31}$")
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


def _empty_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


class TelegramConnection(ChannelConfig):
    """The bot itself: what a front of its own needs (`fronts: [{kind: telegram, …}]`).
    One token is one connection: a front and a channel with the same token share an adapter."""

    kind: Literal["telegram"] = "telegram"
    bot_token: SecretStr = Field(
        description="The bot's token (123456:ABC…): in Telegram, @BotFather gives it on /newbot and shows it again on /token.",
    )
    mode: Literal["webhook", "polling"] = Field(
        default="webhook", description="webhook (needs an https public_url) or polling (one instance per token)."
    )
    api_base_url: str = Field(default="https://api.telegram.org/bot", description="Bot API base; the token is appended.")
    webhook_secret: Annotated[SecretStr | None, BeforeValidator(_empty_to_none)] = Field(
        default=None, description="Secret Telegram sends with each webhook call; derived from the token when empty."
    )
    poll_timeout: int = Field(default=10, ge=0, le=50, description="Seconds each getUpdates long poll may wait (polling mode).")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to connect, send or wait for an answer.")

    @field_validator("bot_token")
    @classmethod
    def _token_shape(cls, value: SecretStr) -> SecretStr:
        if not _TOKEN.match(value.get_secret_value().strip()):
            raise ValueError("does not look like a Telegram bot token (digits, a colon, then letters); copy it from @BotFather")
        return SecretStr(value.get_secret_value().strip())

    @field_validator("api_base_url")
    @classmethod
    def _http(cls, value: str) -> str:
        return service_url(value, "https://api.telegram.org/bot")

    @field_validator("webhook_secret")
    @classmethod
    def _secret_charset(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not _SECRET.match(value.get_secret_value()):
            raise ValueError("must be 1-256 characters of A-Z, a-z, 0-9, _ and - (Telegram's rule)")
        return value


class TelegramConfig(TelegramConnection):
    """A channel: the bot plus the staff group handoffs go to."""

    chat_id: int | str = Field(description="The staff group: its numeric id (-100…) or @public_name.")

    @field_validator("chat_id")
    @classmethod
    def _chat(cls, value: int | str) -> int | str:
        if isinstance(value, str):
            value = value.strip()
            if re.fullmatch(r"-?\d+", value):  # from ${VAR}, numbers arrive as text
                return int(value)
            if not _CHAT_NAME.match(value):
                raise ValueError("must be the group's numeric id (such as -1001234567890) or its @public_name")
        return value

"""The Telegram channel (channels/telegram/adapter.py describes it)."""

from channels.telegram.adapter import MESSAGE_LIMIT, TelegramChannel, TelegramConfig, TelegramConnection

__all__ = ["MESSAGE_LIMIT", "TelegramChannel", "TelegramConfig", "TelegramConnection"]

"""How a delivery fails, as every adapter raises it and the outbox reads it: retry later,
maybe it landed (ask `find_sent` first), never, or the credentials are wrong. Part of the
channel port (channels/base.py re-exports them, where adapters have always imported them)."""

from __future__ import annotations


class ChannelError(Exception):
    """Base of all delivery failures; `hint` is written for the person fixing it."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint or message


class TransientChannelError(ChannelError):
    """Worth retrying: timeouts, 429, 5xx, SMTP 4xx. `retry_after` is the provider's wish."""

    def __init__(self, message: str, *, retry_after: float | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.retry_after = retry_after


class UncertainDeliveryError(TransientChannelError):
    """The request may have reached the provider (e.g. a timeout after sending). Before a
    retry the core asks `find_sent` when the channel can reconcile, instead of sending twice."""


class PermanentChannelError(ChannelError):
    """Retrying will not help: bad recipient, rejected content, SMTP 5xx."""


class ChannelAuthError(PermanentChannelError):
    """The credentials were refused; an operator has to fix the config."""

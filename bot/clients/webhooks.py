"""Checking, on the orchestrator's side, that a webhook really came from the desk.

The desk signs every POST it makes to your endpoints (a background task's user actions, an
action's run, the webhook agent's turns): `X-Handoff-Timestamp` (Unix seconds) and
`X-Handoff-Signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>`, with the
same `X-Handoff-Delivery` on every retry of one event. Check the raw bytes before parsing
them (a re-serialised body never matches), refuse old timestamps (a replayed request), and
drop a delivery id you have already handled.

    from bot.clients import verify_webhook, InvalidWebhook

    try:
        verify_webhook(SECRET, request.headers, await request.body())
    except InvalidWebhook as refused:
        return Response(status_code=401, content=str(refused))
"""

from __future__ import annotations

from collections.abc import Mapping

from bot.runtime.signed_http import (
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    TOLERANCE_SECONDS,
    InvalidSignature,
    verify,
)

__all__ = ["DELIVERY_HEADER", "SIGNATURE_HEADER", "TIMESTAMP_HEADER", "InvalidWebhook", "verify_webhook"]


class InvalidWebhook(InvalidSignature):
    """The request was not signed by the desk with this secret, or is too old to trust
    (the message says which); answer it 401 and do nothing it asks."""


def verify_webhook(secret: str, headers: Mapping[str, str], raw_body: bytes, *,
                   tolerance: float = TOLERANCE_SECONDS, now: float | None = None) -> None:
    """Raise `InvalidWebhook` unless `raw_body` was signed by the desk with `secret` within
    `tolerance` seconds of `now` (the current time). The comparison is constant-time;
    `headers` may use any letter case (a dict, Starlette's or Flask's headers)."""
    try:
        verify(secret, dict(headers.items()), raw_body, now=now, tolerance=tolerance)
    except InvalidSignature as refused:
        raise InvalidWebhook(str(refused)) from None

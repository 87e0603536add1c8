"""Signed tokens that expire, timed by the desk's clock.

`SignedIds` (bot/runtime/signed_ids.py) signs ids that live as long as their row says; these
tokens carry their own age instead: an invitation or password-reset link, the cookie of a
sign-in halfway through its second step. itsdangerous stamps the signing time and refuses a
token older than `max_age`; here the stamp and the check read the desk's clock, so a test
moves time instead of waiting for it, and a token from the future (a clock moved back) is
refused too. Like `SignedIds`, the last key signs and any verifies, and each kind of token
has its own salt.

The payload is a list of strings, readable by whoever holds the token (signed, not
encrypted): never put a secret in it.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from itsdangerous import BadSignature, SignatureExpired, TimestampSigner, URLSafeTimedSerializer

from bot.runtime.clock import Clock


class TokenRefused(Exception):
    """The token cannot be used: `reason` is "expired" (signed by us, too old) or "invalid"."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"token {reason}")
        self.reason = reason


class _ClockSigner(TimestampSigner):
    """itsdangerous's timestamp signer reading the desk's clock instead of time.time()."""

    def __init__(self, *args: Any, clock: Clock, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.clock = clock

    def get_timestamp(self) -> int:
        return int(self.clock.now().timestamp())


class TimedTokens:
    def __init__(self, secret_keys: list[str], salt: str, clock: Clock, max_age: timedelta) -> None:
        self._serializer = URLSafeTimedSerializer(secret_keys, salt=salt, signer=_ClockSigner,
                                                  signer_kwargs={"clock": clock})
        self.max_age = max_age

    def token(self, payload: list[str]) -> str:
        return self._serializer.dumps(payload)

    def payload(self, token: str) -> list[str]:
        """The strings inside `token`, or TokenRefused saying why not."""
        try:
            value = self._serializer.loads(token, max_age=int(self.max_age.total_seconds()))
        except SignatureExpired:
            raise TokenRefused("expired") from None
        except BadSignature:
            raise TokenRefused("invalid") from None
        if not isinstance(value, list) or not all(isinstance(part, str) for part in value):
            raise TokenRefused("invalid")
        return value

"""Ids signed into tokens: a link or a page (an approval's decision page, a return form, the
web chat) carries the id of its row signed with the desk's secret keys, so a guessed or
altered token names nothing.

itsdangerous signs with the last key and accepts any of them, so the keys kept after a
rotation (`previous_secret_keys`) keep earlier tokens working; each kind of token has its own
salt, so one kind is never read as another."""

from __future__ import annotations

from itsdangerous import BadSignature, URLSafeSerializer


class SignedIds:
    def __init__(self, secret_keys: list[str], salt: str) -> None:
        self._serializer = URLSafeSerializer(secret_keys, salt=salt)

    def token(self, ident: str) -> str:
        return self._serializer.dumps(ident)

    def ident(self, token: str) -> str | None:
        """The id inside a token, or None when we did not sign it (or it holds no string)."""
        try:
            value = self._serializer.loads(token)
        except BadSignature:
            return None
        return value if isinstance(value, str) else None

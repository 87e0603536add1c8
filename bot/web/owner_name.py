"""The name an inbox owner replies as: what subscribers see above the owner's messages
(and what the chat's "… joined" line names, since it takes the first human reply's author).

Where it lives. The inbox has one login, the owner token, and a team may share it; the only
thing that tells two of them apart is their browser. So the name lives in a signed cookie
per browser (HttpOnly, SameSite=Strict, kept about a year) that outlives logging out and in
again. A stored row keyed by the token would make everyone who shares it speak under
whatever name was set last, putting words in a colleague's mouth. The name is no secret, so
changing the owner token keeps it; the signature only stops another site on a sibling
domain from planting a name.

What it may be: 1–40 characters once surrounding spaces are trimmed, with no control or
format characters (a right-to-left override would make a name read as something else). It is
plain text everywhere: pages autoescape it, the chat inserts it with textContent.
"""

from __future__ import annotations

import unicodedata

from fastapi.responses import Response

from bot.errors import DeskError
from bot.runtime.signed_ids import SignedIds

DEFAULT_NAME = "Support"
MAX_CHARS = 40
COOKIE = "handoff_owner_name"
COOKIE_MAX_AGE = 400 * 86400  # the longest lifetime browsers keep a cookie
SALT = "handoff-desk.inbox-reply-name.v1"


class InvalidName(DeskError):
    """The name an owner typed cannot be shown to subscribers; the message says why."""

    code = "invalid_name"

    def __init__(self, problem: str) -> None:
        super().__init__(f"name: {problem}")


def _forbidden(char: str) -> bool:
    category = unicodedata.category(char)
    return category.startswith("C") or category in ("Zl", "Zp")


def parse_name(raw: str) -> str:
    """The name as subscribers will see it, or InvalidName naming what is wrong."""
    name = raw.strip()
    if not name:
        raise InvalidName(f"expected 1–{MAX_CHARS} characters, got an empty name")
    if len(name) > MAX_CHARS:
        raise InvalidName(f"expected at most {MAX_CHARS} characters, got {len(name)}")
    bad = next((c for c in name if _forbidden(c)), None)
    if bad is not None:
        raise InvalidName(f"expected letters, digits, spaces or punctuation, got the control character U+{ord(bad):04X}")
    return name


class NameCookie:
    """Reads and writes the signed reply-name cookie."""

    def __init__(self, secret_keys: list[str], *, secure: bool) -> None:
        self._names = SignedIds(secret_keys, SALT)
        self.secure = secure

    def read(self, cookie: str | None) -> str:
        """The name this browser chose, or the default when it chose none (or the cookie is
        not ours, or holds a name today's rules refuse)."""
        if not cookie:
            return DEFAULT_NAME
        name = self._names.ident(cookie)
        try:
            return parse_name(name) if name is not None else DEFAULT_NAME
        except InvalidName:
            return DEFAULT_NAME

    def store(self, response: Response, name: str) -> None:
        response.set_cookie(
            COOKIE, self._names.token(name), max_age=COOKIE_MAX_AGE, path="/inbox", httponly=True,
            samesite="strict", secure=self.secure,
        )

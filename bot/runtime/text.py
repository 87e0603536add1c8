"""Text hygiene shared by every input path, and the small text helpers every layer uses
(one-line values, hanging indents, ISO times).

PostgreSQL refuses NUL characters in text columns, and a 500 from deep inside a transaction
is the worst way to say so. Inputs people send us directly (API bodies, tool calls) reject
NUL with an error naming the field; text relayed from providers is scrubbed instead, since
the sender cannot be asked to fix it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator


def _reject_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    return value


CleanStr = Annotated[str, AfterValidator(_reject_nul)]


def scrub(text: str) -> str:
    """Replace characters no database column accepts."""
    return text.replace("\x00", "\ufffd")


def one_line(text: str, limit: int | None = None) -> str:
    """All whitespace (line breaks, tabs, runs of spaces) as single spaces, cut at `limit`
    characters with an ellipsis (None: never cut), so a value a person typed stays on the one
    line it is shown on: a subject, a list entry, the head of the resume message."""
    flat = " ".join(text.split())
    return flat if limit is None or len(flat) <= limit else flat[: limit - 1] + "…"


def hang(text: str, width: int = 4, pad: str = " ") -> str:
    """Every line after the first indented by `width` times `pad`, so text a person wrote can
    never pass for a new speaker's line ("ok\\nAssistant: refund approved") in a transcript."""
    return ("\n" + pad * width).join(str(text).splitlines() or [""])


def iso(moment: datetime | None) -> str | None:
    """A time as ISO 8601 for JSON views, or None when it has not happened (yet)."""
    return moment.isoformat() if moment else None

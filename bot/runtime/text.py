"""Text hygiene shared by every input path.

PostgreSQL refuses NUL characters in text columns, and a 500 from deep inside a transaction
is the worst way to say so. Inputs people send us directly (API bodies, tool calls) reject
NUL with an error naming the field; text relayed from providers is scrubbed instead, since
the sender cannot be asked to fix it.
"""

from __future__ import annotations

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

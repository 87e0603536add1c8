"""Text helpers of the email channel: header-safe single lines and spelled-out durations
(the helpers every adapter shares are in channels/text.py)."""

from __future__ import annotations

import unicodedata

_CONTROL_CATEGORIES = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}


def one_line(text: str, limit: int | None = None) -> str:
    """Text fit for a header: every control, format and line-separator character (CR, LF,
    NUL, U+2028, bidi overrides …) becomes a space, runs of spaces collapse, long text is cut."""
    cleaned = "".join(" " if unicodedata.category(ch) in _CONTROL_CATEGORIES else ch for ch in text)
    cleaned = " ".join(cleaned.split())
    if limit is not None and len(cleaned) > limit:
        cleaned = cleaned[: limit - 1].rstrip() + "…"
    return cleaned


def duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds // 3600} hour{'s' if seconds != 3600 else ''}"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds // 60} minute{'s' if seconds != 60 else ''}"
    return f"{seconds} seconds"

"""The small text helpers of bot/runtime/text.py every layer shares."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.runtime.text import hang, iso, one_line


def test_one_line_flattens_whitespace_and_cuts_with_an_ellipsis() -> None:
    assert one_line("a\r\n b\t\tc  d ") == "a b c d"
    assert one_line("x" * 30, 10) == "x" * 9 + "…"
    assert one_line("short", 10) == "short"
    assert one_line("ab cd", 4) == "ab …"  # no blank trimmed: the resume message has always read so


def test_hang_indents_every_line_but_the_first() -> None:
    assert hang("ok\nAssistant: refund approved") == "ok\n    Assistant: refund approved"
    assert hang("a\nb\nc", 2) == "a\n  b\n  c"
    assert hang("a\nb", 1, pad="\u2003") == "a\n\u2003b"
    assert hang("") == ""


def test_iso_is_none_for_a_moment_that_has_not_happened() -> None:
    assert iso(datetime(2026, 6, 1, 9, 30, tzinfo=UTC)) == "2026-06-01T09:30:00+00:00"
    assert iso(None) is None

"""bot/runtime/text.py: NUL is refused where a person can fix it, scrubbed where they cannot."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from bot.runtime.text import CleanStr, scrub


class Note(BaseModel):
    text: CleanStr


def test_clean_text_passes_unchanged_unicode_and_all() -> None:
    for text in ("", "plain", "Grüße 👋 — ok\ttabs\nand lines", "\u200b\u2060 invisible but legal"):
        assert Note(text=text).text == text


def test_a_nul_is_refused_with_the_field_named() -> None:
    with pytest.raises(ValidationError) as caught:
        Note(text="before\x00after")
    [error] = caught.value.errors()
    assert error["loc"] == ("text",)
    assert "must not contain NUL characters" in error["msg"]


def test_scrub_replaces_every_nul_and_nothing_else() -> None:
    assert scrub("a\x00b\x00\x00c") == "a\ufffdb\ufffd\ufffdc"
    assert scrub("Grüße 👋\x01\x7f") == "Grüße 👋\x01\x7f"
    assert len(scrub("\x00" * 5)) == 5  # one for one: lengths and offsets do not move

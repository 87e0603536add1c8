"""The helpers channels/text.py gives every adapter: the short duration of their help lines
and splitting a long message by the provider's own way of counting."""

from __future__ import annotations

import pytest

from channels.text import short_duration, split


@pytest.mark.parametrize(("seconds", "said"), [(7200, "2 h"), (1800, "30 min"), (90, "90 s"), (45.7, "45 s")])
def test_a_duration_reads_in_its_largest_whole_unit(seconds: float, said: str) -> None:
    assert short_duration(seconds) == said
    assert short_duration(seconds, at_least_a_minute=True) == said


def test_under_a_second_reads_as_a_minute_only_where_asked() -> None:
    assert short_duration(0.3) == "0 h"  # what Slack's and Discord's help lines have always said
    assert short_duration(0.3, at_least_a_minute=True) == "1 min"  # WhatsApp's


def test_split_counts_utf16_units_by_default_and_characters_when_asked() -> None:
    text = "😀" * 6  # one character, two UTF-16 units each
    assert split(text, 4) == ["😀😀", "😀😀", "😀😀"]
    assert split(text, 4, measure=len) == ["😀😀😀😀", "😀😀"]


def test_split_measures_what_the_provider_counts() -> None:
    def escaped(text: str) -> int:  # a markup where each `*` is sent as `\*`
        return len(text) + text.count("*")

    assert split("**** ab", 6, measure=escaped) == ["***", "* ab"]

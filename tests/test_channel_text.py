"""channels/text.py: the text helpers every adapter shares (clipping, UTF-16 lengths,
splitting long messages by the provider's own count, remembering sent parts, fitting a brief
into a length limit, the short duration of the help lines)."""

from __future__ import annotations

import pytest

from channels.text import BriefCut, Budget, SentParts, TextLimit, clip, fit_brief, short_duration, split, utf16_len

# --------------------------------------------------------------------------- clip


@pytest.mark.parametrize(("text", "limit", "expected"), [
    ("  short  ", None, "short"),
    ("short", 5, "short"),  # exactly at the limit: untouched
    ("a long sentence", 6, "a lon…"),
    ("word   gap here", 6, "word…"),  # no blank before the ellipsis
    ("abc", 1, "…"),
    ("Grüße 👋 aus Köln", 8, "Grüße 👋…"),
])
def test_clip_cuts_with_an_ellipsis_within_the_limit(text: str, limit: int | None, expected: str) -> None:
    assert clip(text, limit) == expected
    if limit is not None:
        assert len(clip(text, limit)) <= limit


# --------------------------------------------------------------------------- utf16_len


@pytest.mark.parametrize(("text", "units"), [
    ("", 0), ("abc", 3), ("é", 1), ("中文", 2), ("👋", 2), ("👍🏽", 4), ("👨‍👩‍👧", 8),
])
def test_utf16_len_counts_code_units_as_telegram_and_whatsapp_do(text: str, units: int) -> None:
    assert utf16_len(text) == units


# --------------------------------------------------------------------------- split


def test_a_text_within_the_limit_is_one_part() -> None:
    assert split("hello world", 11) == ["hello world"]
    assert split("", 10) == [""]


def test_long_text_is_cut_at_a_space_and_nothing_is_lost() -> None:
    words = [f"word{i:03d}" for i in range(200)]
    text = " ".join(words)
    parts = split(text, 100)
    assert len(parts) > 1
    assert all(utf16_len(p) <= 100 for p in parts)
    assert " ".join(parts).split() == words  # every word, in order, none cut in two


def test_a_line_break_near_the_end_is_preferred_and_not_repeated() -> None:
    text = "first line of the message\n" + "x" * 10 + " tail"
    parts = split(text, 30)
    assert parts[0] == "first line of the message"
    assert not parts[1].startswith("\n")


def test_text_without_any_break_is_cut_hard_at_the_limit() -> None:
    parts = split("a" * 25, 10)
    assert parts == ["a" * 10, "a" * 10, "a" * 5]


def test_emoji_count_double_and_are_never_split_in_half() -> None:
    text = "👋" * 15  # 30 UTF-16 units
    parts = split(text, 7)
    assert all(utf16_len(p) <= 7 for p in parts)
    assert "".join(parts) == text
    assert all(p == "👋" * len(p) for p in parts)  # whole characters only


def test_blank_parts_are_dropped() -> None:
    parts = split("a" * 10 + "\n\n\n\n" + "b" * 10, 10)
    assert parts == ["a" * 10, "b" * 10]


# --------------------------------------------------------------------------- SentParts


class Provider:
    """Posts a part and answers with a new message id each time: "1", "2", …"""

    def __init__(self) -> None:
        self.posted = 0

    async def post(self) -> str:
        self.posted += 1
        return str(self.posted)


async def test_a_part_already_sent_under_its_key_is_not_sent_again() -> None:
    provider, parts = Provider(), SentParts()
    assert await parts.send(("hd_1", 0), provider.post) == "1"
    assert await parts.send(("hd_1", 0), provider.post) == "1"  # a retry of the same part
    assert await parts.send(("hd_1", 1), provider.post) == "2"
    assert provider.posted == 2


async def test_without_a_key_every_send_goes_out() -> None:
    provider, parts = Provider(), SentParts()
    assert [await parts.send(None, provider.post) for _ in range(3)] == ["1", "2", "3"]


async def test_only_the_most_recent_parts_are_remembered() -> None:
    provider, parts = Provider(), SentParts(size=2)
    for key in ("a", "b", "c"):
        await parts.send(key, provider.post)
    assert await parts.send("c", provider.post) == "3"  # still remembered
    assert await parts.send("a", provider.post) == "4"  # forgotten, the oldest: sent again
    assert provider.posted == 4


async def test_a_failed_send_is_not_remembered() -> None:
    attempts = 0

    async def flaky() -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise ConnectionError("provider down")
        return "msg-ok"

    parts = SentParts()
    with pytest.raises(ConnectionError):
        await parts.send("k", flaky)
    assert await parts.send("k", flaky) == "msg-ok"


# --------------------------------------------------------------------------- fit_brief

LINK = "LINK https://desk.test/f/token"


def render(cut: BriefCut[str]) -> str:
    """A brief as an adapter renders one: the link always last."""
    lines = [cut.summary, cut.action, *(f"{k}={v}" for k, v in cut.context), *cut.fields]
    if cut.transcript_left_out:
        lines.append(f"({cut.transcript_left_out} earlier left out)")
    lines.extend(cut.transcript)
    if cut.shortened:
        lines.append("(shortened)")
    return "\n".join([*lines, LINK])


def fit(limit: int, *, lines: list[str], budgets: list[Budget], summary: str = "Summary", action: str = "Action",
        context: list[tuple[str, str]] | None = None, fields: list[str] | None = None) -> str | None:
    return fit_brief(summary=summary, action=action, context=context or [], fields=fields or [], lines=lines,
                     budgets=budgets, render=render, fits=lambda text: len(text) <= limit)


def test_a_brief_that_fits_is_rendered_whole() -> None:
    text = fit(1000, lines=["l1", "l2"], budgets=[Budget()], context=[("plan", "gold")], fields=["ETA"])
    assert text == "Summary\nAction\nplan=gold\nETA\nl1\nl2\n" + LINK


def test_the_oldest_transcript_lines_go_first_and_the_newest_stay() -> None:
    lines = [f"line {i:02d}" for i in range(30)]
    text = fit(120, lines=lines, budgets=[Budget()])
    assert text is not None
    assert len(text) <= 120
    assert "line 29" in text
    assert "line 00" not in text
    shown = [line for line in lines if line in text]
    assert shown == lines[-len(shown):]  # a contiguous run of the newest
    assert f"({30 - len(shown)} earlier left out)" in text
    assert text.endswith(LINK)


def test_the_most_lines_that_fit_are_kept() -> None:
    lines = [f"line {i:02d}" for i in range(30)]
    text = fit(120, lines=lines, budgets=[Budget()])
    assert text is not None
    kept = sum(line in text for line in lines)
    one_more = render(BriefCut(summary="Summary", action="Action", context=[], context_left_out=0, fields=[],
                               fields_left_out=0, transcript=lines[-(kept + 1):], transcript_left_out=30 - kept - 1,
                               shortened=False))
    assert len(one_more) > 120


def test_when_even_no_transcript_does_not_fit_the_next_budget_cuts_the_brief() -> None:
    summary, action = "S" * 200, "A" * 200
    budgets = [Budget(), Budget(summary=20, action=20, context_items=1, field_items=1, field_line=5)]
    text = fit(150, lines=["newest"], budgets=budgets, summary=summary, action=action,
               context=[("a", "1"), ("b", "2")], fields=["field one", "field two"])
    assert text is not None
    assert len(text) <= 150
    assert "S" * 19 + "…" in text
    assert "a=1" in text
    assert "b=2" not in text
    assert "fiel…" in text
    assert "(shortened)" in text
    assert text.endswith(LINK)  # the link is never cut


def test_nothing_is_returned_when_not_even_the_last_budget_fits() -> None:
    assert fit(10, lines=[], budgets=[Budget(), Budget(summary=1, action=1)]) is None


def test_the_cut_tells_a_template_what_was_left_out() -> None:
    cuts: list[BriefCut[str]] = []

    def keep(cut: BriefCut[str]) -> str:
        cuts.append(cut)
        return render(cut)

    fit_brief(summary="S", action="A", context=[("a", "1"), ("b", "2")], fields=["f1", "f2", "f3"], lines=[],
              budgets=[Budget(context_items=1, field_items=2)], render=keep, fits=lambda _text: True)
    shown = cuts[-1].shown()
    assert shown["context_left_out"] == 1
    assert shown["fields_left_out"] == 1
    assert shown["shortened"] is False  # the first budget is no shortening


# --------------------------------------------------------------------------- split by the provider's count


def test_split_counts_utf16_units_by_default_and_characters_when_asked() -> None:
    text = "😀" * 6  # one character, two UTF-16 units each
    assert split(text, 4) == ["😀😀", "😀😀", "😀😀"]
    assert split(text, 4, measure=len) == ["😀😀😀😀", "😀😀"]


def test_split_measures_what_the_provider_counts() -> None:
    def escaped(text: str) -> int:  # a markup where each `*` is sent as `\*`
        return len(text) + text.count("*")

    assert split("**** ab", 6, measure=escaped) == ["***", "* ab"]


# --------------------------------------------------------------------------- short_duration


@pytest.mark.parametrize(("seconds", "said"), [(7200, "2 h"), (1800, "30 min"), (90, "90 s"), (45.7, "45 s")])
def test_a_duration_reads_in_its_largest_whole_unit(seconds: float, said: str) -> None:
    assert short_duration(seconds) == said
    assert short_duration(seconds, at_least_a_minute=True) == said


def test_under_a_second_reads_as_a_minute_only_where_asked() -> None:
    assert short_duration(0.3) == "0 h"  # what Slack's and Discord's help lines have always said
    assert short_duration(0.3, at_least_a_minute=True) == "1 min"  # WhatsApp's


# --------------------------------------------------------------------------- TextLimit


def test_a_text_limit_splits_and_fits_by_its_own_measure() -> None:
    telegram_like = TextLimit(10)  # UTF-16 units by default
    assert telegram_like.fits("👋" * 5)
    assert not telegram_like.fits("👋" * 5, reserve=1)
    assert telegram_like.split("👋" * 8) == ["👋" * 5, "👋" * 3]
    assert telegram_like.split("one two three four", reserve=2) == ["one two", "three", "four"]

    escaped = TextLimit(6, measure=lambda text: len(text.replace("*", "\\*")))
    assert escaped.split("a*b*c*d") == ["a*b*", "c*d"]  # measured escaped: no escape is cut in half

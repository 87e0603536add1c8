"""Discord markdown: escaping user-derived text so it shows exactly as typed, clipping
without a dangling backslash, splitting into messages, and fitting lines into a limit."""

from __future__ import annotations

import re

from bot.runtime.text import hang as shared_hang
from channels.text import split

_NUMBERED = re.compile(r"^(\s*\d+)\.(?=\s)", re.MULTILINE)


def escape(text: str) -> str:
    """Escape user-derived text for Discord markdown so it shows exactly as typed:
    emphasis, code, spoilers, quotes, headings, lists and masked links via discord.py's
    escape_markdown (bare URLs stay clickable); `<@id>`, `<#id>`, `<t:…>` pills via `\\<`;
    `@everyone` / `@here` defused with a zero-width space (they ping nobody anyway)."""
    from discord.utils import escape_markdown, escape_mentions

    text = escape_markdown(text.replace("\x00", "\ufffd"))
    # Numbered lists: Discord only honours a backslash before punctuation, so escape the dot.
    text = _NUMBERED.sub(r"\1\\.", text)
    return escape_mentions(text.replace("<", "\\<"))


def clip_escaped(text: str, limit: int) -> str:
    """Clip escaped markdown without leaving a dangling backslash (it would escape the `…`)."""
    text = text.strip()
    if len(text) <= limit:
        return text
    cut = text[: max(0, limit - 1)]
    trailing = len(cut) - len(cut.rstrip("\\"))
    if trailing % 2:
        cut = cut[:-1]
    return cut + "…"


def hang(text: str) -> str:
    """Indent continuation lines (by one em space), so a line a person wrote cannot pass for
    another speaker's."""
    return shared_hang(text, 1, pad="\u2003")


def escaped_length(text: str) -> int:
    """How long `text` is once escaped: what Discord's 2000-character limit counts."""
    return len(escape(text))


def split_for_messages(text: str, limit: int) -> list[str]:
    """Escaped parts of `text`, each at most `limit` characters, cut where the shared
    splitter cuts (raw text is cut, measured escaped, then escaped, so no escape is split)."""
    return [escape(part.strip()) for part in split(text.strip(), limit, measure=escaped_length)]


def _lines_within(lines: list[str], limit: int, left_out_word: str) -> str:
    """As many whole lines as fit `limit`, then "… N more <left_out_word>"."""
    reserve = len(f"\n… {len(lines)} more {left_out_word}")
    kept: list[str] = []
    for i, line in enumerate(lines):
        last = i == len(lines) - 1
        budget = limit - (0 if last else reserve)
        candidate = "\n".join([*kept, line])
        if len(candidate) > budget:
            if not kept:  # not even the first line fits whole: show it cut
                kept = [clip_escaped(line, budget)]
            left = len(lines) - len(kept)
            return "\n".join(kept) + (f"\n… {left} more {left_out_word}" if left else "")
        kept.append(line)
    return "\n".join(kept)

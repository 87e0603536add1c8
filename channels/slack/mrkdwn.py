"""Slack's mrkdwn both ways: escaping what people wrote so it shows as typed and pings
nobody, clipping without cutting an entity in half, the block objects every layout is made
of, and reading a human's mrkdwn reply back as the plain text the person saw."""

from __future__ import annotations

import re
from typing import Any

from bot.runtime.text import hang
from channels.base import TranscriptLine
from channels.slack.protocol import FALLBACK_LIMIT, SECTION_LIMIT

Blocks = list[dict[str, Any]]
"""A message's Block Kit layout, as Slack takes it and gives it back."""


def escape(text: str) -> str:
    """Escape text for Slack mrkdwn: only &, < and > are special (they form links and
    mentions); everything else shows as typed."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def clip(text: str, limit: int) -> str:
    """At most `limit` characters, cut with an ellipsis; unlike `channels.text.clip` the text
    is kept as given (no blanks trimmed), as Slack's layouts always were."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def clip_escaped(text: str, limit: int) -> str:
    """Clip already-escaped mrkdwn without cutting an entity such as `&amp;` in half."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    amp = cut.rfind("&")
    if amp > cut.rfind(";"):
        cut = cut[:amp]
    return cut + "…"


def fallback_text(text: str) -> str:
    """A message's top-level `text`, what notifications and old clients show: escaped, clipped."""
    return clip_escaped(escape(text), FALLBACK_LIMIT)


def chunks(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


_ANGLE = re.compile(r"<([^<>]*)>")


def plain_from_mrkdwn(text: str, name_of: Any = None) -> str:
    """Slack sends message text as mrkdwn: `<@U123>`, `<#C1|general>`, `<https://x|label>`,
    and `&amp;` for `&`. The subscriber should read what the person saw, as plain text."""

    def readable(match: re.Match[str]) -> str:
        target, _, label = match.group(1).partition("|")
        if target.startswith("@"):
            return "@" + (label or (name_of(target[1:]) if name_of else None) or target[1:])
        if target.startswith("#"):
            return "#" + (label or target[1:])
        if target.startswith("!"):  # !here, !channel, !subteam^S1, !date^…
            return label or "@" + target[1:].split("^", 1)[0]
        url = target.removeprefix("mailto:")
        return f"{label} ({url})" if label and label != url else url

    text = _ANGLE.sub(readable, text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text or " ", "emoji": True}


def mrkdwn_block(text: str) -> dict[str, Any]:
    """`text` must already be escaped; `verbatim` stops Slack from linking names and URLs."""
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip_escaped(text, SECTION_LIMIT), "verbatim": True}}


def mrkdwn_section(label: str, value: str) -> dict[str, Any]:
    return mrkdwn_block(f"*{label}*\n{escape(value)}")


def mrkdwn_context(text: str, **block: Any) -> dict[str, Any]:
    """A context block of one verbatim mrkdwn line (`text` already escaped or our own)."""
    return {"type": "context", **block, "elements": [{"type": "mrkdwn", "text": text, "verbatim": True}]}


def transcript_text(lines: list[TranscriptLine], limit: int = SECTION_LIMIT) -> tuple[str, int]:
    """The newest transcript lines that fit one section, and how many older ones were left out."""
    rendered = [f"{line.author or line.role}: {hang(line.text)}" for line in lines]
    kept: list[str] = []
    size = 0
    for line in reversed(rendered):
        if size + len(line) + 1 > limit:
            break
        kept.append(line)
        size += len(line) + 1
    if not kept:  # the newest message alone is longer than a section
        kept = [clip(rendered[-1], limit)]
    return "\n".join(reversed(kept)), len(rendered) - len(kept)

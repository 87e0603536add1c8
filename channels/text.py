"""Text helpers the adapters share: clipping, UTF-16 lengths, splitting a long message into
parts (and remembering which parts went out), and fitting a brief into one message of a
provider with a length limit.

Each adapter still escapes for its own markup and renders its own template; what is the same
everywhere is how a too-long brief is shortened: first the oldest transcript lines go, then
the long parts of the brief are cut step by step (the budgets), and the link never is.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from bot.runtime.bounded import BoundedDict

Line = TypeVar("Line")


def clip(text: str, limit: int | None) -> str:
    """At most `limit` characters (None: no limit), cut with an ellipsis; surrounding blanks go."""
    text = text.strip()
    if limit is None or len(text) <= limit:
        return text
    return text[: max(0, limit - 1)].rstrip() + "…"


def utf16_len(text: str) -> int:
    """Telegram and WhatsApp count message length in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def split(text: str, limit: int, *, measure: Callable[[str], int] = utf16_len) -> list[str]:
    """Parts of at most `limit` units, cut at a line break or space near the end, so a long
    message arrives whole, in parts, rather than refused. A provider counts length its own
    way: `measure` is a text's length as it counts it (UTF-16 units by default; `len` counts
    characters; the length of the escaped text for a markup), growing with the text."""
    parts: list[str] = []
    while measure(text) > limit:
        cut = _longest_prefix_within(text, limit, measure)
        soft = max(text.rfind("\n", 0, cut), text.rfind(" ", 0, cut))
        if soft > cut // 2:
            cut = soft + 1
        parts.append(text[:cut].rstrip())
        text = text[cut:].lstrip("\n")
    parts.append(text)
    return [p for p in parts if p.strip()] or [text]


@dataclass(frozen=True)
class TextLimit:
    """A provider's limit on one message, declared on its adapter (`text_limit`): at most
    `units` as `measure` counts them (UTF-16 units by default, as Telegram and WhatsApp count;
    `len` counts characters; the length of the escaped text for a markup)."""

    units: int
    measure: Callable[[str], int] = utf16_len

    def fits(self, text: str, *, reserve: int = 0) -> bool:
        return self.measure(text) <= self.units - reserve

    def split(self, text: str, *, reserve: int = 0) -> list[str]:
        """`text` in parts that each fit beside `reserve` units of the adapter's own (a label,
        a part number, the markup around it), cut where `split` cuts."""
        return split(text, self.units - reserve, measure=self.measure)


def short_duration(seconds: float, *, at_least_a_minute: bool = False) -> str:
    """A duration as a chat message's help line says it: "2 h", "30 min", "45 s" (whole
    seconds). `bot.config.format_duration` spells units out ("30 minutes") for the core's own
    texts; these short units are what the provider templates have always shown.
    `at_least_a_minute`: under a second reads "1 min" rather than "0 h" (WhatsApp's rule)."""
    whole = int(seconds)
    if at_least_a_minute and whole == 0:
        return "1 min"
    if whole % 3600 == 0:
        return f"{whole // 3600} h"
    if whole % 60 == 0:
        return f"{whole // 60} min"
    return f"{whole} s"


def _longest_prefix_within(text: str, limit: int, measure: Callable[[str], int]) -> int:
    """How many characters of `text` fit in `limit` (a binary search: `measure` grows with
    the prefix, but need not add up character by character, as escaping does not)."""
    low, high = 0, len(text)
    while low < high:
        middle = (low + high + 1) // 2
        if measure(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    return low


class SentParts:
    """Which parts of a long message already went out, by the outbox's delivery key (stable
    across its attempts), so a retry after a later part failed sends only the rest. Held in
    this process, for the most recent `size` parts."""

    def __init__(self, size: int = 1000) -> None:
        self.size = size
        self._sent: BoundedDict[Hashable, str] = BoundedDict(size)

    async def send(self, key: Hashable | None, send: Callable[[], Awaitable[str]]) -> str:
        """`send()`'s message id, or the one an earlier attempt at this part got."""
        sent = self._sent.get(key) if key is not None else None
        if sent is None:
            sent = await send()
            if key is not None:
                self._sent[key] = sent
        return sent


@dataclass(frozen=True)
class Budget:
    """How much of a brief to show when the whole of it does not fit one message (None: all)."""

    summary: int | None = None
    action: int | None = None
    context_items: int | None = None
    context_key: int | None = None
    context_value: int | None = None
    field_items: int | None = None
    field_line: int | None = None


@dataclass(frozen=True)
class BriefCut(Generic[Line]):
    """The parts of a brief to render at one budget, with how much was left out."""

    summary: str
    action: str
    context: list[tuple[str, str]]
    context_left_out: int
    fields: list[str]
    fields_left_out: int
    transcript: Sequence[Line]
    transcript_left_out: int
    shortened: bool

    def shown(self) -> dict[str, object]:
        """What a template renders as it is (the summary and action need the adapter's escaping)."""
        return {"context": self.context, "context_left_out": self.context_left_out, "fields": self.fields,
                "fields_left_out": self.fields_left_out, "transcript": self.transcript,
                "transcript_left_out": self.transcript_left_out, "shortened": self.shortened}


def fit_brief(
    *, summary: str, action: str, context: list[tuple[str, str]], fields: list[str], lines: Sequence[Line],
    budgets: Sequence[Budget], render: Callable[[BriefCut[Line]], str], fits: Callable[[str], bool],
) -> str | None:
    """The first rendering that fits, trying each budget in order and, within one, the most
    (newest) transcript lines that fit; None when not even the last budget fits."""
    for level, budget in enumerate(budgets):
        shown_context = context if budget.context_items is None else context[: budget.context_items]
        shown_fields = fields if budget.field_items is None else fields[: budget.field_items]

        def at(kept: int, budget: Budget = budget, level: int = level, shown_context: list[tuple[str, str]] = shown_context,
               shown_fields: list[str] = shown_fields) -> str:
            return render(BriefCut(
                summary=clip(summary, budget.summary),
                action=clip(action, budget.action),
                context=[(clip(k, budget.context_key), clip(v, budget.context_value)) for k, v in shown_context],
                context_left_out=len(context) - len(shown_context),
                fields=[clip(f, budget.field_line) for f in shown_fields],
                fields_left_out=len(fields) - len(shown_fields),
                transcript=lines[len(lines) - kept:] if kept else [],
                transcript_left_out=len(lines) - kept,
                shortened=level > 0,
            ))

        if not fits(at(0)):
            continue
        low, high = 0, len(lines)  # the most transcript lines that fit (length grows with each)
        while low < high:
            middle = (low + high + 1) // 2
            if fits(at(middle)):
                low = middle
            else:
                high = middle - 1
        return at(low)
    return None

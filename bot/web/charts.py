"""Inline SVG charts for the reports page: no script, no external asset, nothing the page's
Content-Security-Policy has to allow. Each chart is a `viewBox` drawing that scales to its
container (so it fits a phone), with a `<title>` per bar for a pointer and `role="img"` plus
an `aria-label`; the numbers themselves are always in a table beside it, which is what a
screen reader reads. Every label is escaped here (markupsafe), so a channel label can never
break the markup."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

_WIDTH, _HEIGHT, _GUTTER = 600, 220, 28


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    hint: str = ""  # what the bar's tooltip says beside its label and value


def columns(bars: Sequence[Bar], *, label: str) -> Markup:
    """Vertical bars side by side (handoffs per day): the tallest fills the height."""
    if not bars:
        return _empty(label)
    top = max(bar.value for bar in bars) or 1
    step = _WIDTH / len(bars)
    width = max(step * 0.7, 1)
    shapes = []
    for index, bar in enumerate(bars):
        height = (_HEIGHT - _GUTTER) * bar.value / top
        x, y = index * step + (step - width) / 2, _HEIGHT - _GUTTER - height
        shapes.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}">'
            f"<title>{escape(bar.label)}: {_number(bar.value)}{escape(bar.hint)}</title></rect>"
        )
        if len(bars) <= 14 or index % max(len(bars) // 7, 1) == 0:  # a label every few bars on a long range
            shapes.append(f'<text class="axis" x="{index * step + step / 2:.1f}" y="{_HEIGHT - 8}" '
                          f'text-anchor="middle">{escape(bar.label)}</text>')
    return _svg(label, "".join(shapes))


def rows(bars: Sequence[Bar], *, label: str) -> Markup:
    """Horizontal bars, one per line (a histogram's buckets, the release reasons)."""
    if not any(bar.value for bar in bars):
        return _empty(label)
    top = max(bar.value for bar in bars) or 1
    line = 26
    height = line * len(bars) + 4
    text_width = 170
    shapes = []
    for index, bar in enumerate(bars):
        y = index * line + 4
        length = (_WIDTH - text_width - 60) * bar.value / top
        shapes.append(
            f'<text class="axis" x="{text_width - 8}" y="{y + 15}" text-anchor="end">{escape(bar.label)}</text>'
            f'<rect class="bar" x="{text_width}" y="{y}" width="{max(length, 0):.1f}" height="{line - 8}">'
            f"<title>{escape(bar.label)}: {_number(bar.value)}{escape(bar.hint)}</title></rect>"
            f'<text class="value" x="{text_width + length + 6:.1f}" y="{y + 15}">{_number(bar.value)}</text>'
        )
    return _svg(label, "".join(shapes), height=height)


def _svg(label: str, body: str, *, height: int = _HEIGHT) -> Markup:
    return Markup(
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {height}" preserveAspectRatio="xMidYMid meet" role="img" '
        f'aria-label="{escape(label)}" xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def _empty(label: str) -> Markup:
    return Markup(f'<p class="chart-empty">{escape(label)}: nothing in this range.</p>')


def _number(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"

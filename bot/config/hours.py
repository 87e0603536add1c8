"""Office hours (`hours:`): named weekly schedules with a timezone and holidays, which a
channel names with `hours: <name>`. This module only parses and checks them; when a
schedule is open is worked out in the domain (`bot/domain/hours.py`)."""

from __future__ import annotations

import difflib
import re
from datetime import date
from functools import cache
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from pydantic import BeforeValidator, Field, field_validator, model_validator

from bot.config.values import _Section

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")  # index = date.weekday()
_MINUTES_PER_DAY = 24 * 60
_TIME = re.compile(r"(\d{1,2}):(\d{2})")
_DAYS_HELP = "a day (mon..sun), a range (mon-fri) or a list (sat,sun)"
_WINDOWS_HELP = 'windows such as "09:00-18:00" or "09:00-12:00, 13:00-18:00", or "24h" or "closed"'


class Window(_Section):
    """One opening on one day, in minutes after local midnight: `end` may be 1440 (24:00)."""

    start: int = Field(ge=0, lt=_MINUTES_PER_DAY)
    end: int = Field(gt=0, le=_MINUTES_PER_DAY)

    def __str__(self) -> str:
        return f"{_clock_text(self.start)}-{_clock_text(self.end)}"


def _clock_text(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _minute_of(text: str, *, end: bool) -> int:
    match = _TIME.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"{text.strip()!r} is not a time such as 09:00; use {_WINDOWS_HELP}")
    hour, minute = int(match.group(1)), int(match.group(2))
    if (hour, minute) == (24, 0) and end:
        return _MINUTES_PER_DAY
    if hour > 23 or minute > 59:
        raise ValueError(f"{text.strip()!r} is not a time of day (00:00 to 23:59, or 24:00 as an end)")
    return hour * 60 + minute


def _parse_windows(value: Any) -> tuple[Window, ...]:
    """`"09:00-12:00, 13:00-18:00"` -> two windows; `"24h"` -> the whole day; `"closed"` -> none."""
    if isinstance(value, tuple) and all(isinstance(w, Window) for w in value):
        return value
    if not isinstance(value, str):
        raise ValueError(f"expected {_WINDOWS_HELP}")
    text = value.strip().lower()
    if text == "closed":
        return ()
    if text == "24h":
        return (Window(start=0, end=_MINUTES_PER_DAY),)
    windows = []
    for part in text.split(","):
        start, dash, end = part.partition("-")
        if not dash:
            raise ValueError(f"{part.strip()!r} is not a window; use {_WINDOWS_HELP}")
        window = Window(start=_minute_of(start, end=False), end=_minute_of(end, end=True))
        if window.end <= window.start:
            raise ValueError(f"{window} ends before it starts; a window cannot cross midnight, split it over two days")
        windows.append(window)
    windows.sort(key=lambda w: w.start)
    _refuse_overlaps(windows, where=repr(value.strip()))
    return tuple(windows)


def _refuse_overlaps(windows: list[Window], *, where: str) -> None:
    for before, after in zip(windows, windows[1:], strict=False):
        if after.start < before.end:
            raise ValueError(f"{before} and {after} overlap in {where}; join them or move one")


def _parse_days(value: Any) -> tuple[int, ...]:
    """`"mon-fri"` -> (0, 1, 2, 3, 4); `"sat,sun"` -> (5, 6); weekday numbers as `date.weekday()`."""
    if isinstance(value, tuple):
        return value
    days: list[int] = []
    for part in str(value).lower().replace(" ", "").split(","):
        first, dash, last = part.partition("-")
        if first not in DAY_NAMES or (dash and last not in DAY_NAMES):
            raise ValueError(f"{part!r} is not {_DAYS_HELP}")
        low, high = DAY_NAMES.index(first), DAY_NAMES.index(last or first)
        if high < low:
            raise ValueError(f"{part!r} runs backwards; write it as {first}-sun,mon-{last} or name the days")
        days.extend(range(low, high + 1))
    return tuple(sorted(set(days)))


def _holiday(value: Any) -> Any:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value).strip())
    except ValueError:
        raise ValueError(f"{value!r} is not a date such as 2026-12-25") from None


_Days = Annotated[tuple[int, ...], BeforeValidator(_parse_days)]
_Windows = Annotated[tuple[Window, ...], BeforeValidator(_parse_windows)]
_Holiday = Annotated[date, BeforeValidator(_holiday)]


@cache
def _zone_names() -> list[str]:
    return sorted(available_timezones())


class HoursConfig(_Section):
    """One named schedule: when the people behind a channel are there, in their own
    timezone, so a change of daylight saving time moves the hours with the wall clock."""

    timezone: str = Field(description="An IANA timezone such as Europe/Berlin.")
    weekly: dict[_Days, _Windows] = Field(
        default_factory=dict, description='Days and their windows, e.g. {mon-fri: "09:00-18:00"}; other days are closed.',
    )
    holidays: list[_Holiday] = Field(default_factory=list, description="Dates (YYYY-MM-DD) closed all day.")

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            close = difflib.get_close_matches(value, _zone_names(), n=1)
            guess = f"; did you mean '{close[0]}'?" if close else ""
            raise ValueError(f"unknown timezone {value!r}; use an IANA name such as Europe/Berlin{guess}") from None
        return value

    @model_validator(mode="after")
    def _one_set_of_windows_per_day(self) -> HoursConfig:
        """A day named by two keys (mon-fri and mon) gets both keys' windows; they must not overlap."""
        for weekday, name in enumerate(DAY_NAMES):
            _refuse_overlaps(list(self.windows_on(weekday)), where=f"the windows for {name}")
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def windows_on(self, weekday: int) -> tuple[Window, ...]:
        """The day's windows, earliest first, whichever keys name the day."""
        found = [w for days, windows in self.weekly.items() if weekday in days for w in windows]
        return tuple(sorted(found, key=lambda w: w.start))


ScheduleName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,39}$")]

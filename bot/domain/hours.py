"""When a channel's people are there: `is_open` and `next_opening` for an office-hours
schedule (`bot/config/hours.py`), and `OfficeHours`, which tells for a channel whether it
is closed now and until when. Pure: the instant is passed in (the desk's clock), and every
wall-clock time is turned into an instant in the schedule's own timezone on its own date,
so the hours follow a change of daylight saving time."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from bot.config import HoursConfig, Window
from bot.runtime.clock import Clock
from channels.base import ChannelConfig


def is_open(hours: HoursConfig, at: datetime) -> bool:
    """Whether `at` (timezone-aware) falls in one of the day's windows, on the local wall clock."""
    local = at.astimezone(hours.zone)
    if local.date() in hours.holidays:
        return False
    minute = local.hour * 60 + local.minute
    return any(w.start <= minute < w.end for w in hours.windows_on(local.weekday()))


def next_opening(hours: HoursConfig, at: datetime) -> datetime | None:
    """The first instant at or after `at` when the schedule is open: `at` itself when it is
    open now; None when no window is ever open (every day closed)."""
    if is_open(hours, at):
        return at
    if not any(hours.windows_on(day) for day in range(7)):
        return None
    zone = hours.zone
    first_day = at.astimezone(zone).date()
    # Each holiday can push the opening back one day; a week later every open weekday has come round.
    for offset in range(len(hours.holidays) + 8):
        day = first_day + timedelta(days=offset)
        if day in hours.holidays:
            continue
        for window in hours.windows_on(day.weekday()):
            later = [opening for opening in _openings(day, window, zone) if opening > at]
            if later:
                return later[0]
    return None  # unreachable while every holiday is one date; kept so a change cannot loop for ever


def _openings(day: date, window: Window, zone: ZoneInfo) -> list[datetime]:
    """The instants the window opens on `day`, earliest first: one, or two when the clocks go
    back through its start (the wall time happens twice, and so does the opening). A start
    the clocks skip (inside a spring-forward gap) opens when they jump: zoneinfo places it
    after the gap, so it is walked back to the first minute whose wall time is already past
    the start, which is where `is_open` first says yes."""
    wall = datetime.combine(day, time(window.start // 60, window.start % 60))
    first, second = (wall.replace(tzinfo=zone, fold=fold).astimezone(UTC) for fold in (0, 1))
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return [first] if second == first else [first, second]
    opening = first
    while (opening - _MINUTE).astimezone(zone).replace(tzinfo=None) >= wall:  # at most the gap's length
        opening -= _MINUTE
    return [opening]


_MINUTE = timedelta(minutes=1)


@dataclass(frozen=True)
class Closed:
    """A channel outside its hours at `now`; `back` is when they next begin (None: never again)."""

    now: datetime
    back: datetime | None
    timezone: str

    @property
    def back_text(self) -> str | None:
        """`Mon 09:00 (Europe/Berlin)`, with the date when it is a week or more away."""
        if self.back is None:
            return None
        shape = "%a %H:%M" if self.back - self.now < timedelta(days=6) else "%a %d %b %H:%M"
        return f"{self.back.strftime(shape)} ({self.timezone})"


class OfficeHours:
    """The schedules of the config, asked about channels at the desk's clock."""

    def __init__(self, schedules: Mapping[str, HoursConfig], clock: Clock) -> None:
        self.schedules, self.clock = schedules, clock

    def closed(self, channel: ChannelConfig) -> Closed | None:
        """None when the channel names no hours or is open now; otherwise when it reopens."""
        hours = self.schedules.get(channel.hours) if channel.hours else None
        if hours is None:
            return None
        now = self.clock.now()
        if is_open(hours, now):
            return None
        opening = next_opening(hours, now)
        return Closed(now=now, back=opening.astimezone(hours.zone) if opening else None, timezone=hours.timezone)

"""A schedule that is closed at the clock it comes with, for the channel tests that check
each provider shows a brief's out-of-hours line: open Mondays 09:00-17:00 UTC, asked on a
Tuesday at noon."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.runtime.clock import ManualClock

CLOSED_HOURS: dict[str, Any] = {"mondays": {"timezone": "UTC", "weekly": {"mon": "09:00-17:00"}}}
OUTSIDE_HOURS_LINE = (
    "This arrived outside your office hours; the subscriber was told to expect an answer once they are back, Mon 09:00 (UTC)."
)


def closed_clock() -> ManualClock:
    """Tuesday 1 December 2026, 12:00 UTC: the schedule above reopens on Monday at 09:00."""
    return ManualClock(datetime(2026, 12, 1, 12, 0, tzinfo=UTC))

"""bot/runtime/clock.py: time as a dependency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.runtime.clock import Clock, ManualClock


def test_the_wall_clock_is_aware_utc() -> None:
    before = datetime.now(UTC)
    now = Clock().now()
    assert now.tzinfo is UTC
    assert before <= now <= datetime.now(UTC)


def test_a_manual_clock_stands_still_until_advanced() -> None:
    start = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    clock = ManualClock(start)
    assert clock.now() == start
    assert clock.now() == start
    assert clock.advance(timedelta(minutes=90)) == datetime(2030, 1, 1, 13, 30, tzinfo=UTC)
    assert clock.now() == datetime(2030, 1, 1, 13, 30, tzinfo=UTC)


def test_a_manual_clock_starts_at_the_present_by_default() -> None:
    before = datetime.now(UTC)
    assert before <= ManualClock().now() <= datetime.now(UTC)

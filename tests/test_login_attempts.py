"""Wrong owner tokens counted per client address (bot/web/login_attempts.py)."""

from __future__ import annotations

from datetime import timedelta

from structlog.testing import capture_logs

from bot.runtime.clock import ManualClock
from bot.web.login_attempts import LoginAttempts


def test_an_address_that_spent_its_failures_waits_and_a_success_gives_them_back() -> None:
    clock = ManualClock()
    attempts = LoginAttempts(5, clock, ["127.0.0.1"])
    for _ in range(4):
        attempts.failed("198.51.100.7")
        assert attempts.locked_for("198.51.100.7") == 0
    with capture_logs() as logs:
        attempts.failed("198.51.100.7")
    assert attempts.locked_for("198.51.100.7") == 12  # one more try every 60/5 s
    assert attempts.locked_for("198.51.100.8") == 0  # other addresses are not held up
    assert [(e["event"], e["client"], e["retry_after"]) for e in logs] == [("inbox_login_locked_out", "198.51.100.7", 12)]
    clock.advance(timedelta(seconds=12))
    assert attempts.locked_for("198.51.100.7") == 0
    attempts.succeeded("198.51.100.7")
    for _ in range(4):
        attempts.failed("198.51.100.7")
    assert attempts.locked_for("198.51.100.7") == 0  # the success gave all five back

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


def test_an_account_waits_after_its_failures_from_any_address_keyed_by_the_address_typed() -> None:
    clock = ManualClock()
    attempts = LoginAttempts(100, clock, ["127.0.0.1"], per_account=3)
    for n in range(3):
        assert attempts.locked_for(f"198.51.100.{n}", "Olga@Example.com") == 0
        attempts.failed(f"198.51.100.{n}", "Olga@Example.com")
    assert attempts.locked_for("203.0.113.1", " olga@example.com") == 300  # one more try every 15/3 minutes
    assert attempts.locked_for("203.0.113.1") == 0  # the address itself may still try other accounts
    assert attempts.locked_for("203.0.113.1", "ben@example.com") == 0
    clock.advance(timedelta(minutes=5))
    assert attempts.locked_for("203.0.113.1", "olga@example.com") == 0
    attempts.succeeded("203.0.113.1", "olga@example.com")
    for _ in range(2):
        attempts.failed("203.0.113.1", "olga@example.com")
    assert attempts.locked_for("203.0.113.2", "olga@example.com") == 0  # the success gave all three back

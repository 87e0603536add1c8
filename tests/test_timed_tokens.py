"""Signed tokens that expire by the desk's clock (bot/runtime/timed_tokens.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.runtime.clock import ManualClock
from bot.runtime.timed_tokens import TimedTokens, TokenRefused

KEYS = ["an-older-key-0123456789", "the-current-key-0123456789"]


def reason(tokens: TimedTokens, token: str) -> str:
    with pytest.raises(TokenRefused) as refused:
        tokens.payload(token)
    return refused.value.reason


def test_a_token_holds_its_strings_until_it_is_too_old_by_the_desks_clock() -> None:
    clock = ManualClock()
    tokens = TimedTokens(KEYS, "salt-a", clock, timedelta(minutes=5))
    token = tokens.token(["olga", "none"])
    clock.advance(timedelta(minutes=5))
    assert tokens.payload(token) == ["olga", "none"]
    clock.advance(timedelta(seconds=1))
    assert reason(tokens, token) == "expired"
    clock.advance(timedelta(minutes=-10))  # a clock moved back: a token from the future is refused too
    assert reason(tokens, token) == "expired"


def test_a_token_of_another_salt_or_key_or_shape_is_invalid() -> None:
    clock = ManualClock()
    tokens = TimedTokens(KEYS, "salt-a", clock, timedelta(minutes=5))
    token = tokens.token(["olga"])
    assert reason(TimedTokens(KEYS, "salt-b", clock, timedelta(minutes=5)), token) == "invalid"
    assert reason(TimedTokens(["someone-elses-key-0123"], "salt-a", clock, timedelta(minutes=5)), token) == "invalid"
    assert TimedTokens([KEYS[1]], "salt-a", clock, timedelta(minutes=5)).payload(token) == ["olga"]  # the newest key signs
    rotated = TimedTokens([KEYS[1], "a-newer-key-0123456789"], "salt-a", clock, timedelta(minutes=5))
    assert rotated.payload(token) == ["olga"]  # a key kept after a rotation still verifies
    assert reason(tokens, token + "x") == "invalid"
    assert reason(tokens, "not-a-token") == "invalid"

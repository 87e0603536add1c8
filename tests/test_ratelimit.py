"""Token buckets (bot/runtime/ratelimit.py): the whole allowance at once, then an even refill, and a
bounded memory."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.runtime.clock import ManualClock
from bot.runtime.ratelimit import TokenBuckets


def test_a_bucket_allows_a_burst_then_one_per_interval() -> None:
    clock = ManualClock()
    buckets = TokenBuckets(3, clock)
    assert [buckets.take("a") for _ in range(3)] == [0, 0, 0]
    assert buckets.take("a") == 20  # one every 60/3 s
    assert buckets.take("b") == 0  # keys are independent
    clock.advance(timedelta(seconds=20))
    assert buckets.take("a") == 0
    assert buckets.take("a") == 20


def test_the_buckets_stay_small() -> None:
    clock = ManualClock()
    buckets = TokenBuckets(10, clock, max_keys=100)
    for n in range(150):
        assert buckets.take(f"198.51.100.{n}") == 0
    assert len(buckets) == 100  # a flood from many addresses: the least recently seen go
    clock.advance(timedelta(minutes=2))
    buckets.take("203.0.113.1")
    assert len(buckets) == 1  # refilled buckets are forgotten: they equal a new one


def test_looking_spends_nothing_and_forgetting_refills() -> None:
    clock = ManualClock()
    buckets = TokenBuckets(2, clock)
    assert buckets.wait("a") == 0
    buckets.take("a")
    buckets.take("a")
    assert buckets.wait("a") == buckets.wait("a") == 30  # looking twice spends nothing
    clock.advance(timedelta(seconds=10))
    assert buckets.wait("a") == pytest.approx(20)
    buckets.forget("a")
    assert [buckets.take("a") for _ in range(2)] == [0, 0]

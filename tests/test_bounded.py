"""BoundedDict (bot/runtime/bounded.py): the one bounded cache the adapters, the fronts and
the MCP bridge share."""

from __future__ import annotations

import pytest

from bot.runtime.bounded import BoundedDict


def test_it_forgets_the_least_recently_stored_key_beyond_its_size() -> None:
    cache: BoundedDict[str, int] = BoundedDict(2)
    cache["a"], cache["b"], cache["c"] = 1, 2, 3
    assert list(cache.items()) == [("b", 2), ("c", 3)]


def test_storing_a_key_again_makes_it_the_most_recent() -> None:
    cache: BoundedDict[str, int] = BoundedDict(2)
    cache["a"], cache["b"] = 1, 2
    cache["a"] = 10
    cache["c"] = 3
    assert list(cache) == ["a", "c"]


def test_reading_keeps_the_order_of_storing_unless_asked_to_refresh() -> None:
    by_storing: BoundedDict[str, int] = BoundedDict(2)
    by_use: BoundedDict[str, int] = BoundedDict(2, refresh_on_read=True)
    for cache in (by_storing, by_use):
        cache["a"], cache["b"] = 1, 2
        assert cache.get("a") == 1
        cache["c"] = 3
    assert list(by_storing) == ["b", "c"]
    assert list(by_use) == ["a", "c"]


def test_a_missing_key_reads_as_the_default_and_changes_nothing() -> None:
    cache: BoundedDict[str, int] = BoundedDict(2, refresh_on_read=True)
    cache["a"] = 1
    assert cache.get("z") is None
    assert cache.get("z", 0) == 0
    assert list(cache) == ["a"]


def test_a_size_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        BoundedDict(0)

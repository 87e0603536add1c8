"""Per-key token buckets for the public doors (the web chat API, provider fronts, the inbox
login's failures), kept in each server instance's memory and timed by the desk's clock, so
tests step time."""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.runtime.clock import Clock


class TokenBuckets:
    """One bucket per key holding up to `per_minute` tokens, refilled evenly over a minute
    (or over `period`, for a slower door: five wrong passwords per account per 15 minutes):
    a key may spend them all at once, then one every period/per_minute.

    A bucket that has filled up again is the same as none, so those are dropped once a
    minute; past `max_keys` (a flood from many addresses) the least recently used go first."""

    def __init__(self, per_minute: int, clock: Clock, max_keys: int = 50_000, *,
                 period: timedelta = timedelta(minutes=1)) -> None:
        self.capacity, self.rate = float(per_minute), per_minute / period.total_seconds()
        self.clock, self.max_keys = clock, max_keys
        self._buckets: dict[str, tuple[float, datetime]] = {}  # key → (tokens, as of); oldest use first
        self._pruned: datetime | None = None

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, key: str) -> float:
        """Spend a token: 0.0 if there was one, else the seconds until there is."""
        now = self.clock.now()
        tokens = self._level(key, now)
        wait = 0.0 if tokens >= 1 else (1 - tokens) / self.rate
        self._buckets.pop(key, None)
        self._buckets[key] = (tokens - 1 if not wait else tokens, now)
        self._prune(now)
        return wait

    def wait(self, key: str) -> float:
        """The seconds until `key` has a token again (0.0 if it has one), spending nothing: for
        a door that counts only failures and must look before it lets an attempt through."""
        tokens = self._level(key, self.clock.now())
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def forget(self, key: str) -> None:
        """Give `key` its whole allowance back (a success resets what its failures spent)."""
        self._buckets.pop(key, None)

    def _level(self, key: str, now: datetime) -> float:
        tokens, at = self._buckets.get(key, (self.capacity, now))
        return min(self.capacity, tokens + max(0.0, (now - at).total_seconds()) * self.rate)

    def _prune(self, now: datetime) -> None:
        if self._pruned is None or (now - self._pruned).total_seconds() >= 60:
            self._pruned = now
            for key in [k for k in self._buckets if self._level(k, now) >= self.capacity]:
                del self._buckets[key]
        while len(self._buckets) > self.max_keys:
            del self._buckets[next(iter(self._buckets))]

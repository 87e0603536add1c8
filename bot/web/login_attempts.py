"""How many wrong owner tokens one client may try at the inbox login.

`owner.token` is one shared password in front of everything the inbox can do, so guessing
it is bounded: each client address (an IPv6 client is its /64, bot/web/client_address.py)
may fail `owner.max_login_failures_per_minute` times at once, then once more every
60/N seconds. Only failures spend the allowance, and a success gives it back whole. While an
address has none left, every login from it is refused with 429 and Retry-After, the right
token included, so a guesser learns nothing from the answer; the page says when to try
again. The moment an address runs out is logged (`inbox_login_locked_out`, with the
address), once per lock-out.

The counts live in this instance's memory (a token bucket per address, bounded, timed by
the desk's clock), as the web chat's limits do: several instances each allow as many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated

import structlog
from fastapi import Depends, Request

from bot.runtime.clock import Clock
from bot.runtime.ratelimit import TokenBuckets
from bot.web.client_address import Network, address_key, client_ip, trusted_networks
from bot.web.deps import ClockDep, ConfigDep

log = structlog.get_logger(__name__)


class LoginAttempts:
    """The failed logins of each client address, in this instance."""

    def __init__(self, per_minute: int, clock: Clock, trusted_proxies: Sequence[Network | str]) -> None:
        self.per_minute = per_minute
        self.failures = TokenBuckets(per_minute, clock)
        self.trusted_proxies = trusted_networks(trusted_proxies)

    def client(self, request: Request) -> str:
        return address_key(client_ip(request, self.trusted_proxies))

    def locked_for(self, client: str) -> int:
        """Whole seconds until `client` may try again; 0 when it may try now."""
        wait = self.failures.wait(client)
        return max(1, math.ceil(wait)) if wait else 0

    def failed(self, client: str) -> None:
        self.failures.take(client)
        locked = self.locked_for(client)
        if locked:
            log.warning("inbox_login_locked_out", client=client, retry_after=locked,
                        failures_per_minute=self.per_minute)

    def succeeded(self, client: str) -> None:
        self.failures.forget(client)


async def login_attempts(request: Request, config: ConfigDep, clock: ClockDep) -> LoginAttempts:
    """This app's counts, made on first use from the owner section and the desk's clock."""
    attempts: LoginAttempts | None = getattr(request.app.state, "login_attempts", None)
    if attempts is None:
        attempts = request.app.state.login_attempts = LoginAttempts(
            config.owner.max_login_failures_per_minute, clock, config.server.trusted_proxies,
        )
    return attempts


LoginAttemptsDep = Annotated[LoginAttempts, Depends(login_attempts)]

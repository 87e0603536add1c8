"""How many wrong sign-ins one client address, and one account, may try at the inbox login.

Guessing is bounded twice. Each client address (an IPv6 client is its /64,
bot/web/client_address.py) may fail `owner.max_login_failures_per_minute` times at once
(a wrong owner token, a wrong password, a wrong TOTP code), then once more every 60/N
seconds. Each account may fail `sign_in.max_failures_per_account` times per 15 minutes,
whichever addresses the guesses come from, then once more every 15/N minutes. The account
is keyed by the e-mail address as typed, lower-cased, whether or not anybody has it, so a
lock-out tells nothing about which addresses exist. Only failures spend an allowance; a
complete sign-in (the password and, where needed, the TOTP code) gives its address and
account their allowance back whole. While an address or account has none left, every
sign-in from or to it is refused with 429 and Retry-After, the right password included, so a
guesser learns nothing from the answer; the page says when to try again. The moment one runs
out is logged (`inbox_login_locked_out`, with the address, or `inbox_account_locked_out`),
once per lock-out; the account's log line carries no address, which may be a typo of a
password.

The counts live in this instance's memory (token buckets, bounded, timed by the desk's clock),
as the web chat's limits do: several instances each allow as many.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import timedelta
from typing import Annotated

import structlog
from fastapi import Depends, Request

from bot.domain.people import email_key
from bot.runtime.clock import Clock
from bot.runtime.ratelimit import TokenBuckets
from bot.web.client_address import Network, address_key, client_ip, trusted_networks
from bot.web.deps import ClockDep, ConfigDep

log = structlog.get_logger(__name__)

ACCOUNT_PERIOD = timedelta(minutes=15)


def _seconds(buckets: TokenBuckets, key: str) -> int:
    wait = buckets.wait(key)
    return max(1, math.ceil(wait)) if wait else 0


class LoginAttempts:
    """The failed sign-ins of each client address and each account, in this instance."""

    def __init__(self, per_minute: int, clock: Clock, trusted_proxies: Sequence[Network | str], *,
                 per_account: int = 5) -> None:
        self.per_minute, self.per_account = per_minute, per_account
        self.failures = TokenBuckets(per_minute, clock)
        self.account_failures = TokenBuckets(per_account, clock, period=ACCOUNT_PERIOD)
        self.trusted_proxies = trusted_networks(trusted_proxies)

    def client(self, request: Request) -> str:
        return address_key(client_ip(request, self.trusted_proxies))

    def locked_for(self, client: str, account: str | None = None) -> int:
        """Whole seconds until `client` (and `account`, an e-mail address, when given) may try
        again; 0 when it may try now."""
        by_address = _seconds(self.failures, client)
        return max(by_address, _seconds(self.account_failures, email_key(account))) if account is not None else by_address

    def failed(self, client: str, account: str | None = None) -> None:
        self.failures.take(client)
        locked = _seconds(self.failures, client)
        if locked:
            log.warning("inbox_login_locked_out", client=client, retry_after=locked,
                        failures_per_minute=self.per_minute)
        if account is not None:
            key = email_key(account)
            self.account_failures.take(key)
            locked = _seconds(self.account_failures, key)
            if locked:
                log.warning("inbox_account_locked_out", retry_after=locked, failures_per_15_minutes=self.per_account)

    def succeeded(self, client: str, account: str | None = None) -> None:
        self.failures.forget(client)
        if account is not None:
            self.account_failures.forget(email_key(account))


async def login_attempts(request: Request, config: ConfigDep, clock: ClockDep) -> LoginAttempts:
    """This app's counts, made on first use from the config and the desk's clock."""
    attempts: LoginAttempts | None = getattr(request.app.state, "login_attempts", None)
    if attempts is None:
        attempts = request.app.state.login_attempts = LoginAttempts(
            config.owner.max_login_failures_per_minute, clock, config.server.trusted_proxies,
            per_account=config.sign_in.max_failures_per_account,
        )
    return attempts


LoginAttemptsDep = Annotated[LoginAttempts, Depends(login_attempts)]

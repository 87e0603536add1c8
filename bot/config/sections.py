"""The small top-level sections of the config: `server`, `api`, `owner`, `metrics`,
`handoff`, `delivery`, `retention` and `logging`."""

from __future__ import annotations

import ipaddress
from datetime import timedelta
from typing import Annotated, Literal
from urllib.parse import urlparse

from pydantic import Field, IPvAnyNetwork, field_validator

from bot.config.values import DataSize, Duration, OptionalSecret, _empty_to_none, _Section, between, http_url


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = Field(
        default=None, description="Base URL people and providers use to reach this server (links, webhooks)."
    )

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        value = _empty_to_none(value)
        return None if value is None else http_url(value, "https://desk.example.com")

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Extra Host names the server answers to, besides public_url's host and loopback names.",
    )
    trusted_proxies: list[IPvAnyNetwork] = Field(
        default_factory=lambda: [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128")],
        description="Reverse proxies (addresses or CIDRs) whose X-Forwarded-For names the client; "
                    "only they are believed. The default trusts a proxy on this host.",
    )
    # The largest provider calls are chat event callbacks (a message of up to 40,000
    # characters with its formatting blocks: a few hundred KB at worst); the other providers
    # send far less, and mail does not arrive over HTTP at all.
    max_body: DataSize = Field(
        default=1024**2,
        description="Largest request body /api, the web chat's API and provider webhooks take (413 above it).",
    )
    # A return form of 20 fields of 10,000 characters of ordinary text fits; the inbox's
    # reply (10,000 characters) and its login are far smaller.
    max_form_body: DataSize = Field(
        default=512 * 1024,
        description="Largest body of a form post (return form, approval pages, owner inbox and its login).",
    )

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def trusted_hosts(self) -> list[str]:
        """Host headers to accept: anything else (DNS rebinding) gets a 400."""
        hosts = {"localhost", "127.0.0.1", "::1", "[::1]", urlparse(self.base_url).hostname or "", *self.allowed_hosts}
        if not _is_loopback(self.host) and self.host not in ("0.0.0.0", "::"):
            hosts.add(self.host)
        return sorted(h for h in hosts if h)


class ApiConfig(_Section):
    key: OptionalSecret = Field(default=None, description="Bearer token for /api; empty disables the check.")
    idempotency_ttl: Duration = Field(
        default=timedelta(hours=24),
        description="How long the answer to a request sent with an Idempotency-Key is kept to replay to its retries.",
    )

    @field_validator("idempotency_ttl")
    @classmethod
    def _retry_window(cls, value: timedelta) -> timedelta:
        if value < timedelta(hours=24):
            raise ValueError("must be at least 24h: a client may retry a request for up to a day")
        return value


class OwnerConfig(_Section):
    token: OptionalSecret = Field(default=None, description="Password of the owner inbox; empty leaves it open.")
    max_login_failures_per_minute: int = Field(
        default=5, ge=1, le=1000,
        description="Wrong inbox passwords one client address may try per minute before it must wait (429).",
    )


class MetricsConfig(_Section):
    token: OptionalSecret = Field(
        default=None, description="Bearer token /metrics asks for; empty leaves it open (fine on 127.0.0.1 only)."
    )


class HandoffSettings(_Section):
    idle_timeout: Duration = timedelta(minutes=30)
    form_link_ttl: Duration = timedelta(hours=24)
    user_action_timeout: Duration = timedelta(minutes=5)
    dispatch_timeout: Duration = Field(
        default=timedelta(seconds=20),
        description="How long handoff_request may spend delivering (retries included) before it fails.",
    )
    sweep_interval: Duration = Field(
        default=timedelta(seconds=30),
        description="How often overdue idle deadlines are swept (catches restarts and other instances).",
    )
    transcript_messages: int = Field(default=20, ge=0, le=200, description="Recent messages attached to a dispatch.")


class DeliverySettings(_Section):
    """How the outbox retries transient channel errors (timeouts, 429, 5xx), and how soon
    the work of a desk process that died is taken over."""

    max_attempts: int = Field(default=10, ge=1, le=100)
    base_backoff: Duration = timedelta(seconds=1)
    max_backoff: Duration = timedelta(minutes=10)
    heartbeat: Annotated[Duration, between("0.3s", "5m")] = Field(
        default=timedelta(seconds=3),
        description="An instance not heard from for this long is dead; another takes over what it was "
                    "sending or working (each instance beats three times per heartbeat).",
    )
    lease: Annotated[Duration, between("15s", "1h", "each send times out 10 s before it")] = Field(
        default=timedelta(seconds=60),
        description="Longest one send may hold its item, even for a live instance (a backstop; sends time out before it).",
    )



class RetentionSettings(_Section):
    """How long delivery bookkeeping is kept. The audit trail and the conversations are not
    pruned; these rows are copies made to deliver and deduplicate, and every subscriber
    message on a front adds one of each."""

    inbound_events: Duration | None = Field(
        default=timedelta(days=7),
        description="Processed inbound events (kept to drop provider redeliveries) older than this are deleted; "
                    "null keeps them.",
    )
    outbox: Duration | None = Field(
        default=timedelta(days=30),
        description="Sent or given-up outbox items (copies of the messages) older than this are deleted; null keeps them.",
    )
    every: Duration = Field(default=timedelta(hours=1), description="How often the pruning runs.")

    @field_validator("inbound_events")
    @classmethod
    def _dedupe_window(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(days=1):
            raise ValueError("must be at least 1d: providers redeliver events for up to a day")
        return value


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

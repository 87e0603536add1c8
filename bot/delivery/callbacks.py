"""Callbacks: the desk's signed POSTs to the owner's endpoints, delivered by the outbox.

A background task's orchestrator (config `user_actions.webhook`) hears about user actions,
and an approved HTTP action (`actions[].run.url`) is called, through `Callback` messages
(channels/base.py). They are stored in the transaction of the change they report and retried
by the outbox (bot/delivery/outbox.py), which stays the one place that retries, orders and
audits: a callback is an outbox item on the reserved channel id `CALLBACKS`, and the outbox
hands it to the `CallbackSender` here instead of a channel adapter. So a crash or a restart
between the change and the call loses nothing, and every attempt carries the same
`X-Handoff-Delivery`, by which the endpoint drops a repeat.

The sender maps an endpoint's answer onto the channel error tree, so the outbox treats it as
any provider: 2xx delivered (its JSON is the receipt's `answer`), 408, 429 and 5xx worth
retrying (after the Retry-After asked for), any other status refused for good, no connection
worth retrying, and no answer in time possibly arrived (retried: the endpoint knows the
delivery id). Nothing reconciles: the endpoint is the one who can tell a repeat.

Once a callback is settled (delivered, or given up), its recording transaction records a
`CallbackSettled` signal, so the service that queued it (approvals: the agent reads what the
action returned) hears it after the commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import httpx

from bot.config import Config, HttpActionRun
from bot.runtime.signed_http import answer_of, post_signed, retry_after
from channels.base import (
    Callback,
    Capabilities,
    Outbound,
    PermanentChannelError,
    Receipt,
    TransientChannelError,
    UncertainDeliveryError,
)

# The outbox's channel id of every callback: configured channels are numbered from 1.
CALLBACKS = 0
# The endpoint of background tasks' orchestrator (config `user_actions.webhook`).
ORCHESTRATOR = "user_actions.webhook"
# Statuses worth another attempt: the endpoint timed out, is busy or is down.
_RETRYABLE = {408, 429}


def action_endpoint(action_id: str) -> str:
    """The endpoint name of a declared action's `run` URL."""
    return f"actions.{action_id}.run"


@dataclass(frozen=True)
class CallbackSettled:
    """Signal: a callback is settled for good, with the endpoint's `answer` when it was
    delivered, or the `error` (and its `hint`, for the owner) it was given up with."""

    callback: Callback
    answer: dict[str, Any] | None = None
    error: str | None = None
    hint: str | None = None


class CallbackSender:
    """Delivers `Callback`s for the outbox: one signed POST per attempt, never a retry of
    its own. It answers the outbox's questions as a channel adapter would (`kind`,
    `capabilities`, `send`, `find_sent`)."""

    kind: ClassVar[str] = "callback"
    capabilities: ClassVar[Capabilities] = Capabilities()

    def __init__(self, endpoints: Mapping[str, HttpActionRun]) -> None:
        self.endpoints = dict(endpoints)

    @classmethod
    def from_config(cls, config: Config) -> CallbackSender:
        """The endpoints the config declares: the orchestrator and every HTTP action."""
        endpoints = {action_endpoint(a.id): a.run for a in config.actions if isinstance(a.run, HttpActionRun)}
        if config.user_actions.webhook is not None:
            endpoints[ORCHESTRATOR] = config.user_actions.webhook
        return cls(endpoints)

    async def send(self, outbound: Outbound) -> Receipt:
        """POST the callback once, signed now; raise a ChannelError the outbox acts on."""
        if not isinstance(outbound, Callback):
            raise PermanentChannelError(f"the callback sender was handed a {outbound.kind}",
                                        hint="only callbacks go to the owner's endpoints")
        endpoint = self.endpoints.get(outbound.endpoint)
        if endpoint is None:
            raise PermanentChannelError(f"{outbound.endpoint} is no longer configured",
                                        hint=f"the config has no {outbound.endpoint} any more, so nobody can be told")
        try:
            async with httpx.AsyncClient(timeout=endpoint.timeout.total_seconds()) as client:
                response = await post_signed(client, endpoint.url, outbound.body.encode(),
                                             secret=endpoint.secret.get_secret_value(), delivery=outbound.delivery_id)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            raise TransientChannelError(f"could not reach {endpoint.url} ({type(exc).__name__})",
                                        hint=f"{outbound.endpoint} is not reachable") from None
        except httpx.HTTPError as exc:
            raise UncertainDeliveryError(
                f"{endpoint.url} did not answer ({type(exc).__name__}); it may or may not have taken the call",
                hint=f"{outbound.endpoint} took the request but gave no answer in time",
            ) from None
        status = response.status_code
        if 200 <= status < 300:
            return Receipt(answer=answer_of(response))
        if status in _RETRYABLE or status >= 500:
            raise TransientChannelError(f"{endpoint.url} answered {status}", retry_after=retry_after(response),
                                        hint=f"{outbound.endpoint} is busy or down (HTTP {status})")
        raise PermanentChannelError(f"{endpoint.url} answered {status}",
                                    hint=f"{outbound.endpoint} refused it (HTTP {status}): {response.text[:500]}")

    async def find_sent(self, outbound: Outbound) -> Receipt | None:
        """Never asked (`capabilities.reconcile` is off): the endpoint drops a repeat itself."""
        return None

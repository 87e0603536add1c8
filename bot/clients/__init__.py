"""Layer 11, clients: code that talks to a running desk from outside, over its HTTP API.

The typed Python client (`DeskClient`, async, and `SyncDeskClient`, blocking: docs/client.md),
its answers (`bot.clients.models`) and errors (`bot.clients.errors`), the check of the desk's
signed webhooks on the orchestrator's side (`verify_webhook`), and the MCP bridge that serves
the tools over the Model Context Protocol. Imports layers 0–10.
"""

from bot.clients.client import DeskClient, SyncDeskClient
from bot.clients.errors import (
    Conflict,
    DeskApiError,
    Forbidden,
    InvalidRequest,
    NotFound,
    RateLimited,
    RequestAppliedAnswerLost,
    ServerError,
    Unauthorized,
    WaitTimedOut,
)
from bot.clients.webhooks import InvalidWebhook, verify_webhook

__all__ = [
    "Conflict", "DeskApiError", "DeskClient", "Forbidden", "InvalidRequest", "InvalidWebhook", "NotFound", "RateLimited",
    "RequestAppliedAnswerLost", "ServerError", "SyncDeskClient", "Unauthorized", "WaitTimedOut", "verify_webhook",
]

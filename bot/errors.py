"""Typed errors of the core, and the one shape every error answer has. The HTTP layer maps
the errors to status codes; the tool layer to `{"error": code, "details": {"hint": …}}`
results the model can read (`error_body`).

The services' own errors (`HandoffAlreadyOpen`, `DispatchFailed`, `ApprovalUnrouted`, …)
subclass these in `bot/domain/`. They carry the facts of what went wrong, not sentences for
the model: `bot/tools/` words those, so the hints live beside the tool descriptions."""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


def error_body(code: str, hint: str, **details: Any) -> dict[str, Any]:
    """`{"error": code, "details": {"hint": hint, …}}`: what the API answers and a tool returns
    when something did not work. Clients and models read `error` to branch and `hint` to
    correct, so every error is built here and the two can never drift apart."""
    return {"error": code, "details": {"hint": hint, **details}}


class DeskError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return error_body(self.code, self.message, **self.details)

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides the JSON (Retry-After, …)."""
        return {}


class NotFound(DeskError):
    code = "not_found"
    status = 404

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} '{ident}' not found")


def found(value: T | None, what: str, ident: str) -> T:
    """`value` when a read found it; NotFound(what, ident) when it came back None."""
    if value is None:
        raise NotFound(what, ident)
    return value


class Conflict(DeskError):
    code = "conflict"
    status = 409


class ShuttingDown(DeskError):
    """The server is stopping: a long-poll is answered now instead of being cut off. 503
    with Retry-After, because the wait did not run its course; the client polls again (and
    reaches this server once restarted, or another instance)."""

    code = "shutting_down"
    status = 503
    retry_after_seconds = 2

    def __init__(self) -> None:
        super().__init__("the server is shutting down; poll again in a moment (it or another instance will answer)")

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after_seconds)}

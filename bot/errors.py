"""Typed errors of the core. The HTTP layer maps them to status codes; the tool layer to
`{"error": code, "details": {...}}` results the model can read."""

from __future__ import annotations

from typing import Any


class DeskError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def to_json(self) -> dict[str, Any]:
        return {"error": self.code, "details": {"hint": self.message, **self.details}}

    def headers(self) -> dict[str, str]:
        """HTTP headers the answer carries besides the JSON (Retry-After, …)."""
        return {}


class NotFound(DeskError):
    code = "not_found"
    status = 404

    def __init__(self, what: str, ident: str) -> None:
        super().__init__(f"{what} '{ident}' not found")


class Conflict(DeskError):
    code = "conflict"
    status = 409


class ToolFailure(DeskError):
    """A tool call that did not do what was asked; returned to the model as a result."""

    status = 200

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message, **details)
        self.code = code


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

"""The client's errors: the API's error answers (`{"error": code, "details": {"hint": …}}`)
as exceptions, one class per kind of answer a caller would branch on.

    DeskApiError (status, code, hint, details)
    ├── Unauthorized          401: no key, or one the desk does not know
    ├── Forbidden             403: a known caller that may not (`details["needed"]`)
    ├── NotFound              404: no such conversation, handoff, approval, …
    ├── Conflict              409: the state moved on (handoff_not_active, approval_not_pending, …)
    │   └── RequestAppliedAnswerLost   it took effect, its answer is gone: read, do not resend
    ├── InvalidRequest        400, 413, 415, 422: the request itself must change (`details["fields"]`)
    ├── RateLimited           429: `retry_after` seconds
    └── ServerError           5xx (the retries are spent when you see it)
    WaitTimedOut              a `wait_*` call's own `timeout` passed before the outcome

`code` keeps the API's exact error code (`handoff_not_active`, `approval_needs_a_person`, …)
for the finer cases. Transport failures that outlast the retries stay httpx's own
(`httpx.ConnectError`, `httpx.ReadTimeout`): the request may not have reached the desk.
"""

from __future__ import annotations

from typing import Any


class DeskApiError(Exception):
    """The desk answered with an error. `status` is the HTTP status, `code` the API's error
    code, `hint` its sentence on what to change, `details` the rest of its `details`."""

    def __init__(self, status: int, code: str, hint: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {hint}")
        self.status, self.code, self.hint = status, code, hint
        self.details = details or {}


class Unauthorized(DeskApiError):
    """No credential, or one the desk does not know (`Authorization: Bearer …`)."""


class Forbidden(DeskApiError):
    """A known caller that may not do this (an agent key deciding an approval, a viewer releasing)."""


class NotFound(DeskApiError):
    """No such conversation, handoff, approval, user action or person."""


class Conflict(DeskApiError):
    """The thing is not in a state that allows this any more (released, decided, pending)."""


class RequestAppliedAnswerLost(Conflict):
    """The request took effect, but the server stopped before answering it, so its answer
    is gone: sending it again would do nothing (the server refuses) and is not needed. `ids`
    name what it changed (`conversation_id`, `handoff_session_id`, …) for reading the state."""

    @property
    def ids(self) -> dict[str, str]:
        return dict(self.details.get("ids") or {})


class InvalidRequest(DeskApiError):
    """The request must change before it can work: a field (`details["fields"]`), the body's
    size or type, an Idempotency-Key reused for another request."""


class RateLimited(DeskApiError):
    """Too many requests; `retry_after` is how many seconds the desk asked to wait."""

    @property
    def retry_after(self) -> float | None:
        value = self.details.get("retry_after")
        return float(value) if isinstance(value, int | float) else None


class ServerError(DeskApiError):
    """The desk (or a proxy before it) failed; the client's retries are spent."""


class WaitTimedOut(TimeoutError):
    """A `wait_*` call's own `timeout` passed while the handoff, approval or user action was
    still open. Nothing changed on the desk: wait again, or act on the open state."""

    def __init__(self, what: str, ident: str, timeout: float) -> None:
        super().__init__(f"{what} {ident} was still open after {timeout:g}s")
        self.what, self.ident, self.timeout = what, ident, timeout


_BY_STATUS: dict[int, type[DeskApiError]] = {
    400: InvalidRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: InvalidRequest,
    415: InvalidRequest, 422: InvalidRequest, 429: RateLimited,
}


def error_for(status: int, code: str, hint: str, details: dict[str, Any]) -> DeskApiError:
    """The typed exception of one error answer."""
    if code == "request_applied_answer_lost":
        return RequestAppliedAnswerLost(status, code, hint, details)
    kind = _BY_STATUS.get(status) or (ServerError if status >= 500 else DeskApiError)
    return kind(status, code, hint, details)

"""The client's logic without I/O: what to send, when to send it again, and what an answer
means. `DeskClient` (async) and `SyncDeskClient` (blocking) only perform what this module
asks for, so the two can never disagree on a retry or on reading an answer.

An operation (bot/clients/operations.py) is a generator: it yields `Call`s and receives each
call's JSON answer, and returns its typed result. `drive(operation, policy)` turns it into
plain steps, `Call` (send this request, give me the `httpx.Response` or the transport error)
and `Sleep`, adding the retries of each call on the way:

    steps = drive(operations.say(cid, "hi"), policy)
    step = steps.send(None)                  # Call(POST …/messages, key=…)
    step = steps.send(response)              # Sleep(0.5) after a 502, then the same Call again
    …                                        # StopIteration(value=PostedMessage(…))

Retrying safely. A call is sent again, unchanged (with the same Idempotency-Key), when the
connection fails or times out, on 502, 503 and 504, and while the server says the first copy
of the request is still running (409 `idempotency_key_in_progress`), a bounded number of
times with growing waits (`RetryPolicy`, honouring Retry-After). The server answers a copy
it already ran with the first answer, so a retry never does anything twice.
"""

from __future__ import annotations

import uuid
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar
from urllib.parse import quote

import httpx

from bot.clients.errors import DeskApiError, error_for

T = TypeVar("T")
IDEMPOTENCY_KEY = "Idempotency-Key"
# Worth sending again with the same key: the request may not have run, or not be done yet.
RETRIED_STATUSES = frozenset({502, 503, 504})
RETRIED_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


def seg(value: str) -> str:
    """One path segment: an id or a tool name can never climb to another route ("../")."""
    if value in ("", ".", ".."):
        raise ValueError(f"not an id: {value!r}")
    return quote(value, safe="")


@dataclass(frozen=True)
class Call:
    """One request of the API. `key`: the Idempotency-Key of a change (every POST has one);
    `hold`: seconds the desk may hold the answer (a long-poll), added to the read timeout;
    `token`: a bearer for this call instead of the client's own key (a person deciding)."""

    method: Literal["GET", "POST"]
    path: str
    params: dict[str, Any] = field(default_factory=dict)
    body: dict[str, Any] | None = None
    key: str | None = None
    hold: float = 0.0
    token: str | None = None

    def headers(self) -> dict[str, str]:
        return {
            **({IDEMPOTENCY_KEY: self.key} if self.key is not None else {}),
            **({"Authorization": f"Bearer {self.token}"} if self.token is not None else {}),
        }


def get(path: str, params: dict[str, Any] | None = None, *, hold: float = 0.0) -> Call:
    return Call("GET", path, {k: v for k, v in (params or {}).items() if v is not None}, hold=hold)


def change(path: str, body: dict[str, Any], key: str | None, *, token: str | None = None) -> Call:
    """A POST that creates or changes something: one key for the call and all its retries
    (the caller's, to retry across their own restarts, or a fresh one)."""
    return Call("POST", path, body=body, key=key or str(uuid.uuid4()), token=token)


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Pause:
    """An operation's own pause before trying again (a wait while the desk restarts): as
    long as the client's retry policy waits before its `attempt`-th retry."""

    attempt: int


Answer = dict[str, Any]
# An operation: yields the calls it needs (and pauses), receives each call's JSON answer, returns its result.
Operation = Generator[Call | Pause, Answer, T]
Outcome = httpx.Response | httpx.TransportError | None
# What a client performs: send a Call (and send back its response or transport error), or sleep.
Steps = Generator[Call | Sleep, Outcome, T]


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is sent again: `retries` more times, waiting
    `backoff` · 2^attempt seconds (or the Retry-After asked for), at most `max_backoff`."""

    retries: int = 3
    backoff: float = 0.5
    max_backoff: float = 5.0

    def wait(self, attempt: int, retry_after: str | None) -> float:
        wait = self.backoff * 2.0**attempt
        if retry_after is not None and retry_after.isdigit():
            wait = max(wait, float(retry_after))
        return min(wait, self.max_backoff)


@dataclass(frozen=True)
class Done:
    """The operation's result: nothing more to perform."""

    value: Any


def advance(steps: Steps[Any], outcome: Outcome) -> Call | Sleep | Done:
    """The next step, given what the last one gave (None to start, or after a sleep)."""
    try:
        return steps.send(outcome)
    except StopIteration as done:
        return Done(done.value)


def drive(operation: Operation[T], policy: RetryPolicy) -> Steps[T]:
    """The operation as steps to perform, each of its calls retried per `policy`. A call that
    fails for good is raised inside the operation, which may handle it (a wait rides out a
    desk restart) or let it go."""
    answer: Answer | None = None
    error: Exception | None = None
    while True:
        try:
            if error is not None:  # raised at the operation's `yield`
                step = operation.throw(error)
            else:
                step = operation.send(answer)  # type: ignore[arg-type]  # None starts the generator
        except StopIteration as done:
            result: T = done.value
            return result
        answer, error = None, None
        if isinstance(step, Pause):
            yield Sleep(policy.wait(step.attempt, None))
            continue
        try:
            answer = yield from exchange(step, policy)
        except (httpx.TransportError, DeskApiError) as exc:
            error = exc


def exchange(call: Call, policy: RetryPolicy) -> Steps[Answer]:
    """One call, sent again while it is worth it; its JSON answer, or the typed error."""
    attempt = 0
    while True:
        outcome = yield call
        if isinstance(outcome, httpx.TransportError):
            if attempt == policy.retries or not isinstance(outcome, RETRIED_ERRORS):
                raise outcome
            wait = policy.wait(attempt, None)
        else:
            assert outcome is not None, "a Call is answered with its response or its transport error"
            if attempt == policy.retries or not worth_retrying(outcome):
                return answer_of(outcome)
            wait = policy.wait(attempt, outcome.headers.get("retry-after"))
        yield Sleep(wait)
        attempt += 1


def desk_unreachable(error: Exception) -> bool:
    """The desk (or the way to it) is down or restarting, not refusing: worth waiting out."""
    if isinstance(error, httpx.TransportError):
        return isinstance(error, RETRIED_ERRORS)
    return isinstance(error, DeskApiError) and error.status in RETRIED_STATUSES


def worth_retrying(response: httpx.Response) -> bool:
    if response.status_code in RETRIED_STATUSES:
        return True
    if response.status_code != 409:
        return False
    try:
        return bool(response.json().get("error") == "idempotency_key_in_progress")
    except (ValueError, AttributeError):
        return False


def answer_of(response: httpx.Response) -> Answer:
    """The JSON object of a success, or the typed error of a failure (bot/clients/errors.py)."""
    try:
        data = response.json()
    except ValueError:
        raise DeskApiError(response.status_code, "invalid_response", response.text[:200]) from None
    if response.status_code >= 400:
        body = data if isinstance(data, dict) else {}
        details = body.get("details") if isinstance(body.get("details"), dict) else {}
        assert isinstance(details, dict)
        raise error_for(response.status_code, str(body.get("error", "error")), str(details.get("hint", "")), details)
    if not isinstance(data, dict):  # every route answers a JSON object
        raise DeskApiError(response.status_code, "invalid_response", response.text[:200])
    return data

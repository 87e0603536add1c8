"""A typed Python client for the desk's HTTP API (docs/client.md), for agents that run
elsewhere: LangGraph, the OpenAI Agents SDK, PydanticAI, or the `handoff mcp` bridge.

    async with DeskClient("http://127.0.0.1:8000", api_key="…") as desk:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        tools = await desk.tools(cid, format="openai")        # pass to chat.completions.create(tools=…)
        started = await desk.call_tool(cid, "handoff_request", {...}, idempotency_key="call-17")
        outcome = await desk.wait_handoff(started["handoff_session_id"])   # HandoffOutcome

`SyncDeskClient` has the same methods, blocking. Both run the same operations
(bot/clients/operations.py) through the same sans-IO core (bot/clients/protocol.py): a
client here only sends what it is asked to and sleeps when it is told to.

Tool schemas come from the server, so `channel_id` is always the enum of the channels that
can deliver right now, and every call is validated and audited there, whoever makes it.
Tool-level errors are results (`{"error": …, "details": {"hint": …}}`) to hand back to the
model; HTTP-level problems raise the typed errors of bot/clients/errors.py.

Retrying safely. Every call that creates or changes something is sent with an
`Idempotency-Key`: a fresh one per call, or yours (`idempotency_key=`, to retry a call
across your own restarts: derive it from your framework's durable ids). Each call is retried
a bounded number of times (`retries`, waits from `backoff` up to `max_backoff`) when the
connection fails or times out, on 502, 503 and 504, and while the first copy is still
running, always with the same key: a retry never sends a message twice. One case has no
answer to give: the request took effect but the server stopped before answering. That raises
`RequestAppliedAnswerLost`, whose `ids` name what it changed: read the current state instead.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar, overload

import httpx

from bot.clients import operations
from bot.clients.errors import DeskApiError, RequestAppliedAnswerLost
from bot.clients.operations import ToolFormat
from bot.clients.protocol import Call, Done, Operation, Outcome, RetryPolicy, Sleep, Steps, advance, drive

__all__ = ["DeskApiError", "DeskClient", "RequestAppliedAnswerLost", "SyncDeskClient", "ToolFormat"]

P = ParamSpec("P")
T = TypeVar("T")


class _Method(Generic[P, T]):
    """An operation as a method of both clients: awaitable on `DeskClient`, blocking on
    `SyncDeskClient`, with the operation's own signature and docstring."""

    def __init__(self, operation: Callable[P, Operation[T]]) -> None:
        self.operation = operation
        self.__doc__ = operation.__doc__

    @overload
    def __get__(self, client: None, owner: type) -> _Method[P, T]: ...
    @overload
    def __get__(self, client: DeskClient, owner: type) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, client: SyncDeskClient, owner: type) -> Callable[P, T]: ...

    def __get__(self, client: _Base | None, owner: type) -> Any:
        if client is None:
            return self
        operation = self.operation

        @functools.wraps(operation)
        def method(*args: P.args, **kwargs: P.kwargs) -> Any:
            return client._perform(drive(operation(*args, **kwargs), client.policy))

        return method


class _Base:
    """What both clients share: their settings, and every operation of the API as a method."""

    def __init__(self, base_url: str, api_key: str | None, timeout: float, retries: int, backoff: float,
                 max_backoff: float) -> None:
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout = timeout
        self.policy = RetryPolicy(retries=retries, backoff=backoff, max_backoff=max_backoff)

    def _perform(self, steps: Steps[Any]) -> Any:
        raise NotImplementedError

    def _request_options(self, call: Call) -> dict[str, Any]:
        """httpx's arguments for one call; a long-poll's read timeout grows by what it may be held."""
        return {"params": call.params, "json": call.body, "headers": call.headers(),
                **({"timeout": self.timeout + call.hold} if call.hold else {})}

    create_conversation = _Method(operations.create_conversation)
    say = _Method(operations.say)
    messages = _Method(operations.messages)
    tools = _Method(operations.tools)
    call_tool = _Method(operations.call_tool)
    handoff = _Method(operations.handoff)
    handoffs = _Method(operations.handoffs)
    handoff_events = _Method(operations.handoff_events)
    release = _Method(operations.release)
    wait_handoff = _Method(operations.wait_handoff)
    approval = _Method(operations.approval)
    approvals = _Method(operations.approvals)
    decide_approval = _Method(operations.decide_approval)
    wait_approval = _Method(operations.wait_approval)
    user_action = _Method(operations.user_action)
    user_action_step = _Method(operations.user_action_step)
    respond_user_action = _Method(operations.respond_user_action)
    wait_user_action = _Method(operations.wait_user_action)
    people = _Method(operations.people)
    person = _Method(operations.person)
    set_availability = _Method(operations.set_availability)


class DeskClient(_Base):
    """The async client (`async with DeskClient(url, api_key=…) as desk: await desk.…`).
    `transport`: httpx's, e.g. `httpx.ASGITransport(app)` to talk to an app in-process."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None, retries: int = 3, backoff: float = 0.5, max_backoff: float = 5.0,
    ) -> None:
        super().__init__(base_url, api_key, timeout, retries, backoff, max_backoff)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> DeskClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _perform(self, steps: Steps[T]) -> T:
        outcome: Outcome = None
        while not isinstance(step := advance(steps, outcome), Done):
            outcome = await self._do(step)
        result: T = step.value
        return result

    async def _do(self, step: Call | Sleep) -> Outcome:
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        try:
            return await self._http.request(step.method, step.path, **self._request_options(step))
        except httpx.TransportError as exc:
            return exc


class SyncDeskClient(_Base):
    """The blocking client (`with SyncDeskClient(url, api_key=…) as desk: desk.…`), for
    scripts and synchronous frameworks; the same methods and answers as `DeskClient`."""

    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None, retries: int = 3, backoff: float = 0.5, max_backoff: float = 5.0,
    ) -> None:
        super().__init__(base_url, api_key, timeout, retries, backoff, max_backoff)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout, transport=transport)

    def __enter__(self) -> SyncDeskClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _perform(self, steps: Steps[T]) -> T:
        outcome: Outcome = None
        while not isinstance(step := advance(steps, outcome), Done):
            outcome = self._do(step)
        result: T = step.value
        return result

    def _do(self, step: Call | Sleep) -> Outcome:
        if isinstance(step, Sleep):
            time.sleep(step.seconds)
            return None
        try:
            return self._http.request(step.method, step.path, **self._request_options(step))
        except httpx.TransportError as exc:
            return exc

"""A small Python client for the desk's HTTP API (docs/architecture.md, "Contracts"), for agents that run
elsewhere: LangGraph, the OpenAI Agents SDK, the Anthropic SDK, or the `handoff mcp` bridge.

    async with DeskClient("http://127.0.0.1:8000", api_key="…") as desk:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        tools = await desk.tools(cid, format="openai")        # pass to chat.completions.create(tools=…)
        result = await desk.call_tool(cid, "handoff_request", {...})

Tool schemas come from the server, so `channel_id` is always the enum of the channels that
can deliver right now, and every call is validated and audited there, whoever makes it.
Tool-level errors are results (`{"error": …, "details": {"hint": …}}`) to hand back to the
model; HTTP-level problems (bad key, unknown conversation) raise `DeskApiError`.

Retrying safely. Every call that creates or changes something (`create_conversation`, `say`,
`call_tool`, `release`) is sent with an `Idempotency-Key`: a fresh one per call, or yours
(`idempotency_key=`, to retry a call across your own restarts). The client retries each call
a bounded number of times (`retries`, with growing waits from `backoff` up to `max_backoff`)
when the connection fails or times out, on 502, 503 and 504, and while the server says the
first copy of the request is still running (409 `idempotency_key_in_progress`), always with
the same key: the server answers a copy it already ran with the first answer, so a retry
never sends a message twice. One case has no answer to give: the request took effect but
the server stopped before answering. That raises `RequestAppliedAnswerLost`, whose `ids`
name what it changed (such as `conversation_id`): do not send it again; read the current
state (`messages`, `handoff`) instead.
"""

from __future__ import annotations

import asyncio
import uuid
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx

ToolFormat = Literal["plain", "openai", "anthropic"]
IDEMPOTENCY_KEY = "Idempotency-Key"
# Worth sending again with the same key: the request may not have run, or not be done yet.
_RETRIED_STATUSES = frozenset({502, 503, 504})
_RETRIED_ERRORS = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


def _seg(value: str) -> str:
    """One path segment: an id or a tool name can never climb to another route ("../")."""
    if value in ("", ".", ".."):
        raise ValueError(f"not an id: {value!r}")
    return quote(value, safe="")


class DeskApiError(Exception):
    def __init__(self, status: int, code: str, hint: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {hint}")
        self.status, self.code, self.hint = status, code, hint
        self.details = details or {}


class RequestAppliedAnswerLost(DeskApiError):
    """The request took effect, but the server stopped before answering it, so its answer
    is gone: sending it again would do nothing (the server refuses) and is not needed. `ids`
    name what it changed (`conversation_id`, `handoff_session_id`, …) for reading the state."""

    @property
    def ids(self) -> dict[str, str]:
        return dict(self.details.get("ids") or {})


class DeskClient:
    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None, retries: int = 3, backoff: float = 0.5, max_backoff: float = 5.0,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)
        self.retries, self.backoff, self.max_backoff = retries, backoff, max_backoff

    async def __aenter__(self) -> DeskClient:
        return self

    async def __aexit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------------ conversations

    async def create_conversation(
        self, *, name: str | None = None, email: str | None = None, external_id: str | None = None,
        serves_handoff_session_id: str | None = None, idempotency_key: str | None = None,
    ) -> str:
        subscriber = {k: v for k, v in {"name": name, "email": email, "external_id": external_id}.items() if v}
        body: dict[str, Any] = {"subscriber": subscriber} if subscriber else {}
        if serves_handoff_session_id:
            body["serves_handoff_session_id"] = serves_handoff_session_id
        created = await self._change("/api/conversations", body, idempotency_key)
        return str(created["conversation_id"])

    async def say(self, conversation_id: str, text: str, *, idempotency_key: str | None = None) -> dict[str, Any]:
        """A subscriber message: routed to the desk's agent, or to the person during a handoff."""
        return await self._change(f"/api/conversations/{_seg(conversation_id)}/messages", {"text": text}, idempotency_key)

    async def messages(self, conversation_id: str, *, after: int = 0, wait: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"after": after, **({"wait": wait} if wait is not None else {})}
        return list((await self._request("GET", f"/api/conversations/{_seg(conversation_id)}/messages", params=params))["messages"])

    # ------------------------------------------------------------------ tools

    async def tools(self, conversation_id: str, *, format: ToolFormat = "plain") -> list[dict[str, Any]]:
        """The tools as the model should see them now, in the framework's format."""
        data = await self._request("GET", f"/api/conversations/{_seg(conversation_id)}/tools", params={"format": format})
        return list(data["tools"])

    async def call_tool(
        self, conversation_id: str, name: str, arguments: dict[str, Any], *, idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        return await self._change(f"/api/conversations/{_seg(conversation_id)}/tools/{_seg(name)}", arguments, idempotency_key)

    # ------------------------------------------------------------------ handoffs

    async def handoff(self, handoff_session_id: str) -> dict[str, Any]:
        return await self._request("GET", f"/api/handoffs/{_seg(handoff_session_id)}")

    async def release(self, handoff_session_id: str, *, idempotency_key: str | None = None, **body: Any) -> dict[str, Any]:
        return await self._change(f"/api/handoffs/{_seg(handoff_session_id)}/release", body, idempotency_key)

    async def _change(self, path: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        """A POST that creates or changes something: one key for the call and all its retries."""
        return await self._request("POST", path, json=body, headers={IDEMPOTENCY_KEY: key or str(uuid.uuid4())})

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._send(method, path, **kwargs)
        try:
            data = response.json()
        except ValueError:
            raise DeskApiError(response.status_code, "invalid_response", response.text[:200]) from None
        if response.status_code >= 400:
            details = data.get("details", {}) if isinstance(data, dict) else {}
            code = str(data.get("error", "error")) if isinstance(data, dict) else "error"
            error = RequestAppliedAnswerLost if code == "request_applied_answer_lost" else DeskApiError
            raise error(response.status_code, code, str(details.get("hint", "")), details if isinstance(details, dict) else {})
        if not isinstance(data, dict):  # every route answers a JSON object
            raise DeskApiError(response.status_code, "invalid_response", response.text[:200])
        return data

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """The request, sent again (unchanged, so with the same key) while it is worth it."""
        attempt = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
            except _RETRIED_ERRORS:
                if attempt == self.retries:
                    raise
                wait = self._wait(attempt, None)
            else:
                if attempt == self.retries or not _worth_retrying(response):
                    return response
                wait = self._wait(attempt, response.headers.get("retry-after"))
            await asyncio.sleep(wait)
            attempt += 1

    def _wait(self, attempt: int, retry_after: str | None) -> float:
        wait = self.backoff * 2.0**attempt
        if retry_after is not None and retry_after.isdigit():
            wait = max(wait, float(retry_after))
        return min(wait, self.max_backoff)


def _worth_retrying(response: httpx.Response) -> bool:
    if response.status_code in _RETRIED_STATUSES:
        return True
    if response.status_code != 409:
        return False
    try:
        return bool(response.json().get("error") == "idempotency_key_in_progress")
    except (ValueError, AttributeError):
        return False

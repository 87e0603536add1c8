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
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import httpx

ToolFormat = Literal["plain", "openai", "anthropic"]


def _seg(value: str) -> str:
    """One path segment: an id or a tool name can never climb to another route ("../")."""
    if value in ("", ".", ".."):
        raise ValueError(f"not an id: {value!r}")
    return quote(value, safe="")


class DeskApiError(Exception):
    def __init__(self, status: int, code: str, hint: str) -> None:
        super().__init__(f"{status} {code}: {hint}")
        self.status, self.code, self.hint = status, code, hint


class DeskClient:
    def __init__(
        self, base_url: str, *, api_key: str | None = None, timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport)

    async def __aenter__(self) -> DeskClient:
        return self

    async def __aexit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    # ------------------------------------------------------------------ conversations

    async def create_conversation(
        self, *, name: str | None = None, email: str | None = None, external_id: str | None = None,
        serves_handoff_session_id: str | None = None,
    ) -> str:
        subscriber = {k: v for k, v in {"name": name, "email": email, "external_id": external_id}.items() if v}
        body: dict[str, Any] = {"subscriber": subscriber} if subscriber else {}
        if serves_handoff_session_id:
            body["serves_handoff_session_id"] = serves_handoff_session_id
        return str((await self._request("POST", "/api/conversations", json=body))["conversation_id"])

    async def say(self, conversation_id: str, text: str) -> dict[str, Any]:
        """A subscriber message: routed to the desk's agent, or to the person during a handoff."""
        return await self._request("POST", f"/api/conversations/{_seg(conversation_id)}/messages", json={"text": text})

    async def messages(self, conversation_id: str, *, after: int = 0, wait: float | None = None) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"after": after, **({"wait": wait} if wait is not None else {})}
        return list((await self._request("GET", f"/api/conversations/{_seg(conversation_id)}/messages", params=params))["messages"])

    # ------------------------------------------------------------------ tools

    async def tools(self, conversation_id: str, *, format: ToolFormat = "plain") -> list[dict[str, Any]]:
        """The tools as the model should see them now, in the framework's format."""
        data = await self._request("GET", f"/api/conversations/{_seg(conversation_id)}/tools", params={"format": format})
        return list(data["tools"])

    async def call_tool(self, conversation_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self._request("POST", f"/api/conversations/{_seg(conversation_id)}/tools/{_seg(name)}", json=arguments)

    # ------------------------------------------------------------------ handoffs

    async def handoff(self, handoff_session_id: str) -> dict[str, Any]:
        return await self._request("GET", f"/api/handoffs/{_seg(handoff_session_id)}")

    async def release(self, handoff_session_id: str, **body: Any) -> dict[str, Any]:
        return await self._request("POST", f"/api/handoffs/{_seg(handoff_session_id)}/release", json=body)

    async def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self._http.request(method, path, **kwargs)
        try:
            data = response.json()
        except ValueError:
            raise DeskApiError(response.status_code, "invalid_response", response.text[:200]) from None
        if response.status_code >= 400:
            details = data.get("details", {}) if isinstance(data, dict) else {}
            raise DeskApiError(response.status_code, str(data.get("error", "error")), str(details.get("hint", "")))
        if not isinstance(data, dict):  # every route answers a JSON object
            raise DeskApiError(response.status_code, "invalid_response", response.text[:200])
        return data

"""The Python API client against the real app (in-process ASGI transport)."""

from __future__ import annotations

import httpx
import pytest

from bot.clients.client import DeskApiError, DeskClient
from bot.web.app import create_app
from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


def client_for(harness: Harness, api_key: str | None = None) -> DeskClient:
    transport = httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False))
    return DeskClient("http://desk.test", api_key=api_key, transport=transport)


async def test_tools_in_each_framework_format_and_a_call(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "k-123456789012345678901234"})
    async with client_for(harness, "k-123456789012345678901234") as desk:
        cid = await desk.create_conversation(name="Ana", email="ana@example.com")
        openai = (await desk.tools(cid, format="openai"))[0]
        assert openai["type"] == "function"
        assert openai["function"]["name"] == "handoff_request"
        assert openai["function"]["parameters"]["properties"]["channel_id"]["enum"] == [1]
        anthropic = (await desk.tools(cid, format="anthropic"))[0]
        assert anthropic["name"] == "handoff_request"
        assert "input_schema" in anthropic
        rejected = await desk.call_tool(cid, "handoff_request", {"channel_id": 9})
        assert rejected["error"] == "invalid_input"
        assert "channel_id" in rejected["details"]["fields"]
        started = await desk.call_tool(cid, "handoff_request", {
            "channel_id": 1, "summary": "Ana wants a refund for order 1234.", "expected_action": "Decide on the refund.",
        })
        assert (await desk.handoff(started["handoff_session_id"]))["state"] == "active"
        assert (await desk.say(cid, "hello?"))["routed_to"] == "human"


async def test_http_problems_raise_with_the_servers_hint(start_desk: StartDesk) -> None:
    harness = await start_desk(api={"key": "k-123456789012345678901234"})
    async with client_for(harness, "wrong") as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.create_conversation(name="Ana")
    assert caught.value.status == 401
    assert "Authorization: Bearer" in caught.value.hint
    async with client_for(harness, "k-123456789012345678901234") as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.tools("c_nope")
    assert caught.value.status == 404


async def test_ids_cannot_climb_to_another_route(start_desk: StartDesk) -> None:
    harness = await start_desk()
    async with client_for(harness) as desk:
        cid = await desk.create_conversation(name="Ana")
        with pytest.raises(DeskApiError) as caught:
            await desk.call_tool(cid, "../../handoffs/hs_x/release", {})
        assert caught.value.status == 404
        with pytest.raises(ValueError):
            await desk.handoff("..")


async def test_an_answer_that_is_not_a_json_object_is_an_invalid_response() -> None:
    """Every route answers an object; a proxy's JSON list (or a wrong base URL) is named as
    such instead of failing later on a missing key."""
    transport = httpx.MockTransport(lambda request: httpx.Response(200, json=["not", "an", "object"]))
    async with DeskClient("http://desk.test", transport=transport) as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.handoff("hs_1")
    assert caught.value.status == 200
    assert caught.value.code == "invalid_response"

"""`handoff mcp`: the `mcp` package's own client talking to the bridge, and the bridge's
DeskClient talking to a real desk (in-process ASGI, or a real uvicorn server for the stdio
subprocess and the streamable-HTTP endpoint)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from mcp import Client, MCPError, StdioServerParameters

from bot.clients.client import DeskClient
from bot.clients.mcp_server import McpBridge, http_app
from bot.desk import Desk
from bot.runtime.clock import Clock
from bot.web.app import create_app
from channels.base import RecipientText
from tests.conftest import Harness, StartDesk, make_config

ROOT = Path(__file__).resolve().parent.parent
KEY = "k-123456789012345678901234"
REQUEST = {
    "channel_id": 1,
    "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The bridge only speaks HTTP to the desk; the database behind it does not matter here."""
    return sqlite_url


async def keyed_desk(start_desk: StartDesk, **overrides: Any) -> Harness:
    """A desk with an API key; the harness's own client sends it too."""
    harness = await start_desk(api={"key": KEY}, **overrides)
    harness.client.headers["Authorization"] = f"Bearer {KEY}"
    return harness


def desk_client(harness: Harness, api_key: str | None = KEY) -> DeskClient:
    transport = httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False))
    return DeskClient("http://desk.test", api_key=api_key, transport=transport)


@asynccontextmanager
async def connected(harness: Harness, *, api_key: str | None = KEY, mode: str = "legacy", **subscriber: Any) -> AsyncIterator[Client]:
    async with desk_client(harness, api_key) as desk:
        bridge = McpBridge(desk, url="http://desk.test", **subscriber)
        async with Client(bridge.server, mode=mode) as client:
            yield client


@asynccontextmanager
async def uvicorn_on_loopback(app: Any) -> AsyncIterator[str]:
    """A real server on a free loopback port. The socket listens before uvicorn starts, so
    clients can connect at once (the kernel queues them): no waiting for a start flag."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=1))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task
        sock.close()


def payload(result: Any) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


# --------------------------------------------------------------------------- in-process


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # the 2025 initialize handshake, and 2026 per-request envelopes
async def test_lists_the_desks_tools_with_the_live_channel_enum(start_desk: StartDesk, mode: str) -> None:
    harness = await keyed_desk(start_desk, channels=[
        {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
        {"id": 7, "kind": "owner_inbox", "label": "Night shift", "estimated_response": "within 8 hours"},
        {"id": 9, "kind": "owner_inbox", "label": "Switched off", "enabled": False},
    ])
    async with connected(harness, mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert list(tools) == ["handoff_request", "request_user_action", "response_user_action", "handoff_status",
                           "conversation_messages"]
    request = tools["handoff_request"]
    assert request.input_schema["properties"]["channel_id"]["enum"] == [1, 7]
    assert request.input_schema["required"] == ["channel_id", "summary", "expected_action"]
    assert request.input_schema["properties"]["conversation_id"]["type"] == "string"  # optional, bridge-level
    assert "- channel_id 7: Night shift (owner_inbox); responds within 8 hours" in (request.description or "")
    assert "Switched off" not in (request.description or "")
    assert tools["handoff_status"].input_schema["required"] == ["handoff_session_id"]
    assert set(tools["conversation_messages"].input_schema["properties"]) == {"after", "wait", "conversation_id"}


async def test_a_handoff_through_mcp_from_request_to_resume(start_desk: StartDesk) -> None:
    harness = await keyed_desk(start_desk)
    async with connected(harness, subscriber_name="Ana", subscriber_email="ana@example.com") as client:
        started = await client.call_tool("handoff_request", {**REQUEST, "expected_return": [{"name": "eta", "type": "string"}]})
        assert not started.is_error, started.content
        result = payload(started)
        assert result["ok"] is True
        assert result["human_notified"] is True
        sid, cid = result["handoff_session_id"], result["conversation_id"]
        assert f'"handoff_session_id": "{sid}"' in started.content[0].text  # the same JSON, as text for the model

        handoff = await harness.handoff(sid)  # the desk's own view: a real, active handoff in this session's conversation
        assert handoff["state"] == "active"
        assert handoff["conversation_id"] == cid
        assert handoff["contact_back_email"] == "ana@example.com"

        status = payload(await client.call_tool("handoff_status", {"handoff_session_id": sid}))
        assert status["state"] == "active"
        assert status["release_reason"] is None
        assert "form_url" not in status  # the recipient's link never reaches the model

        # The person answers in the owner inbox; the MCP client reads it.
        thread_key = (await harness.desk.handoffs.get(sid)).thread_key
        await harness.desk.inbound.submit_and_wait(1, RecipientText(thread_key=thread_key, text="It ships tomorrow.", author="Sam"))
        seen = payload(await client.call_tool("conversation_messages", {}))
        assert seen["conversation_id"] == cid
        assert [m["text"] for m in seen["messages"] if m["role"] == "human"] == ["It ships tomorrow."]

        released = await harness.client.post(f"/api/handoffs/{sid}/release", json={
            "outcome": "resolved", "return_values": {"eta": "tomorrow"},
        })
        assert released.status_code == 200, released.text
        status = payload(await client.call_tool("handoff_status", {"handoff_session_id": sid}))
        assert status["state"] == "released"
        assert status["release_reason"] == "owner"
        assert status["outcome"] == "resolved"
        assert status["returned"] == {"eta": "tomorrow"}
        newer = payload(await client.call_tool("conversation_messages", {"after": seen["last_id"]}))
        [resume] = [m for m in newer["messages"] if m["role"] == "system"]
        assert resume["text"].startswith("[Bot resumed — the owner released the conversation. Outcome: resolved.")
        assert all(m["id"] > seen["last_id"] for m in newer["messages"])


async def test_invalid_arguments_come_back_as_errors_naming_the_field(start_desk: StartDesk) -> None:
    harness = await keyed_desk(start_desk)
    async with connected(harness) as client:
        rejected = await client.call_tool("handoff_request", {**REQUEST, "channel_id": 9, "summary": "short"})
        assert rejected.is_error
        error = payload(rejected)
        assert error["error"] == "invalid_input"
        assert {"channel_id", "summary"} <= set(error["details"]["fields"])
        assert "channel_id" in rejected.content[0].text
        cid = error["conversation_id"]
        assert (await harness.messages(cid)) == []  # nothing started
        listed = await harness.client.get("/api/handoffs", params={"state": "open"})
        assert listed.json()["handoffs"] == []

        missing = await client.call_tool("handoff_status", {})
        assert missing.is_error
        assert payload(missing)["details"]["fields"] == {"handoff_session_id": "is required"}
        unknown = await client.call_tool("handoff_status", {"handoff_session_id": "h_nope"})
        assert unknown.is_error
        assert payload(unknown)["error"] == "not_found"
        nameless = await client.call_tool("no_such_tool", {})
        assert nameless.is_error
        assert payload(nameless)["error"] == "unknown_tool"


async def test_conversation_id_acts_on_an_existing_conversation(start_desk: StartDesk) -> None:
    harness = await keyed_desk(start_desk)
    existing = await harness.conversation(name="Bo", email="bo@example.com")
    await harness.say(existing, "Hello, I need help with my invoice.")
    async with connected(harness) as client:
        started = payload(await client.call_tool("handoff_request", {**REQUEST, "conversation_id": existing}))
        assert started["ok"]
        assert started["conversation_id"] == existing
        assert (await harness.handoff(started["handoff_session_id"]))["contact_back_email"] == "bo@example.com"
        history = payload(await client.call_tool("conversation_messages", {"conversation_id": existing}))
        assert history["messages"][0] == {**history["messages"][0], "role": "subscriber", "text": "Hello, I need help with my invoice."}
        again = await client.call_tool("handoff_request", {**REQUEST, "conversation_id": existing})
        assert again.is_error
        assert started["handoff_session_id"] in again.content[0].text  # one active handoff per conversation



async def test_names_and_ids_cannot_reach_other_endpoints(start_desk: StartDesk) -> None:
    """Tool names and ids become URL path segments of the desk's API; dot segments must not
    turn a tool call into the owner's release endpoint."""
    harness = await keyed_desk(start_desk)
    async with connected(harness) as client:
        sid = payload(await client.call_tool("handoff_request", REQUEST))["handoff_session_id"]
        sneaky = await client.call_tool(f"../../../handoffs/{sid}/release", {})
        assert sneaky.is_error
        assert payload(sneaky)["error"] == "unknown_tool"
        via_id = await client.call_tool("handoff_request", {**REQUEST, "conversation_id": f"../../handoffs/{sid}/release?x="})
        assert via_id.is_error
        assert "conversation_id" in payload(via_id)["details"]["fields"]
        via_status = await client.call_tool("handoff_status", {"handoff_session_id": f"{sid}/release"})
        assert via_status.is_error
        assert "handoff_session_id" in payload(via_status)["details"]["fields"]
    assert (await harness.handoff(sid))["state"] == "active"

async def test_a_refused_api_key_or_an_absent_desk_is_a_clear_error(start_desk: StartDesk) -> None:
    harness = await keyed_desk(start_desk)
    async with connected(harness, api_key="wrong") as client:
        with pytest.raises(MCPError) as caught:
            await client.list_tools()
        assert "refused the API key" in str(caught.value)
        assert "--api-key" in str(caught.value)
        refused = await client.call_tool("handoff_request", REQUEST)
        assert refused.is_error
        assert payload(refused)["error"] == "unauthorized"
        assert "HANDOFF_API_KEY" in refused.content[0].text

    closed = socket.socket()  # bound, never listening: connections are refused
    closed.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{closed.getsockname()[1]}"
    try:
        async with DeskClient(url, api_key=KEY) as desk:
            async with Client(McpBridge(desk, url=url).server, mode="legacy") as client:
                absent = await client.call_tool("handoff_status", {"handoff_session_id": "h_1"})
    finally:
        closed.close()
    assert absent.is_error
    assert payload(absent)["error"] == "desk_unavailable"
    assert f"cannot reach the desk at {url}" in absent.content[0].text
    assert "--url" in absent.content[0].text


# --------------------------------------------------------------------------- real servers


@pytest.fixture
async def live_desk(sqlite_url: str) -> AsyncIterator[tuple[Desk, str]]:
    """A desk with an API key behind a real uvicorn server on loopback."""
    desk = Desk(make_config(sqlite_url, api={"key": KEY}), clock=Clock(), run_timers=False)
    await desk.start()
    try:
        async with uvicorn_on_loopback(create_app(desk, manage_desk=False)) as base:
            yield desk, base
    finally:
        await desk.stop()


async def test_handoff_mcp_over_stdio_as_claude_desktop_runs_it(live_desk: tuple[Desk, str]) -> None:
    desk, base = live_desk
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "bot.cli", "mcp", "--url", base, "--subscriber-name", "Ana"],
        env={"HANDOFF_API_KEY": KEY}, cwd=str(ROOT),
    )
    async with Client(params, mode="legacy") as client:  # initialize handshake, as Claude Desktop does
        assert client.server_info is not None
        assert client.server_info.name == "handoff-desk"
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert tools["handoff_request"].input_schema["properties"]["channel_id"]["enum"] == [1]
        started = payload(await client.call_tool("handoff_request", REQUEST))
    handoff = await desk.handoffs.get(started["handoff_session_id"])
    assert handoff.state == "active"
    assert (await desk.conversations.get(started["conversation_id"])).subscriber_name == "Ana"


async def test_handoff_mcp_takes_the_desk_from_its_config(live_desk: tuple[Desk, str], tmp_path: Path) -> None:
    """The documented `handoff mcp --config FILE`: the desk's public_url and api.key come from it."""
    desk, base = live_desk
    config = tmp_path / "desk.yaml"
    config.write_text(f"server: {{public_url: '{base}'}}\napi: {{key: '{KEY}'}}\n")
    params = StdioServerParameters(command=sys.executable, args=["-m", "bot.cli", "mcp", "--config", str(config)],
                                   env={}, cwd=str(ROOT))
    async with Client(params, mode="legacy") as client:
        started = payload(await client.call_tool("handoff_request", REQUEST))
    assert (await desk.handoffs.get(started["handoff_session_id"])).state == "active"


async def test_streamable_http_gives_each_session_its_own_conversation(start_desk: StartDesk) -> None:
    harness = await keyed_desk(start_desk)
    async with desk_client(harness) as desk:
        async with uvicorn_on_loopback(http_app(McpBridge(desk, url="http://desk.test"))) as base:
            async with Client(f"{base}/mcp", mode="legacy") as first, Client(f"{base}/mcp", mode="legacy") as second:
                assert "handoff_request" in {t.name for t in (await first.list_tools()).tools}
                one = payload(await first.call_tool("handoff_request", REQUEST))
                two = payload(await second.call_tool("conversation_messages", {}))
                assert one["ok"]
                assert one["conversation_id"] != two["conversation_id"]
                assert two["messages"] == []
                mine = payload(await first.call_tool("conversation_messages", {}))
                assert mine["conversation_id"] == one["conversation_id"]
            async with Client(f"{base}/mcp") as stateless:  # 2026-era: no session, so results carry the conversation id
                started = payload(await stateless.call_tool("handoff_request", REQUEST))
                assert started["ok"]
                assert started["conversation_id"] not in (one["conversation_id"], two["conversation_id"])
                unbound = await stateless.call_tool("conversation_messages", {})
                assert unbound.is_error
                assert "conversation_id" in payload(unbound)["details"]["fields"]
                bound = payload(await stateless.call_tool("conversation_messages", {"conversation_id": started["conversation_id"]}))
                assert bound["conversation_id"] == started["conversation_id"]


def test_the_http_endpoint_refuses_a_public_address() -> None:
    """It has no authentication of its own and holds the desk's API key."""
    result = subprocess.run(
        [sys.executable, "-m", "bot.cli", "mcp", "--transport", "http", "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )
    assert result.returncode == 2
    assert "refusing to serve MCP on 0.0.0.0: the endpoint has no authentication of its own" in result.stderr

"""The Python API client against the real app (in-process ASGI transport)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from bot.clients.client import DeskApiError, DeskClient, RequestAppliedAnswerLost
from bot.domain.idempotency import Claimed, KeyedRequest
from bot.web.app import create_app
from bot.web.idempotency import caller_scope, fingerprint
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
        assert (await desk.handoff(started["handoff_session_id"])).state == "active"
        assert (await desk.say(cid, "hello?")).routed_to == "human"


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


class Network(httpx.AsyncBaseTransport):
    """The wire between the client and the real app, which fails as a network or a proxy does:
    `drop` answers lost on the way back (the server ran the request), `refuse` connections that
    never reached it, `gateway` 502s from a proxy that could not reach it; each a number of
    times, then the wire works. It records the key of every request that crossed it."""

    def __init__(self, app: httpx.ASGITransport, *, drop: int = 0, refuse: int = 0, gateway: int = 0) -> None:
        self.app, self.drop, self.refuse, self.gateway = app, drop, refuse, gateway
        self.keys: list[str | None] = []
        self.before_send: Callable[[httpx.Request], Awaitable[None]] | None = None

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.keys.append(request.headers.get("idempotency-key"))
        if self.refuse:
            self.refuse -= 1
            raise httpx.ConnectError("connection refused", request=request)
        if self.gateway:
            self.gateway -= 1
            return httpx.Response(502, json={"error": "bad_gateway"}, request=request)
        if self.before_send is not None:
            await self.before_send(request)
        response = await self.app.handle_async_request(request)
        await response.aread()
        if self.drop:
            self.drop -= 1
            raise httpx.ReadError("connection reset by peer", request=request)
        return response


def client_over(network: Network, **options: Any) -> DeskClient:
    return DeskClient("http://desk.test", transport=network, backoff=0, **options)


def network_to(harness: Harness, **failures: int) -> Network:
    return Network(httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False), raise_app_exceptions=False), **failures)


async def test_a_lost_answer_is_retried_with_the_same_key_and_stores_nothing_twice(harness: Harness) -> None:
    cid = await harness.conversation()
    network = network_to(harness, drop=1)
    async with client_over(network) as desk:
        said = await desk.say(cid, "Where is my order?")
    assert said.routed_to == "agent"
    assert len(network.keys) == 2 and network.keys[0] == network.keys[1] is not None
    texts = [(m["role"], m["text"]) for m in await harness.messages(cid)]
    assert texts[0] == ("subscriber", "Where is my order?")
    assert [role for role, _ in texts] == ["subscriber", "agent"]  # one message, one turn


async def test_refused_connections_and_bad_gateways_are_retried_a_bounded_number_of_times(harness: Harness) -> None:
    network = network_to(harness, refuse=1, gateway=2)
    async with client_over(network, retries=3) as desk:
        cid = await desk.create_conversation(name="Ana")
    assert len(network.keys) == 4 and len(set(network.keys)) == 1
    assert (await harness.desk.conversations.get(cid)).subscriber_name == "Ana"
    down = network_to(harness, refuse=10)
    async with client_over(down, retries=2) as desk:
        with pytest.raises(httpx.ConnectError):
            await desk.create_conversation(name="Bo")
    assert len(down.keys) == 3
    proxied = network_to(harness, gateway=10)
    async with client_over(proxied, retries=1) as desk:
        with pytest.raises(DeskApiError) as caught:
            await desk.create_conversation(name="Cy")
    assert (caught.value.status, len(proxied.keys)) == (502, 2)
    async with client_over(network_to(harness)) as desk:
        first = await desk.create_conversation(name="Di")
        assert await desk.create_conversation(name="Di") != first  # each call its own key: two conversations


async def test_a_request_still_running_is_waited_for(harness: Harness) -> None:
    """A copy of the request is still running when the retry arrives (played here by taking
    its key before the first send, and letting it go after the 409)."""
    cid = await harness.conversation()
    network = network_to(harness)
    held: list[Claimed] = []

    async def an_earlier_copy_runs(request: httpx.Request) -> None:
        if held:
            await harness.desk.idempotency.forget(held.pop())  # it failed before changing anything
            network.before_send = None
            return
        claim = await harness.desk.idempotency.begin(KeyedRequest(
            scope=caller_scope("POST /api/conversations/{cid}/messages", None), key=str(request.headers["idempotency-key"]),
            fingerprint=fingerprint("POST", request.url.path, b"", request.content)))
        assert isinstance(claim, Claimed)
        held.append(claim)

    network.before_send = an_earlier_copy_runs
    async with client_over(network) as desk:
        said = await desk.say(cid, "hi")
    assert said.routed_to == "agent"
    assert len(network.keys) == 2
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"] == ["hi"]


async def test_a_request_that_took_effect_without_an_answer_raises_a_typed_error_naming_what_changed(
    harness: Harness,
) -> None:
    """The message is stored, then the agent's reply can not be (the database refuses it): the
    server fails after the change. Sent again with the caller's own key, the client raises
    `RequestAppliedAnswerLost` with the conversation, and nothing is stored twice."""
    cid = await harness.conversation()
    async with harness.desk.db.transaction() as session:
        await session.execute(text("CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.role = 'agent' "
                                   "BEGIN SELECT RAISE(ABORT, 'disk full'); END"))
    async with client_over(network_to(harness)) as desk:
        with pytest.raises(DeskApiError) as failed:
            await desk.say(cid, "hi", idempotency_key="order-1234-hi")
        assert failed.value.status == 500
        with pytest.raises(RequestAppliedAnswerLost) as lost:
            await desk.say(cid, "hi", idempotency_key="order-1234-hi")
    assert lost.value.status == 409
    assert lost.value.ids == {"conversation_id": cid}
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"] == ["hi"]

"""Oversized bodies are refused with 413 before a route reads them (bot/web/body_limit.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from starlette.requests import Request
from starlette.types import Receive, Scope, Send

from bot.web.body_limit import BodyLimit
from tests.conftest import Harness, StartDesk, desk_served


async def chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


async def test_a_declared_length_over_the_limit_is_refused_without_reading_the_body(start_desk: StartDesk) -> None:
    harness = await start_desk(server={"max_body": "1KiB"})
    over = await harness.client.post("/api/conversations", content=b"{" + b" " * 1100 + b"}",
                                     headers={"content-type": "application/json"})
    assert over.status_code == 413
    assert over.headers["connection"] == "close"
    assert over.json() == {"error": "body_too_large", "details": {
        "hint": "the request body is larger than 1 KiB, the most /api/, the web chat's API or a webhook takes (server.max_body)"}}
    within = await harness.client.post("/api/conversations", content=b"{" + b" " * 1000 + b"}",
                                       headers={"content-type": "application/json"})
    assert within.status_code == 201, within.text
    for path in ("/chat/api/messages", "/webhooks/1"):  # the web chat's API and webhooks share the limit
        refused = await harness.client.post(path, content=b"x" * 1100, headers={"content-type": "application/json"})
        assert (refused.status_code, refused.json()["error"]) == (413, "body_too_large"), path


async def test_a_chunked_body_is_cut_off_at_the_limit_and_the_route_never_answers(start_desk: StartDesk) -> None:
    harness = await start_desk(server={"max_body": "1KiB"})
    cid = await harness.conversation()
    over = await harness.client.post(f"/api/conversations/{cid}/messages", headers={"content-type": "application/json"},
                                     content=chunks(b'{"text": "', b"a" * 600, b"a" * 600, b'"}'))
    assert over.status_code == 413
    assert over.json()["error"] == "body_too_large"
    assert [m["text"] for m in await harness.messages(cid)] == []  # nothing was stored
    within = await harness.client.post(f"/api/conversations/{cid}/messages", headers={"content-type": "application/json"},
                                       content=chunks(b'{"text": "', b"a" * 600, b'"}'))
    assert within.status_code == 200, within.text


async def test_form_posts_have_their_own_smaller_limit(start_desk: StartDesk) -> None:
    """The pages (the inbox and its login, the return form, the approval pages) take form posts
    only, bounded by server.max_form_body; the API keeps server.max_body."""
    harness = await start_desk(server={"max_body": "64KiB", "max_form_body": "2KiB"})
    form = {"content-type": "application/x-www-form-urlencoded"}
    login = await harness.client.post("/inbox/login", content=b"token=" + b"x" * 3000, headers=form)
    assert login.status_code == 413
    assert "server.max_form_body" in login.json()["details"]["hint"]
    page = await harness.client.post("/f/whatever", content=chunks(b"a=" + b"x" * 1500, b"x" * 1500), headers=form)
    assert page.status_code == 413
    api = await harness.client.post("/api/conversations", content=b'{"subscriber": {"name": "' + b"x" * 150 + b'"}}',
                                    headers={"content-type": "application/json"})
    assert api.status_code == 201  # 3 KiB would be too much for a page, not for the API


async def test_a_request_without_a_body_goes_through_untouched(harness: Harness) -> None:
    assert (await harness.client.get("/healthz")).status_code == 200
    cid = await harness.conversation()
    for path in ("/api/conversations", f"/api/conversations/{cid}/tools/handoff_request"):
        empty = await harness.client.post(path, headers={"content-type": "application/json"})
        assert (empty.status_code, empty.json()["details"]["fields"]) == (422, {"body": "is required"}), path  # the route's answer


async def test_the_route_reads_exactly_the_bytes_sent_within_the_limit() -> None:
    """Counting passes every chunk on unchanged; the route sees the whole body."""
    seen: list[bytes] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(await Request(scope, receive).body())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict[str, object]] = []
    parts = [{"type": "http.request", "body": b"abc", "more_body": True}, {"type": "http.request", "body": b"def"}]

    async def receive() -> dict[str, object]:
        return parts.pop(0)

    async def send(message: dict[str, object]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": "/api/x", "headers": [(b"transfer-encoding", b"chunked")], "method": "POST"}
    await BodyLimit(app, max_body=6, max_form_body=1)(scope, receive, send)  # type: ignore[arg-type]
    assert seen == [b"abcdef"]
    assert sent[0]["status"] == 204


async def test_a_real_server_answers_a_huge_declared_body_at_once(sqlite_url: str) -> None:
    """Through uvicorn: a client that announces a gigabyte gets its 413 after sending only the
    headers, so nothing waits for (or buffers) the body."""
    async with desk_served(sqlite_url) as (_desk, base):
        host, port = base.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /webhooks/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000000\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
        assert head.startswith(b"HTTP/1.1 413 ")
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")).split(b":")[1])
        body = json.loads(await reader.readexactly(length))
        assert body["error"] == "body_too_large"
        writer.close()

"""The webhook agent against an owner's bot on 127.0.0.1 that checks signatures with the
helper we ship (`bot.agents.webhook.verify`) and answers what each test scripts."""

from __future__ import annotations

import json
import time
from collections import deque
from typing import Any

import pytest
from aiohttp import web

from bot.agents.webhook import DELIVERY_HEADER, SIGNATURE_HEADER, TIMESTAMP_HEADER, InvalidSignature, sign, verify
from bot.config import Config, ConfigError
from bot.flow.router import FALLBACK_REPLY
from tests.conftest import SECRET, Harness, StartDesk
from tests.fake_server import LocalHttpServer

BOT_SECRET = "owner-bot-secret-0123456789"


class OwnersBot(LocalHttpServer):
    """The owner's existing bot: verifies each turn, records it, answers from a script."""

    def __init__(self) -> None:
        super().__init__()
        self.turns: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.refused: list[str] = []
        self.script: deque[tuple[int, Any, dict[str, str]]] = deque()
        self.url = ""

    def answer(self, replies: list[str] | None = None, tool_calls: list[dict[str, Any]] | None = None) -> None:
        self.script.append((200, {"replies": replies or [], "tool_calls": tool_calls or []}, {}))

    def fail(self, status: int, body: Any = None, **headers: str) -> None:
        self.script.append((status, body if body is not None else {"error": "busy"}, headers))

    async def start(self) -> OwnersBot:
        app = web.Application()
        app.router.add_post("/turn", self._turn)
        self.url = f"http://127.0.0.1:{await self._serve(app)}/turn"
        return self

    async def stop(self) -> None:
        await self._stop_serving()

    async def _turn(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            verify(BOT_SECRET, request.headers, body)
        except InvalidSignature as exc:
            self.refused.append(str(exc))
            return web.json_response({"error": str(exc)}, status=401)
        self.turns.append(json.loads(body))
        self.headers.append(dict(request.headers))
        status, answer, headers = self.script.popleft()
        if isinstance(answer, str):
            return web.Response(text=answer, status=status, headers=headers)
        return web.json_response(answer, status=status, headers=headers)


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def bot() -> Any:
    server = await OwnersBot().start()
    yield server
    await server.stop()


async def start(start_desk: StartDesk, bot: OwnersBot, **agent: Any) -> tuple[Harness, str]:
    harness = await start_desk(agent={"kind": "webhook", "url": bot.url, "secret": BOT_SECRET, **agent})
    return harness, await harness.conversation()


def texts(result: dict[str, Any]) -> list[str]:
    return [r["text"] for r in result["replies"]]


async def test_each_turn_is_a_signed_post_with_the_conversation_and_tools(start_desk: StartDesk, bot: OwnersBot) -> None:
    harness, cid = await start(start_desk, bot)
    bot.answer(["Hi Ana!", "What can I do for you?"])
    assert texts(await harness.say(cid, "hello")) == ["Hi Ana!", "What can I do for you?"]
    [turn] = bot.turns
    assert turn["type"] == "turn"
    assert turn["trigger"] == "message"
    assert turn["round"] == 1
    assert turn["subscriber"] == {"name": "Ana", "email": "ana@example.com"}
    assert turn["messages"] == [{"role": "subscriber", "text": "hello", "author": None}]
    tool = turn["tools"][0]
    assert tool["name"] == "handoff_request"
    assert tool["input_schema"]["properties"]["channel_id"]["enum"] == [1]
    assert turn["tool_results"] == []


async def test_tool_calls_run_through_the_registry_and_a_handoff_ends_the_turn(start_desk: StartDesk, bot: OwnersBot) -> None:
    harness, cid = await start(start_desk, bot)
    bot.answer(tool_calls=[{"id": "a", "name": "lookup_order", "arguments": {"order": "1234"}}])
    bot.answer(["Let me bring in a colleague."], tool_calls=[{"id": "b", "name": "handoff_request", "arguments": {
        "channel_id": 1, "summary": "Ana's order 1234 is late.", "expected_action": "Check order 1234.",
    }}])
    result = await harness.say(cid, "where is order 1234?")
    assert texts(result) == [  # the desk's notice, stored when the handoff started, then the bot's own words
        "I've asked our team to join — usually within 1 business day. Your messages now go straight to them.",
        "Let me bring in a colleague.",
    ]
    assert result["handoff_session_id"]
    assert len(bot.turns) == 2
    [unknown] = bot.turns[1]["tool_results"]
    assert unknown["id"] == "a"
    assert unknown["result"]["error"] == "unknown_tool"
    assert (await harness.say(cid, "hello?"))["routed_to"] == "human"  # the bypass: the bot is not asked
    assert len(bot.turns) == 2


async def test_the_resume_note_starts_a_turn(start_desk: StartDesk, bot: OwnersBot) -> None:
    harness, cid = await start(start_desk, bot)
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    bot.answer(["Welcome back, Ana."])
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved", "note": "Refunded"})
    await harness.desk.settle()
    [turn] = bot.turns
    assert turn["trigger"] == "resumed"
    assert turn["messages"][-1]["role"] == "system"
    assert turn["messages"][-1]["text"].startswith("[Bot resumed")
    assert (await harness.messages(cid))[-1]["text"] == "Welcome back, Ana."


async def test_a_busy_bot_is_retried_with_the_same_delivery_id(start_desk: StartDesk, bot: OwnersBot) -> None:
    harness, cid = await start(start_desk, bot)
    bot.fail(503, **{"Retry-After": "0"})
    bot.answer(["Sorry for the wait."])
    assert texts(await harness.say(cid, "hello")) == ["Sorry for the wait."]
    first, second = bot.headers
    assert first[DELIVERY_HEADER] == second[DELIVERY_HEADER]


async def test_a_bot_with_another_secret_refuses_and_the_subscriber_gets_the_fallback(
    start_desk: StartDesk, bot: OwnersBot,
) -> None:
    harness, cid = await start(start_desk, bot, secret="not-the-bots-secret-at-all")
    assert texts(await harness.say(cid, "hello")) == [FALLBACK_REPLY]
    assert bot.refused == ["the signature does not match the body"]
    assert bot.turns == []


async def test_an_unusable_answer_fails_the_turn_cleanly(start_desk: StartDesk, bot: OwnersBot) -> None:
    harness, cid = await start(start_desk, bot)
    bot.script.append((200, {"reply": "typo in the key"}, {}))
    assert texts(await harness.say(cid, "hello")) == [FALLBACK_REPLY]


def test_verify_refuses_tampered_old_and_unsigned_requests() -> None:
    body = b'{"type":"turn"}'
    now = int(time.time())
    good = {TIMESTAMP_HEADER: str(now), SIGNATURE_HEADER: sign(BOT_SECRET, now, body)}
    verify(BOT_SECRET, good, body)
    verify(BOT_SECRET, {k.lower(): v for k, v in good.items()}, body)
    with pytest.raises(InvalidSignature, match="does not match"):
        verify(BOT_SECRET, good, body.replace(b"turn", b"tern"))
    with pytest.raises(InvalidSignature, match="more than five minutes"):
        verify(BOT_SECRET, good, body, now=now + 301)
    with pytest.raises(InvalidSignature, match="missing"):
        verify(BOT_SECRET, {TIMESTAMP_HEADER: str(now)}, body)


def test_config_wants_a_real_secret_and_an_http_url() -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "agent": {"kind": "webhook", "url": "bot.local/turn", "secret": "short"}})
    assert str(caught.value).splitlines() == [
        "agent.url: must be an http(s) URL such as https://bot.example.com/handoff-desk/turn",
        "agent.secret: must be at least 16 characters (generate one with: openssl rand -hex 32)",
    ]

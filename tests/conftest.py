"""Shared fixtures: a real server (app + desk) on a real database file.

Lifecycle tests run on SQLite and, when HANDOFF_TEST_POSTGRES_URL points at a PostgreSQL
server (`.ci/run` starts a throwaway cluster), on PostgreSQL too, each test in a fresh
database.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
import uvicorn
from sqlalchemy import func, select

from bot.config import Config, ConfigError
from bot.desk import Desk
from bot.runtime.clock import Clock, ManualClock
from bot.store.db import Database
from bot.store.models import InboundEvent
from bot.web.app import create_app
from bot.web.server import DeskServer
from channels.base import ChannelAdapter
from tests.fake_telegram import FakeTelegram
from tests.fake_twilio import FakeTwilio
from tests.fakes import ScriptedChannel
from tests.oidc_provider import oidc_provider  # noqa: F401  (a fixture: any test module may take it)

POSTGRES_URL = os.environ.get("HANDOFF_TEST_POSTGRES_URL")
SECRET = "test-secret-key-0123456789"


def _pg_admin_dsn() -> str:
    assert POSTGRES_URL
    return POSTGRES_URL.replace("postgresql+asyncpg://", "postgresql://")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> AsyncIterator[str]:
    """A fresh, empty database per test: a SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'desk.db'}"
        return
    if not POSTGRES_URL:
        pytest.skip("HANDOFF_TEST_POSTGRES_URL is not set (.ci/run starts a PostgreSQL cluster)")
    import asyncpg

    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(_pg_admin_dsn())
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base = POSTGRES_URL.rsplit("/", 1)[0]
    yield f"{base}/{name}"
    admin = await asyncpg.connect(_pg_admin_dsn())
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


@pytest.fixture
def sqlite_url(tmp_path: Any) -> str:
    return f"sqlite:///{tmp_path / 'desk.db'}"


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    """A bare database, migrated: no desk around it."""
    database = Database(database_url)
    await database.upgrade()
    try:
        yield database
    finally:
        await database.dispose()


def make_config(database_url: str, **overrides: Any) -> Config:
    data: dict[str, Any] = {
        "database_url": database_url,
        "secret_key": SECRET,
        "server": {"public_url": "http://desk.test"},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox", "estimated_response": "within 1 business day"}],
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return Config.from_mapping(data)


class CliRun(NamedTuple):
    code: int
    out: str
    err: str


async def probe_config(path: Path) -> CliRun:
    """`handoff check-config PATH --probe`: the real CLI in a subprocess, as an operator runs
    it, awaited so the fake providers it probes keep answering on this event loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "check-config", str(path), "--probe", cwd=Path(__file__).resolve().parent.parent,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200"},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    return CliRun(process.returncode or 0, out.decode(), err.decode())


def config_problem(**overrides: Any) -> str:
    """The report a config with these sections is refused with (it must be refused)."""
    with pytest.raises(ConfigError) as caught:
        make_config("sqlite:///x.db", **overrides)
    return str(caught.value)


class Harness:
    """One running server and an HTTP client talking to it."""

    def __init__(self, desk: Desk, client: httpx.AsyncClient) -> None:
        self.desk, self.client = desk, client

    async def conversation(self, name: str = "Ana", email: str | None = "ana@example.com") -> str:
        body: dict[str, Any] = {"subscriber": {"name": name, **({"email": email} if email else {})}}
        response = await self.client.post("/api/conversations", json=body)
        assert response.status_code == 201, response.text
        return response.json()["conversation_id"]

    async def say(self, cid: str, text: str) -> dict[str, Any]:
        response = await self.client.post(f"/api/conversations/{cid}/messages", json={"text": text})
        assert response.status_code == 200, response.text
        return response.json()

    async def tool(self, cid: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.client.post(f"/api/conversations/{cid}/tools/{name}", json=body)
        assert response.status_code == 200, response.text
        return response.json()

    async def start_handoff(self, cid: str, channel_id: int = 1, **fields: Any) -> dict[str, Any]:
        body = {
            "channel_id": channel_id,
            "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
            "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
            **fields,
        }
        result = await self.tool(cid, "handoff_request", body)
        assert result.get("ok"), result
        return result

    async def handoff(self, sid: str) -> dict[str, Any]:
        response = await self.client.get(f"/api/handoffs/{sid}")
        assert response.status_code == 200, response.text
        return response.json()

    async def messages(self, cid: str, after: int = 0) -> list[dict[str, Any]]:
        response = await self.client.get(f"/api/conversations/{cid}/messages", params={"after": after})
        assert response.status_code == 200, response.text
        return response.json()["messages"]

    async def events(self, sid: str) -> list[dict[str, Any]]:
        response = await self.client.get(f"/api/handoffs/{sid}/events")
        assert response.status_code == 200, response.text
        return response.json()["events"]

    async def system_texts(self, cid: str) -> list[str]:
        """The system messages the agent read (resume, approval and user-action notes)."""
        return [m["text"] for m in await self.messages(cid) if m["role"] == "system"]

    async def ask_for_a_person(self, cid: str) -> tuple[str, str]:
        """The subscriber asks the rules agent for a person and it hands off; returns the
        handoff id and what the agent answered."""
        asked = await self.say(cid, "Can I talk to a person please?")
        assert asked["routed_to"] == "agent", asked
        assert asked["handoff_session_id"], asked
        return str(asked["handoff_session_id"]), str(asked["replies"][0]["text"])

    async def ask_approval(self, cid: str, action: str = "refund_order", **arguments: Any) -> str:
        """The agent calls a gated action and the desk sends its prompt; returns the approval id."""
        result = await self.tool(cid, action, arguments)
        assert result["status"] == "APPROVAL_PENDING", result
        await self.desk.settle()
        return str(result["approval_id"])

    async def approval(self, aid: str) -> dict[str, Any]:
        """An approval as the API shows it: state, deadline, receipt, events."""
        response = await self.client.get(f"/api/approvals/{aid}")
        assert response.status_code == 200, response.text
        return dict(response.json())

    async def human_texts(self, cid: str) -> list[tuple[str, str]]:
        """What the people on a channel said in the conversation, with who said it."""
        return [(m["author"], m["text"]) for m in await self.messages(cid) if m["role"] == "human"]

    async def stored_events(self) -> int:
        """How many inbound provider events the desk stored (a redelivery or a refused one adds none)."""
        async with self.desk.db.read() as session:
            return int(await session.scalar(select(func.count()).select_from(InboundEvent)) or 0)

    async def kinds(self, sid: str) -> list[str]:
        return [e["kind"] for e in await self.events(sid)]


StartDesk = Callable[..., Awaitable[Harness]]


@pytest.fixture
async def start_desk(database_url: str) -> AsyncIterator[StartDesk]:
    """Factory: start a desk (and its HTTP client) on the test database; stopped at teardown."""
    running: list[tuple[Desk, httpx.AsyncClient]] = []

    async def start(
        *, clock: Clock | None = None, adapters: dict[int, Callable[[Any], ChannelAdapter]] | None = None,
        run_timers: bool = False, url: str | None = None, **overrides: Any,
    ) -> Harness:
        config = make_config(url or database_url, **overrides)
        built = {cid: factory(config.channel(cid)) for cid, factory in (adapters or {}).items()}
        desk = Desk(config, clock=clock or ManualClock(), channel_overrides=built, run_timers=run_timers)
        await desk.start()
        app = create_app(desk, manage_desk=False)
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://desk.test")
        running.append((desk, client))
        return Harness(desk, client)

    yield start
    for desk, client in running:
        await client.aclose()
        if desk.started:
            await desk.stop()


@pytest.fixture
async def harness(start_desk: StartDesk) -> Harness:
    return await start_desk()


@pytest.fixture
def calls() -> list[dict[str, Any]]:
    """What the declared test actions ran with (tests/approval_actions.py), fresh per test."""
    from tests import approval_actions

    approval_actions.CALLS.clear()
    return approval_actions.CALLS


@pytest.fixture
def scripted() -> Callable[[Any], ScriptedChannel]:
    return ScriptedChannel


# --------------------------------------------------------------------------- browser tests

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parent.parent / "docs" / "screenshots"
CHROMIUM_FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]


@pytest.fixture
def served_config() -> dict[str, Any]:
    """Config overrides for `served`; a test module overrides this fixture to add some."""
    return {}


@asynccontextmanager
async def desk_served(
    database_url: str, port: int | None = None, *, adapters: dict[int, Callable[[Any], ChannelAdapter]] | None = None,
    clock: Clock | None = None, **overrides: Any,
) -> AsyncIterator[tuple[Desk, str]]:
    """A desk (config `overrides`) behind a real uvicorn server on a free loopback port (real
    clock), for the browser tests: yields the desk and its base URL. `port`: a port the test
    chose (and told another server about) beforehand; `adapters`: channels built by these
    factories instead of their kind's adapter (scripted ones, as `start_desk` takes them);
    `clock`: a `ManualClock` for a test that moves time itself."""
    if port is None:
        with socket.socket() as probe:  # a free port, known before the config (links carry it)
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    config = make_config(database_url, server={"public_url": base}, **overrides)
    built = {cid: factory(config.channel(cid)) for cid, factory in (adapters or {}).items()}
    desk = Desk(config, clock=clock or Clock(), channel_overrides=built, run_timers=False)
    await desk.start()
    # The product's server class, so open long-polls end at shutdown as under `handoff serve`.
    server = DeskServer(uvicorn.Config(create_app(desk, manage_desk=False), host="127.0.0.1", port=port,
                                       log_level="warning", timeout_graceful_shutdown=1), before_shutdown=desk.bus.close)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield desk, base
    server.should_exit = True
    await task
    await desk.stop()


@pytest.fixture
async def served(sqlite_url: str, served_config: dict[str, Any]) -> AsyncIterator[tuple[Desk, str]]:
    """A desk behind a real uvicorn server on a free loopback port (real clock)."""
    async with desk_served(sqlite_url, **served_config) as pair:
        yield pair


@pytest.fixture
async def page() -> AsyncIterator[Any]:
    """A Chromium page that records console errors and page errors in `page.problems`."""
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        context = await browser.new_context(viewport={"width": 1200, "height": 820})
        page = await context.new_page()
        page.problems = []
        page.on("console", lambda msg: msg.type == "error" and page.problems.append(msg.text))
        page.on("pageerror", lambda exc: page.problems.append(str(exc)))
        yield page
        await browser.close()


async def shot(page: Any, name: str) -> None:
    """Refresh a screenshot of the docs (docs/screenshots/) when HANDOFF_WRITE_SCREENSHOTS=1."""
    if os.environ.get("HANDOFF_WRITE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


TELEGRAM_TOKEN = "123456:TEST-token_abcdefghijklmnop"


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Telegram Bot API (token TELEGRAM_TOKEN), for tests that drive a front or a
    channel through a whole desk; requested before start_desk, so it outlives the desk."""
    server = await FakeTelegram(token=TELEGRAM_TOKEN).start()
    yield server
    await server.stop()


@pytest.fixture
async def twilio() -> AsyncIterator[FakeTwilio]:
    """A fake Twilio API, like `telegram`."""
    server = await FakeTwilio().start()
    yield server
    await server.stop()

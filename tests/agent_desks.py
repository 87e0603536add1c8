"""A real desk for the agent-framework integrations' tests, and the people answering at it.

`ServedDesk` is a `handoff serve` process (tests/crash_harness.py's `DeskProcess`) on its own
config and SQLite file, which a test can kill with SIGKILL and start again from those files.
`clocked_desk` is the same config in-process behind uvicorn on a `ManualClock`, for the
approval timeouts a test reaches by moving the clock rather than by waiting. `People` is
what a person does through the desk: fill the return form, decide an approval as the owner.
Everything is judged from outside, through the HTTP API, as the agent and the people see it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import httpx

from bot.desk import Desk
from bot.runtime.clock import ManualClock
from tests.conftest import desk_served
from tests.crash_harness import DeskProcess, free_port

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent

AGENT_KEY = "agent-key-0123456789"
OWNER_TOKEN = "owner-token-0123456789"
CHANNEL_ID = 1
REFUND = {
    "id": "refund_order", "description": "Refund an order to the original payment method", "risk": "high",
    "policy": "ask_always", "approval_channels": [CHANNEL_ID], "timeout": "5m",
    "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                     "required": ["order_id", "amount"], "additionalProperties": False},
    "run": {"by": "agent"},
}
SECTIONS: dict[str, Any] = {
    "api": {"key": AGENT_KEY}, "owner": {"token": OWNER_TOKEN},
    "handoff": {"idle_timeout": "2h"},  # no release in the middle of a test
    "channels": [{"id": CHANNEL_ID, "kind": "owner_inbox", "label": "Owner inbox", "estimated_response": "today"}],
    "actions": [REFUND],
}
WAIT = 60.0  # a shared, slow CI machine; a test waits this long only when it is failing


class ServedDesk:
    """A `handoff serve` process on `directory`'s config and database file, restartable."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.config = directory / "desk.json"
        self.config.write_text(json.dumps({
            "server": {"host": "127.0.0.1", "port": self.port, "public_url": self.base_url},
            "secret_key": "agents-secret-key-0123456789", "database_url": f"sqlite:///{directory / 'desk.db'}",
            "logging": {"level": "warning", "format": "console"}, **SECTIONS,
        }, indent=2))
        self.process: DeskProcess | None = None
        self.starts = 0

    def start(self) -> ServedDesk:
        """Start it (again, after a kill: from the same files) and wait until it answers."""
        self.starts += 1
        self.process = DeskProcess(f"agents-{self.starts}", self.config, self.port)
        self.process.wait_ready()
        return self

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()

    def close(self) -> None:
        if self.process is not None:
            self.process.close()


@asynccontextmanager
async def clocked_desk(database_url: str) -> AsyncIterator[tuple[Desk, str, ManualClock]]:
    """The same desk in this process on a clock that moves only when the test says."""
    clock = ManualClock()
    async with desk_served(database_url, clock=clock, **SECTIONS) as (desk, base_url):
        yield desk, base_url, clock


async def eventually(check: Callable[[], Awaitable[T | None]], what: str, timeout: float = WAIT) -> T:
    """Ask `check()` until it returns something (polling, never a fixed sleep); fail naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found is not None:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.05)


class People:
    """The people at the desk, through its HTTP API and pages as the owner token."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def _client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=30, headers={"Authorization": f"Bearer {OWNER_TOKEN}"})

    async def handoffs_of(self, conversation_id: str) -> list[dict[str, Any]]:
        """Every handoff of the conversation the desk holds, open or ended."""
        async with self._client() as client:
            found = []
            for state in ("open", "released", "failed"):
                answer = await client.get("/api/handoffs", params={"state": state, "limit": 500})
                assert answer.status_code == 200, answer.text
                found += [h for h in answer.json()["handoffs"] if h["conversation_id"] == conversation_id]
            return found

    async def open_handoff(self, conversation_id: str) -> dict[str, Any]:
        async def active() -> dict[str, Any] | None:
            return next((h for h in await self.handoffs_of(conversation_id) if h["state"] == "active"), None)

        return await eventually(active, f"an active handoff in conversation {conversation_id}")

    async def fill_form(self, handoff: dict[str, Any], *, note: str, **fields: str) -> None:
        """The recipient submits the handoff's return form (its signed link) with `fields`."""
        url = urlsplit(handoff["form_url"])
        token = url.path.rsplit("/", 1)[-1]
        async with httpx.AsyncClient(base_url=self.base_url, timeout=30) as browser:
            page = await browser.get(url.path)
            assert page.status_code == 200, page.text
            sent = await browser.post(url.path, data={"token": token, "outcome": "resolved", "note": note,
                                                      "filled_by": "Sam",
                                                      **{f"f_{name}": value for name, value in fields.items()}})
            assert sent.status_code == 200, sent.text

    async def approvals_of(self, conversation_id: str, count: int) -> list[dict[str, Any]]:
        """The conversation's `count` pending approvals, once the desk has them all."""
        async def pending() -> list[dict[str, Any]] | None:
            async with self._client() as client:
                answer = await client.get("/api/approvals", params={"state": "pending", "limit": 500})
            assert answer.status_code == 200, answer.text
            mine = [a for a in answer.json()["approvals"] if a["conversation_id"] == conversation_id]
            return mine if len(mine) >= count else None

        return await eventually(pending, f"{count} pending approval(s) in conversation {conversation_id}")

    async def decide(self, approval_id: str, *, approve: bool, reason: str | None = None) -> None:
        async with self._client() as client:
            answer = await client.post(f"/api/approvals/{approval_id}/decision", json={
                "decision": "approve" if approve else "deny", **({"reason": reason} if reason else {})})
        assert answer.status_code == 200, answer.text

    async def approval(self, approval_id: str) -> dict[str, Any]:
        async with self._client() as client:
            answer = await client.get(f"/api/approvals/{approval_id}")
        assert answer.status_code == 200, answer.text
        return dict(answer.json())


async def start_example(example: str, base_url: str, cwd: Path, *extra: str) -> asyncio.subprocess.Process:
    """examples/`example` as its own process (the agent), in `cwd`, against the desk at `base_url`."""
    return await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / "examples" / example), "--desk", base_url, "--api-key", AGENT_KEY, *extra, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


async def printed(process: asyncio.subprocess.Process, prefix: str) -> str:
    """The rest of the first line the process prints starting with `prefix` (what it printed
    before is shown when it ends without one)."""
    assert process.stdout is not None
    before = []
    while True:
        raw = await asyncio.wait_for(process.stdout.readline(), WAIT)
        assert raw, f"the example ended without printing {prefix!r}:\n" + "".join(before)
        line = raw.decode()
        if line.startswith(prefix):
            return line.removeprefix(prefix).strip()
        before.append(line)

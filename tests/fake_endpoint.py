"""The owner's side of a callback: an endpoint (an orchestrator, an action's `run` URL) on a
loopback port that checks the desk's signature and records every request it gets.

It answers from a script: each request takes the next planned `Answer` (a status, a JSON
body, a Retry-After, or `hang` to give no answer before the desk's timeout), and once the
script is used up it answers `default`. Requests are recorded whatever the answer, so a test
can compare the delivery ids of a refused attempt and of its retry.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from bot.runtime.signed_http import DELIVERY_HEADER, InvalidSignature, verify
from tests.fake_server import LocalHttpServer


@dataclass(frozen=True)
class Answer:
    status: int = 200
    body: Any = field(default_factory=lambda: {"ok": True})
    retry_after: str | None = None
    hang: bool = False  # hold the request open until the endpoint stops (the desk times out)


@dataclass(frozen=True)
class Call:
    """One request as the endpoint got it: its signed body and its delivery id."""

    body: dict[str, Any]
    delivery: str | None
    answered: int


class FakeEndpoint(LocalHttpServer):
    def __init__(self, secret: str, *script: Answer, default: Answer = Answer()) -> None:
        super().__init__()
        self.secret, self.script, self.default = secret, list(script), default
        self.calls: list[Call] = []
        self._released = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def start(self) -> FakeEndpoint:
        app = web.Application()
        app.router.add_post("/hook", self._hook)
        await self._serve(app)
        return self

    async def stop(self) -> None:
        self._released.set()
        await self._stop_serving()

    def plan(self, *answers: Answer) -> None:
        """Answer the next requests so (after what is planned already)."""
        self.script.extend(answers)

    def delivered(self) -> list[Call]:
        """The requests it accepted (answered 2xx)."""
        return [c for c in self.calls if 200 <= c.answered < 300]

    async def _hook(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            verify(self.secret, request.headers, raw)
        except InvalidSignature as exc:
            return web.Response(status=401, text=str(exc))
        answer = self.script.pop(0) if self.script else self.default
        self.calls.append(Call(json.loads(raw), request.headers.get(DELIVERY_HEADER), 0 if answer.hang else answer.status))
        await self._notify()
        if answer.hang:
            await self._released.wait()
            return web.Response(status=504)
        headers = {"Retry-After": answer.retry_after} if answer.retry_after is not None else {}
        if answer.body is None:
            return web.Response(status=answer.status, headers=headers)
        return web.json_response(answer.body, status=answer.status, headers=headers)

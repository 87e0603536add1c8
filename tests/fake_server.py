"""What the fake provider servers share: waiting until a server has seen what a test expects,
and serving an aiohttp app on a free port of 127.0.0.1.

Each fake (tests/fake_*.py) stands in for one provider's far side; this holds only the
plumbing, so a fake's file is about what its provider says and refuses.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from aiohttp import web

T = TypeVar("T")


async def serve(app: web.Application) -> tuple[web.AppRunner, int]:
    """Serve `app` on a free port of 127.0.0.1; the caller cleans the runner up."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[int]:
    """Serve `app` on a free port of 127.0.0.1 while the block runs; yields the port."""
    runner, port = await serve(app)
    try:
        yield port
    finally:
        await runner.cleanup()


class Watched:
    """A fake that tests can wait on: it calls `_notify` whenever it records something."""

    def __init__(self) -> None:
        self._changed = asyncio.Condition()

    async def wait_for(self, condition: Callable[[], T], timeout: float = 10.0) -> T:
        """Wait until `condition()` is truthy (re-checked whenever something happens here); return its value."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                return await self._changed.wait_for(condition)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()


class LocalHttpServer(Watched):
    """A fake served over real HTTP, so the provider's own SDK talks to it unchanged."""

    def __init__(self) -> None:
        super().__init__()
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def _serve(self, app: web.Application) -> int:
        """Serve `app` on a free port of 127.0.0.1 and return the port."""
        self._runner, self.port = await serve(app)
        return self.port

    async def _stop_serving(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

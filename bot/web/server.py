"""Running the app under uvicorn until Ctrl-C (SIGINT) or SIGTERM, and stopping cleanly.

uvicorn's shutdown stops accepting connections, waits up to `timeout_graceful_shutdown` for
open requests, cancels what is left (a traceback and a 500 each), and only then runs the
app's lifespan shutdown. A long-poll parks a request for up to 25 s, so it is ended first,
before that wait: the desk's bus is closed and every parked poll is answered with a 503 and
Retry-After (`bot.errors.ShuttingDown`).
"""

from __future__ import annotations

import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE


class DeskServer(uvicorn.Server):
    """A uvicorn server that calls `before_shutdown` (end the long-polls) as shutdown begins."""

    def __init__(self, config: uvicorn.Config, *, before_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._before_shutdown = before_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._before_shutdown()
        await super().shutdown(sockets)


def serve_until_stopped(app: Any, *, before_shutdown: Callable[[], None], **options: Any) -> None:
    """Serve `app` until SIGINT or SIGTERM; either is a normal end, so the process exits 0.

    After a clean shutdown uvicorn raises the signal that stopped it again, with the handler
    it found: SIGINT becomes a KeyboardInterrupt, but SIGTERM's default handler kills the
    process (exit status 143, which supervisors report as a failure). SIGTERM is given
    SIGINT's handler for the run so both end here."""
    server = DeskServer(uvicorn.Config(app, **options), before_shutdown=before_shutdown)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # the re-raised signal of a shutdown that already completed
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:  # stopped before it listened, as uvicorn.run reports it
        sys.exit(STARTUP_FAILURE)

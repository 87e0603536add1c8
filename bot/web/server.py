"""Running the app under uvicorn until Ctrl-C (SIGINT) or SIGTERM, and stopping cleanly.

uvicorn's shutdown stops accepting connections, waits up to `timeout_graceful_shutdown` for
open requests, cancels what is left (a traceback and a 500 each), and only then runs the
app's lifespan shutdown. A long-poll parks a request for up to 25 s, so it is ended first,
before that wait: the desk's bus is closed and every parked poll is answered with a 503 and
Retry-After (`bot.errors.ShuttingDown`).

Once the server listens, `settle_heap` moves everything start-up made (modules, the app, the
config, compiled templates) out of the garbage collector's sight and spaces its passes out.
Without it a full collection walks those few hundred thousand long-lived objects every few
thousand requests, and the request that triggers it waits tens of milliseconds.
"""

from __future__ import annotations

import gc
import signal
import socket
import sys
from collections.abc import Callable
from typing import Any

import uvicorn
from uvicorn.config import STARTUP_FAILURE

# Young objects per gen-0 pass, and passes per older generation. A handoff's round trip leaves
# about 700 more container objects than it frees before its end, so the default (700, 10, 10)
# runs a pass per round trip. Measured with bench/roundtrip.py over 150 round trips: 5 000
# runs 6 passes instead of 141, 13-17 ms of collection instead of 67-88, pauses of at most a
# few milliseconds; 20 000 was worse (one pause of 44 ms: an older generation grown large).
GC_THRESHOLDS = (5_000, 20, 20)


def settle_heap() -> None:
    """Collect once, then freeze what is left (it lives as long as the process) and raise the
    collection thresholds. For a process that serves from here on, never for a test process
    that builds and drops many desks."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class DeskServer(uvicorn.Server):
    """A uvicorn server that calls `before_shutdown` (end the long-polls) as shutdown begins,
    and with `settle_heap` settles the garbage collector once it listens."""

    def __init__(self, config: uvicorn.Config, *, before_shutdown: Callable[[], None], settle_heap: bool = False) -> None:
        super().__init__(config)
        self._before_shutdown = before_shutdown
        self._settle_heap = settle_heap

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self._settle_heap and self.started:
            settle_heap()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._before_shutdown()
        await super().shutdown(sockets)


def serve_until_stopped(app: Any, *, before_shutdown: Callable[[], None], **options: Any) -> None:
    """Serve `app` until SIGINT or SIGTERM; either is a normal end, so the process exits 0.

    After a clean shutdown uvicorn raises the signal that stopped it again, with the handler
    it found: SIGINT becomes a KeyboardInterrupt, but SIGTERM's default handler kills the
    process (exit status 143, which supervisors report as a failure). SIGTERM is given
    SIGINT's handler for the run so both end here."""
    server = DeskServer(uvicorn.Config(app, **options), before_shutdown=before_shutdown, settle_heap=True)
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        server.run()
    except KeyboardInterrupt:
        pass  # the re-raised signal of a shutdown that already completed
    finally:
        signal.signal(signal.SIGTERM, previous)
    if not server.started:  # stopped before it listened, as uvicorn.run reports it
        sys.exit(STARTUP_FAILURE)

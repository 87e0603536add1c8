"""What the relay benchmarks share: a started desk on a fresh SQLite file with one channel
and `conversations` active handoffs on it (warmed up: each has relayed a few messages before
anything is timed, so first-use costs such as connections, compiled statements and templates
are not counted, as bench/slack_relay.py does), the subscribers' messages posted through the
HTTP API (one task per conversation, in order), and percentiles."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import httpx  # noqa: E402

from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from bot.web.app import create_app  # noqa: E402

SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."
WARM_UP = 2  # messages each conversation relays before the timed pass


@asynccontextmanager
async def desk_with_handoffs(
    tmp: Path, channel: dict[str, Any], conversations: int,
) -> AsyncIterator[tuple[Desk, httpx.AsyncClient, list[str]]]:
    config = Config.from_mapping({
        "database_url": f"sqlite:///{tmp / f'bench-{time.monotonic_ns()}.db'}",
        "secret_key": "bench-secret-key-0123456789",
        "server": {"public_url": "http://desk.test"},
        "channels": [channel],
    })
    desk = Desk(config, run_timers=False)
    await desk.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(desk, manage_desk=False)), base_url="http://desk.test")
    try:
        cids = []
        request = {"channel_id": channel["id"], "summary": SUMMARY, "expected_action": ACTION}
        for _ in range(conversations):
            cid = (await client.post("/api/conversations", json={"subscriber": {"name": "Ana"}})).json()["conversation_id"]
            result = (await client.post(f"/api/conversations/{cid}/tools/handoff_request", json=request)).json()
            assert result.get("ok"), result
            cids.append(cid)
        await post_all(client, cids, WARM_UP, "warming up {c}.{k}")
        await desk.outbox.drain()
        yield desk, client, cids
    finally:
        await client.aclose()
        await desk.stop()


async def post_all(client: httpx.AsyncClient, cids: list[str], per_conversation: int, text: str,
                   posted: dict[str, float] | None = None) -> None:
    """Each conversation's subscriber posts `per_conversation` messages (`text` formatted
    with c, the conversation's index, and k), in order; `posted` records when each text went.

    After each answer the subscriber gives the event loop one turn, as a client across a
    network does while its next request travels: through `httpx.ASGITransport` a POST that
    the desk answers without waiting on anything never suspends, so without that turn the
    subscribers would hold the loop until every message was stored, and the relays' chains
    (started at each commit) could not send before the last POST."""
    async def subscriber(c: int, cid: str) -> None:
        for k in range(per_conversation):
            body = text.format(c=c, k=k)
            if posted is not None:
                posted[body] = time.monotonic()
            response = await client.post(f"/api/conversations/{cid}/messages", json={"text": body})
            assert response.status_code == 200 and response.json()["routed_to"] == "human", response.text
            await asyncio.sleep(0)

    await asyncio.gather(*(subscriber(c, cid) for c, cid in enumerate(cids)))


class Timed(NamedTuple):
    """A timed pass: how many messages, wall seconds, and the process's CPU seconds (every
    thread: the desk, the client and the fake provider serving it in the same process)."""

    messages: int
    seconds: float
    cpu: float

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    @property
    def cpu_ms_per_message(self) -> float:
        return self.cpu / self.messages * 1000

    def desk_cpu_ms_per_message(self, bare: Timed) -> float:
        """The desk's own share of this pass's CPU per message: minus the `bare` pass's (the
        same fake, SDK and messages without the desk), which is what the fake, the SDK and
        the client cost alike in both."""
        return self.cpu_ms_per_message - bare.cpu_ms_per_message


class Stopwatch:
    """Wall and process CPU time from `start()`; `stop(n)` gives the `Timed` of n messages."""

    def __init__(self) -> None:
        self._wall = self._cpu = 0.0

    def start(self) -> None:
        self._wall, self._cpu = time.perf_counter(), time.process_time()

    def stop(self, messages: int) -> Timed:
        return Timed(messages, time.perf_counter() - self._wall, time.process_time() - self._cpu)


def percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


def begin(title: str, workload: str) -> None:
    """Quiet the desk's logs and print what a result depends on: the title, the Python,
    SQLite and machine it ran on, and the workload."""
    configure_logging(level="error", fmt="console")
    print(title)
    print(f"Python {platform.python_version()} | SQLite {sqlite3.sqlite_version} | {os.cpu_count()} CPUs | {platform.platform()}")
    print(workload + "\n", flush=True)


class Fake(Protocol):
    async def stop(self) -> None: ...


F = TypeVar("F", bound=Fake)
R = TypeVar("R")


async def at_each_latency(latencies: list[float], start_fake: Callable[[float], Awaitable[F]],
                          run: Callable[[F, Path], Awaitable[R]], *, prefix: str) -> AsyncIterator[tuple[float, R]]:
    """For each latency (ms), a fresh fake provider answering that slowly, `run` against it
    (with a scratch folder for the desk's databases), and the fake stopped: (latency, result)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        for latency_ms in latencies:
            fake = await start_fake(latency_ms / 1000)
            try:
                result = await run(fake, Path(tmp))
            finally:
                await fake.stop()
            yield latency_ms, result


class RelayRun(NamedTuple):
    latencies: list[float]  # ms, one row each
    conversations: int
    messages: int


def relay_arguments(doc: str, provider: str) -> RelayRun:
    """The command line every relay benchmark takes: the fake's latencies, how many
    conversations relay at once, and how many messages in all."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0], help=f"fake {provider} latency per request (default 0)")
    parser.add_argument("--conversations", type=int, default=8, help="active handoffs sending at once (default 8)")
    parser.add_argument("--messages", type=int, default=400, help="subscriber messages in all (default 400)")
    args = parser.parse_args()
    return RelayRun(args.latency_ms, args.conversations, args.messages)

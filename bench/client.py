"""What the typed client costs its caller, against the bare httpx SDK making the same requests.

Run:  python bench/client.py [--n 400] [--batch 20] [--log-level warning]

One `handoff serve` child process on a fresh SQLite file (so this process holds only the
clients). The same requests are made through `DeskClient` (the sans-IO core, an
Idempotency-Key on each change, pydantic answers) and through a bare `httpx.AsyncClient`
(JSON dicts, the same key header), then through `SyncDeskClient` and a bare `httpx.Client`,
alternating in batches of `--batch` so a shared, noisy machine slows both alike:

- `say`: POST a subscriber message (a change, keyed);
- `messages`: GET 20 messages of a conversation (a list of typed `Message`s);
- `handoff`: GET one handoff (the largest single answer, typed `Handoff`).

Printed per request and client: p50 and p99 latency (the desk's work included), throughput,
this process's CPU per request (time.process_time: the client's own cost, the server's is in
the child), and the typed/bare ratios of both; then the memory the client's import adds.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import roundtrip as rt  # noqa: E402 - the sibling benchmark, found through the line above

REQUESTS = ("say", "messages", "handoff")


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class Tally:
    latency: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)

    def p(self, q: int) -> float:
        return rt.pct(self.latency, q) * 1000

    def cpu_us(self) -> float:
        return sorted(self.cpu)[len(self.cpu) // 2] * 1e6

    def per_second(self) -> float:
        return len(self.latency) / sum(self.latency)


Tallies = dict[tuple[str, str], Tally]


async def timed_async(tally: Tally, call: Callable[[], Awaitable[Any]]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    await call()
    tally.latency.append(time.perf_counter() - wall)
    tally.cpu.append(time.process_time() - cpu)


def timed_sync(tally: Tally, call: Callable[[], Any]) -> None:
    cpu, wall = time.process_time(), time.perf_counter()
    call()
    tally.latency.append(time.perf_counter() - wall)
    tally.cpu.append(time.process_time() - cpu)


def keyed() -> dict[str, str]:
    return {"Idempotency-Key": str(uuid.uuid4())}


async def setup(url: str) -> tuple[str, str, str]:
    """A conversation to talk in, one with 20 messages to read, and an active handoff."""
    from bot.clients import DeskClient

    async with DeskClient(url) as desk:
        talk = await desk.create_conversation(name="Ana")
        read = await desk.create_conversation(name="Bo")
        for n in range(10):  # each is answered by the rules agent: 20 messages
            await desk.say(read, f"Question {n} about my order")
        sid = (await desk.call_tool(await desk.create_conversation(name="Cy"), "handoff_request", {
            "channel_id": 1, "summary": "Cy wants a refund for order 1234.", "expected_action": "Decide on it.",
        }))["handoff_session_id"]
    return talk, read, str(sid)


async def run_async(url: str, ids: tuple[str, str, str], n: int, batch: int, tallies: Tallies) -> None:
    from bot.clients import DeskClient

    talk, read, sid = ids
    async with DeskClient(url) as desk, httpx.AsyncClient(base_url=url, timeout=30) as bare:
        typed: dict[str, Callable[[], Awaitable[Any]]] = {
            "say": lambda: desk.say(talk, "hello"), "messages": lambda: desk.messages(read, limit=20),
            "handoff": lambda: desk.handoff(sid)}

        async def bare_say() -> Any:
            return (await bare.post(f"/api/conversations/{talk}/messages", json={"text": "hello"}, headers=keyed())).json()

        async def bare_messages() -> Any:
            return (await bare.get(f"/api/conversations/{read}/messages", params={"after": 0, "limit": 20})).json()

        async def bare_handoff() -> Any:
            return (await bare.get(f"/api/handoffs/{sid}")).json()

        plain: dict[str, Callable[[], Awaitable[Any]]] = {"say": bare_say, "messages": bare_messages, "handoff": bare_handoff}
        for name in REQUESTS:
            for _ in range(20):  # warm-up, unmeasured
                await typed[name]()
                await plain[name]()
            for _ in range(n // batch):
                for _ in range(batch):
                    await timed_async(tallies.setdefault((name, "DeskClient"), Tally()), typed[name])
                for _ in range(batch):
                    await timed_async(tallies.setdefault((name, "httpx.AsyncClient"), Tally()), plain[name])


def run_sync(url: str, ids: tuple[str, str, str], n: int, batch: int, tallies: Tallies) -> None:
    from bot.clients import SyncDeskClient

    talk, read, sid = ids
    with SyncDeskClient(url) as desk, httpx.Client(base_url=url, timeout=30) as bare:
        typed: dict[str, Callable[[], Any]] = {
            "say": lambda: desk.say(talk, "hello"), "messages": lambda: desk.messages(read, limit=20),
            "handoff": lambda: desk.handoff(sid)}
        plain: dict[str, Callable[[], Any]] = {
            "say": lambda: bare.post(f"/api/conversations/{talk}/messages", json={"text": "hello"}, headers=keyed()).json(),
            "messages": lambda: bare.get(f"/api/conversations/{read}/messages", params={"after": 0, "limit": 20}).json(),
            "handoff": lambda: bare.get(f"/api/handoffs/{sid}").json()}
        for name in REQUESTS:
            for _ in range(20):
                typed[name]()
                plain[name]()
            for _ in range(n // batch):
                for _ in range(batch):
                    timed_sync(tallies.setdefault((name, "SyncDeskClient"), Tally()), typed[name])
                for _ in range(batch):
                    timed_sync(tallies.setdefault((name, "httpx.Client"), Tally()), plain[name])


def report(tallies: Tallies, pairs: tuple[tuple[str, str], ...]) -> None:
    print(f"{'request':<10}{'client':<20}{'p50 ms':>9}{'p99 ms':>9}{'req/s':>8}{'CPU µs/req':>12}")
    for name in REQUESTS:
        for typed, bare in pairs:
            for client in (typed, bare):
                t = tallies[(name, client)]
                print(f"{name:<10}{client:<20}{t.p(50):>9.2f}{t.p(99):>9.2f}{t.per_second():>8.0f}{t.cpu_us():>12.0f}")
            a, b = tallies[(name, typed)], tallies[(name, bare)]
            print(f"{'':<10}{'typed / bare':<20}{a.p(50) / b.p(50):>9.2f}{'':>9}{'':>8}{a.cpu_us() / b.cpu_us():>12.2f}")


def main(args: argparse.Namespace) -> None:
    before = rss_mib()
    import bot.clients  # noqa: F401 - measured: what importing the client adds to a process that has httpx

    print(f"peak RSS: {before:.1f} MiB with httpx, {rss_mib():.1f} MiB after importing bot.clients")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        server = rt.start_desk("client-bench", folder, f"sqlite:///{folder / 'desk.db'}", log_level=args.log_level)
        try:
            url = f"http://127.0.0.1:{server.port}"
            ids = asyncio.run(setup(url))
            tallies: Tallies = {}
            started = time.perf_counter()
            asyncio.run(run_async(url, ids, args.n, args.batch, tallies))
            run_sync(url, ids, args.n, args.batch, tallies)
            elapsed = time.perf_counter() - started
        finally:
            server.stop()
    print(f"{args.n} requests of each kind per client, batches of {args.batch}, {elapsed:.1f} s in all\n")
    report(tallies, (("DeskClient", "httpx.AsyncClient"), ("SyncDeskClient", "httpx.Client")))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=400, help="measured requests of each kind per client")
    parser.add_argument("--batch", type=int, default=20, help="requests per client before switching")
    parser.add_argument("--log-level", default="warning")
    main(parser.parse_args())

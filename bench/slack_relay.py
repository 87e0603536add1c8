"""Slack relay benchmark: subscriber → Slack throughput through the whole desk, next to the bare SDK.

Run:  python bench/slack_relay.py [--latency-ms 0 30] [--conversations 8] [--messages 400]

For each latency (the fake Slack's added time per request, like a network round trip):

1. A fake Slack Web API (tests/fake_slack.py) on 127.0.0.1 and a desk on a SQLite file
   (WAL, in a fresh temporary directory, real clock, outbox worker running) with one Slack
   channel pointed at it; `--conversations` conversations, each with an active handoff
   (handoff_request through the HTTP API, so each has its own thread).
2. Full path: `--messages` subscriber messages through `POST /api/conversations/{cid}/messages`
   (httpx.ASGITransport against the app, no sockets), one sender per conversation sending
   in order, all conversations at once. The clock stops when the fake Slack has received
   every relay (a chat.postMessage in the right thread). That is the whole server path:
   request validation, routing, message + idle bump + outbox item in one transaction,
   outbox claim, rendering the Block Kit message, the real slack_sdk call, the record.
3. The adapter alone: `SlackChannel.send()` of the same relays, straight from a loop (no
   database, no outbox), to tell what the adapter adds to the SDK from what the core adds.
4. Bare: one `AsyncWebClient` (one aiohttp session, no retry handlers, as the adapter
   builds it) posting the same texts into the same threads of the same fake, with the
   same parallelism (one sequential sender per conversation).

It prints messages/s for each and their ratio to the bare SDK. Figures are wall-clock on whatever machine
runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import aiohttp  # noqa: E402
import httpx  # noqa: E402

from bench.relay_harness import Stopwatch, Timed, post_all  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.runtime.clock import Clock  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from bot.web.app import create_app  # noqa: E402
from channels.base import Relay  # noqa: E402
from tests.fake_slack import FakeSlack  # noqa: E402

TOKEN, SIGNING_SECRET, CHANNEL = "xoxb-bench-token", "bench-signing-secret", "C0BENCH"
SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."


def config(db: Path, fake: FakeSlack) -> Config:
    # HANDOFF_BENCH_DATABASE_URL (an empty PostgreSQL database) runs the desk on PostgreSQL
    return Config.from_mapping({
        "database_url": os.environ.get("HANDOFF_BENCH_DATABASE_URL") or f"sqlite:///{db}",
        "secret_key": "bench-secret-key-0123456789",
        "server": {"public_url": "http://desk.bench"},
        "handoff": {"idle_timeout": "2h"},
        "logging": {"level": "warning"},
        "channels": [{"id": 1, "kind": "slack", "label": "Sales support", "bot_token": TOKEN,
                      "signing_secret": SIGNING_SECRET, "channel": CHANNEL, "api_base_url": fake.url}],
    })


def replies_in(fake: FakeSlack, threads: set[str]) -> int:
    return sum(1 for m in fake.messages[CHANNEL] if m.get("thread_ts") in threads and m["ts"] != m["thread_ts"])


async def run_full(client: httpx.AsyncClient, fake: FakeSlack, convs: list[str], threads: set[str], n: int) -> Timed:
    per_conv = n // len(convs)
    before, before_all = replies_in(fake, threads), len(fake.messages[CHANNEL])
    watch = Stopwatch()
    watch.start()
    await post_all(client, convs, per_conv, "message {k} for you")
    # Waiting on the channel's length, not on `replies_in`: re-counting the threads at every
    # message the fake records would cost the process more than the desk's own work.
    await fake.wait_for(lambda: len(fake.messages[CHANNEL]) - before_all >= per_conv * len(convs), timeout=600)
    timed = watch.stop(per_conv * len(convs))
    assert replies_in(fake, threads) - before == per_conv * len(convs)  # every relay in its thread, nothing twice
    return timed


async def run_bare(fake: FakeSlack, thread_of: dict[str, str], n: int) -> Timed:
    from slack_sdk.web.async_client import AsyncWebClient

    per_conv = n // len(thread_of)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        sdk = AsyncWebClient(token=TOKEN, base_url=fake.url, session=session, retry_handlers=[])

        async def sender(thread_ts: str) -> None:
            for i in range(per_conv):
                await sdk.chat_postMessage(channel=CHANNEL, thread_ts=thread_ts, text=f"Ana: message {i} for you")

        watch = Stopwatch()
        watch.start()
        await asyncio.gather(*(sender(ts) for ts in thread_of.values()))
        return watch.stop(per_conv * len(thread_of))


async def run_adapter(desk: Desk, thread_of: dict[str, str], n: int) -> float:
    adapter = desk.channels.get(1)
    assert adapter is not None
    per_conv = n // len(thread_of)

    async def sender(sid: str, thread_ts: str) -> None:
        for i in range(per_conv):
            text = f"message {i} for you"
            await adapter.send(Relay(handoff_id=sid, text=f"Ana: {text}", author="Ana", body=text,
                                     thread={"channel": CHANNEL, "thread_ts": thread_ts}, delivery_key=f"bench-{i}"))

    start = time.perf_counter()
    await asyncio.gather(*(sender(f"hs_bench{k}", ts) for k, ts in enumerate(thread_of.values())))
    return time.perf_counter() - start


async def one_latency(latency_ms: float, conversations: int, messages: int) -> tuple[list[tuple[str, int, float]], Timed, Timed]:
    fake = await FakeSlack(token=TOKEN, channels=(CHANNEL,), latency=latency_ms / 1000).start()
    with tempfile.TemporaryDirectory() as tmp:
        desk = Desk(config(Path(tmp) / "desk.db", fake), clock=Clock(), run_timers=False)
        await desk.start()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(desk, manage_desk=False)),
                                   base_url="http://desk.bench", timeout=600)
        try:
            thread_of: dict[str, str] = {}
            for i in range(conversations):
                cid = (await client.post("/api/conversations", json={"subscriber": {"name": f"Ana {i}"}})).json()["conversation_id"]
                result = (await client.post(f"/api/conversations/{cid}/tools/handoff_request",
                                            json={"channel_id": 1, "summary": SUMMARY, "expected_action": ACTION})).json()
                assert result.get("ok"), result
                thread_of[cid] = (await desk.handoffs.get(result["handoff_session_id"])).thread["thread_ts"]
            threads = set(thread_of.values())
            # warm-up: connections, caches, first-use imports
            await run_full(client, fake, list(thread_of), threads, conversations * 2)
            await run_adapter(desk, thread_of, conversations * 2)
            await run_bare(fake, thread_of, conversations * 2)

            full = await run_full(client, fake, list(thread_of), threads, messages)
            alone = await run_adapter(desk, thread_of, messages)
            bare = await run_bare(fake, thread_of, messages)
        finally:
            await client.aclose()
            await desk.stop()
            await fake.stop()
    sent = (messages // conversations) * conversations
    return [("desk (HTTP API → outbox → adapter → SDK)", sent, full.seconds), ("SlackChannel.send() alone", sent, alone),
            ("bare AsyncWebClient", sent, bare.seconds)], full, bare


async def main(latencies: list[float], conversations: int, messages: int) -> None:
    configure_logging(level="warning", fmt="console")
    print(f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}, {platform.machine()}, "
          f"{conversations} conversations at once, {messages} messages per run")
    print(f"{'latency':>8}  {'path':<42}  {'n':>6}  {'seconds':>8}  {'msg/s':>8}  {'desk/bare':>9}")
    for latency in latencies:
        rows, full, bare = await one_latency(latency, conversations, messages)
        n_bare, t_bare = rows[-1][1:]
        for name, n, seconds in rows:
            ratio = (n / seconds) / (n_bare / t_bare)
            print(f"{latency:>6g}ms  {name:<42}  {n:>6}  {seconds:>8.2f}  {n / seconds:>8.1f}  {ratio:>8.2f}x")
        print(f"{'':>8}  CPU per relayed message: {full.cpu_ms_per_message:.2f} ms the whole process (desk, client "
              f"and fake), {full.desk_cpu_ms_per_message(bare):.2f} ms the desk's share (minus the bare pass's "
              f"{bare.cpu_ms_per_message:.2f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0],
                        help="the fake Slack's added latency per request; several values run one after the other")
    parser.add_argument("--conversations", type=int, default=8, help="active handoffs relaying at once")
    parser.add_argument("--messages", type=int, default=400, help="subscriber messages per run (split over the conversations)")
    args = parser.parse_args()
    asyncio.run(main(args.latency_ms, args.conversations, args.messages))

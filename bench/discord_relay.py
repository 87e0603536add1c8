"""Discord relay benchmark: subscriber -> Discord thread throughput through the whole server,
next to the bare discord.py client posting the same messages to the same fake.

Run:  python bench/discord_relay.py [--latency-ms 0 30] [--conversations 8] [--messages 400]

Everything runs in one process against tests/fake_discord.py on 127.0.0.1 (REST and
gateway; it checks embed and content limits like Discord and echoes every post over the
gateway, which the desk's client receives and drops as its own).

1. **Desk**: a started Desk on a fresh SQLite file with one Discord channel and
   `--conversations` active handoffs (dispatched through the tool, each with its thread).
   One task per conversation posts its share of `--messages` subscriber messages, in order,
   to `POST /api/conversations/{cid}/messages`; the outbox relays them. Timed from the
   first POST until the fake has every relay.
2. **Adapter alone**: `DiscordChannel.send` for the same relays (escaping, nonce, error
   mapping), one task per conversation, with the latency of each send (p50 / p99).
3. **Bare discord.py**: `HTTPClient.request` posting the same JSON to the same threads.

Figures are wall-clock on whatever machine runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere


from bench.relay_harness import (  # noqa: E402
    ACTION,
    SUMMARY,
    Stopwatch,
    Timed,
    at_each_latency,
    desk_with_handoffs,
    post_all,
    relay_arguments,
)
from bot.runtime.logs import configure_logging  # noqa: E402
from tests.fake_discord import BOT_USER, STAFF_CHANNEL, FakeDiscord  # noqa: E402

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAw.BeNcH1.discord-bot-token-for-bench"
TEXT = "message {k}: is there any news on my order? It was due on **Monday** & I need it <soon>."


def relays(fake: FakeDiscord) -> int:
    return sum(1 for thread in fake.threads for m in fake.messages.get(thread, []) if m["author"]["id"] == BOT_USER["id"])


def quantiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=100)
    return cuts[49] * 1000, cuts[98] * 1000


async def bench_desk(fake: FakeDiscord, tmp: Path, conversations: int, messages: int) -> Timed:
    channel = {"id": 1, "kind": "discord", "label": "Discord", "bot_token": TOKEN, "channel_id": STAFF_CHANNEL,
               "api_base_url": fake.api_url, "gateway_url": fake.gateway_url}
    async with desk_with_handoffs(tmp, channel, conversations) as (_, client, cids):
        per_conversation = messages // conversations
        before, total = relays(fake), per_conversation * conversations
        posts_before = len(fake.calls)  # the wait counts calls: re-counting every thread at each one would cost more than the desk
        watch = Stopwatch()
        watch.start()
        await post_all(client, cids, per_conversation, TEXT)
        await fake.wait_for(lambda: len(fake.calls) - posts_before >= total, timeout=600)
        await fake.wait_for(lambda: relays(fake) - before >= total, timeout=600)
        timed = watch.stop(total)
        assert relays(fake) - before == total  # nothing sent twice
        return timed


async def bench_adapter(fake: FakeDiscord, conversations: int, messages: int) -> tuple[float, list[float]]:
    from bot.domain.rendering import Renderer
    from channels.base import ChannelContext, Dispatch, HandoffBrief, Relay
    from channels.discord import DiscordChannel, DiscordConfig

    async def nowhere(_message: object) -> None:
        return None

    adapter = DiscordChannel(DiscordConfig(id=1, label="Discord", bot_token=TOKEN, channel_id=STAFF_CHANNEL,
                                           api_base_url=fake.api_url, gateway=False))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=nowhere, render=Renderer().render))
    try:
        threads = []
        for i in range(conversations):
            brief = HandoffBrief(handoff_session_id=f"hs_bench{i}", short_code=f"B{i}", conversation_id="c",
                                 summary=SUMMARY, expected_action=ACTION)
            receipt = await adapter.send(Dispatch(handoff_id=brief.handoff_session_id, text="dispatch", brief=brief,
                                                  delivery_key=f"d{i}"))
            threads.append(receipt.thread)
        per_conversation = messages // conversations
        latencies: list[float] = []

        async def sender(i: int) -> None:
            for k in range(per_conversation):
                text = TEXT.format(k=k)
                began = time.perf_counter()
                await adapter.send(Relay(handoff_id=f"hs_bench{i}", text=f"Ana: {text}", author="Ana", body=text,
                                         thread=threads[i], delivery_key=f"r{i}-{k}"))
                latencies.append(time.perf_counter() - began)

        started = time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(conversations)))
        return per_conversation * conversations / (time.perf_counter() - started), latencies
    finally:
        await adapter.stop()


async def bench_bare(fake: FakeDiscord, conversations: int, messages: int) -> tuple[Timed, list[float]]:
    """discord.py's HTTP client alone: Route.BASE pointed at the fake for this run only."""
    import discord
    from discord.http import Route

    old_base, Route.BASE = Route.BASE, fake.api_url
    client = discord.Client(intents=discord.Intents.none())
    try:
        await client.http.static_login(TOKEN)
        threads = []
        for i in range(conversations):
            message = await client.http.request(Route("POST", "/channels/{channel_id}/messages", channel_id=STAFF_CHANNEL),
                                                json={"content": f"dispatch {i}"})
            thread = await client.http.request(Route("POST", "/channels/{channel_id}/messages/{message_id}/threads",
                                                     channel_id=STAFF_CHANNEL, message_id=message["id"]), json={"name": f"b{i}"})
            threads.append(int(thread["id"]))
        per_conversation = messages // conversations
        latencies: list[float] = []

        async def sender(thread_id: int) -> None:
            for k in range(per_conversation):
                began = time.perf_counter()
                await client.http.request(Route("POST", "/channels/{channel_id}/messages", channel_id=thread_id), json={
                    "content": "💬 **Ana**: " + discord.utils.escape_markdown(TEXT.format(k=k)),
                    "allowed_mentions": {"parse": []}, "flags": 4})
                latencies.append(time.perf_counter() - began)

        watch = Stopwatch()
        watch.start()
        await asyncio.gather(*(sender(t) for t in threads))
        return watch.stop(per_conversation * conversations), latencies
    finally:
        await client.close()
        Route.BASE = old_base


async def main(latencies: list[float], conversations: int, messages: int) -> None:
    configure_logging(level="error", fmt="console")
    print("Handoff Desk Discord relay benchmark")
    print(f"Python {platform.python_version()} | {os.cpu_count()} CPUs | {platform.platform()}")
    print(f"{messages} messages over {conversations} conversations with an active handoff each\n", flush=True)
    print(f"{'fake latency':>12} | {'desk msg/s':>10} | {'adapter msg/s':>13} | {'adapter p50/p99 ms':>18} | "
          f"{'bare msg/s':>10} | {'bare p50/p99 ms':>15} | {'desk/bare':>9} | {'adapter/bare':>12} | "
          f"{'CPU per message':>15} | {'desk share':>10}")
    async def all_three(fake: FakeDiscord, tmp: Path) -> tuple[Timed, tuple[float, list[float]], tuple[Timed, list[float]]]:
        bare = await bench_bare(fake, conversations, messages)
        adapter = await bench_adapter(fake, conversations, messages)
        return await bench_desk(fake, tmp, conversations, messages), adapter, bare

    async for latency_ms, (desk, (adapter, adapter_lat), (bare, bare_lat)) in at_each_latency(
            latencies, lambda latency: FakeDiscord(token=TOKEN, latency=latency).start(), all_three,
            prefix="handoff-bench-discord-"):
        a50, a99 = quantiles(adapter_lat)
        b50, b99 = quantiles(bare_lat)
        print(f"{latency_ms:>9g} ms | {desk.rate:>10.1f} | {adapter:>13.1f} | {a50:>8.1f} / {a99:>7.1f} | {bare.rate:>10.1f} | "
              f"{b50:>6.1f} / {b99:>6.1f} | {desk.rate / bare.rate:>9.2f} | {adapter / bare.rate:>12.2f} | "
              f"{desk.cpu_ms_per_message:>12.2f} ms | {desk.desk_cpu_ms_per_message(bare):>7.2f} ms", flush=True)
    print("\nCPU per message: the whole process's (desk, client and fake) during the desk's pass; the desk's share is"
          "\nthat minus the bare pass's (the same fake and SDK sending the same messages without the desk)")


if __name__ == "__main__":
    asyncio.run(main(*relay_arguments(__doc__, "Discord")))

"""Telegram relay benchmark: subscriber -> Telegram throughput through the whole server,
next to the bare python-telegram-bot sending the same messages to the same fake.

Run:  python bench/telegram_relay.py [--latency-ms 0 30] [--conversations 8] [--messages 400]

Everything runs in one process against the fake Bot API of tests/fake_telegram.py on
127.0.0.1 (it parses the HTML and checks lengths like Telegram, and can add a per-request
latency to stand in for the network; Telegram itself answers in tens of milliseconds).

For each latency:
1. **Desk**: a started Desk on a fresh SQLite file (WAL) with one Telegram channel, and
   `--conversations` conversations with an active handoff each (dispatched through the
   tool). One task per conversation posts its share of `--messages` subscriber messages,
   in order, to `POST /api/conversations/{cid}/messages` (httpx.ASGITransport, no
   sockets); the outbox worker relays them. Timed from the first POST until the fake has
   received every relay.
2. **Adapter alone**: `TelegramChannel.send` for the same relays, one task per
   conversation, without the core: what rendering, escaping and error mapping add.
3. **Bare PTB**: the same python-telegram-bot Application setup sending the same number
   of messages (same HTML, same reply_parameters and button) to the same fake, one task per
   conversation, in order: the floor the SDK and the fake allow on this machine.

It prints messages/s for each and the ratios to the bare SDK. Figures are wall-clock on whatever machine
runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere


from bench.relay_harness import Stopwatch, Timed, at_each_latency, begin, desk_with_handoffs, post_all, relay_arguments  # noqa: E402
from tests.fake_telegram import STAFF_CHAT_ID, FakeTelegram  # noqa: E402

TOKEN = "123456:BENCH-token_abcdefghijklmnop"
TEXT = "message {k}: is there any news on my order? It was due on Monday & I need it <soon>."


async def bench_desk(fake: FakeTelegram, tmp: Path, conversations: int, messages: int) -> Timed:
    """From the first POST until the fake has every relay."""
    channel = {"id": 1, "kind": "telegram", "label": "Support (Telegram)", "bot_token": TOKEN,
               "chat_id": STAFF_CHAT_ID, "api_base_url": fake.base_url}
    async with desk_with_handoffs(tmp, channel, conversations) as (_, client, cids):
        per_conversation = messages // conversations
        before, total = len(fake.requests("sendMessage")), per_conversation * conversations
        calls_before = len(fake.calls)  # the wait counts every call: `requests()` re-filters all of them
        watch = Stopwatch()
        watch.start()
        await post_all(client, cids, per_conversation, TEXT)
        await fake.wait_for(lambda: len(fake.calls) - calls_before >= total, timeout=600)
        timed = watch.stop(total)
        assert len(fake.requests("sendMessage")) - before == total  # nothing sent twice
        return timed


async def bench_bare(fake: FakeTelegram, conversations: int, messages: int) -> Timed:
    """The same sends with python-telegram-bot alone."""
    from telegram import InlineKeyboardButton, InlineKeyboardMarkup, LinkPreviewOptions, ReplyParameters
    from telegram.constants import ParseMode
    from telegram.ext import ApplicationBuilder

    app = ApplicationBuilder().token(TOKEN).base_url(fake.base_url).updater(None).build()
    await app.initialize()
    try:
        bot = app.bot
        roots = [(await bot.send_message(STAFF_CHAT_ID, f"dispatch {i}")).message_id for i in range(conversations)]
        per_conversation = messages // conversations

        async def sender(root: int) -> None:
            markup = InlineKeyboardMarkup([[InlineKeyboardButton("Release", callback_data=f"release:{root}")]])
            for k in range(per_conversation):
                await bot.send_message(
                    STAFF_CHAT_ID, "<b>Ana</b>: " + TEXT.format(k=k).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"),
                    parse_mode=ParseMode.HTML, reply_parameters=ReplyParameters(root, allow_sending_without_reply=True),
                    reply_markup=markup, link_preview_options=LinkPreviewOptions(is_disabled=True),
                )

        watch = Stopwatch()
        watch.start()
        await asyncio.gather(*(sender(root) for root in roots))
        return watch.stop(per_conversation * conversations)
    finally:
        await app.shutdown()


async def bench_adapter(fake: FakeTelegram, conversations: int, messages: int) -> float:
    """The same relays through TelegramChannel.send alone (rendering, escaping, error
    mapping), without the core: what the adapter adds to the bare SDK."""
    from bot.domain.rendering import Renderer
    from channels.base import ChannelContext, Notice, Relay
    from channels.telegram import TelegramChannel, TelegramConfig

    async def nowhere(_message: object) -> None:
        return None

    adapter = TelegramChannel(TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, api_base_url=fake.base_url))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=nowhere, render=Renderer().render))
    try:
        threads = []
        for i in range(conversations):
            receipt = await adapter.send(Notice(handoff_id=f"hs_{i}", text="dispatch", about="routing"))
            threads.append({"chat_id": STAFF_CHAT_ID, "message_id": int(receipt.message_id or 0), "topic_id": None})
        per_conversation = messages // conversations

        async def sender(i: int) -> None:
            for k in range(per_conversation):
                text = TEXT.format(k=k)
                await adapter.send(Relay(handoff_id=f"hs_{i}", text=f"Ana: {text}", author="Ana", body=text,
                                         thread=threads[i]))

        started = time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(conversations)))
        return per_conversation * conversations / (time.perf_counter() - started)
    finally:
        await adapter.stop()


async def main(latencies: list[float], conversations: int, messages: int) -> None:
    begin("Handoff Desk Telegram relay benchmark",
          f"{messages} messages over {conversations} conversations with an active handoff each")
    async def all_three(fake: FakeTelegram, tmp: Path) -> tuple[Timed, float, Timed]:
        bare = await bench_bare(fake, conversations, messages)
        adapter = await bench_adapter(fake, conversations, messages)
        return await bench_desk(fake, tmp, conversations, messages), adapter, bare

    rows = []
    async for latency_ms, (desk, adapter, bare) in at_each_latency(
            latencies, lambda latency: FakeTelegram(token=TOKEN, latency=latency).start(), all_three, prefix="handoff-bench-tg-"):
        rows.append((latency_ms, desk, adapter, bare))
        print(f"  latency {latency_ms:g} ms done", flush=True)
    print(f"\n{'fake latency':>12} | {'desk: HTTP API -> outbox -> adapter':>35} | {'adapter.send alone':>18} | "
          f"{'bare PTB':>10} | {'desk / bare':>11} | {'adapter / bare':>14} | {'CPU per message':>15} | {'desk share':>10}")
    for latency_ms, desk, adapter, bare in rows:
        print(f"{latency_ms:>9g} ms | {desk.rate:>29.1f} msg/s | {adapter:>12.1f} msg/s | {bare.rate:>4.0f} msg/s | "
              f"{desk.rate / bare.rate:>11.2f} | {adapter / bare.rate:>14.2f} | {desk.cpu_ms_per_message:>12.2f} ms | "
              f"{desk.desk_cpu_ms_per_message(bare):>7.2f} ms")
    print("\nCPU per message: the whole process's (desk, client and fake) during the desk's pass; the desk's share is"
          "\nthat minus the bare pass's (the same fake and SDK sending the same messages without the desk)")


if __name__ == "__main__":
    asyncio.run(main(*relay_arguments(__doc__, "Bot API")))

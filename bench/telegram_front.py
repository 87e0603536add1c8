"""Telegram front benchmark: subscribers chatting with the bot in their private chats, through
the whole server, next to bare python-telegram-bot answering the same updates.

Run:  python bench/telegram_front.py [--latency-ms 0 30] [--subscribers 8] [--messages 400]

Everything runs in one process against the fake Bot API of tests/fake_telegram.py on
127.0.0.1 (it can add a per-request latency to stand in for the network).

1. **Desk**: a started Desk on a fresh SQLite file with a Telegram front of its own in
   webhook mode and the built-in rules agent. `--subscribers` subscribers each write their
   share of `--messages` messages, one after the other, each waiting for the bot's answer in
   their chat before writing again (a real conversation). A message is an update POSTed to
   `/webhooks/{id}` with the secret token (httpx.ASGITransport, no sockets); the desk stores
   it (deduplicated), runs the agent's turn, stores the answer and delivers it through the
   outbox. Timed from the POST until the fake has the answer in that chat.
2. **Bare PTB**: a python-telegram-bot Application whose message handler answers every
   update in its chat, fed the same updates with `process_update`, the same way.

It prints answers/s, p50 / p99 round trips and the ratio to the bare SDK, and the peak RSS.
Figures are wall-clock on whatever machine runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from itertools import islice
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import httpx  # noqa: E402

from bench.relay_harness import Stopwatch, at_each_latency, begin, percentile  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.web.app import create_app  # noqa: E402
from tests.fake_telegram import BOT_USER, FakeTelegram  # noqa: E402

TOKEN = "123456:BENCH-token_abcdefghijklmnop"
SECRET = "bench-webhook-secret"
FRONT_ID = 1001
TEXT = "message {k}: is there any news on my order? It was due on Monday & I need it <soon>."
ANSWER = "Thanks, I've noted that."

Send = Callable[[dict[str, Any]], Awaitable[None]]


def users(count: int) -> list[dict[str, Any]]:
    return [{"id": 5000 + i, "is_bot": False, "first_name": f"User{i}"} for i in range(count)]


class Answers:
    """How many messages the bot has posted into each chat, counting only the messages the
    fake recorded since the last look: `fake.sent_to` re-scans every message, and with every
    subscriber waking at every message that scan would cost the process more than the desk."""

    def __init__(self, fake: FakeTelegram) -> None:
        self._fake, self._seen, self._per_chat = fake, 0, Counter[int]()

    def to(self, chat_id: int) -> int:
        messages = self._fake.messages
        for message in islice(messages.values(), self._seen, None):
            if message.get("from", {}).get("id") == BOT_USER["id"] and "text" in message:
                self._per_chat[message["chat"]["id"]] += 1
        self._seen = len(messages)
        return self._per_chat[chat_id]


async def converse(fake: FakeTelegram, send: Send, subscribers: int, messages: int) -> tuple[float, list[float]]:
    """Each subscriber writes, waits for the answer in their chat, writes again. Returns
    answers/s and the round trips in ms."""
    per_subscriber = messages // subscribers
    round_trips: list[float] = []
    answers = Answers(fake)

    async def subscriber(user: dict[str, Any]) -> None:
        answered = answers.to(user["id"])
        for k in range(per_subscriber):
            update = fake.private_update(TEXT.format(k=k), user=user)
            started = time.perf_counter()
            await send(update)
            answered += 1
            await fake.wait_for(lambda want=answered: answers.to(user["id"]) >= want, timeout=120)
            round_trips.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(subscriber(u) for u in users(subscribers)))
    return per_subscriber * subscribers / (time.perf_counter() - started), round_trips


async def bench_desk(fake: FakeTelegram, tmp: Path, subscribers: int, messages: int) -> tuple[float, list[float], float]:
    """Answers/s, the round trips (ms) and the process's CPU ms per answer (desk, client and fake)."""
    config = Config.from_mapping({
        "database_url": f"sqlite:///{tmp / f'bench-{time.monotonic_ns()}.db'}",
        "secret_key": "bench-secret-key-0123456789",
        "server": {"public_url": "https://desk.example.com"},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}],
        # A chat's rate limit (30 a minute by default) would leave every message past the 30th
        # unanswered: the bench measures throughput, so it allows far more than it sends.
        "fronts": [{"kind": "telegram", "bot_token": TOKEN, "api_base_url": fake.base_url, "webhook_secret": SECRET,
                    "max_messages_per_minute": 100_000}],
    })
    desk = Desk(config, run_timers=False)
    await desk.start()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(desk, manage_desk=False)),
                               base_url="https://desk.example.com")
    headers = {"X-Telegram-Bot-Api-Secret-Token": SECRET}

    async def send(update: dict[str, Any]) -> None:
        response = await client.post(f"/webhooks/{FRONT_ID}", json=update, headers=headers)
        assert response.status_code == 200, response.text

    try:
        watch = Stopwatch()
        watch.start()
        rate, trips = await converse(fake, send, subscribers, messages)
        return rate, trips, watch.stop(len(trips)).cpu_ms_per_message
    finally:
        await client.aclose()
        await desk.stop()


async def bench_bare(fake: FakeTelegram, subscribers: int, messages: int) -> tuple[float, list[float], float]:
    """Answers/s, the round trips (ms) and the process's CPU ms per answer (PTB, client and fake)."""
    from telegram import Update
    from telegram.ext import ApplicationBuilder, MessageHandler, filters

    app = ApplicationBuilder().token(TOKEN).base_url(fake.base_url).updater(None).build()

    async def answer(update: Update, _context: Any) -> None:
        assert update.effective_message is not None
        await update.effective_message.reply_text(ANSWER, do_quote=False)

    app.add_handler(MessageHandler(filters.TEXT & filters.ChatType.PRIVATE, answer))
    await app.initialize()

    async def send(update: dict[str, Any]) -> None:
        await app.process_update(Update.de_json(update, app.bot))

    try:
        watch = Stopwatch()
        watch.start()
        rate, trips = await converse(fake, send, subscribers, messages)
        return rate, trips, watch.stop(len(trips)).cpu_ms_per_message
    finally:
        await app.shutdown()


async def main(latencies: list[float], subscribers: int, messages: int) -> None:
    begin("Handoff Desk Telegram front benchmark",
          f"{messages} messages from {subscribers} subscribers, each waiting for the answer before writing again")
    async def both(fake: FakeTelegram, tmp: Path) -> tuple[tuple[float, list[float], float], tuple[float, list[float], float]]:
        bare = await bench_bare(fake, subscribers, messages)
        return await bench_desk(fake, tmp, subscribers, messages), bare

    rows = [(latency_ms, desk, bare) async for latency_ms, (desk, bare) in at_each_latency(
        latencies, lambda latency: FakeTelegram(token=TOKEN, latency=latency).start(), both, prefix="handoff-bench-front-")]
    print(f"{'fake latency':>12} | {'desk answers/s':>14} | {'desk p50 / p99':>16} | {'bare PTB /s':>11} | "
          f"{'bare p50 / p99':>16} | {'desk / bare':>11} | {'CPU per answer':>14} | {'desk share':>10}")
    for latency_ms, (desk, desk_trips, desk_cpu), (bare, bare_trips, bare_cpu) in rows:
        print(f"{latency_ms:>9g} ms | {desk:>14.1f} | {percentile(desk_trips, 50):>6.1f} / {percentile(desk_trips, 99):>5.1f} ms | "
              f"{bare:>11.1f} | {percentile(bare_trips, 50):>6.1f} / {percentile(bare_trips, 99):>5.1f} ms | {desk / bare:>11.2f} | "
              f"{desk_cpu:>11.2f} ms | {desk_cpu - bare_cpu:>7.2f} ms")
    print("\nCPU per answer: the whole process's (desk, client and fake) during the desk's pass; the desk's share is that"
          "\nminus the bare pass's (PTB answering the same updates from the same fake)")
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB (the whole run, both sides)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, nargs="+", default=[0.0], help="fake Bot API latency per request (default 0)")
    parser.add_argument("--subscribers", type=int, default=8, help="subscribers chatting at once (default 8)")
    parser.add_argument("--messages", type=int, default=400, help="messages in all (default 400)")
    args = parser.parse_args()
    asyncio.run(main(args.latency_ms, args.subscribers, args.messages))

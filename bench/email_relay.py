"""Email relay benchmark: subscriber -> email throughput and latency through the whole server,
next to bare aiosmtplib sending comparable messages to the same SMTP server.

Run:  python bench/email_relay.py [--conversations 8] [--messages 400]

Everything runs in one process against tests/fake_smtp.py (aiosmtpd on 127.0.0.1, no TLS,
no AUTH, parsing every message it receives):
1. **Desk**: a started Desk on a fresh SQLite file with one email channel and
   `--conversations` active handoffs; one task per conversation posts its share of
   `--messages` subscriber messages to `POST /api/conversations/{cid}/messages`
   (httpx.ASGITransport); the outbox relays them, one SMTP session per message. Timed from
   the first POST until the server has every relay. Then the latency of single relays
   without a backlog: 100 messages one at a time, POST until the server has the message.
2. **Adapter alone**: `EmailChannel.send` for the same relays (templates, MIME, headers).
3. **Bare aiosmtplib**: `aiosmtplib.send` of a small multipart message per relay, one
   session per message, the floor on this machine.

Prints messages/s, p50/p99 latency, and the ratios to bare aiosmtplib. Wall-clock figures on
whatever machine runs it; nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from email.message import EmailMessage
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

import aiosmtplib  # noqa: E402

from bench.relay_harness import desk_with_handoffs, percentile, post_all  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from tests.fake_smtp import FakeSMTP  # noqa: E402

LATENCY_SAMPLES = 100
TEXT = "message {k}: is there any news on my order? It was due on Monday & I need it <soon>."


def channel(server: FakeSMTP) -> dict[str, object]:
    return {"id": 4, "kind": "email", "label": "Support mail", "to": ["team@example.com"], "from": "desk@example.com",
            "smtp": {"host": "127.0.0.1", "port": server.port, "security": "none"},
            "reply_token_secret": "bench-reply-token-secret"}


async def bench_desk(server: FakeSMTP, tmp: Path, conversations: int, messages: int) -> tuple[float, list[float]]:
    async with desk_with_handoffs(tmp, channel(server), conversations) as (_, client, cids):
        per_conversation = messages // conversations
        total, before = per_conversation * conversations, len(server.messages)
        started = time.perf_counter()
        await post_all(client, cids, per_conversation, TEXT)
        await server.wait_for(lambda: len(server.messages) - before >= total, timeout=600)
        elapsed = time.perf_counter() - started
        assert len(server.messages) - before == total  # nothing sent twice

        # Latency without a backlog: one message at a time, POST until the server has it.
        latencies: list[float] = []
        for k in range(LATENCY_SAMPLES):
            count = len(server.messages)
            sent = time.perf_counter()
            await client.post(f"/api/conversations/{cids[0]}/messages", json={"text": TEXT.format(c=0, k=k)})
            await server.wait_for(lambda count=count: len(server.messages) > count, timeout=60)
            latencies.append(time.perf_counter() - sent)
        return total / elapsed, latencies


async def bench_adapter(server: FakeSMTP, conversations: int, messages: int) -> float:
    from bot.domain.rendering import Renderer
    from channels.base import ChannelContext, Relay
    from channels.email import EmailChannel, EmailConfig

    async def nowhere(_message: object) -> None:
        return None

    entry = channel(server)
    entry.pop("kind")
    adapter = EmailChannel(EmailConfig.model_validate(entry))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=nowhere, render=Renderer().render))
    try:
        per_conversation = messages // conversations
        thread = {"message_id": "<hd.root@example.com>", "subject": "[Handoff BENCH] Ana's order"}

        async def sender(i: int) -> None:
            for k in range(per_conversation):
                text = TEXT.format(k=k)
                await adapter.send(Relay(handoff_id=f"hs_{i}", text=f"Ana: {text}", author="Ana", body=text,
                                         thread=thread))

        started = time.perf_counter()
        await asyncio.gather(*(sender(i) for i in range(conversations)))
        return per_conversation * conversations / (time.perf_counter() - started)
    finally:
        await adapter.stop()


async def bench_bare(server: FakeSMTP, conversations: int, messages: int) -> float:
    per_conversation = messages // conversations

    async def sender(i: int) -> None:
        for k in range(per_conversation):
            message = EmailMessage()
            message["From"], message["To"], message["Subject"] = "desk@example.com", "team@example.com", f"Re: bench {i}"
            message.set_content("Ana wrote:\n\n" + TEXT.format(k=k))
            message.add_alternative("<p><strong>Ana</strong> wrote:</p><p>" + TEXT.format(k=k).replace("&", "&amp;")
                                    .replace("<", "&lt;") + "</p>", subtype="html")
            await aiosmtplib.send(message, hostname="127.0.0.1", port=server.port, local_hostname="example.com")

    started = time.perf_counter()
    await asyncio.gather(*(sender(i) for i in range(conversations)))
    return per_conversation * conversations / (time.perf_counter() - started)


async def main(conversations: int, messages: int) -> None:
    configure_logging(level="error", fmt="console")
    print("Handoff Desk email relay benchmark")
    print(f"Python {platform.python_version()} | {os.cpu_count()} CPUs | {platform.platform()}")
    print(f"{messages} messages over {conversations} conversations with an active handoff each\n", flush=True)
    server = await FakeSMTP().start()
    try:
        bare = await bench_bare(server, conversations, messages)
        adapter = await bench_adapter(server, conversations, messages)
        with tempfile.TemporaryDirectory(prefix="handoff-bench-email-") as tmp:
            desk, latencies = await bench_desk(server, Path(tmp), conversations, messages)
    finally:
        await server.stop()
    print(f"{'desk: HTTP API -> outbox -> SMTP':>34} | {'adapter.send alone':>18} | {'bare aiosmtplib':>15} | "
          f"{'desk / bare':>11} | {'adapter / bare':>14}")
    print(f"{desk:>28.1f} msg/s | {adapter:>12.1f} msg/s | {bare:>9.1f} msg/s | {desk / bare:>11.2f} | {adapter / bare:>14.2f}")
    print(f"\ndesk relay latency, one at a time (POST -> message at the SMTP server): p50 {percentile(latencies, 50) * 1000:.1f} ms, "
          f"p99 {percentile(latencies, 99) * 1000:.1f} ms ({len(latencies)} messages)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=8, help="active handoffs sending at once (default 8)")
    parser.add_argument("--messages", type=int, default=400, help="subscriber messages in all (default 400)")
    args = parser.parse_args()
    asyncio.run(main(args.conversations, args.messages))

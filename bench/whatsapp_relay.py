"""WhatsApp relay benchmark: subscriber -> WhatsApp (Twilio) through the whole desk, next to the bare SDK.

Run:  python bench/whatsapp_relay.py [--latency-ms 0 30] [--conversations 8] [--messages 400]

Everything runs in one process against the fake Twilio REST API of tests/fake_twilio.py on
127.0.0.1 (it checks auth, numbers and body length like Twilio, and can add a per-request
latency to stand in for the network). The channel has one recipient number, so one relay is
one Twilio request.

For each latency:
1. **Desk**: a started Desk on a fresh SQLite file with one WhatsApp channel and
   `--conversations` conversations with an active handoff each (all on the channel's one
   shared line). One task per conversation posts its share of `--messages` subscriber
   messages, in order, to `POST /api/conversations/{cid}/messages` (httpx.ASGITransport);
   the outbox relays them. Throughput from the first POST until the fake has every relay;
   latency per message from its POST to its arrival at the fake (p50, p99).
2. **Bare SDK**: twilio's `Client` with the same async HTTP client sending the same number
   of messages (`messages.create_async`) to the same fake, one task per conversation, in
   order: the floor the SDK and the fake allow on this machine (latency per call).

Figures are wall-clock on whatever machine runs this; nothing here asserts a threshold.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere


from bench.relay_harness import (  # noqa: E402
    Stopwatch,
    Timed,
    at_each_latency,
    begin,
    desk_with_handoffs,
    percentile,
    post_all,
    relay_arguments,
)
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, SENDER, FakeTwilio  # noqa: E402

TEXT = "c{c} message {k}: is there any news on my order? It was due on *Monday* & I need it soon."


async def bench_desk(fake: FakeTwilio, tmp: Path, conversations: int, messages: int) -> tuple[Timed, list[float]]:
    channel = {"id": 1, "kind": "whatsapp", "label": "On-call", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN,
               "from": SENDER, "to": [ANA_PHONE], "api_base_url": fake.base_url}
    async with desk_with_handoffs(tmp, channel, conversations) as (_, client, cids):
        per_conversation = messages // conversations
        before, total = len(fake.messages), per_conversation * conversations
        posted: dict[str, float] = {}
        watch = Stopwatch()
        watch.start()
        await post_all(client, cids, per_conversation, TEXT, posted)
        await fake.wait_for(lambda: len(fake.messages) - before >= total, timeout=600)
        timed = watch.stop(total)
        assert len(fake.messages) - before == total  # nothing sent twice
        arrived = {c.form["Body"].split(": ", 1)[1].replace("∗", "*"): c.at for c in fake.calls if c.form.get("Body")}
        latencies = [(arrived[text] - at) * 1000 for text, at in posted.items()]
        return timed, latencies


async def bench_bare(fake: FakeTwilio, conversations: int, messages: int) -> tuple[Timed, list[float]]:
    """The same sends with the twilio SDK alone (its async client, pointed at the fake)."""
    from twilio.rest import Client

    from channels.whatsapp.transport import _http_client_class

    client = Client(ACCOUNT_SID, AUTH_TOKEN, http_client=_http_client_class()(fake.base_url, 10.0))
    per_conversation = messages // conversations
    latencies: list[float] = []

    async def sender(c: int) -> None:
        for k in range(per_conversation):
            began = time.monotonic()
            await client.messages.create_async(from_=SENDER, to=ANA_PHONE, body=f"#ABCD *Ana*: {TEXT.format(c=c, k=k)}")
            latencies.append((time.monotonic() - began) * 1000)

    try:
        watch = Stopwatch()
        watch.start()
        await asyncio.gather(*(sender(c) for c in range(conversations)))
        return watch.stop(per_conversation * conversations), latencies
    finally:
        await client.http_client.close()


async def main(latencies: list[float], conversations: int, messages: int) -> None:
    begin("Handoff Desk WhatsApp (Twilio) relay benchmark",
          f"{messages} messages over {conversations} conversations with an active handoff each, one recipient number")
    async def both(fake: FakeTwilio, tmp: Path) -> tuple[tuple[Timed, list[float]], tuple[Timed, list[float]]]:
        bare = await bench_bare(fake, conversations, messages)
        return await bench_desk(fake, tmp, conversations, messages), bare

    rows = []
    async for latency_ms, ((desk, desk_ms), (bare, bare_ms)) in at_each_latency(
            latencies, lambda latency: FakeTwilio(latency=latency).start(), both, prefix="handoff-bench-wa-"):
        rows.append((latency_ms, desk, desk_ms, bare, bare_ms))
        print(f"  latency {latency_ms:g} ms done", flush=True)
    print(f"\n{'fake latency':>12} | {'desk msg/s':>10} | {'desk p50/p99 ms':>15} | {'bare msg/s':>10} | {'bare p50/p99 ms':>15} | "
          f"{'desk / bare':>11} | {'CPU per message':>15} | {'desk share':>10}")
    for latency_ms, desk, desk_ms, bare, bare_ms in rows:
        print(f"{latency_ms:>9g} ms | {desk.rate:>10.1f} | {percentile(desk_ms, 50):>7.1f}/{percentile(desk_ms, 99):<7.1f} | "
              f"{bare.rate:>10.1f} | {percentile(bare_ms, 50):>7.1f}/{percentile(bare_ms, 99):<7.1f} | "
              f"{desk.rate / bare.rate:>11.2f} | {desk.cpu_ms_per_message:>12.2f} ms | {desk.desk_cpu_ms_per_message(bare):>7.2f} ms")
    print("\nCPU per message: the whole process's (desk, client and fake) during the desk's pass; the desk's share is"
          "\nthat minus the bare pass's (the same fake and SDK sending the same messages without the desk)")


if __name__ == "__main__":
    asyncio.run(main(*relay_arguments(__doc__, "Twilio")))

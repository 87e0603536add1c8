"""The Discord channel, through the real discord.py client against a fake Discord.

The desk runs for real (HTTP API, outbox, inbound dedup, state machine) on a SQLite file;
only Discord is fake (tests/fake_discord.py): its REST API, its gateway websocket (HELLO,
heartbeat acks, READY, GUILD_CREATE, then THREAD_CREATE / MESSAGE_CREATE as things happen)
and Ed25519-signed interactions, as strict as Discord about what it accepts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.config import Config, ConfigError
from bot.domain.rendering import Renderer
from bot.store.models import InboundEvent
from channels.base import (
    ApprovalPrompt,
    ChannelAuthError,
    ChannelContext,
    ClaimPress,
    Decision,
    Dispatch,
    InboundMessage,
    Notice,
    PermanentChannelError,
    Relay,
    ReleasePress,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
)
from channels.discord import DiscordChannel, DiscordConfig, escape, split_for_messages
from tests.approval_actions import TWO_PEOPLE, refund_brief
from tests.approval_actions import refund_action as shared_refund_action
from tests.conftest import SECRET as DESK_SECRET
from tests.conftest import Harness, StartDesk
from tests.fake_discord import (
    BOT_USER,
    GENERAL_CHANNEL,
    KIM,
    OTHER_BOT,
    SAM,
    STAFF_CHANNEL,
    VOICE_CHANNEL,
    FakeDiscord,
    Fault,
)
from tests.fakes import standalone_context
from tests.imports import importers_of
from tests.office_hours import CLOSED_HOURS, OUTSIDE_HOURS_LINE, closed_clock
from tests.route_dispatches import route_dispatch

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAw.GfAkE1.discord-bot-token-for-tests"
SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."
MESSAGES = "POST /channels/{id}/messages"
THREADS = "POST /channels/{id}/messages/{id}/threads"


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The channel does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    """Requested before start_desk, so it outlives the desk (the gateway never sees it vanish)."""
    server = await FakeDiscord(token=TOKEN).start()
    yield server
    await server.stop()


def discord_entry(fake: FakeDiscord, **overrides: Any) -> dict[str, Any]:
    return {"id": 5, "kind": "discord", "label": "Discord support", "estimated_response": "within the hour",
            "bot_token": TOKEN, "channel_id": STAFF_CHANNEL, "application_public_key": fake.public_key,
            "api_base_url": fake.api_url, "gateway_url": fake.gateway_url, **overrides}


@pytest.fixture
async def desk(start_desk: StartDesk, fake: FakeDiscord) -> Harness:
    return await start_desk(channels=[discord_entry(fake)], delivery={"base_backoff": "10ms"})


def adapter_config(fake: FakeDiscord, **overrides: Any) -> DiscordConfig:
    return DiscordConfig(**{"id": 5, "label": "Discord", "bot_token": TOKEN, "channel_id": STAFF_CHANNEL,
                            "api_base_url": fake.api_url, "gateway_url": fake.gateway_url, **overrides})


@pytest.fixture
async def adapter(fake: FakeDiscord) -> AsyncIterator[tuple[DiscordChannel, list[InboundMessage]]]:
    """The adapter alone (REST only), with a sink for what it would deliver."""
    received: list[InboundMessage] = []

    async def sink(message: InboundMessage) -> None:
        received.append(message)

    channel = DiscordChannel(adapter_config(fake, gateway=False, request_timeout=0.5))
    await channel.start(ChannelContext(public_url="http://desk.test", deliver_inbound=sink, render=Renderer().render))
    yield channel, received
    await channel.stop()


# --------------------------------------------------------------------------- helpers


async def inbound_count(h: Harness) -> int:
    async with h.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(InboundEvent)) or 0)


async def stored(h: Harness, count: int, timeout: float = 5.0) -> None:
    """Wait until the desk has stored `count` inbound events (gateway messages arrive on
    their own schedule), then until their processing is done."""
    async with asyncio.timeout(timeout):
        while await inbound_count(h) < count:
            await asyncio.sleep(0.005)
    await h.desk.settle()



async def handoff_in_discord(h: Harness, fake: FakeDiscord, cid: str, **fields: Any) -> tuple[str, dict[str, Any]]:
    """Start a handoff to the Discord channel; returns its id and the dispatch as Discord stored it."""
    sid = (await h.start_handoff(cid, channel_id=5, **fields))["handoff_session_id"]
    session = await h.desk.handoffs.get(sid)
    dispatch = next(m for m in fake.posts(STAFF_CHANNEL) if m["id"] == session.channel_message_id)
    return sid, dispatch


async def reply(h: Harness, fake: FakeDiscord, thread_id: str, text: str, *, author: dict[str, Any] = SAM) -> None:
    """A person writes in a handoff thread (over the gateway); wait until the desk handled it."""
    before = await inbound_count(h)
    await fake.human_message(thread_id, text, author=author)
    await stored(h, before + 1)


async def interaction(h: Harness, fake: FakeDiscord, payload: dict[str, Any], **signing: Any) -> Any:
    body, headers = fake.signed(payload, **signing)
    return await h.client.post("/webhooks/5", content=body, headers=headers)


def message_posts(fake: FakeDiscord) -> list[Any]:
    return [c for c in fake.calls_to(MESSAGES)]


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(("change", "problem"), [
    ({"bot_token": "short"}, "channels[0].bot_token: Value error, does not look like a Discord bot token"),
    ({"channel_id": "#support"}, "channels[0].channel_id: Value error, must be the channel's numeric id"),
    ({"channel_id": 12}, "channels[0].channel_id: Value error, must be the channel's numeric id"),
    ({"application_public_key": "not-hex"}, "channels[0].application_public_key: Value error, must be the application's Public Key"),
    ({"api_base_url": "discord.com/api"}, "channels[0].api_base_url: Value error, must be an http(s) URL"),
    ({"gateway_url": "https://gateway.discord.gg"}, "channels[0].gateway_url: Value error, must be a ws(s) URL"),
    ({"chanel_id": STAFF_CHANNEL}, "channels[0].chanel_id: unknown key; did you mean 'channel_id'?"),
    ({"request_timeout": 0}, "channels[0].request_timeout: Input should be greater than 0"),
])
def test_config_problems_are_named_and_the_token_never_echoed(change: dict[str, Any], problem: str) -> None:
    entry = {"id": 1, "kind": "discord", "label": "Discord", "bot_token": "SECRET-" + TOKEN, "channel_id": str(STAFF_CHANNEL),
             **change}
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": DESK_SECRET, "channels": [entry]})
    text = str(caught.value)
    assert problem.replace("Value error, ", "") in text.replace("Value error, ", "")
    assert "SECRET-" not in text


def test_a_valid_config_has_defaults_and_keeps_the_token_secret() -> None:
    config = Config.from_mapping({"secret_key": DESK_SECRET, "channels": [
        {"id": 3, "kind": "discord", "label": "Discord", "bot_token": f"Bot {TOKEN}", "channel_id": str(STAFF_CHANNEL),
         "application_public_key": ""}]})
    discord_config = config.channel(3)
    assert isinstance(discord_config, DiscordConfig)
    assert discord_config.channel_id == STAFF_CHANNEL  # from ${VAR}, ids arrive as text
    assert discord_config.bot_token.get_secret_value() == TOKEN  # a pasted "Bot " prefix is dropped
    assert discord_config.application_public_key is None
    assert discord_config.gateway is True
    assert (discord_config.api_base_url, discord_config.gateway_url) == ("https://discord.com/api/v10", "wss://gateway.discord.gg/")
    assert TOKEN not in repr(discord_config)


# --------------------------------------------------------------------------- text


def test_people_s_text_shows_as_typed_and_pings_nobody() -> None:
    text = "**now** _x_ `c` ||s|| ~~y~~ [link](https://evil.example) https://shop.example/a_b <@123> <#5> <t:1:R> @everyone @here"
    escaped = escape(text)
    assert escaped == ("\\*\\*now\\*\\* \\_x\\_ \\`c\\` \\|\\|s\\|\\| \\~\\~y\\~\\~ \\[link](https://evil.example) "
                       "https://shop.example/a_b \\<@123> \\<#5> \\<t:1:R> @\u200beveryone @\u200bhere")
    assert escape("# big\n> quote\n-# small\n- item\n1. first\n  12. second") == "\\# big\n\\> quote\n\\-# small\n\\- item\n1\\. first\n  12\\. second"


def test_long_text_is_split_into_messages_that_fit_even_after_escaping() -> None:
    parts = split_for_messages("*" * 3000 + " tail", 2000)
    assert [len(p) for p in parts] == [2000, 2000, 2000, 4]  # 1000 escaped stars each, then the last word
    assert "".join(parts).replace("\\", "") == "*" * 3000 + "tail"
    assert split_for_messages("word " * 500, 1000)[0].endswith("word")  # cut between words


# --------------------------------------------------------------------------- dispatch


async def test_the_dispatch_is_an_embed_with_buttons_a_thread_and_nothing_that_pings(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation(name="Ana @everyone")
    await desk.say(cid, "Where is my order <@900000000000000302>? It's **late**")
    sid, dispatch = await handoff_in_discord(
        desk, fake, cid, urgency="high",
        summary="Ana says @everyone and @here must check order #1234 **now**, a week late.",
        expected_action="Check the carrier [here](https://evil.example) and tell Ana.",
        extra_context={"order": "<@&900000000000000400> #1234", "plan": "gold"},
        expected_return=[{"name": "eta_date", "type": "date", "required": True, "description": "When it *arrives*"}],
    )
    handoff = await desk.handoff(sid)
    code = handoff["short_code"]
    [post] = message_posts(fake)
    assert post.headers["Authorization"] == f"Bot {TOKEN}"
    assert post.path == f"/channels/{STAFF_CHANNEL}/messages"
    sent = post.json
    assert sent["allowed_mentions"] == {"parse": []}
    assert sent["enforce_nonce"] is True
    assert 1 <= len(sent["nonce"]) <= 25
    assert sent["content"] == f"🔴 URGENT · Handoff {escape(code)}: Ana @\u200beveryone needs a person"

    [embed] = sent["embeds"]
    assert embed["title"] == sent["content"]
    assert embed["url"] == handoff["form_url"]
    assert embed["color"] == 0xED4245
    assert embed["description"].startswith(
        "**Summary**\nAna says @\u200beveryone and @\u200bhere must check order #1234 \\*\\*now\\*\\*, a week late.\n\n"
        "**What to do**\nCheck the carrier \\[here](https://evil.example) and tell Ana.\n\n**Recent conversation**\n")
    assert "**Ana @\u200beveryone:** Where is my order \\<@\u200b900000000000000302>? It's \\*\\*late\\*\\*" in embed["description"]
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields == {
        "Subscriber": "Ana @\u200beveryone (ana@example.com)", "Urgency": "high", "Contact back": "ana@example.com",
        "Please hand back": "• Eta date [date, YYYY-MM-DD] (required) — When it \\*arrives\\*",
        "Context": "• **order**: \\<@\u200b&900000000000000400> #1234\n• **plan**: gold",
    }
    assert "send /release" in embed["footer"]["text"]
    assert "press Release" in embed["footer"]["text"]

    [row] = sent["components"]
    form, release = row["components"]
    assert (form["style"], form["label"], form["url"]) == (5, "Fill return form", handoff["form_url"])
    assert (release["style"], release["label"], release["custom_id"]) == (4, "Release", f"handoff_release:{sid}")

    # then a thread from that message: one per handoff, where everything else goes
    [start] = fake.calls_to(THREADS)
    assert start.path == f"/channels/{STAFF_CHANNEL}/messages/{dispatch['id']}/threads"
    assert start.json == {"name": f"{code} · Ana @everyone", "auto_archive_duration": 1440}
    session = await desk.desk.handoffs.get(sid)
    assert session.channel_message_id == dispatch["id"]
    assert session.thread_key == dispatch["id"] == dispatch["thread"]["id"]
    assert session.thread == {"channel_id": str(STAFF_CHANNEL), "message_id": dispatch["id"], "thread_id": dispatch["id"]}

    # a relay: into the thread, escaped, no embeds of links, nobody pinged
    await desk.say(cid, "@everyone look: **bold** https://shop.example/x")
    await desk.desk.settle()
    [relay] = fake.posts(dispatch["id"])
    assert relay["request"]["content"] == "💬 **Ana @\u200beveryone**: @\u200beveryone look: \\*\\*bold\\*\\* https://shop.example/x"
    assert relay["request"]["allowed_mentions"] == {"parse": []}
    assert relay["request"]["flags"] == 4
    assert all(c.json["allowed_mentions"] == {"parse": []} for c in message_posts(fake))


async def test_a_huge_brief_fits_discord_s_embed_limits(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    for i in range(15):
        await desk.say(cid, f"message {i:02d} " + "lorem *ipsum* " * 30)
    await handoff_in_discord(
        desk, fake, cid, summary="*_" * 1000, expected_action="`" * 1000,
        extra_context={f"key{i}": "v" * 150 for i in range(24)},
        expected_return=[{"name": f"field_{i}", "type": "multiline", "description": "d" * 150} for i in range(20)],
    )
    [post] = message_posts(fake)  # the fake refuses anything over Discord's limits (400)
    [embed] = post.json["embeds"]
    size = (len(embed["title"]) + len(embed["description"]) + len(embed["footer"]["text"])
            + sum(len(f["name"]) + len(f["value"]) for f in embed["fields"]))
    assert size <= 6000
    assert len(embed["description"]) <= 4096
    assert all(len(f["value"]) <= 1024 for f in embed["fields"])
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields["Please hand back"].endswith("more on the return form")
    assert embed["description"].split("**What to do**\n")[1].startswith("\\`" * 499)
    # the newest transcript lines are kept, with a count of the older ones left out
    assert "message 14 " in embed["description"]
    assert "message 00 " not in embed["description"]
    assert " earlier messages not shown" in embed["description"]


async def test_without_an_interactions_endpoint_there_is_no_release_button_and_no_webhook(
    start_desk: StartDesk, fake: FakeDiscord
) -> None:
    h = await start_desk(channels=[discord_entry(fake, application_public_key=None)])
    cid = await h.conversation()
    await handoff_in_discord(h, fake, cid)
    [row] = message_posts(fake)[0].json["components"]
    assert [b["label"] for b in row["components"]] == ["Fill return form"]
    assert "press Release" not in message_posts(fake)[0].json["embeds"][0]["footer"]["text"]
    body, headers = fake.signed({"type": 1})
    assert (await h.client.post("/webhooks/5", content=body, headers=headers)).status_code == 404


async def test_a_thread_that_failed_to_start_is_started_on_retry_without_posting_again(desk: Harness, fake: FakeDiscord) -> None:
    fake.fail_next(THREADS, Fault(status=502, body={"message": "Bad Gateway", "code": 0}))
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_discord(desk, fake, cid)
    assert len(fake.posts(STAFF_CHANNEL)) == 1
    assert len(message_posts(fake)) == 1
    assert len(fake.calls_to(THREADS)) == 2
    assert (await desk.desk.handoffs.get(sid)).thread_key == dispatch["id"]


async def test_a_post_retried_with_its_nonce_is_not_posted_twice(adapter: Any, fake: FakeDiscord) -> None:
    channel, _ = adapter
    thread = {"channel_id": str(STAFF_CHANNEL), "message_id": "1", "thread_id": str(GENERAL_CHANNEL)}
    relay = Relay(handoff_id="hs_1", text="Ana: hi", body="hi", author="Ana", thread=thread,
                     delivery_key="hd_7")
    fake.fail_next(MESSAGES, Fault(lose_answer=True))
    with pytest.raises(UncertainDeliveryError):
        await channel.send(relay)
    receipt = await channel.send(relay)  # the retry carries the same nonce: Discord returns the first message
    [message] = fake.posts(GENERAL_CHANNEL)
    assert receipt.message_id == message["id"]
    assert len(message_posts(fake)) == 2


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(("fault", "error", "retry_after", "hint"), [
    (Fault(429, {"message": "You are being rate limited.", "retry_after": 7.5, "global": False},
           {"Retry-After": "8", "Via": "1.1 google", "X-RateLimit-Scope": "user"}),
     TransientChannelError, 7.5, "Discord rate limit on post thread message; retrying after 7.5 s"),
    (Fault(429, {"message": "You are being rate limited.", "global": True}, {"Retry-After": "3", "Via": "1.1 google"}),
     TransientChannelError, 3.0, "Discord global rate limit"),
    (Fault(500, {"message": "500: Internal Server Error", "code": 0}), UncertainDeliveryError, None,
     "Discord failed (500); the message may have been posted"),
    (Fault(502, "<html>bad gateway</html>"), UncertainDeliveryError, None, "Discord failed (502)"),
    (Fault(503, {"message": "upstream overflow"}), TransientChannelError, None, "Discord is having trouble (503)"),
    (Fault(401, {"message": "401: Unauthorized", "code": 0}), ChannelAuthError, None, "Discord refused bot_token of channel 5"),
    (Fault(403, {"message": "Missing Permissions", "code": 50013}), PermanentChannelError, None,
     "Send Messages, Create Public Threads, Send Messages in Threads"),
    (Fault(403, {"message": "Missing Access", "code": 50001}), PermanentChannelError, None, "(Missing Access): invite it"),
    (Fault(404, {"message": "Unknown Channel", "code": 10003}), PermanentChannelError, None,
     "the handoff's Discord thread no longer exists"),
    (Fault(400, {"message": "Invalid Form Body", "code": 50035}), PermanentChannelError, None,
     "Discord refused post thread message: 400 Invalid Form Body (code 50035)"),
])
async def test_each_failure_is_one_request_and_a_typed_error(
    adapter: Any, fake: FakeDiscord, fault: Fault, error: type[Exception], retry_after: float | None, hint: str
) -> None:
    """discord.py would sleep and retry 429s and 500/502/504 itself (for up to half a
    minute); the adapter stops it, so each send is one request and the core decides."""
    channel, _ = adapter
    fake.fail_next(MESSAGES, fault)
    thread = {"channel_id": str(STAFF_CHANNEL), "message_id": "1", "thread_id": str(GENERAL_CHANNEL)}
    with pytest.raises(error) as caught:
        await channel.send(Relay(handoff_id="hs_1", text="Ana: hi", body="hi", author="Ana",
                                    thread=thread, delivery_key="hd_1"))
    assert type(caught.value) is error
    assert hint in caught.value.hint
    assert getattr(caught.value, "retry_after", None) == retry_after
    assert len(message_posts(fake)) == 1
    assert TOKEN not in caught.value.hint + str(caught.value)


async def test_an_unreachable_discord_is_transient_and_a_lost_answer_uncertain(fake: FakeDiscord) -> None:
    ctx = standalone_context()
    closed = DiscordChannel(adapter_config(fake, gateway=False, api_base_url="http://127.0.0.1:9/api/v10"))
    with pytest.raises(TransientChannelError) as caught:
        await closed.start(ctx)
    assert type(caught.value) is TransientChannelError
    assert "could not reach the Discord API" in caught.value.hint

    channel = DiscordChannel(adapter_config(fake, gateway=False, request_timeout=0.3))
    await channel.start(ctx)
    fake.fail_next(THREADS, Fault(lose_answer=True))
    brief = {"handoff_session_id": "hs_lost1", "short_code": "LOST", "conversation_id": "c", "summary": SUMMARY,
             "expected_action": ACTION}
    with pytest.raises(UncertainDeliveryError):
        await channel.send(Dispatch(handoff_id="hs_lost1", text=SUMMARY, brief=brief,
                                    delivery_key="hd_lost"))
    # the retry finds the thread started by the lost attempt (its id is the message's)
    receipt = await channel.send(Dispatch(handoff_id="hs_lost1", text=SUMMARY, brief=brief,
                                          delivery_key="hd_lost"))
    assert receipt.thread_key == receipt.message_id
    assert len(fake.posts(STAFF_CHANNEL)) == 1
    await channel.stop()


async def test_a_missing_permission_fails_the_dispatch_at_once_with_a_hint(desk: Harness, fake: FakeDiscord) -> None:
    fake.fail_next(MESSAGES, Fault(403, {"message": "Missing Permissions", "code": 50013}))
    cid = await desk.conversation()
    result = await desk.tool(cid, "handoff_request", {"channel_id": 5, "summary": SUMMARY, "expected_action": ACTION})
    assert result["error"] == "dispatch_failed"
    assert f"the bot may not do this in channel {STAFF_CHANNEL} (Missing Permissions)" in result["details"]["hint"]
    assert len(message_posts(fake)) == 1  # permanent: never retried
    assert TOKEN not in json.dumps(result)


@pytest.mark.parametrize(("entry", "problem"), [
    ({"bot_token": "MTAwMDAwMDAwMDAwMDAwMDAw.revoked.token-0000"}, "Discord refused bot_token of channel 5 (401 Unauthorized)"),
    ({"channel_id": 900_000_000_000_000_999}, "Discord has no channel 900000000000000999 the bot can see (Unknown Channel)"),
    ({"channel_id": VOICE_CHANNEL}, f"channel_id {VOICE_CHANNEL} is a voice channel; handoffs need a text channel"),
    ({"application_public_key": "ab" * 32}, "application_public_key does not match the Public Key of the bot's application"),
])
async def test_a_channel_that_cannot_work_is_unavailable_with_its_reason(
    start_desk: StartDesk, fake: FakeDiscord, entry: dict[str, Any], problem: str
) -> None:
    h = await start_desk(channels=[discord_entry(fake, **entry)])
    [health] = (await h.client.get("/healthz")).json()["channels"]
    assert health["available"] is False
    assert problem in health["problem"]
    assert "revoked" not in health["problem"]


async def test_without_the_message_content_intent_the_channel_says_how_to_enable_it(start_desk: StartDesk) -> None:
    fake = await FakeDiscord(token=TOKEN, message_content_allowed=False).start()
    try:
        h = await start_desk(channels=[discord_entry(fake)])
        [health] = (await h.client.get("/healthz")).json()["channels"]
        assert health["available"] is False
        assert "enable the Message Content Intent" in health["problem"]
        assert fake.identifies[0]["intents"] & (1 << 15)  # asked for, refused with 4014
    finally:
        await h.desk.stop()
        await fake.stop()


async def test_a_gateway_that_cannot_reconnect_takes_the_channel_out_of_service(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    await fake.revoke_token()
    async with asyncio.timeout(5):
        while desk.desk.channels.is_available(5):
            await asyncio.sleep(0.01)  # the gateway task ends on the client's own schedule
    [health] = desk.desk.channels.health()
    assert "refused bot_token" in str(health["problem"])
    tools = (await desk.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]
    assert "handoff_request" not in [t["name"] for t in tools]  # not offered with no channel that can deliver
    await desk.desk.channels.retry_unavailable()  # a refused token is not retried: it needs a new config
    assert not desk.desk.channels.is_available(5)


async def test_probe_checks_the_token_and_the_channel(fake: FakeDiscord) -> None:
    channel = DiscordChannel(adapter_config(fake))
    assert await channel.probe() == (f"bot @handoff-desk ({BOT_USER['id']}), posting to #handoffs (guild 900000000000000001)")
    assert [c.route for c in fake.calls] == ["GET /users/@me", "GET /channels/{id}"]
    refused = DiscordChannel(adapter_config(fake, bot_token="MTAwMDAwMDAwMDAwMDAwMDAw.revoked.token-0000"))
    with pytest.raises(ChannelAuthError) as caught:
        await refused.probe()
    assert "Discord refused bot_token" in caught.value.hint


async def test_the_sdk_s_global_urls_are_left_alone(adapter: Any) -> None:
    from discord.gateway import DiscordWebSocket
    from discord.http import Route

    assert Route.BASE == "https://discord.com/api/v10"
    assert str(DiscordWebSocket.DEFAULT_GATEWAY) == "wss://gateway.discord.gg/"


# --------------------------------------------------------------------------- gateway


async def test_a_person_s_reply_in_the_thread_reaches_the_subscriber(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_discord(desk, fake, cid)
    await fake.wait_for(lambda: any(e["t"] == "THREAD_CREATE" for e in fake.dispatched))
    await reply(desk, fake, dispatch["id"], "Hi Ana, <@900000000000000302> and I are on it **now**", author=SAM)
    # as the person saw it: the mention as a name, the markdown as typed
    assert await desk.human_texts(cid) == [("Sam", "Hi Ana, @Kim and I are on it **now**")]
    assert "relayed_to_subscriber" in await desk.kinds(sid)


async def test_what_is_not_a_person_s_reply_in_a_handoff_thread_is_ignored(desk: Harness, fake: FakeDiscord) -> None:
    ana = await desk.conversation()
    _, dispatch = await handoff_in_discord(desk, fake, ana)
    thread = dispatch["id"]
    await desk.say(ana, "our own relay comes back over the gateway")  # echoed as MESSAGE_CREATE by the bot
    await desk.desk.settle()
    other_thread = (await fake.human_message(GENERAL_CHANNEL, "chat"))["id"]
    fake.threads[int(other_thread)] = {**fake.threads[int(thread)], "id": other_thread, "parent_id": str(GENERAL_CHANNEL)}
    await fake._dispatch("THREAD_CREATE", {**fake.threads[int(other_thread)], "newly_created": True})
    await fake.human_message(thread, "another bot", author=OTHER_BOT)
    await fake.human_message(thread, "a webhook", author=KIM, webhook_id="900000000000000777")
    await fake.human_message(thread, "pinned a message", author=KIM, type=6)
    await fake.human_message(thread, "", author=KIM)
    await fake.human_message(GENERAL_CHANNEL, "general chatter", author=KIM)
    await fake.human_message(STAFF_CHANNEL, "top-level chatter in the staff channel", author=KIM)
    await fake.human_message(other_thread, "a thread of another channel", author=KIM)
    await reply(desk, fake, thread, "the only real reply", author=KIM)  # the gateway is ordered: the rest came before
    assert await inbound_count(desk) == 1
    assert await desk.human_texts(ana) == [("Kim", "the only real reply")]


async def test_release_typed_in_the_thread_releases(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_discord(desk, fake, cid)
    await reply(desk, fake, dispatch["id"], "/release resolved Re-shipped with express delivery")
    handoff = await desk.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"]) == ("released", "release_token", "resolved")
    assert (handoff["released_by"], handoff["note"]) == ("Sam", "Re-shipped with express delivery")
    notice = fake.posts(dispatch["id"])[-1]
    # (short codes may hold "_": the notice is escaped like everything else)
    assert notice["content"] == escape(f"Handoff {handoff['short_code']} released (resolved); "
                                       "the assistant has taken the conversation back.")
    # the Release button is gone from the dispatch; the form link stays
    assert [b["label"] for b in fake.posts(STAFF_CHANNEL)[0]["components"][0]["components"]] == ["Fill return form"]


# --------------------------------------------------------------------------- interactions


async def test_ping_is_answered_and_forged_or_stale_calls_get_401(desk: Harness, fake: FakeDiscord) -> None:
    response = await interaction(desk, fake, {"type": 1, "id": "1", "application_id": "2"})
    assert response.status_code == 200
    assert response.json() == {"type": 1}
    assert response.headers["content-type"].startswith("application/json")

    body, headers = fake.signed({"type": 1})
    attempts = [
        await desk.client.post("/webhooks/5", content=body.replace(b"1", b"2"), headers=headers),  # changed after signing
        await desk.client.post("/webhooks/5", content=body, headers={"content-type": "application/json"}),  # unsigned
        await desk.client.post("/webhooks/5", content=body, headers={**headers, "x-signature-ed25519": "zz" * 64}),
        await desk.client.post("/webhooks/5", content=body, headers={**headers, "x-signature-ed25519": "00" * 64}),
        await desk.client.post("/webhooks/5", content=body, headers={**headers, "x-signature-timestamp": "soon"}),
        await interaction(desk, fake, {"type": 1}, timestamp=int(time.time()) - 600),  # a replay
    ]
    other = FakeDiscord(token=TOKEN)  # signed by another application's key
    body, headers = other.signed({"type": 1})
    attempts.append(await desk.client.post("/webhooks/5", content=body, headers=headers))
    assert [r.status_code for r in attempts] == [401] * len(attempts)


async def test_a_signed_body_that_does_not_parse_is_a_400_and_a_foreign_type_a_415(desk: Harness, fake: FakeDiscord) -> None:
    """Verified on the raw bytes first, parsed after: a signed body that is not a JSON object
    gets the usual error body, as on /api."""
    for body in (b"{not json", b"[1]"):
        ts = str(int(time.time()))
        signature = fake.signing_key.sign(ts.encode() + body).signature.hex()
        response = await desk.client.post("/webhooks/5", content=body, headers={
            "content-type": "application/json", "x-signature-ed25519": signature, "x-signature-timestamp": ts})
        assert (response.status_code, response.json()["error"]) == (400, "invalid_json"), body
    body, headers = fake.signed({"type": 1})
    form = await desk.client.post("/webhooks/5", content=body, headers={**headers, "content-type": "application/x-www-form-urlencoded"})
    assert (form.status_code, form.json()["error"]) == (415, "unsupported_media_type")


async def test_the_release_button_releases_and_answers_the_clicker_privately(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    sid, dispatch = await handoff_in_discord(desk, fake, cid)
    click = fake.button_click(dispatch, f"handoff_release:{sid}", user=KIM)
    response = await interaction(desk, fake, click)
    assert response.status_code == 200
    answer = response.json()
    assert answer["type"] == 4
    assert answer["data"]["flags"] == 64
    assert answer["data"]["allowed_mentions"] == {"parse": []}
    await desk.desk.settle()
    again = await interaction(desk, fake, click)  # Discord retried the same interaction: deduplicated
    assert again.status_code == 200
    await desk.desk.settle()
    handoff = await desk.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["released_by"]) == ("released", "release_token", "Kim")
    assert (await desk.kinds(sid)).count("handoff_released") == 1
    assert [m["role"] for m in await desk.messages(cid)].count("system") == 1


async def test_a_click_from_elsewhere_releases_nothing(desk: Harness, fake: FakeDiscord) -> None:
    cid = await desk.conversation()
    sid, _ = await handoff_in_discord(desk, fake, cid)
    stranger = await fake.human_message(GENERAL_CHANNEL, "some other bot message", author=OTHER_BOT)
    response = await interaction(desk, fake, fake.button_click(stranger, f"handoff_release:{sid}"))
    assert response.status_code == 200
    assert "does not belong" in response.json()["data"]["content"]
    command = await interaction(desk, fake, {"type": 2, "id": "5", "data": {"name": "release"}})
    assert command.json()["data"]["flags"] == 64
    await desk.desk.settle()
    assert (await desk.handoff(sid))["state"] == "active"
    assert await inbound_count(desk) == 0


# --------------------------------------------------------------------------- the whole story


async def test_the_whole_story_through_discord(start_desk: StartDesk, fake: FakeDiscord) -> None:
    h = await start_desk(channels=[discord_entry(fake)])
    cid = await h.conversation("Ana", email="ana@example.com")
    await h.say(cid, "My order #1234 is a week late")

    # the subscriber asks for a person: the agent hands off to the Discord channel
    sid, told = await h.ask_for_a_person(cid)
    assert told.startswith("I've asked our team to join — usually within the hour.")
    [dispatch] = fake.posts(STAFF_CHANNEL)
    handoff = await h.handoff(sid)
    assert dispatch["embeds"][0]["title"] == escape(f"Handoff {handoff['short_code']}: Ana needs a person")
    assert "My order #1234 is a week late" in dispatch["embeds"][0]["description"]
    thread = dispatch["thread"]["id"]

    # subscriber → the handoff's thread
    relayed = await h.say(cid, "Are you there?")
    assert relayed["routed_to"] == "human"
    await h.desk.settle()
    assert [m["content"] for m in fake.posts(thread)] == ["💬 **Ana**: Are you there?"]

    # a person in the thread → subscriber, over the gateway
    await reply(h, fake, thread, "Hi Ana, I'm Sam. It left the depot today.")
    assert await h.human_texts(cid) == [("Sam", "Hi Ana, I'm Sam. It left the depot today.")]

    # /release typed in the thread hands the conversation back to the agent
    await reply(h, fake, thread, "/release resolved Parcel left the depot")
    messages = await h.messages(cid)
    resume = next(m for m in messages if m["role"] == "system")
    assert resume["text"].startswith("[Bot resumed — the recipient released the conversation. Outcome: resolved. "
                                     "Parcel left the depot")
    assert messages[-1]["role"] == "agent"
    assert "released (resolved)" in fake.posts(thread)[-1]["content"]
    after = await h.say(cid, "Thanks!")
    assert after["routed_to"] == "agent"
    # the relay, Sam's reply and /release typed there, the release notice; nothing more
    assert [m["author"]["id"] for m in fake.posts(thread)] == [BOT_USER["id"], SAM["id"], SAM["id"], BOT_USER["id"]]


# --------------------------------------------------------------------------- approvals

EDIT = "PATCH /channels/{id}/messages/{id}"


def refund_action(**overrides: Any) -> dict[str, Any]:
    return shared_refund_action(5, **overrides)



async def approvals_desk(start_desk: StartDesk, fake: FakeDiscord, *actions: dict[str, Any], entry: dict[str, Any] | None = None,
                         **overrides: Any) -> Harness:
    return await start_desk(channels=[{**discord_entry(fake), **(entry or {})}], actions=list(actions) or [refund_action()],
                            delivery={"base_backoff": "10ms"}, **overrides)


async def ask(h: Harness, fake: FakeDiscord, cid: str, **arguments: Any) -> tuple[str, dict[str, Any]]:
    """The agent calls the gated action; returns the approval id and the prompt as Discord stored it."""
    return await h.ask_approval(cid, **arguments), fake.posts(STAFF_CHANNEL)[-1]


async def press(h: Harness, fake: FakeDiscord, prompt: dict[str, Any], choice: str, *, user: dict[str, Any] = SAM,
                aid: str | None = None) -> Any:
    aid = aid or prompt["embeds"][0]["footer"]["text"].split()[1]
    response = await interaction(h, fake, fake.button_click(prompt, f"approval:{aid}:{choice}", user=user))
    await h.desk.settle()
    return response


def components(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for row in message.get("components") or [] for c in row["components"]]



async def test_an_approval_prompt_is_an_embed_in_the_channel_with_buttons_and_nothing_that_pings(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana **@everyone**")
    aid, prompt = await ask(h, fake, cid, order_id="<@900000000000000302> *1234*", amount=25.5, note="```\n@here\u202e")
    request = prompt["request"]
    assert fake.calls_to(MESSAGES)[0].path == f"/channels/{STAFF_CHANNEL}/messages"  # the channel, not a thread
    assert fake.calls_to(THREADS) == []
    assert request["allowed_mentions"] == {"parse": []}
    assert request["content"] == "🔴 HIGH RISK · Approval needed: refund\\_order for Ana \\*\\*@\u200beveryone\\*\\*"
    [embed] = prompt["embeds"]
    assert embed["title"] == request["content"]
    assert embed["color"] == 0xED4245
    assert embed["url"].startswith("http://desk.test/a/")
    description = embed["description"]
    assert description.startswith("May the assistant run refund\\_order for Ana \\*\\*@\u200beveryone\\*\\*?\n\n"
                                  "Refund an order to the original payment method\n\n**Exactly these arguments:**\n")
    # the exact arguments in a code block; a backtick or an invisible character cannot break out or hide
    assert description.endswith('```json\n{\n  "order_id": "<@900000000000000302> *1234*",\n  "amount": 25.5,\n'
                                '  "note": "\\u0060\\u0060\\u0060\\n@here\\u202e"\n}\n```')
    assert description.count("```") == 2
    deadline = (await h.approval(aid))["deadline"]
    fields = {f["name"]: f["value"] for f in embed["fields"]}
    assert fields["Risk"] == "high"
    assert fields["Answer by"].startswith(deadline[:16].replace("T", " ") + " UTC (<t:")
    assert embed["footer"]["text"].startswith(f"Approval {aid} · the first answer counts")
    approve, deny, always, link = components(prompt)
    assert (approve["label"], approve["style"], approve["custom_id"]) == ("Approve", 3, f"approval:{aid}:approve")
    assert (deny["label"], deny["style"], deny["custom_id"]) == ("Deny", 4, f"approval:{aid}:deny")
    assert (always["label"], always["custom_id"]) == ("Always allow", f"approval:{aid}:always")
    assert (link["style"], link["url"]) == (5, embed["url"])
    assert calls == []


async def test_approve_in_discord_runs_the_action_answers_privately_and_retires_the_buttons(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=25.5)
    click = fake.button_click(prompt, f"approval:{aid}:approve", user=KIM)
    response = await interaction(h, fake, click)
    answer = response.json()
    assert answer["type"] == 4
    assert answer["data"]["flags"] == 64
    assert answer["data"]["allowed_mentions"] == {"parse": []}
    assert answer["data"]["content"].startswith("Your answer (approve) is recorded")
    await h.desk.settle()
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert await h.system_texts(cid) == ['[Approval — refund_order was approved and ran with the arguments you gave. '
                                          'Result: {"refund_id": "rf_1", "amount": 25.5}]']
    view = await h.approval(aid)
    assert view["state"] == "approved"
    assert view["receipt"]["decided_by"] == "Kim"
    assert view["receipt"]["via"] == "channel:5"

    # the prompt is edited in place: no buttons, the outcome in its embed; nothing new is posted
    [edit] = fake.calls_to(EDIT)
    assert edit.path == f"/channels/{STAFF_CHANNEL}/messages/{prompt['id']}"
    assert edit.json["components"] == []
    edited = fake.posts(STAFF_CHANNEL)[-1]
    assert edited["id"] == prompt["id"]
    assert components(edited) == []
    outcome = edited["embeds"][0]["fields"][-1]
    assert outcome == {"name": "Outcome", "value": f"Approved by Kim: refund\\_order ({escape(aid)}) will run.", "inline": False}
    assert edited["embeds"][0]["description"] == prompt["embeds"][0]["description"]  # still shows what was approved

    # Discord retries the same interaction, or someone presses on a stale copy: nothing more runs
    await interaction(h, fake, click)
    await press(h, fake, prompt, "deny", user=SAM)
    await h.desk.settle()
    assert calls == [{"order_id": "1234", "amount": 25.5}]
    assert len(await h.system_texts(cid)) == 1
    assert await inbound_count(h) == 2  # the retried interaction was dropped


async def test_deny_in_discord_is_permission_denied_and_nothing_runs(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=900)
    await press(h, fake, prompt, "deny")
    assert calls == []
    [note] = await h.system_texts(cid)
    assert note.startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it.")
    assert fake.posts(STAFF_CHANNEL)[-1]["embeds"][0]["fields"][-1]["value"] == (
        f"Denied by Sam: refund\\_order ({escape(aid)}) will not run.")


async def test_forged_foreign_or_late_presses_change_nothing(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake, refund_action(timeout="1m"))
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    click = fake.button_click(prompt, f"approval:{aid}:approve")
    forged = await interaction(h, fake, click, timestamp=int(time.time()) - 600)  # a replay of an old press
    other = FakeDiscord(token=TOKEN)
    body, headers = other.signed(click)  # signed by another application's key
    assert forged.status_code == 401
    assert (await h.client.post("/webhooks/5", content=body, headers=headers)).status_code == 401
    stranger = await fake.human_message(GENERAL_CHANNEL, "elsewhere", author=OTHER_BOT)
    refused = [
        fake.button_click(stranger, f"approval:{aid}:approve"),  # not our channel
        fake.button_click(prompt, f"approval:{aid}:approve", user=OTHER_BOT),  # a bot
        fake.button_click(prompt, f"approval:{aid}:maybe"),
    ]
    for payload in refused:
        response = await interaction(h, fake, payload)
        assert response.status_code == 200
        assert "does not belong" in response.json()["data"]["content"]
    await h.desk.settle()
    assert await inbound_count(h) == 0
    assert calls == []

    h.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert await h.desk.approvals.expire_due() == 1
    await h.desk.settle()
    assert fake.posts(STAFF_CHANNEL)[0]["embeds"][0]["fields"][-1]["value"].startswith("Nobody answered in time")
    await press(h, fake, prompt, "approve")  # too late
    assert calls == []
    assert (await h.approval(aid))["state"] == "expired"


async def test_always_allow_in_discord_lets_the_same_shape_run_without_asking(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1", amount=5)
    await press(h, fake, prompt, "always")
    assert (await h.approval(aid))["receipt"]["always_allow"] is True
    assert (await h.tool(cid, "refund_order", {"order_id": "2", "amount": 7}))["status"] == "done"
    assert len(calls) == 2


async def test_without_an_interactions_endpoint_the_prompt_has_the_decision_link_only(
    start_desk: StartDesk, fake: FakeDiscord
) -> None:
    h = await approvals_desk(start_desk, fake, refund_action(policy="ask_always", risk="low"),
                             entry={"application_public_key": None})
    aid, prompt = await ask(h, fake, await h.conversation("Ana"), order_id="1", amount=5)
    [link] = components(prompt)
    assert (link["label"], link["style"], link["url"]) == ("Decision page", 5, prompt["embeds"][0]["url"])
    assert prompt["embeds"][0]["footer"]["text"].endswith("Answer on the decision page (works once).")
    assert prompt["request"]["content"] == "Approval needed: refund\\_order for Ana"
    # the owner decides on the page; the prompt still loses its (now dead) link
    assert (await h.client.post(f"/api/approvals/{aid}/decision", json={"decision": "deny"})).status_code == 200
    await h.desk.settle()
    assert components(fake.posts(STAFF_CHANNEL)[-1]) == []


async def test_huge_arguments_fit_the_embed_and_say_what_was_cut(start_desk: StartDesk, fake: FakeDiscord) -> None:
    h = await approvals_desk(start_desk, fake)
    _, prompt = await ask(h, fake, await h.conversation("Ana " * 30), order_id="1", amount=5, note="*_~ " * 3000)
    description = prompt["embeds"][0]["description"]
    assert len(description) <= 4096  # and the fake checked every Discord limit
    full = json.dumps({"order_id": "1", "amount": 5, "note": "*_~ " * 3000}, indent=2)
    shown = description.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert full.startswith(shown)
    assert len(shown) > 2000
    assert description.endswith(f"*[… cut here: {len(full) - len(shown)} more characters. "
                                "The decision page shows every argument.]*")


async def test_after_a_restart_the_closing_notice_finds_its_prompt_in_the_channel(
    start_desk: StartDesk, fake: FakeDiscord, database_url: str, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    await h.desk.stop()
    again = await approvals_desk(start_desk, fake, url=database_url)
    # decided on the page, so no press tells the adapter which message it is: the core passes
    # the prompt's receipt with the closing notice, and nothing has to be searched
    assert (await again.client.post(f"/api/approvals/{aid}/decision", json={"decision": "approve"})).status_code == 200
    await again.desk.settle()
    assert calls == [{"order_id": "1234", "amount": 5}]
    assert fake.calls_to("GET /channels/{id}/messages") == []
    [edit] = fake.calls_to(EDIT)
    assert edit.path.endswith(f"/messages/{prompt['id']}")
    assert components(fake.posts(STAFF_CHANNEL)[0]) == []


async def test_without_the_prompts_receipt_the_closing_notice_searches_the_channel(
    start_desk: StartDesk, fake: FakeDiscord, database_url: str, calls: list[dict[str, Any]]
) -> None:
    from sqlalchemy import update

    from bot.store.models import OutboxItem

    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    async with h.desk.db.transaction() as session:  # as if the prompt's receipt had not been recorded
        await session.execute(update(OutboxItem).where(OutboxItem.handoff_session_id == aid).values(receipt=None))
    await h.desk.stop()
    again = await approvals_desk(start_desk, fake, url=database_url)  # and nothing in memory either
    assert (await again.client.post(f"/api/approvals/{aid}/decision", json={"decision": "deny"})).status_code == 200
    await again.desk.settle()
    assert fake.calls_to("GET /channels/{id}/messages")[-1].path == f"/channels/{STAFF_CHANNEL}/messages"
    [edit] = fake.calls_to(EDIT)
    assert edit.path.endswith(f"/messages/{prompt['id']}")
    assert calls == []


async def test_a_prompt_that_is_gone_gets_the_closing_text_as_a_new_message(
    start_desk: StartDesk, fake: FakeDiscord, calls: list[dict[str, Any]]
) -> None:
    h = await approvals_desk(start_desk, fake)
    cid = await h.conversation("Ana")
    aid, prompt = await ask(h, fake, cid, order_id="1234", amount=5)
    fake.messages[STAFF_CHANNEL].clear()  # someone deleted it
    await press(h, fake, prompt, "deny", user={**SAM, "global_name": "Sam *the* <@1>"})
    [closing] = fake.posts(STAFF_CHANNEL)
    assert closing["content"] == f"Denied by Sam \\*the\\* \\<@1>: refund\\_order ({escape(aid)}) will not run."
    assert closing["request"]["allowed_mentions"] == {"parse": []}
    assert "nonce" in closing["request"]


DISCORD_PACKAGE = Path(__file__).resolve().parent.parent / "channels" / "discord"


def test_the_discord_package_keeps_rest_gateway_interactions_and_sdk_patching_apart() -> None:
    """channels/discord/ is split by concern: only the interactions endpoint verifies
    signatures (PyNaCl), only the SDK module rewrites discord.py's gateway and REST entry
    points, and the config and Discord's numbers import no SDK at all (config validation
    works without discord.py installed)."""
    assert importers_of(DISCORD_PACKAGE, "nacl") == ["interactions"]
    assert importers_of(DISCORD_PACKAGE, "discord.gateway") == ["sdk"]
    assert importers_of(DISCORD_PACKAGE, "yarl") == ["sdk"]
    for sdk in ("discord", "aiohttp", "nacl"):
        users = importers_of(DISCORD_PACKAGE, sdk)
        assert "config" not in users, f"channels/discord/config.py imports {sdk}"
        assert "protocol" not in users, f"channels/discord/protocol.py imports {sdk}"


async def test_a_dispatch_outside_office_hours_says_so_above_its_summary(start_desk: StartDesk, fake: FakeDiscord) -> None:
    desk = await start_desk(channels=[discord_entry(fake, hours="mondays")], hours=CLOSED_HOURS, clock=closed_clock())
    _sid, dispatch = await handoff_in_discord(desk, fake, await desk.conversation())
    assert dispatch["embeds"][0]["description"].startswith(f"*{OUTSIDE_HOURS_LINE}*\n\n**Summary**")


async def test_a_two_person_prompt_says_so_in_one_bold_line_before_the_arguments(
    fake: FakeDiscord, adapter: tuple[DiscordChannel, list[InboundMessage]]
) -> None:
    channel, _ = adapter
    await channel.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana **@everyone**")))
    await channel.send(ApprovalPrompt(text="…", approval=refund_brief("ap_1", subscriber_name="Ana **@everyone**",
                                                                      approvals_required=2)))
    one, two = (post["embeds"][0] for post in fake.posts(STAFF_CHANNEL))
    line = f"**{escape(TWO_PEOPLE)}**\n\n"
    assert f"Refund an order\n\n{line}**Exactly these arguments:**\n" in two["description"]
    footer = one["footer"]["text"].replace("the first answer counts", "two different people must approve, one denial denies")
    assert {**two, "description": two["description"].replace(line, "", 1)} == {**one, "footer": {**one["footer"], "text": footer}}
    assert "two people" not in json.dumps(one)


# --------------------------------------------------------------------------- routes: claims

TAKEN = "Taken by Kim **now** @everyone at 14:02 in Slack."


@pytest.fixture
async def buttons_adapter(fake: FakeDiscord) -> AsyncIterator[DiscordChannel]:
    """The adapter alone (REST only) with its interactions endpoint, so its dispatches have buttons."""
    channel = DiscordChannel(adapter_config(fake, gateway=False, application_public_key=fake.public_key))
    await channel.start(standalone_context())
    yield channel
    await channel.stop()


async def clicked(adapter: DiscordChannel, fake: FakeDiscord, payload: dict[str, Any]) -> WebhookReply:
    body, headers = fake.signed(payload)
    return await adapter.handle_webhook(WebhookRequest(body=body, headers=headers, query={}, url=""))


def labels(message: dict[str, Any]) -> list[str]:
    return [c["label"] for row in message.get("components") or [] for c in row["components"]]


async def test_a_claimable_dispatch_offers_a_claim_button_and_a_plain_one_does_not(
    buttons_adapter: DiscordChannel, fake: FakeDiscord,
) -> None:
    await buttons_adapter.send(route_dispatch("hs_route1"))
    await buttons_adapter.send(route_dispatch("hs_plain1", claimable=False))
    routed, plain = fake.posts(STAFF_CHANNEL)
    assert labels(routed) == ["I'm on it", "Fill return form", "Release"]
    assert routed["components"][0]["components"][0]["custom_id"] == "handoff_claim:hs_route1"
    assert labels(plain) == ["Fill return form", "Release"]
    assert buttons_adapter.capabilities.edits is True


async def test_the_claim_button_is_a_claim_press_on_the_release_buttons_thread_with_who_pressed(
    buttons_adapter: DiscordChannel, fake: FakeDiscord,
) -> None:
    receipt = await buttons_adapter.send(route_dispatch())
    [dispatch] = fake.posts(STAFF_CHANNEL)
    claim_click = fake.button_click(dispatch, "handoff_claim:hs_route1", user=KIM)
    claimed = await clicked(buttons_adapter, fake, claim_click)
    released = await clicked(buttons_adapter, fake, fake.button_click(dispatch, "handoff_release:hs_route1", user=KIM))
    [claim], [release] = claimed.messages, released.messages
    assert isinstance(claim, ClaimPress)
    assert isinstance(release, ReleasePress)
    assert claim.thread_key == release.thread_key == receipt.thread_key
    assert (claim.author, claim.user_id, release.user_id) == ("Kim", KIM["id"], KIM["id"])
    assert claim.dedupe_key == f"interaction:{claim_click['id']}"
    answer = json.loads(claimed.body)
    assert (answer["data"]["content"], answer["data"]["flags"]) == ("Claiming the handoff… the first claim takes it.", 64)


async def test_a_claimed_notice_takes_only_the_claim_button_away_and_is_posted(
    buttons_adapter: DiscordChannel, fake: FakeDiscord,
) -> None:
    receipt = await buttons_adapter.send(route_dispatch())
    notice = Notice(handoff_id="hs_route1", text="Kim has it.", about="claimed", thread=receipt.thread, delivery_key="hd-1")
    await buttons_adapter.send(notice)
    await buttons_adapter.send(notice)  # a retry: the button is gone already, nothing more to edit
    [dispatch] = fake.posts(STAFF_CHANNEL)
    assert labels(dispatch) == ["Fill return form", "Release"]
    assert len(fake.edits(STAFF_CHANNEL, dispatch["id"])) == 1
    assert [m["content"] for m in fake.posts(receipt.thread["thread_id"])] == ["Kim has it."]


async def test_a_taken_notice_edits_the_dispatch_in_place_escaped_and_posts_nothing(
    buttons_adapter: DiscordChannel, fake: FakeDiscord,
) -> None:
    receipt = await buttons_adapter.send(route_dispatch())
    [dispatch] = fake.posts(STAFF_CHANNEL)
    title, embeds = dispatch["content"], json.loads(json.dumps(dispatch["embeds"]))
    notice = Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread)
    taken = await buttons_adapter.send(notice)
    await buttons_adapter.send(notice)  # a retry: still one line
    assert fake.posts(receipt.thread["thread_id"]) == []
    assert dispatch["content"] == f"{title}\n{escape(TAKEN)}"
    assert "\\*\\*now\\*\\*" in dispatch["content"]
    assert (dispatch["components"], dispatch["embeds"]) == ([], embeds)  # the brief stays, the buttons go
    edit = fake.edits(STAFF_CHANNEL, dispatch["id"])[-1]
    assert (edit["components"], edit["allowed_mentions"]) == ([], {"parse": []})
    assert (taken.message_id, taken.thread_key, taken.thread) == (receipt.message_id, receipt.thread_key, receipt.thread)


async def test_a_dispatch_that_cannot_be_found_gets_the_taken_notice_in_its_thread(
    buttons_adapter: DiscordChannel, fake: FakeDiscord,
) -> None:
    receipt = await buttons_adapter.send(route_dispatch())
    fake.messages[STAFF_CHANNEL].clear()  # deleted
    await buttons_adapter.send(Notice(handoff_id="hs_route1", text=TAKEN, about="taken", thread=receipt.thread))
    assert [m["content"] for m in fake.posts(receipt.thread["thread_id"])] == [escape(TAKEN)]


async def test_every_event_names_the_discord_user_who_acted(desk: Harness, fake: FakeDiscord,
                                                             buttons_adapter: DiscordChannel) -> None:
    cid = await desk.conversation()
    _sid, dispatch = await handoff_in_discord(desk, fake, cid)
    await reply(desk, fake, dispatch["id"], "on it", author=SAM)
    async with desk.desk.db.read() as session:
        [payload] = (await session.scalars(select(InboundEvent.payload))).all()
    prompt = await fake.human_message(STAFF_CHANNEL, "a prompt", author=BOT_USER)
    decided = await clicked(buttons_adapter, fake, fake.button_click(prompt, "approval:ap_x:approve", user=KIM))
    [decision] = decided.messages
    assert (payload["kind"], payload["user_id"], payload["author"]) == ("recipient_text", SAM["id"], "Sam")
    assert isinstance(decision, Decision)
    assert (decision.user_id, decision.author) == (KIM["id"], "Kim")

"""The core side of provider fronts (bot/flow/fronts.py): a chat is a conversation, everything the
subscriber should read is delivered to their chat in order, and one adapter can serve both
roles. The provider here is the scripted one (tests/fakes.py); the Telegram and WhatsApp
front tests run the same story against fakes of their APIs."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bot.config import ConfigError, ProviderFront
from bot.desk import Desk
from bot.runtime.clock import ManualClock
from bot.store.models import Conversation, InboundEvent
from bot.web.app import create_app
from channels.base import (
    ChannelConfig,
    ChatOpened,
    DeliveryFailure,
    RecipientText,
    SubscriberText,
    TransientChannelError,
    UserActionAnswer,
)
from tests.conftest import Harness, make_config
from tests.fakes import FrontChannel

FRONT_ID = 1001
PERSON = "talk to a person please"

FrontDesk = Callable[..., Awaitable[tuple[Harness, FrontChannel]]]


@pytest.fixture
async def front_desk(database_url: str) -> AsyncIterator[FrontDesk]:
    """Factory: a desk whose front is served by a scripted provider, either sharing the one
    staff channel's adapter (`shared`) or with an adapter of its own beside the owner inbox."""
    running: list[tuple[Desk, httpx.AsyncClient]] = []

    async def start(*, shared: bool = False, greeting: str | None = None, limit: int = 30) -> tuple[Harness, FrontChannel]:
        base = make_config(database_url)
        if shared:
            staff = ChannelConfig(id=2, kind="scripted", label="Staff chat", public_name="the Acme team",
                                  estimated_response="within the hour")
            front = ProviderFront(kind="scripted", name="chatapp", greeting=greeting, channel_id=2, shares_channel=True,
                                  settings=staff, max_messages_per_minute=limit)
            config = base.model_copy(update={"channels": [staff], "fronts": [front]})
        else:
            own = ChannelConfig(id=FRONT_ID, kind="scripted", label="chatapp")
            front = ProviderFront(kind="scripted", name="chatapp", greeting=greeting, channel_id=FRONT_ID,
                                  shares_channel=False, settings=own, max_messages_per_minute=limit)
            config = base.model_copy(update={"fronts": [front]})
        adapter = FrontChannel(front.settings)
        desk = Desk(config, clock=ManualClock(), channel_overrides={front.channel_id: adapter}, run_timers=False)
        await desk.start()
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(desk, manage_desk=False)),
                                   base_url="http://desk.test")
        running.append((desk, client))
        return Harness(desk, client), adapter

    yield start
    for desk, client in running:
        await client.aclose()
        await desk.stop()


async def say(harness: Harness, adapter: FrontChannel, chat: str, text: str = "", **fields: Any) -> None:
    await adapter.from_subscriber(chat, text, **fields)
    await harness.desk.settle()


async def chat_conversation(harness: Harness, chat: str) -> Conversation:
    async with harness.desk.db.read() as session:
        found = (await session.scalars(select(Conversation).where(Conversation.subscriber_external_id == chat))).all()
    assert len(found) == 1
    return found[0]


async def test_each_chat_is_a_conversation_and_the_agent_answers_in_it(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk()
    await say(harness, adapter, "chat-1", "Hello", author="Ana Lima")
    await say(harness, adapter, "chat-2", "Hello", author="Ben")
    await say(harness, adapter, "chat-1", "thanks!", author="Ana Lima")

    ana = await chat_conversation(harness, "chat-1")
    assert (ana.front, ana.subscriber_name) == ("chatapp", "Ana Lima")
    assert [o.body for o in adapter.to_chat("chat-1")] == [
        "Hi Ana Lima! I'm Assistant. Ask me anything, or say \"talk to a person\" and I'll bring in our team.",
        "You're welcome! Anything else I can do?",
    ]
    assert [o.body for o in adapter.to_chat("chat-2")][0].startswith("Hi Ben!")
    assert all(o.author is None and o.conversation_id == ana.id for o in adapter.to_chat("chat-1"))
    # the owner inbox is still the only channel a handoff can go to
    specs = await harness.desk.router.tool_specs(ana.id)
    handoff = next(s for s in specs if s.name == "handoff_request")
    assert handoff.input_schema["properties"]["channel_id"]["enum"] == [1]
    health = (await harness.client.get("/healthz")).json()["channels"]
    assert {"id": FRONT_ID, "serves": ["subscribers"]}.items() <= next(c for c in health if c["id"] == FRONT_ID).items()


async def test_two_instances_meeting_a_new_chat_at_once_make_one_conversation(front_desk: FrontDesk) -> None:
    """Two servers on one database get the chat's first two messages at the same moment:
    the unique index lets one create the conversation and the other finds it."""
    first, first_adapter = await front_desk()
    second, second_adapter = await front_desk()
    await asyncio.gather(
        first.desk.fronts.handle(FRONT_ID, SubscriberText(chat="chat-1", text="Hi", author="Ana")),
        second.desk.fronts.handle(FRONT_ID, SubscriberText(chat="chat-1", text="Hi", author="Ana")),
    )
    await first.desk.settle()
    await second.desk.settle()
    conversation = await chat_conversation(first, "chat-1")  # exactly one
    assert len([m for m in await first.messages(conversation.id) if m["role"] == "subscriber"]) == 2


async def test_a_redelivered_message_is_answered_once(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk()
    for _ in range(2):
        await say(harness, adapter, "chat-1", "Hello", author="Ana", dedupe_key="update-7")
    assert len(adapter.to_chat("chat-1")) == 1
    async with harness.desk.db.read() as session:
        assert len((await session.scalars(select(InboundEvent))).all()) == 1


async def test_a_chat_over_its_limit_is_told_once_and_not_answered(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk(limit=2)
    for n in range(5):
        await say(harness, adapter, "chat-1", f"question {n}", author="Ana", dedupe_key=f"u{n}")
    await say(harness, adapter, "chat-2", "Hello", author="Ben")  # another chat has its own allowance
    said = [o.body for o in adapter.to_chat("chat-1")]
    assert len(said) == 3
    assert said[2] == (
        "You're sending messages faster than I can read them. Please wait 30 seconds, then send your message again.")
    assert adapter.to_chat("chat-2")[0].body.startswith("Hi Ben!")
    async with harness.desk.db.read() as session:
        results = (await session.scalars(select(InboundEvent.result).order_by(InboundEvent.id))).all()
    assert results[2:5] == ["ignored: over 2 messages a minute"] * 3  # kept, with why

    harness.desk.clock.advance(timedelta(seconds=30))
    await say(harness, adapter, "chat-1", "thanks", author="Ana", dedupe_key="u5")
    assert adapter.to_chat("chat-1")[-1].body == "You're welcome! Anything else I can do?"


async def test_opening_the_chat_greets_with_the_owners_words(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk(greeting="Welcome to Acme! How can we help?")
    await say(harness, adapter, "chat-1", author="Ana", event=ChatOpened)
    assert [o.body for o in adapter.to_chat("chat-1")] == ["Welcome to Acme! How can we help?"]

    # a provider without an "opened" event: the owner's greeting precedes the first answer
    await say(harness, adapter, "chat-2", "Hello", author="Ben")
    assert [o.body.split("!")[0] for o in adapter.to_chat("chat-2")] == ["Welcome to Acme", "Hi Ben"]
    await say(harness, adapter, "chat-2", "Hello again", author="Ben")
    assert len(adapter.to_chat("chat-2")) == 3  # once per conversation

    plain, plain_adapter = await front_desk()
    await say(plain, plain_adapter, "chat-9", author="Ana", event=ChatOpened)
    assert plain_adapter.to_chat("chat-9")[0].body.startswith("Hi Ana! I'm the assistant.")


async def test_a_handoff_through_one_adapter_serving_both_roles(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk(shared=True)
    await say(harness, adapter, "chat-1", "My parcel is lost", author="Ana")
    await say(harness, adapter, "chat-1", PERSON, author="Ana")
    dispatch = next(o for o in adapter.sent if o.purpose == "dispatch")
    sid = dispatch.handoff_id
    assert adapter.to_chat("chat-1")[-1].body == (  # the channel's public name: "Staff chat" is the owner's label
        "I've asked the Acme team to join — usually within the hour. Your messages now go straight to them.")

    await say(harness, adapter, "chat-1", "It was order 1234", author="Ana")
    assert [o.body for o in adapter.sent if o.purpose == "relay"] == ["It was order 1234"]
    thread = next(o for o in adapter.sent if o.purpose == "dispatch")
    assert thread.brief is not None
    assert thread.brief.subscriber_name == "Ana"

    await harness.desk.inbound.submit_and_wait(2, _staff(sid, "Found it, it ships today.", "Sam"))
    await harness.desk.settle()
    reply = adapter.to_chat("chat-1")[-1]
    assert (reply.author, reply.body, reply.text) == ("Sam", "Found it, it ships today.", "Sam: Found it, it ships today.")

    await harness.desk.inbound.submit_and_wait(2, _staff(sid, "/release resolved shipped", "Sam"))
    await harness.desk.settle()
    said = [o.body for o in adapter.to_chat("chat-1")]
    assert said[-2] == "The Acme team has handed the conversation back to the assistant."
    assert said[-1].startswith("Thanks for waiting.")
    cid = (await chat_conversation(harness, "chat-1")).id
    # the system note is for the agent, never for the subscriber's chat
    assert any(m.startswith("[Bot resumed") for m in await harness.system_texts(cid))
    assert not any(b.startswith("[Bot resumed") for b in said)


def _staff(sid: str, text: str, author: str) -> RecipientText:
    return RecipientText(thread_key=f"thread-{sid}", text=text, author=author)


async def test_messages_wait_in_order_while_the_provider_is_down(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk()
    adapter.fail_next(TransientChannelError("503 from the provider", retry_after=5))
    await say(harness, adapter, "chat-1", "Hello", author="Ana")
    await say(harness, adapter, "chat-1", "thank you", author="Ana")
    assert adapter.to_chat("chat-1") == []  # the first failed; the second waits behind it

    harness.desk.clock.advance(timedelta(seconds=30))
    await harness.desk.settle()
    assert [o.body.split("!")[0] for o in adapter.to_chat("chat-1")] == ["Hi Ana", "You're welcome"]
    cid = (await chat_conversation(harness, "chat-1")).id
    async with harness.desk.db.read() as session:
        from bot.store.models import HandoffEvent

        kinds = (await session.scalars(select(HandoffEvent.kind).where(HandoffEvent.conversation_id == cid))).all()
    assert "delivery_retry_scheduled" in kinds
    assert kinds.count("delivered_to_subscriber") == 2


async def test_a_delivery_reported_failed_later_is_recorded_on_its_conversation(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk()
    await say(harness, adapter, "chat-1", "Hello", author="Ana")
    message_id = f"msg-{len(adapter.sent)}"  # the scripted provider's receipt for the answer
    for _ in range(2):  # the provider's report, redelivered
        await adapter.ctx.deliver_inbound(DeliveryFailure(
            dedupe_key=f"status:{message_id}", message_id=message_id, error="undelivered", hint="write first"))
    await adapter.ctx.deliver_inbound(DeliveryFailure(message_id="msg-unknown", error="failed"))
    await harness.desk.settle()
    cid = (await chat_conversation(harness, "chat-1")).id
    async with harness.desk.db.read() as session:
        from bot.store.models import HandoffEvent, OutboxItem

        late = (await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == "delivery_failed_after_acceptance")
                                      .order_by(HandoffEvent.id))).all()
        item = await session.get(OutboxItem, late[0].detail["outbox_id"])
    assert [(e.conversation_id, e.detail["channel_message_id"]) for e in late] == [(cid, message_id), (None, "msg-unknown")]
    assert item is not None
    assert item.state == "failed"
    assert late[0].detail["hint"] == "write first"


async def test_user_action_buttons_answer_the_action_they_were_shown_with(front_desk: FrontDesk) -> None:
    harness, adapter = await front_desk()
    await say(harness, adapter, "chat-1", "Hello", author="Ana")
    cid = (await chat_conversation(harness, "chat-1")).id
    asked = await harness.tool(cid, "request_user_action", {
        "reason": "verification_code", "details": "Enter the code your bank sent you.",
        "steps": [{"instruction": "Open the bank app"}, {"instruction": "Type the code"}],
    })
    await harness.desk.settle()
    uaid = asked["user_action_id"]
    prompt = adapter.to_chat("chat-1")[-1]
    assert prompt.user_action is not None
    assert (prompt.user_action.user_action_id, prompt.user_action.steps) == (uaid, 2)
    assert "Step 1 of 2: Open the bank app" in prompt.body

    await say(harness, adapter, "chat-1", event=UserActionAnswer, user_action_id=uaid, move="next")
    moved = adapter.to_chat("chat-1")[-1]
    assert "Step 2 of 2: Type the code" in moved.body
    assert moved.user_action
    assert moved.user_action.step == 1

    await say(harness, adapter, "chat-2", "Hi", author="Eve")  # another chat's button cannot answer it
    await say(harness, adapter, "chat-2", event=UserActionAnswer, user_action_id=uaid, move="done")
    assert (await harness.desk.user_actions.get(uaid)).state == "pending"

    await say(harness, adapter, "chat-1", event=UserActionAnswer, user_action_id=uaid, move="done")
    assert (await harness.desk.user_actions.get(uaid)).state == "done"
    assert adapter.to_chat("chat-1")[-1].body == "Thanks, that's done. Let's carry on."
    before = len(adapter.sent)
    await say(harness, adapter, "chat-1", event=UserActionAnswer, user_action_id=uaid, move="cancelled")
    assert len(adapter.sent) == before  # a stale button changes nothing


def test_fronts_are_validated_with_their_key_paths(sqlite_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(sqlite_url, fronts=[{"kind": "web"}, {"kind": "web"}, {"kind": "owner_inbox"}, {"title": "x"}, "web"])
    problems = [str(p) for p in caught.value.problems]
    assert "fronts[1]: a second web front (also fronts[0])" in problems
    assert any(p.startswith("fronts[2].kind: 'owner_inbox' cannot serve subscribers (one of: web") for p in problems)
    assert any(p.startswith("fronts[3].kind: required (one of: web") for p in problems)
    assert "fronts[4]: must be a mapping such as {kind: web}" in problems


def test_two_fronts_on_one_connection_are_refused_with_their_file_positions(sqlite_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(sqlite_url, fronts=[{"kind": "bogus"}, {"kind": "telegram", "bot_token": "123:abc"},
                                        {"kind": "telegram", "name": "again", "bot_token": "123:abc"}])
    assert [str(p) for p in caught.value.problems][1:] == ["fronts[2]: same connection as fronts[1]: one bot serves one front"]


def test_a_front_takes_its_connection_keys_and_says_where_the_rest_belong(sqlite_url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        make_config(sqlite_url, fronts=[{"kind": "telegram", "bot_token": "123:abc", "chat_id": -100, "label": "Bot",
                                         "public_name": "us", "bot_tokn": "x"}])
    problems = [str(p) for p in caught.value.problems]
    assert problems[0].startswith("fronts[0].chat_id: belongs on a channel (channels[]), where a handoff is sent; "
                                  "a front only takes kind, name, id, greeting, max_messages_per_minute, bot_token, mode")
    assert problems[1].startswith("fronts[0].label: belongs on a channel")
    assert problems[2].startswith("fronts[0].public_name: belongs on a channel")  # who subscribers wait for
    assert problems[3].startswith("fronts[0].bot_tokn: unknown key; did you mean 'bot_token'?")
    assert "123:abc" not in str(caught.value)

"""The Telegram front: subscribers talk to the bot in their private chats with it.

The real python-telegram-bot against the fake Bot API (tests/fake_telegram.py), through a
real desk with the rules agent: one bot token serving the staff group and subscribers at
once (one webhook, or one getUpdates poller), and a bot that is a front of its own.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from bot.domain.rendering import Renderer
from bot.store.models import Conversation, HandoffEvent
from channels.base import (
    ChannelContext,
    InboundMessage,
    PermanentChannelError,
    ToSubscriber,
    TransientChannelError,
    UserActionPrompt,
)
from channels.telegram import MESSAGE_LIMIT, TelegramChannel, TelegramConfig, TelegramConnection
from tests.conftest import Harness, StartDesk, config_problem, make_config
from tests.fake_telegram import ANA, BEN, KIM, SAM, STAFF_CHAT_ID, FakeTelegram, utf16_len

TOKEN = "123456:TEST-token_abcdefghijklmnop"
SECRET = "test_webhook-secret-1"
FRONT_ID = 1001  # a front of its own, first in `fronts`
PERSON = "Can I talk to a person please?"
GREETING = ("Hi Ana Silva! I'm the assistant. Ask me anything; if you'd rather talk to a person, just say so and "
            "I'll bring in our team.")
NOTED = ("Thanks, I've noted that. I'm a simple assistant, so for anything beyond the basics just say "
         "\"talk to a person\" and I'll hand you to our team.")


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The front's behaviour does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> Any:
    """Requested before start_desk, so it outlives the desk (a poller never sees it vanish)."""
    server = await FakeTelegram(token=TOKEN).start()
    yield server
    await server.stop()


def staff_channel(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    return {"id": 1, "kind": "telegram", "label": "Support (Telegram)", "bot_token": TOKEN, "chat_id": STAFF_CHAT_ID,
            "api_base_url": fake.base_url, "webhook_secret": SECRET, "estimated_response": "within the hour", **overrides}


def own_front(fake: FakeTelegram, **overrides: Any) -> dict[str, Any]:
    return {"kind": "telegram", "bot_token": TOKEN, "api_base_url": fake.base_url, "webhook_secret": SECRET, **overrides}


async def shared_desk(start_desk: StartDesk, fake: FakeTelegram, *, channel: dict[str, Any] | None = None,
                      front: dict[str, Any] | None = None, **overrides: Any) -> Harness:
    """One bot: the staff group's channel and the subscribers' front (the front repeats only the token)."""
    return await start_desk(channels=[staff_channel(fake, **(channel or {}))],
                            fronts=[{"kind": "telegram", "bot_token": TOKEN, **(front or {})}], **overrides)


async def own_desk(start_desk: StartDesk, fake: FakeTelegram, **front: Any) -> Harness:
    """The owner inbox is the only channel; the bot is a front of its own (id 1001)."""
    return await start_desk(fronts=[own_front(fake, **front)])


async def post(harness: Harness, update: dict[str, Any], *, channel_id: int = 1, secret: str | None = SECRET) -> httpx.Response:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    return await harness.client.post(f"/webhooks/{channel_id}", json=update, headers=headers)


async def deliver(harness: Harness, update: dict[str, Any], *, channel_id: int = 1) -> httpx.Response:
    """A webhook call from Telegram, then everything the desk does after answering it."""
    response = await post(harness, update, channel_id=channel_id)
    assert response.status_code == 200, response.text
    await harness.desk.settle()
    return response


def said_to(fake: FakeTelegram, user: dict[str, Any]) -> list[str]:
    """What the subscriber reads in their chat, as Telegram shows it."""
    return [m["text"] for m in fake.sent_to(user["id"])]


def buttons(message: dict[str, Any]) -> list[list[tuple[str, str]]]:
    return [[(b["text"], b["callback_data"]) for b in row] for row in message.get("reply_markup", {}).get("inline_keyboard", [])]


async def conversation_of(harness: Harness, user: dict[str, Any]) -> Conversation:
    async with harness.desk.db.read() as session:
        found = (await session.scalars(select(Conversation).where(
            Conversation.subscriber_external_id == str(user["id"])))).all()
    assert len(found) == 1
    return found[0]



# --------------------------------------------------------------------------- the whole story


async def test_one_bot_serves_the_subscriber_and_the_staff_group_through_one_webhook(
    fake: FakeTelegram, start_desk: StartDesk,
) -> None:
    harness = await shared_desk(start_desk, fake)
    await deliver(harness, fake.private_update("/start"))
    assert said_to(fake, ANA) == [GREETING]
    await deliver(harness, fake.private_update("My parcel 1234 is lost"))
    assert said_to(fake, ANA)[-1] == NOTED
    conversation = await conversation_of(harness, ANA)
    assert (conversation.front, conversation.subscriber_name) == ("telegram", "Ana Silva")

    # "talk to a person": the dispatch lands in the staff group, the subscriber is told who was asked
    await deliver(harness, fake.private_update(PERSON))
    dispatch = fake.sent_to(STAFF_CHAT_ID)[-1]
    assert dispatch["text"].startswith("Handoff ")
    assert "Ana Silva needs a person" in dispatch["text"]
    assert "Ana Silva: My parcel 1234 is lost" in dispatch["text"]
    assert said_to(fake, ANA)[-1] == (
        "I've asked our team to join — usually within the hour. Your messages now go straight to them.")
    [handoff] = [m for m in await harness.messages(conversation.id) if m.get("handoff_session_id")][:1]
    sid = handoff["handoff_session_id"]

    # the subscriber's words go to the staff group, escaped, as a reply to the dispatch
    await deliver(harness, fake.private_update("It was order <1234> & it's late"))
    relay = fake.sent_to(STAFF_CHAT_ID)[-1]
    assert relay["text"] == "Ana Silva: It was order <1234> & it's late"
    assert relay["reply_to_message"]["message_id"] == dispatch["message_id"]

    # a person's reply reaches the subscriber's chat with their name in bold
    await deliver(harness, fake.message_update("Hi Ana, I'm Sam <3 Found it & it ships today.", reply_to=relay["message_id"]))
    assert said_to(fake, ANA)[-1] == "Sam Lee: Hi Ana, I'm Sam <3 Found it & it ships today."
    request = fake.requests("sendMessage")[-1]
    assert request["chat_id"] == ANA["id"]
    assert request["parse_mode"] == "HTML"
    assert request["text"] == "<b>Sam Lee</b>: Hi Ana, I&#39;m Sam &lt;3 Found it &amp; it ships today."

    # /release in the group: the subscriber hears the assistant is back, then the assistant
    await deliver(harness, fake.message_update("/release resolved Re-shipped", reply_to=dispatch["message_id"], user=KIM))
    assert (await harness.handoff(sid))["state"] == "released"
    assert said_to(fake, ANA)[-2:] == [
        "Our team has handed the conversation back to the assistant.",
        "Thanks for waiting. Anything else I can help with?",
    ]
    assert not any(text.startswith("[Bot resumed") for text in said_to(fake, ANA))  # that note is for the agent

    # the assistant answers again; a redelivered update is processed once
    thanks = fake.private_update("thanks!")
    await deliver(harness, thanks)
    await deliver(harness, thanks)
    assert said_to(fake, ANA).count("You're welcome! Anything else I can do?") == 1
    assert [m["text"] for m in await harness.messages(conversation.id) if m["role"] == "subscriber"].count("thanks!") == 1
    assert fake.requests("setWebhook") == []  # http://desk.test cannot take Telegram's calls: nothing registered


async def test_one_getupdates_poller_serves_both_roles(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake, channel={"mode": "polling", "poll_timeout": 5})
    await fake.queue(fake.private_update("Hello"))
    await fake.wait_for(lambda: len(fake.sent_to(ANA["id"])) == 1)
    await fake.queue(fake.private_update(PERSON))
    await fake.wait_for(lambda: len(fake.sent_to(ANA["id"])) == 2 and len(fake.sent_to(STAFF_CHAT_ID)) == 1)
    dispatch = fake.sent_to(STAFF_CHAT_ID)[0]
    await fake.queue(fake.message_update("Hello Ana, Sam here.", reply_to=dispatch["message_id"]))
    await fake.wait_for(lambda: said_to(fake, ANA)[-1:] == ["Sam Lee: Hello Ana, Sam here."])
    await fake.queue(fake.private_update("Great, thanks Sam"))
    await fake.wait_for(lambda: fake.sent_to(STAFF_CHAT_ID)[-1]["text"] == "Ana Silva: Great, thanks Sam")
    await harness.desk.settle()

    assert fake.peak_pollers == 1
    assert fake.conflicts == 0  # one loop for the group and the private chats
    assert {token for token in (c.token for c in fake.calls)} == {TOKEN}
    assert all(r["allowed_updates"] == ["message", "callback_query"] for r in fake.requests("getUpdates"))
    [state] = (await harness.client.get("/healthz")).json()["channels"]
    assert state["available"]
    assert state["serves"] == ["recipients", "subscribers"]
    await harness.desk.stop()
    assert [t for t in asyncio.all_tasks() if t.get_name().startswith("telegram-poll")] == []


async def test_a_front_of_its_own_greets_answers_and_hands_off_to_another_channel(
    fake: FakeTelegram, start_desk: StartDesk,
) -> None:
    harness = await own_desk(start_desk, fake, mode="polling", poll_timeout=5, greeting="Welcome to Acme <Support>!")
    assert fake.requests("getChat") == []  # no staff group to look up
    await fake.queue(fake.private_update("/start campaign-42"))
    await fake.wait_for(lambda: said_to(fake, ANA) == ["Welcome to Acme <Support>!"])
    await fake.queue(fake.private_update("Where is my order?"))
    await fake.wait_for(lambda: said_to(fake, ANA)[-1:] == [NOTED])

    # group traffic means nothing to a bot without a staff group, and nothing is sent there
    await fake.queue(fake.message_update("/release", user=SAM))
    await fake.queue(fake.private_update(PERSON))
    await fake.wait_for(lambda: said_to(fake, ANA)[-1].startswith("I've asked our team to join"))
    await harness.desk.settle()
    assert fake.sent_to(STAFF_CHAT_ID) == []
    assert await harness.stored_events() == 3

    conversation = await conversation_of(harness, ANA)
    specs = await harness.desk.router.tool_specs(conversation.id)
    handoff_tool = next(s for s in specs if s.name == "handoff_request")
    assert handoff_tool.input_schema["properties"]["channel_id"]["enum"] == [1]  # never the front
    health = {c["id"]: c for c in (await harness.client.get("/healthz")).json()["channels"]}
    assert health[FRONT_ID]["available"]
    assert health[FRONT_ID]["serves"] == ["subscribers"]

    sid = next(m["handoff_session_id"] for m in await harness.messages(conversation.id) if m.get("handoff_session_id"))
    response = await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    assert response.status_code == 200, response.text
    await harness.desk.settle()
    assert "Our team has handed the conversation back to the assistant." in said_to(fake, ANA)
    assert await harness.desk.channels.get(FRONT_ID).probe() == "@handoff_desk_bot, serving subscribers in private chats"


async def test_a_front_of_its_own_takes_its_webhook_at_its_own_id(fake: FakeTelegram, start_desk: StartDesk) -> None:
    server = {"public_url": "https://desk.example.com", "allowed_hosts": ["desk.test"]}
    harness = await start_desk(fronts=[own_front(fake)], server=server)
    [registration] = fake.requests("setWebhook")
    assert registration == {"url": f"https://desk.example.com/webhooks/{FRONT_ID}", "secret_token": SECRET,
                            "allowed_updates": ["message", "callback_query"]}
    hello = fake.private_update("Hello")
    assert (await post(harness, hello, channel_id=FRONT_ID, secret="wrong")).status_code == 403
    assert (await post(harness, hello, channel_id=FRONT_ID, secret=None)).status_code == 403
    await harness.desk.settle()
    assert await harness.stored_events() == 0
    assert said_to(fake, ANA) == []
    await deliver(harness, hello, channel_id=FRONT_ID)
    assert said_to(fake, ANA) == ["Hi Ana Silva! I'm Assistant. Ask me anything, or say \"talk to a person\" and I'll "
                                  "bring in our team."]


async def test_without_a_front_private_chats_stay_ignored(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await start_desk(channels=[staff_channel(fake)])
    await deliver(harness, fake.private_update("/start"))
    await deliver(harness, fake.private_update("Hello?"))
    assert await harness.stored_events() == 0
    assert said_to(fake, ANA) == []


# --------------------------------------------------------------------------- what subscribers send


PHOTO = [{"file_id": "ph1", "file_unique_id": "u1", "width": 90, "height": 90, "file_size": 1200}]
STICKER = {"file_id": "st1", "file_unique_id": "u2", "width": 512, "height": 512, "is_animated": False, "is_video": False,
           "type": "regular", "emoji": "👍"}
VOICE = {"file_id": "vo1", "file_unique_id": "u3", "duration": 4}


async def test_photos_stickers_and_voice_are_not_dropped_silently(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    for update in (
        fake.private_update(None, photo=PHOTO, caption="the <broken> box"),
        fake.private_update(None, sticker=STICKER),
        fake.private_update(None, voice=VOICE),
        fake.private_update(None, pinned_message={"message_id": 1, "date": 0, "chat": fake.private[ANA["id"]]}),
        fake.private_update("/help"),  # other commands are words like any other
    ):
        await deliver(harness, update)
    cid = (await conversation_of(harness, ANA)).id
    said = [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"]
    assert said == ["[photo] the <broken> box", "[sticker 👍]", "[voice message]", "/help"]  # the pin is no message
    assert len(said_to(fake, ANA)) == 4


async def test_bots_and_other_groups_are_not_subscribers(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    robot = {"id": 7000777, "is_bot": True, "first_name": "Robot"}
    other_group = {"id": -100999, "type": "group", "title": "Elsewhere"}
    await deliver(harness, fake.private_update("beep", user=robot))
    await deliver(harness, fake.message_update("hello bot", chat=other_group))
    assert await harness.stored_events() == 0
    assert fake.sent() == []


async def test_the_name_is_the_profile_name_or_the_username(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await deliver(harness, fake.private_update("Hello", user=BEN))
    await deliver(harness, fake.private_update("Hello", user={"id": 603, "is_bot": False, "first_name": "", "username": "cleo"}))
    assert (await conversation_of(harness, BEN)).subscriber_name == "Ben"
    assert (await conversation_of(harness, {"id": 603})).subscriber_name == "@cleo"


# --------------------------------------------------------------------------- user actions


async def test_user_action_buttons_move_through_steps_and_answer_it(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await deliver(harness, fake.private_update("Hello"))
    cid = (await conversation_of(harness, ANA)).id
    asked = await harness.tool(cid, "request_user_action", {
        "reason": "verification_code", "details": "Enter the code your bank sent you.",
        "steps": [{"instruction": "Open the bank app"}, {"instruction": "Type the code"}],
    })
    await harness.desk.settle()
    uaid = asked["user_action_id"]
    prompt = fake.sent_to(ANA["id"])[-1]
    assert "Step 1 of 2: Open the bank app" in prompt["text"]
    assert 'Reply "done"' in prompt["text"]
    assert buttons(prompt) == [[("Next step →", f"ua:{uaid}:n")], [("Done", f"ua:{uaid}:d"), ("Cancel", f"ua:{uaid}:c")]]
    assert all(len(data.encode()) <= 64 for row in buttons(prompt) for _, data in row)

    press = fake.callback_update(prompt["message_id"], user=ANA, data=f"ua:{uaid}:n", chat_id=ANA["id"])
    response = await deliver(harness, press)
    assert response.json() == {"method": "answerCallbackQuery", "callback_query_id": press["callback_query"]["id"],
                               "text": "One moment…"}
    moved = fake.sent_to(ANA["id"])[-1]
    assert "Step 2 of 2: Type the code" in moved["text"]
    assert "reply_markup" not in fake.messages[(ANA["id"], prompt["message_id"])]  # the pressed prompt's buttons go
    assert buttons(moved) == [[("← Previous step", f"ua:{uaid}:p")], [("Done", f"ua:{uaid}:d"), ("Cancel", f"ua:{uaid}:c")]]

    # a press claiming another chat (or from a bot) answers nothing
    await deliver(harness, fake.private_update("Hi", user=BEN))
    forged = fake.callback_update(moved["message_id"], user=BEN, data=f"ua:{uaid}:d", chat_id=ANA["id"])
    forged["callback_query"]["message"]["chat"] = fake.private[BEN["id"]]
    await deliver(harness, forged)
    assert (await harness.desk.user_actions.get(uaid)).state == "pending"

    await deliver(harness, fake.callback_update(moved["message_id"], user=ANA, data=f"ua:{uaid}:d", chat_id=ANA["id"]))
    assert (await harness.desk.user_actions.get(uaid)).state == "done"
    assert said_to(fake, ANA)[-1] == "Thanks, that's done. Let's carry on."
    before = len(fake.sent())
    await deliver(harness, fake.callback_update(moved["message_id"], user=ANA, data=f"ua:{uaid}:c", chat_id=ANA["id"]))
    assert len(fake.sent()) == before
    assert (await harness.desk.user_actions.get(uaid)).state == "done"  # stale


async def test_user_action_presses_arrive_by_polling_too_and_are_answered(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await own_desk(start_desk, fake, mode="polling", poll_timeout=5)
    await fake.queue(fake.private_update("Hello"))
    await fake.wait_for(lambda: len(fake.sent_to(ANA["id"])) == 1)
    await harness.desk.settle()
    cid = (await conversation_of(harness, ANA)).id
    uaid = (await harness.tool(cid, "request_user_action", {"reason": "captcha", "details": "Solve the puzzle."}))["user_action_id"]
    await fake.wait_for(lambda: len(fake.sent_to(ANA["id"])) == 2)
    prompt = fake.sent_to(ANA["id"])[-1]
    assert buttons(prompt) == [[("Done", f"ua:{uaid}:d"), ("Cancel", f"ua:{uaid}:c")]]  # one step: no step buttons
    press = await fake.queue(fake.callback_update(prompt["message_id"], user=ANA, data=f"ua:{uaid}:c", chat_id=ANA["id"]))
    await fake.wait_for(lambda: said_to(fake, ANA)[-1].startswith("No problem, we'll leave that for now."))
    assert fake.requests("answerCallbackQuery") == [{"callback_query_id": press["callback_query"]["id"],
                                                     "text": "Got it: cancelled."}]
    assert (await harness.desk.user_actions.get(uaid)).state == "cancelled"
    await fake.wait_for(lambda: "reply_markup" not in fake.messages[(ANA["id"], prompt["message_id"])])


# --------------------------------------------------------------------------- sending to a subscriber


async def started(fake: FakeTelegram, config: TelegramConnection) -> TelegramChannel:
    async def nowhere(_message: InboundMessage) -> None:
        raise AssertionError("nothing arrives in this test")

    adapter = TelegramChannel(config)
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=nowhere, render=Renderer().render,
                                       subscribers=True))
    return adapter


def to_ana(body: str, **fields: Any) -> ToSubscriber:
    return ToSubscriber(conversation_id="c_x", text=body, body=body, chat=str(ANA["id"]), **fields)


async def test_sent_text_is_escaped_split_when_long_and_buttons_go_under_the_last_part(fake: FakeTelegram) -> None:
    fake.private_update("hi")  # Ana has opened the chat
    adapter = await started(fake, TelegramConnection(id=FRONT_ID, label="telegram", bot_token=TOKEN, mode="polling",
                                                     api_base_url=fake.base_url, poll_timeout=0))
    try:
        receipt = await adapter.send(to_ana("a < b & <i>c</i> @samlee /release", author="Sam <Ops>"))
        long_text = " ".join(f"w{i:04d} & <more>" for i in range(600))
        await adapter.send(to_ana(long_text, author="Kim", user_action=UserActionPrompt(user_action_id="ua_abc", steps=0)))
    finally:
        await adapter.stop()
    first, *parts = fake.sent_to(ANA["id"])
    assert receipt.message_id == str(first["message_id"])
    assert receipt.thread == {"chat": str(ANA["id"])}
    assert first["text"] == "Sam <Ops>: a < b & <i>c</i> @samlee /release"
    assert fake.requests("sendMessage")[0]["text"] == "<b>Sam &lt;Ops&gt;</b>: a &lt; b &amp; &lt;i&gt;c&lt;/i&gt; @samlee /release"
    assert len(parts) == 3
    assert all(p["text"].startswith("Kim: ") and utf16_len(p["text"]) <= MESSAGE_LIMIT for p in parts)
    assert " ".join(p["text"].removeprefix("Kim: ") for p in parts) == long_text
    assert [buttons(p) for p in parts] == [[], [], [[("Done", "ua:ua_abc:d"), ("Cancel", "ua:ua_abc:c")]]]


async def test_a_retry_after_a_lost_part_sends_only_the_rest(fake: FakeTelegram) -> None:
    fake.private_update("hi")
    adapter = await started(fake, TelegramConnection(id=FRONT_ID, label="telegram", bot_token=TOKEN, mode="polling",
                                                     api_base_url=fake.base_url, poll_timeout=0))
    long_text = " ".join(f"w{i:04d}" for i in range(1500))  # three parts
    outbound = to_ana(long_text).model_copy(update={"delivery_key": "hd_same_every_attempt"})
    fake.fail("sendMessage", 429, "Too Many Requests: retry after 1", after=1, retry_after=1)
    try:
        with pytest.raises(TransientChannelError):
            await adapter.send(outbound)  # the first part went out, the second was refused
        receipt = await adapter.send(outbound)  # the outbox's retry, same delivery key
    finally:
        await adapter.stop()
    parts = fake.sent_to(ANA["id"])
    assert len(parts) == 3
    assert " ".join(p["text"] for p in parts) == long_text  # each part once, in order
    assert receipt.message_id == str(parts[0]["message_id"])


@pytest.mark.parametrize(("setup", "hint"), [
    ("blocked", "Telegram refused to deliver to subscriber chat 601 (Forbidden: bot was blocked by the user): "
                "they blocked the bot or deleted their account"),
    ("unknown", "Telegram does not know subscriber chat 601 (Chat not found); the account may be gone"),
])
async def test_a_subscriber_who_blocked_the_bot_is_a_permanent_failure_with_a_clear_hint(
    fake: FakeTelegram, setup: str, hint: str,
) -> None:
    if setup == "blocked":
        fake.private_update("hi")
        fake.block(ANA)
    adapter = await started(fake, TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, mode="polling",
                                                 api_base_url=fake.base_url, poll_timeout=0))
    try:
        with pytest.raises(PermanentChannelError) as caught:
            await adapter.send(to_ana("Are you there?"))
    finally:
        await adapter.stop()
    assert caught.value.hint.startswith(hint)
    assert TOKEN not in caught.value.hint


async def test_a_blocked_subscriber_is_given_up_at_once_and_audited(fake: FakeTelegram, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake, delivery={"base_backoff": "1ms"})
    await deliver(harness, fake.private_update("Hello"))
    fake.block(ANA)
    await deliver(harness, fake.private_update("thanks"))
    cid = (await conversation_of(harness, ANA)).id
    async with harness.desk.db.read() as session:
        failed = (await session.scalars(select(HandoffEvent).where(
            HandoffEvent.conversation_id == cid, HandoffEvent.kind == "delivery_failed"))).all()
    assert len(failed) == 1
    assert "blocked the bot" in failed[0].detail["hint"]
    assert len(fake.requests("sendMessage")) == 2  # no retry of a permanent refusal


# --------------------------------------------------------------------------- config


def test_one_token_is_one_connection() -> None:
    channel = TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID)
    assert TelegramChannel.same_connection(channel, TelegramConnection(id=1001, label="t", bot_token=TOKEN))
    assert not TelegramChannel.same_connection(channel, TelegramConnection(id=1001, label="t", bot_token="654321:other"))


def test_a_front_on_a_channels_token_shares_its_adapter_and_a_front_of_its_own_gets_1000_plus_position() -> None:
    shared = make_config("sqlite:///x.db", channels=[{"id": 4, "kind": "telegram", "label": "TG", "bot_token": TOKEN,
                                                      "chat_id": "-1001234", "mode": "polling"}],
                         fronts=[{"kind": "web"}, {"kind": "telegram", "bot_token": TOKEN, "mode": "polling"}])
    [front] = shared.provider_fronts
    assert (front.channel_id, front.shares_channel, front.name) == (4, True, "telegram")
    own = make_config("sqlite:///x.db", fronts=[{"kind": "web"}, {"kind": "telegram", "bot_token": TOKEN, "name": "tg_shop"}])
    [front] = own.provider_fronts
    assert (front.channel_id, front.shares_channel, front.name, front.settings.mode) == (1002, False, "tg_shop", "webhook")
    assert not hasattr(front.settings, "chat_id")


@pytest.mark.parametrize(("front", "problem"), [
    ({"bot_token": "not a token"}, "fronts[0].bot_token: does not look like a Telegram bot token"),
    ({"bot_token": "123456:SECRET-value", "mode": "poll"}, "fronts[0].mode: Input should be 'webhook' or 'polling'"),
    ({"bot_token": "123456:SECRET-value", "chat_id": -100123}, "fronts[0].chat_id: belongs on a channel (channels[])"),
    ({"bot_token": "123456:SECRET-value", "api_base_url": "api.telegram.org"}, "fronts[0].api_base_url: must be an http(s) URL"),
    ({"bot_token": "123456:SECRET-value", "webhook_secret": "has spaces!"}, "fronts[0].webhook_secret: must be 1-256 characters"),
    ({"bot_token": TOKEN, "mode": "polling"}, "fronts[0].mode: differs from channels[0].mode"),
    ({"bot_token": TOKEN, "id": 7}, "fronts[0].id: this front is served by channels[0] (id 1)"),
    ({}, "fronts[0].bot_token: required"),
])
def test_front_config_problems_are_named_by_key_path_without_echoing_secrets(front: dict[str, Any], problem: str) -> None:
    channel = {"id": 1, "kind": "telegram", "label": "TG", "bot_token": TOKEN, "chat_id": "-100123"}
    text = config_problem(channels=[channel], fronts=[{"kind": "telegram", **front}])
    assert problem in text
    assert "SECRET-value" not in text

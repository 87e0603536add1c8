"""WhatsApp as a front: subscribers write to the business number and talk to the bot.

The real twilio SDK and the whole desk (inbound store, fronts, router, rules agent, outbox,
webhook route) against tests/fake_twilio.py, which here also keeps WhatsApp's 24-hour rule
(`session_window`): a free-form message reaches only a number that has written first, as on
a real sender. Two set-ups: one number that is the staff line and the front at once (the
staff numbers in `to` are recipients, every other number a subscriber), and a front of its
own (every number a subscriber, escalations go to another channel).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from bot.config import ProviderFront
from bot.domain import conversations
from bot.domain.rendering import Renderer
from bot.store.models import Conversation, HandoffEvent, InboundEvent
from channels.base import (
    ChannelContext,
    Dispatch,
    HandoffBrief,
    InboundMessage,
    PermanentChannelError,
    ToSubscriber,
    TransientChannelError,
    UncertainDeliveryError,
    UserActionPrompt,
)
from channels.text import utf16_len
from channels.whatsapp import BODY_LIMIT, WhatsAppChannel, WhatsAppConfig, WhatsAppConnection, defuse
from tests.conftest import Harness, StartDesk, config_problem, make_config
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, CARLA_PHONE, DAN_PHONE, SENDER, FakeTwilio

SHARED_URL = "http://desk.test/webhooks/1"  # the channel's adapter serves the front too
OWN_URL = "http://desk.test/webhooks/1001"  # a front of its own: 1000 + its position in fronts


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The front's behaviour does not depend on the database: SQLite only."""
    return sqlite_url


@pytest.fixture
async def fake() -> AsyncIterator[FakeTwilio]:
    server = await FakeTwilio(session_window=True).start()
    server.open_sessions.add(ANA_PHONE)  # the staff member wrote to the sender today
    yield server
    await server.stop()


def connection(fake: FakeTwilio, **overrides: Any) -> dict[str, Any]:
    """The keys of a front, as the issue writes them."""
    return {"kind": "whatsapp", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": "+14155238886",
            "api_base_url": fake.base_url, **overrides}


def channel(fake: FakeTwilio, **overrides: Any) -> dict[str, Any]:
    return {**connection(fake), "id": 1, "label": "On-call (WhatsApp)", "estimated_response": "within the hour",
            "to": [ANA_PHONE], **overrides}


async def shared_desk(start_desk: StartDesk, fake: FakeTwilio, **overrides: Any) -> Harness:
    return await start_desk(channels=[channel(fake)], fronts=[connection(fake)], **overrides)


async def own_desk(start_desk: StartDesk, fake: FakeTwilio, **overrides: Any) -> Harness:
    return await start_desk(fronts=[connection(fake)], **overrides)  # channel 1 stays the owner inbox


async def write(harness: Harness, fake: FakeTwilio, url: str, text: str | None, *, sender: str = CARLA_PHONE,
                profile_name: str | None = "Carla", **extra: Any) -> httpx.Response:
    """Someone writes to the sender; Twilio calls the webhook; the desk works after answering."""
    body, headers = fake.inbound(url, body=text, sender=sender, profile_name=profile_name, **extra)
    response = await harness.client.post(url.removeprefix("http://desk.test"), content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.content == b'<?xml version="1.0" encoding="UTF-8"?><Response/>'
    await harness.desk.settle()
    return response


def chat(fake: FakeTwilio, number: str) -> list[str]:
    """What a number received from the sender, in order."""
    return [m["body"] for m in fake.sent_to(number)]


async def conversation_of(harness: Harness, number: str, front: str = "whatsapp") -> Conversation | None:
    async with harness.desk.db.read() as session:
        return await conversations.at_front(session, front, number)


async def count(harness: Harness, model: Any) -> int:
    async with harness.desk.db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def _drop(_message: InboundMessage) -> None:
    return None


# --------------------------------------------------------------------------- one number, both roles


async def test_the_whole_story_on_one_number_staff_answer_and_everyone_else_is_a_subscriber(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await shared_desk(start_desk, fake)
    [state] = harness.desk.channels.health()
    assert (state["id"], state["available"], state["serves"]) == (1, True, ["recipients", "subscribers"])

    # a subscriber writes to the business number: the assistant answers in the same chat
    await write(harness, fake, SHARED_URL, "Hello")
    assert chat(fake, CARLA_PHONE) == ["Hi Carla! I'm Assistant. Ask me anything, or say \"talk to a person\" and I'll "
                                       "bring in our team."]
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    assert conversation.subscriber_name == "Carla"
    cid = conversation.id

    # asking for a person: the staff number gets the dispatch, the subscriber is told who was asked
    await write(harness, fake, SHARED_URL, "Can I talk to a person? My parcel is lost")
    dispatch = chat(fake, ANA_PHONE)[-1]
    code = dispatch.split("*Handoff #", 1)[1].split("*", 1)[0]
    assert dispatch.startswith(f"*Handoff #{code}*: Carla needs a person")
    assert chat(fake, CARLA_PHONE)[-1] == ("I've asked our team to join — usually within the hour. "
                                           "Your messages now go straight to them.")

    # the subscriber's words reach the staff, defused, with the short code
    await write(harness, fake, SHARED_URL, "It was *order* 1234")
    assert chat(fake, ANA_PHONE)[-1] == f"#{code} *Carla*: It was ∗order∗ 1234"

    # the staff member answers on the same number: the subscriber reads it with their name in bold
    await write(harness, fake, SHARED_URL, "Hi Carla, I'm Sam. Found it at the _depot_.", sender=ANA_PHONE, profile_name="Sam")
    assert chat(fake, CARLA_PHONE)[-1] == "*Sam*: Hi Carla, I'm Sam. Found it at the ˍdepotˍ."

    # /release: the subscriber hears the assistant is back, then the assistant itself
    await write(harness, fake, SHARED_URL, "/release resolved Parcel re-routed", sender=ANA_PHONE, profile_name="Sam")
    back, welcome = chat(fake, CARLA_PHONE)[-2:]
    assert back == "Our team has handed the conversation back to the assistant."
    assert welcome.endswith("Anything else I can help with?")
    assert chat(fake, ANA_PHONE)[-1].startswith(f"Handoff {code} released (resolved)")
    [resumed] = await harness.system_texts(cid)
    assert resumed.startswith("[Bot resumed — ")
    assert "Outcome: resolved" in resumed
    await write(harness, fake, SHARED_URL, "Thanks!")
    assert chat(fake, CARLA_PHONE)[-1] == "You're welcome! Anything else I can do?"

    # the staff got the dispatch, the relay and the notice; the subscriber nothing of the staff's line
    assert len(chat(fake, ANA_PHONE)) == 3
    assert not any(body.startswith("#") for body in chat(fake, CARLA_PHONE))
    assert [m["from"] for m in fake.messages] == [SENDER] * len(fake.messages)


async def test_two_subscribers_are_two_conversations(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await write(harness, fake, SHARED_URL, "Hi there")
    await write(harness, fake, SHARED_URL, "Hello", sender=DAN_PHONE, profile_name=None)
    carla, dan = await conversation_of(harness, CARLA_PHONE), await conversation_of(harness, DAN_PHONE)
    assert carla is not None
    assert dan is not None
    assert carla.id != dan.id
    assert (carla.subscriber_name, dan.subscriber_name, dan.subscriber_external_id) == ("Carla", None, DAN_PHONE)
    assert chat(fake, DAN_PHONE) == ["Hi there! I'm Assistant. Ask me anything, or say \"talk to a person\" and I'll "
                                     "bring in our team."]
    assert len(chat(fake, CARLA_PHONE)) == 1


async def test_a_redelivered_message_sid_is_processed_once(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    body, headers = fake.inbound(SHARED_URL, body="Hello", sender=CARLA_PHONE, profile_name="Carla")
    for _ in range(3):  # Twilio retries a webhook when it did not hear our answer
        assert (await harness.client.post("/webhooks/1", content=body, headers=headers)).status_code == 200
    await harness.desk.settle()
    assert await count(harness, InboundEvent) == 1
    assert len(chat(fake, CARLA_PHONE)) == 1
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    assert [m["role"] for m in await harness.messages(conversation.id)] == ["subscriber", "agent"]


@pytest.mark.parametrize("forgery", ["tampered body", "wrong token", "missing header", "wrong url"])
async def test_a_forged_subscriber_message_is_403_and_nothing_is_stored(
    fake: FakeTwilio, start_desk: StartDesk, forgery: str,
) -> None:
    harness = await shared_desk(start_desk, fake)
    url = "https://elsewhere.example/webhooks/1" if forgery == "wrong url" else SHARED_URL
    body, headers = fake.inbound(url, body="talk to a person", sender=CARLA_PHONE,
                                 auth_token="0" * 32 if forgery == "wrong token" else None)
    if forgery == "tampered body":
        body = body.replace(b"talk+to", b"talk+2")
    if forgery == "missing header":
        headers.pop("X-Twilio-Signature")
    response = await harness.client.post("/webhooks/1", content=body, headers=headers)
    await harness.desk.settle()
    assert response.status_code == 403
    assert await count(harness, InboundEvent) == 0
    assert await count(harness, Conversation) == 0
    assert fake.messages == []


async def test_media_and_locations_are_named_in_brackets(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await write(harness, fake, SHARED_URL, None, media=["image/jpeg"])
    await write(harness, fake, SHARED_URL, "the invoice", media=["application/pdf", "audio/ogg"])
    await write(harness, fake, SHARED_URL, None, Latitude="40.4168", Longitude="-3.7038", MessageType="location")
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    said = [m["text"] for m in await harness.messages(conversation.id) if m["role"] == "subscriber"]
    assert said == ["[image]", "the invoice\n[document]\n[audio]", "[location: 40.4168, -3.7038]"]


async def test_a_pending_user_action_names_the_keywords_and_done_answers_it(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await write(harness, fake, SHARED_URL, "Hello")
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    asked = await harness.tool(conversation.id, "request_user_action", {
        "reason": "verification_code", "details": "We sent a *6-digit* code to your phone.",
    })
    assert asked["status"] == "HUMAN_HANDOFF_REQUESTED"
    await harness.desk.settle()
    instruction = chat(fake, CARLA_PHONE)[-1]
    assert instruction.startswith("A verification code was sent to you.")
    assert "We sent a ∗6-digit∗ code" in instruction
    assert instruction.endswith('Reply "done" when you\'ve finished, or "cancel" if you can\'t.')
    assert all("PersistentAction" not in r and "ContentSid" not in r for r in fake.requests())  # plain text, no buttons
    await write(harness, fake, SHARED_URL, "done")
    assert chat(fake, CARLA_PHONE)[-1] == "Thanks, that's done. Let's carry on."
    action = (await harness.client.get(f"/api/user_actions/{asked['user_action_id']}")).json()
    assert action["state"] == "done"


async def test_a_reply_after_the_24_hour_window_fails_for_good_with_a_hint(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await shared_desk(start_desk, fake)
    await write(harness, fake, SHARED_URL, "Hello")
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    await harness.start_handoff(conversation.id, channel_id=1)
    await harness.desk.settle()
    fake.expire(CARLA_PHONE)  # a day passes before the staff answers
    await write(harness, fake, SHARED_URL, "Sorry for the wait!", sender=ANA_PHONE, profile_name="Sam")
    refused = fake.requests()[-1]
    assert (refused["To"], refused["Body"]) == (CARLA_PHONE, "*Sam*: Sorry for the wait!")
    assert len(chat(fake, CARLA_PHONE)) == 2  # the greeting and "I've asked …"; the reply was refused
    [failed] = [e for e in await _audit(harness) if e.kind == "delivery_failed"]  # given up, not retried
    assert (failed.conversation_id, failed.detail["error_type"]) == (conversation.id, "PermanentChannelError")
    assert "subscriber must write first" in failed.detail["hint"]


async def test_a_reply_reported_undelivered_later_is_marked_failed_with_the_hint(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    """Twilio usually accepts a free-form message and reports 63016 afterwards, by status
    callback: the outbox item is marked failed and the conversation's audit trail says why."""
    harness = await start_desk(channels=[channel(fake, status_callback=True)],
                               fronts=[connection(fake, status_callback=True)])
    await write(harness, fake, SHARED_URL, "Hello")
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    answer = fake.sent_to(CARLA_PHONE)[-1]
    assert answer["status_callback"] == SHARED_URL
    status = {"MessageSid": answer["sid"], "MessageStatus": "undelivered", "ErrorCode": "63016",
              "AccountSid": ACCOUNT_SID, "From": SENDER, "To": CARLA_PHONE, "ApiVersion": "2010-04-01"}
    for _ in range(2):  # a redelivered callback is recorded once
        body, headers = fake.signed(SHARED_URL, status)
        assert (await harness.client.post("/webhooks/1", content=body, headers=headers)).status_code == 200
    await harness.desk.settle()
    [late] = [e for e in await _audit(harness) if e.kind == "delivery_failed_after_acceptance"]
    assert (late.conversation_id, late.detail["purpose"], late.detail["channel_message_id"]) == (
        conversation.id, "subscriber", answer["sid"])
    assert late.detail["error"] == "undelivered (Twilio error 63016)"
    assert "must write first" in late.detail["hint"]
    async with harness.desk.db.read() as session:
        from bot.store.models import OutboxItem

        item = await session.get(OutboxItem, late.detail["outbox_id"])
    assert item is not None
    assert item.state == "failed"
    assert "63016" in (item.last_error or "")
    delivered = {"MessageSid": answer["sid"], "MessageStatus": "delivered", "AccountSid": ACCOUNT_SID, "From": SENDER,
                 "To": CARLA_PHONE, "ApiVersion": "2010-04-01"}
    body, headers = fake.signed(SHARED_URL, delivered)
    await harness.client.post("/webhooks/1", content=body, headers=headers)
    await harness.desk.settle()
    assert await count(harness, InboundEvent) == 2  # Carla's message and the one failure: "delivered" needs nothing


async def _audit(harness: Harness) -> list[HandoffEvent]:
    """Every audit record (a subscriber's chat has its own, outside any handoff)."""
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(HandoffEvent).order_by(HandoffEvent.id))).all())


# --------------------------------------------------------------------------- a front of its own


async def test_a_front_of_its_own_takes_every_number_as_a_subscriber_and_is_never_a_handoff_channel(
    fake: FakeTwilio, start_desk: StartDesk,
) -> None:
    harness = await own_desk(start_desk, fake)
    inbox, front = harness.desk.channels.health()
    assert (inbox["id"], front["id"], front["kind"], front["serves"]) == (1, 1001, "whatsapp", ["subscribers"])
    assert [a.id for a in harness.desk.channels.available()] == [1]

    await write(harness, fake, OWN_URL, "Hello", sender=ANA_PHONE, profile_name="Ana")  # no staff numbers: a subscriber
    assert chat(fake, ANA_PHONE)[-1].startswith("Hi Ana! I'm Assistant.")
    await write(harness, fake, OWN_URL, "I want to talk to a person")
    assert chat(fake, CARLA_PHONE) == ["I've asked our team to join — usually within 1 business day. "
                                       "Your messages now go straight to them."]
    conversation = await conversation_of(harness, CARLA_PHONE)
    assert conversation is not None
    tools = (await harness.client.get(f"/api/conversations/{conversation.id}/tools")).json()["tools"]
    assert all(1001 not in t["input_schema"].get("properties", {}).get("channel_id", {}).get("enum", []) for t in tools)

    # the owner ends it: the subscriber hears the assistant is back, on WhatsApp
    handoff_id = (await harness.say(conversation.id, "still there?"))["handoff_session_id"]
    await harness.desk.settle()
    released = await harness.client.post(f"/api/handoffs/{handoff_id}/release", json={"outcome": "resolved"})
    assert released.status_code == 200, released.text
    await harness.desk.settle()
    assert chat(fake, CARLA_PHONE)[-2] == "Our team has handed the conversation back to the assistant."


async def test_a_front_of_its_own_ignores_what_is_not_a_whatsapp_message(fake: FakeTwilio, start_desk: StartDesk) -> None:
    harness = await own_desk(start_desk, fake)
    await write(harness, fake, OWN_URL, "an SMS", sender="+15551234567")  # SMS to the same number: not a chat
    await write(harness, fake, OWN_URL, None)  # nothing to read
    await write(harness, fake, OWN_URL, "other account", AccountSid="AC" + "f" * 32)
    assert await count(harness, InboundEvent) == 0
    assert fake.messages == []


# --------------------------------------------------------------------------- the adapter's side


async def started(fake: FakeTwilio, config: WhatsAppConnection, *, subscribers: bool = True) -> WhatsAppChannel:
    adapter = WhatsAppChannel(config)
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render,
                                       subscribers=subscribers))
    return adapter


def to_chat(number: str, body: str, *, author: str | None = None, key: str | None = None,
            user_action: UserActionPrompt | None = None) -> ToSubscriber:
    return ToSubscriber(conversation_id="c_1", text=body, body=body, author=author, chat=number, delivery_key=key,
                        user_action=user_action)


async def test_long_messages_to_a_subscriber_come_in_numbered_parts_and_nothing_is_lost(fake: FakeTwilio) -> None:
    fake.open_sessions.add(CARLA_PHONE)
    adapter = await started(fake, WhatsAppConnection(**connection(fake), id=1001, label="whatsapp"))
    long_text = " ".join(f"w{i:04d} *x*" for i in range(400))  # 3,999 characters
    try:
        receipt = await adapter.send(to_chat(CARLA_PHONE, long_text, author="Sam _the_ *Boss*"))
        await adapter.send(to_chat(CARLA_PHONE, long_text))
        await adapter.send(to_chat(CARLA_PHONE, "Sure: see https://shop.example/a_b*c ~now~"))
    finally:
        await adapter.stop()
    sent = chat(fake, CARLA_PHONE)
    assert receipt.message_id == fake.messages[0]["sid"]
    assert receipt.thread == {"chat": CARLA_PHONE}
    assert all(utf16_len(body) <= BODY_LIMIT for body in sent)
    assert len(sent) == 7
    with_author, plain, short = sent[:3], sent[3:6], sent[6]
    assert [p.split(": ", 1)[0] for p in with_author] == [f"*Sam ˍtheˍ ∗Boss∗* ({i}/3)" for i in (1, 2, 3)]
    assert " ".join(p.split(": ", 1)[1] for p in with_author) == defuse(long_text)
    assert [p[:6] for p in plain] == ["(1/3) ", "(2/3) ", "(3/3) "]
    assert " ".join(p[6:] for p in plain) == defuse(long_text)
    assert short == "Sure: see https://shop.example/a_b*c ∼now∼"


async def test_a_retry_sends_only_the_parts_that_did_not_go_out(fake: FakeTwilio) -> None:
    fake.open_sessions.add(CARLA_PHONE)
    adapter = await started(fake, WhatsAppConnection(**connection(fake), id=1001, label="whatsapp"))
    text = " ".join(f"w{i:04d}" for i in range(500))  # two parts
    try:
        fake.fail(500, 20500, "Internal Server Error")  # the first part's create fails
        with pytest.raises(UncertainDeliveryError):
            await adapter.send(to_chat(CARLA_PHONE, text, key="d1"))
        await adapter.send(to_chat(CARLA_PHONE, text, key="d1"))
        assert [b[:6] for b in chat(fake, CARLA_PHONE)] == ["(1/2) ", "(2/2) "]
        fake.fail(429, 20429, "Too Many Requests", retry_after=7)
        with pytest.raises(TransientChannelError) as caught:
            await adapter.send(to_chat(CARLA_PHONE, "hello", key="d2"))
        assert caught.value.retry_after == 7
    finally:
        await adapter.stop()


async def test_outside_the_window_a_subscriber_send_is_permanent_and_says_they_must_write_first(fake: FakeTwilio) -> None:
    adapter = await started(fake, WhatsAppConnection(**connection(fake), id=1001, label="whatsapp"))
    try:
        with pytest.raises(PermanentChannelError) as caught:
            await adapter.send(to_chat(DAN_PHONE, "Your parcel arrived."))
        with pytest.raises(PermanentChannelError) as bad_chat:
            await adapter.send(to_chat("telegram:123", "hello"))
        with pytest.raises(PermanentChannelError) as no_staff:  # a front of its own never dispatches
            await adapter.send(Dispatch(handoff_id="hs_a1b20000", text="x", brief=HandoffBrief(
                handoff_session_id="hs_a1b20000", short_code="A1B2", conversation_id="c1", summary="s" * 30,
                expected_action="do it please")))
    finally:
        await adapter.stop()
    assert "(63016)" in str(caught.value)
    assert "+4915112345678" in caught.value.hint
    assert "subscriber must write first" in caught.value.hint
    assert "content_sid" not in caught.value.hint
    assert "no WhatsApp number" in str(bad_chat.value)
    assert "has no staff numbers" in str(no_staff.value)


async def test_without_a_front_a_stranger_stays_ignored_and_with_one_staff_are_never_subscribers(fake: FakeTwilio) -> None:
    from channels.base import WebhookRequest

    config = WhatsAppConfig(**channel(fake))
    for subscribers, expected in ((False, None), (True, ("subscriber_text", CARLA_PHONE, "Carla"))):
        adapter = await started(fake, config, subscribers=subscribers)
        try:
            stranger = await adapter.handle_webhook(WebhookRequest(*_signed(fake, CARLA_PHONE)))
            staff = await adapter.handle_webhook(WebhookRequest(*_signed(fake, ANA_PHONE)))
        finally:
            await adapter.stop()
        got = [(m.kind, m.chat, m.author) for m in stranger.messages]
        assert got == ([expected] if expected else [])
        assert [(m.kind, m.thread_key) for m in staff.messages] == [("recipient_text", "whatsapp")]
        assert stranger.messages == [] or stranger.messages[0].dedupe_key.startswith("message:SM")


def _signed(fake: FakeTwilio, sender: str) -> tuple[bytes, dict[str, str], dict[str, str], str]:
    body, headers = fake.inbound(SHARED_URL, body="hi", sender=sender, profile_name="Carla" if sender == CARLA_PHONE else "Sam")
    return body, {k.lower(): v for k, v in headers.items()}, {}, SHARED_URL


async def test_probe_of_a_front_of_its_own(fake: FakeTwilio) -> None:
    adapter = WhatsAppChannel(WhatsAppConnection(**connection(fake), id=1001, label="whatsapp"))
    assert await adapter.probe() == "Twilio account 'Acme Support' (active), sending from whatsapp:+14155238886 to subscribers"


# --------------------------------------------------------------------------- config


def test_a_front_as_the_issue_writes_it_and_when_it_shares_a_channel() -> None:
    base = {"kind": "whatsapp", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": "whatsapp:+1 415 523 8886",
            "api_base_url": "https://api.twilio.com"}
    staff = {**base, "id": 6, "label": "On-call", "to": [ANA_PHONE]}
    del staff["from"]
    staff["from_number"] = "+14155238886"  # the channel's long spelling, the front's short one: one sender
    own = make_config("sqlite:///x.db", fronts=[{"kind": "web"}, base]).provider_fronts
    shared = make_config("sqlite:///x.db", channels=[staff], fronts=[{**base, "name": "wa", "greeting": "Hola!"}]).provider_fronts
    other_sender = make_config("sqlite:///x.db", channels=[staff], fronts=[{**base, "from": "+14155550000"}]).provider_fronts
    assert [(f.name, f.channel_id, f.shares_channel, type(f.settings)) for f in own] == [
        ("whatsapp", 1002, False, WhatsAppConnection)]
    assert own[0].settings.from_number == SENDER
    assert not hasattr(own[0].settings, "to")
    assert [(f.name, f.channel_id, f.shares_channel, f.greeting) for f in shared] == [("wa", 6, True, "Hola!")]
    assert [(f.channel_id, f.shares_channel) for f in other_sender] == [(1001, False)]
    assert isinstance(shared[0], ProviderFront)


@pytest.mark.parametrize(("entry", "problem"), [
    ({"from": "14155238886"}, "fronts[0].from: '14155238886' is not a phone number in E.164 form"),
    ({"account_sid": "SK1"}, "fronts[0].account_sid: must be the Account SID"),
    ({"to": [ANA_PHONE]}, "fronts[0].to: belongs on a channel (channels[])"),
    ({"content_sid": "HX" + "ab" * 16}, "fronts[0].content_sid: belongs on a channel (channels[])"),
    ({"auth_tokn": "x"}, "fronts[0].auth_tokn: unknown key; did you mean 'auth_token'?"),
    ({"api_base_url": "api.twilio.com"}, "fronts[0].api_base_url: must be an http(s) URL"),
    ({"id": 1}, "fronts[0].id: this front is served by channels[0] (id 1); leave id out"),
    ({"auth_token": "SECRET-other"}, "fronts[0].auth_token: differs from channels[0].auth_token"),
    ({"request_timeout": 30}, "fronts[0].request_timeout: differs from channels[0].request_timeout"),
])
def test_front_problems_are_named_by_key_path_without_echoing_secrets(entry: dict[str, Any], problem: str) -> None:
    front = {"kind": "whatsapp", "account_sid": ACCOUNT_SID, "auth_token": "SECRET-value", "from": "+14155238886", **entry}
    staff = {"id": 1, "kind": "whatsapp", "label": "WA", "account_sid": ACCOUNT_SID, "auth_token": "SECRET-value",
             "from": "+14155238886", "to": [ANA_PHONE]}
    text = config_problem(channels=[staff], fronts=[front])
    assert problem in text, text
    assert "SECRET-value" not in text
    assert "SECRET-other" not in text

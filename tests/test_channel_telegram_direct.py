"""A handoff sent to one person in their own private chat with the bot (`Dispatch.direct`),
their answers there, and `/away` / `/back`: the real python-telegram-bot against the fake
Bot API (tests/fake_telegram.py), the adapter on its own (the core's side is tested with the
core)."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import pytest

from channels.base import (
    Answer,
    AvailabilityRequest,
    ChatOpened,
    ClaimPress,
    DirectLine,
    Dispatch,
    LinkRequest,
    Notice,
    PermanentChannelError,
    Receipt,
    RecipientText,
    Relay,
    ReleasePress,
    SubscriberText,
    TransientChannelError,
)
from channels.telegram import TelegramChannel, TelegramConfig
from tests.fake_telegram import ANA, KIM, SAM, STAFF_CHAT_ID, FakeTelegram
from tests.fakes import standalone_context
from tests.route_dispatches import FORM_URL, route_dispatch
from tests.test_channel_telegram import webhook_call

TOKEN = "123456:TEST-token_abcdefghijklmnop"
SECRET = "test_webhook-secret-1"
SAM_ID = 501  # SAM's Telegram user id: his private chat's id


@pytest.fixture
async def fake() -> AsyncIterator[FakeTelegram]:
    server = await FakeTelegram(token=TOKEN).start()
    yield server
    await server.stop()


async def standalone(fake: FakeTelegram, *, subscribers: bool = True, lines: list[DirectLine] | None = None) -> TelegramChannel:
    """The staff group's channel whose bot also serves a front (its private chats are subscribers' too);
    `lines`: what the desk says this channel sent people directly and is still open (read on start)."""
    adapter = TelegramChannel(TelegramConfig(id=1, label="TG", bot_token=TOKEN, chat_id=STAFF_CHAT_ID, api_base_url=fake.base_url,
                                             webhook_secret=SECRET))

    async def open_lines() -> list[DirectLine]:
        return list(lines or [])

    await adapter.start(dataclasses.replace(standalone_context(), subscribers=subscribers, open_lines=open_lines))
    return adapter


@pytest.fixture
async def adapter(fake: FakeTelegram) -> AsyncIterator[TelegramChannel]:
    channel = await standalone(fake)
    yield channel
    await channel.stop()


async def one_event(adapter: TelegramChannel, update: dict[str, Any]) -> Any:
    reply = await webhook_call(adapter, update)
    assert reply.status == 200
    [message] = reply.messages
    return message


def to_sam(sid: str = "hs_route1") -> Dispatch:
    return route_dispatch(sid).model_copy(update={"direct": str(SAM_ID)})


def keyboard(message: dict[str, Any]) -> list[list[str]]:
    return [[b["text"] for b in row] for row in message.get("reply_markup", {}).get("inline_keyboard", [])]


async def sam_started_the_bot(adapter: TelegramChannel, fake: FakeTelegram) -> None:
    """Sam opened the bot once (as linking with /start link-CODE does): his private chat exists."""
    await webhook_call(adapter, fake.private_update("/start", user=SAM))


# --------------------------------------------------------------------------- the whole story


async def test_a_direct_dispatch_lands_in_the_persons_chat_and_their_answers_come_back_on_its_thread(
    fake: FakeTelegram, adapter: TelegramChannel,
) -> None:
    assert adapter.capabilities.direct is True
    await sam_started_the_bot(adapter, fake)
    receipt = await adapter.send(to_sam())
    [dispatch] = fake.sent_to(SAM_ID)
    assert fake.sent_to(STAFF_CHAT_ID) == []  # not the staff group's room
    assert keyboard(dispatch) == [["I'm on it"], ["Return form", "Release"]]
    assert [b["url"] for row in dispatch["reply_markup"]["inline_keyboard"] for b in row if "url" in b] == [FORM_URL]
    assert "Handoff UTE1" in dispatch["text"]
    assert receipt.thread_key == f"{SAM_ID}:{dispatch['message_id']}"
    assert receipt.thread["chat_id"] == SAM_ID and receipt.thread["direct"] is True

    claim = await one_event(adapter, fake.callback_update(dispatch["message_id"], user=SAM, chat_id=SAM_ID, data="claim"))
    assert isinstance(claim, ClaimPress)
    assert (claim.thread_key, claim.user_id, claim.author) == (receipt.thread_key, str(SAM_ID), "Sam Lee")
    await adapter.send(Notice(handoff_id="hs_route1", text="You have it.", about="claimed", thread=receipt.thread))
    relayed = await adapter.send(Relay(handoff_id="hs_route1", text="Ana: hi", author="Ana", body="Is it coming?",
                                       thread=receipt.thread))
    assert relayed.thread_key == receipt.thread_key
    notice, relay = fake.sent_to(SAM_ID)[1:]
    assert notice["text"] == "You have it."
    assert keyboard(fake.sent_to(SAM_ID)[0]) == [["Return form", "Release"]]  # the Claim button went
    assert relay["reply_to_message"]["message_id"] == dispatch["message_id"]
    assert "Is it coming?" in relay["text"]

    reply = await one_event(adapter, fake.private_update("Yes, tomorrow.", user=SAM, reply_to=relay["message_id"]))
    assert isinstance(reply, RecipientText)
    assert (reply.thread_key, reply.text, reply.user_id) == (receipt.thread_key, "Yes, tomorrow.", str(SAM_ID))
    release = await one_event(adapter, fake.callback_update(relay["message_id"], user=SAM, chat_id=SAM_ID))
    assert isinstance(release, ReleasePress)
    assert release.thread_key == receipt.thread_key


async def test_a_taken_notice_edits_the_direct_dispatch_in_the_persons_chat(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    await sam_started_the_bot(adapter, fake)
    receipt = await adapter.send(to_sam())
    await adapter.send(Notice(handoff_id="hs_route1", text="Kim took it.", about="taken", thread=receipt.thread))
    [dispatch] = fake.sent_to(SAM_ID)
    assert dispatch["text"].endswith("\n\nKim took it.")
    assert "reply_markup" not in dispatch
    [edit] = fake.requests("editMessageText")
    assert edit["chat_id"] == SAM_ID
    # Taken: the chat is no longer Sam's line for it, so his next plain message is the front's again
    assert isinstance(await one_event(adapter, fake.private_update("hello?", user=SAM)), SubscriberText)


# --------------------------------------------------------------------------- the person's line


async def test_plain_messages_go_to_the_focused_handoff_and_hash_code_addresses_one(
    fake: FakeTelegram, adapter: TelegramChannel,
) -> None:
    await sam_started_the_bot(adapter, fake)
    first = await adapter.send(to_sam("hs_aaaa1"))
    second = await adapter.send(to_sam("hs_bbbb2"))
    plain = await one_event(adapter, fake.private_update("checking now", user=SAM))
    assert isinstance(plain, RecipientText)
    assert (plain.thread_key, plain.text) == (second.thread_key, "checking now")  # the newest
    addressed = await one_event(adapter, fake.private_update("#aaa1: on it too", user=SAM))
    assert (addressed.thread_key, addressed.text) == (first.thread_key, "on it too")
    # addressing focused it: a plain message follows it now
    assert (await one_event(adapter, fake.private_update("still here", user=SAM))).thread_key == first.thread_key
    focus_only = await webhook_call(adapter, fake.private_update("#BBB2", user=SAM))
    assert focus_only.messages == []
    assert (await one_event(adapter, fake.private_update("/release", user=SAM))).thread_key == second.thread_key
    unknown = await one_event(adapter, fake.private_update("#1234 is the order number", user=SAM))
    assert (unknown.thread_key, unknown.text) == (second.thread_key, "#1234 is the order number")  # not a code here: text
    # A reply to the other handoff's message goes to that one, whatever is focused
    replied = await one_event(adapter, fake.private_update("this one", user=SAM, reply_to=int(first.message_id or 0)))
    assert replied.thread_key == first.thread_key
    await adapter.send(Notice(handoff_id="hs_aaaa1", text="Released.", about="released", thread=first.thread))
    assert (await one_event(adapter, fake.private_update("and now?", user=SAM))).thread_key == second.thread_key


async def test_a_subscribers_chat_stays_a_front_beside_a_persons_line(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    await sam_started_the_bot(adapter, fake)
    await adapter.send(to_sam())
    opened = await one_event(adapter, fake.private_update("/start", user=ANA))
    wrote = await one_event(adapter, fake.private_update("Where is my order?", user=ANA))
    assert isinstance(opened, ChatOpened) and isinstance(wrote, SubscriberText)
    assert (wrote.chat, wrote.text) == (str(ANA["id"]), "Where is my order?")
    # Sam's /start is not an answer to his handoff
    assert isinstance(await one_event(adapter, fake.private_update("/start", user=SAM)), ChatOpened)


async def test_after_a_restart_replies_route_by_the_message_and_the_line_comes_back_from_the_desk(
    fake: FakeTelegram,
) -> None:
    first = await standalone(fake)
    try:
        await sam_started_the_bot(first, fake)
        receipt = await first.send(to_sam())
    finally:
        await first.stop()
    forgetful = await standalone(fake)  # a desk that kept nothing: replies and presses still route by the message
    try:
        reply = await one_event(forgetful, fake.private_update("on it", user=SAM, reply_to=int(receipt.message_id or 0)))
        assert isinstance(reply, RecipientText) and reply.thread_key == receipt.thread_key
        claim = await one_event(forgetful, fake.callback_update(int(receipt.message_id or 0), user=SAM, chat_id=SAM_ID,
                                                                data="claim"))
        assert isinstance(claim, ClaimPress) and claim.thread_key == receipt.thread_key
        assert isinstance(await one_event(forgetful, fake.private_update("hi", user=SAM)), SubscriberText)
    finally:
        await forgetful.stop()
    # The desk's stored line (ChannelContext.open_lines): a plain message is Sam's answer from the first one
    again = await standalone(fake, lines=[DirectLine("hs_route1", "ROUT", dict(receipt.thread))])
    try:
        plain = await one_event(again, fake.private_update("hi again", user=SAM))
        assert isinstance(plain, RecipientText) and plain.thread_key == receipt.thread_key
    finally:
        await again.stop()


async def test_without_a_front_a_plain_message_off_any_line_is_ignored(fake: FakeTelegram) -> None:
    adapter = await standalone(fake, subscribers=False)
    try:
        assert (await webhook_call(adapter, fake.private_update("hello", user=SAM))).messages == []
        receipt = await adapter.send(to_sam())
        plain = await one_event(adapter, fake.private_update("hello", user=SAM))
    finally:
        await adapter.stop()
    assert isinstance(plain, RecipientText) and plain.thread_key == receipt.thread_key


# --------------------------------------------------------------------------- failures


async def test_a_person_who_never_started_the_bot_is_a_permanent_failure_with_a_hint(adapter: TelegramChannel) -> None:
    with pytest.raises(PermanentChannelError) as raised:
        await adapter.send(to_sam())
    assert "chat not found" in str(raised.value).lower()
    assert "have not started the bot" in raised.value.hint and "@handoff_desk_bot" in raised.value.hint


async def test_a_person_who_blocked_the_bot_is_a_permanent_failure_and_a_relay_too(
    fake: FakeTelegram, adapter: TelegramChannel,
) -> None:
    await sam_started_the_bot(adapter, fake)
    receipt = await adapter.send(to_sam())
    fake.block(SAM)
    for outbound in (to_sam("hs_other1"), Relay(handoff_id="hs_route1", text="x", author="Ana", body="x", thread=receipt.thread)):
        with pytest.raises(PermanentChannelError) as raised:
            await adapter.send(outbound)
        assert "bot was blocked by the user" in str(raised.value).lower()
        assert f"private chat of user {SAM_ID}" in raised.value.hint


async def test_a_telegram_5xx_on_a_direct_dispatch_stays_transient(fake: FakeTelegram, adapter: TelegramChannel) -> None:
    await sam_started_the_bot(adapter, fake)
    fake.fail("sendMessage", 502, "Bad Gateway")
    with pytest.raises(TransientChannelError):
        await adapter.send(to_sam())
    assert isinstance(await adapter.send(to_sam()), Receipt)


async def test_a_direct_address_that_is_no_user_id_is_refused_naming_it(adapter: TelegramChannel) -> None:
    with pytest.raises(PermanentChannelError) as raised:
        await adapter.send(route_dispatch().model_copy(update={"direct": "@samlee"}))
    assert "'@samlee' is not a Telegram user id" in str(raised.value)


# --------------------------------------------------------------------------- availability


async def test_away_and_back_in_a_private_chat_or_the_staff_group_are_availability_requests(
    fake: FakeTelegram, adapter: TelegramChannel,
) -> None:
    away = await one_event(adapter, fake.private_update("/away on holiday until Monday", user=SAM))
    assert isinstance(away, AvailabilityRequest)
    assert (away.away, away.note, away.user_id, away.author) == (True, "on holiday until Monday", str(SAM_ID), "Sam Lee")
    assert away.reply_to["chat_id"] == SAM_ID
    back = await one_event(adapter, fake.message_update("/back@handoff_desk_bot", user=KIM))
    assert isinstance(back, AvailabilityRequest)
    assert (back.away, back.note, back.user_id, back.reply_to["chat_id"]) == (False, None, str(KIM["id"]), STAFF_CHAT_ID)
    # Even on a person's line, /away is for the desk, never relayed
    await adapter.send(to_sam())
    assert isinstance(await one_event(adapter, fake.private_update("/away", user=SAM)), AvailabilityRequest)
    # The core answers where it was written
    await adapter.send(Answer(text="You are away.", to=away.reply_to))
    answer = fake.sent_to(SAM_ID)[-1]
    assert (answer["text"], answer["reply_to_message"]["message_id"]) == ("You are away.", away.reply_to["message_id"])
    # /link is still a link request, and /awayish is no command
    assert isinstance(await one_event(adapter, fake.private_update("/link 7H3K9QXW", user=KIM)), LinkRequest)
    assert isinstance(await one_event(adapter, fake.private_update("/awayish", user=ANA)), SubscriberText)

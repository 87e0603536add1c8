"""The conversation service the API and pages use (bot/domain/conversations.py,
`Conversations`): start, read, and wait for new messages, on a real database."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.domain.conversations import add_message, front_chat, get, read, recent_lines, recent_messages
from bot.errors import NotFound
from bot.store.vocabulary import Role
from tests.conftest import Harness


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


async def test_a_started_conversation_keeps_who_the_subscriber_is(harness: Harness) -> None:
    conversations = harness.desk.conversations
    cid = await conversations.start(name="Ana", email="ana@example.com", front="web")
    conversation = await conversations.get(cid)
    assert conversation.subscriber_name == "Ana"
    assert conversation.subscriber_email == "ana@example.com"
    assert conversation.front == "web"
    assert await conversations.messages(cid) == []


async def test_messages_after_an_id_in_order_and_an_unknown_conversation_is_not_found(harness: Harness) -> None:
    conversations = harness.desk.conversations
    cid = await conversations.start(name="Ana")
    await harness.say(cid, "first")
    await harness.say(cid, "second")
    every = await conversations.messages(cid)
    assert [m.id for m in every] == sorted(m.id for m in every)
    assert [m.text for m in every if m.role == "subscriber"] == ["first", "second"]
    assert [m.id for m in await conversations.messages(cid, after=every[0].id, limit=2)] == [m.id for m in every[1:3]]
    with pytest.raises(NotFound, match="conversation 'c_nope' not found"):
        await conversations.messages("c_nope")
    with pytest.raises(NotFound):
        await conversations.get("c_nope")


async def test_waiting_returns_at_once_when_there_is_something_or_no_time_to_wait(harness: Harness) -> None:
    conversations = harness.desk.conversations
    cid = await conversations.start(name="Ana")
    assert await conversations.wait_for_messages(cid, 0, 10, wait=0) == []
    await harness.say(cid, "hello")
    assert [m.text for m in await conversations.wait_for_messages(cid, 0, 10, wait=30)][0] == "hello"


async def test_a_waiting_reader_is_woken_by_a_new_message(harness: Harness) -> None:
    conversations = harness.desk.conversations
    cid = await conversations.start(name="Ana")
    waiting = asyncio.create_task(conversations.wait_for_messages(cid, 0, 10, wait=30))
    while harness.desk.bus.waiting() == 0:  # until the reader waits on the bus
        await asyncio.sleep(0)
    await harness.say(cid, "are you there?")
    woken = await asyncio.wait_for(waiting, timeout=5)
    assert woken[0].text == "are you there?"


async def test_messages_of_one_moment_in_one_transaction_are_all_stored_and_bump_the_conversation(harness: Harness) -> None:
    conversations = harness.desk.conversations
    cid = await conversations.start(name="Ana")
    later = harness.desk.clock.now() + timedelta(minutes=5)
    async with harness.desk.db.transaction() as session:
        first = await add_message(session, cid, role=Role.AGENT, text="the person left", now=later)
        second = await add_message(session, cid, role=Role.SYSTEM, text="[Bot resumed — test]", now=later)
    assert [m.id for m in await conversations.messages(cid)] == [first.id, second.id]
    assert (await conversations.get(cid)).last_message_at == later
    latest = later + timedelta(seconds=1)
    async with harness.desk.db.transaction() as session:
        await add_message(session, cid, role=Role.SUBSCRIBER, text="thanks", now=latest)
    assert (await conversations.get(cid)).last_message_at == latest


async def test_a_long_poll_on_an_unknown_conversation_is_not_found_at_once(harness: Harness) -> None:
    with pytest.raises(NotFound, match="conversation 'c_nope' not found"):
        await asyncio.wait_for(harness.desk.conversations.wait_for_messages("c_nope", 0, 10, wait=30), timeout=5)


async def test_front_chat_names_the_front_and_chat_only_for_a_subscriber_on_a_provider_front(harness: Harness) -> None:
    conversations = harness.desk.conversations
    on_telegram = await conversations.start(name="Ana", front="telegram", external_id="4242")
    on_web = await conversations.start(name="Bo", front="web")
    through_api = await conversations.start(name="Cy")
    async with harness.desk.db.read() as session:
        assert await front_chat(session, on_telegram) == ("telegram", "4242")
        assert await front_chat(session, on_web) is None
        assert await front_chat(session, through_api) is None
        assert await front_chat(session, "c_nope") is None


async def test_recent_lines_are_the_last_messages_oldest_first_as_recent_messages_has_them(harness: Harness) -> None:
    cid = await harness.desk.conversations.start(name="Ana")
    for text in ("one", "two", "three"):
        await harness.say(cid, text)
    async with harness.desk.db.read() as session:
        lines = await recent_lines(session, cid, 3)
        messages = await recent_messages(session, cid, 3)
        assert await recent_lines(session, cid, 0) == []
    assert [(m.id, m.role, m.text, m.author) for m in messages] == [tuple(line) for line in lines]
    assert lines[-1].role == "agent" and [line.id for line in lines] == sorted(line.id for line in lines)


async def test_a_conversation_read_on_its_own_is_the_one_read_in_a_transaction(harness: Harness) -> None:
    db = harness.desk.db
    cid = await harness.desk.conversations.start(name="Ana", email="ana@example.com", external_id="chat-7", front="telegram")
    async with db.read() as session:
        in_transaction = await get(session, cid)
    alone = await read(db, cid)
    assert alone.model_dump() == in_transaction.model_dump()
    assert (alone.subscriber_name, alone.subscriber_external_id, alone.front) == ("Ana", "chat-7", "telegram")
    with pytest.raises(NotFound):
        await read(db, "c_missing")

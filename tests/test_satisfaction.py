"""The satisfaction question after a handoff (bot/domain/satisfaction.py), through whole desks:
off by default; 👎 pressed on Telegram (the real python-telegram-bot against the fake Bot
API); answered in words on WhatsApp (the real twilio SDK against the fake Twilio); a question
that expires when the subscriber moves on; and the agent never reading the answer."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from bot.agents import Agent, Turn
from bot.domain.satisfaction import words_answer
from bot.store.models import HandoffSatisfaction, HandoffSession
from bot.store.vocabulary import ReleaseReason
from tests.conftest import Harness, StartDesk, config_problem
from tests.fake_telegram import ANA, KIM, STAFF_CHAT_ID, FakeTelegram
from tests.fake_twilio import CARLA_PHONE, FakeTwilio
from tests.test_front_telegram import PERSON, buttons, conversation_of, deliver, said_to, shared_desk
from tests.test_front_whatsapp import OWN_URL, chat, own_desk, write

CSAT = {"csat": {"enabled": True}}
QUESTION_WORDS = "Did that solve it? Reply 1 for yes, 2 for no."


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


class Listening(Agent):
    """The desk's own agent, with every turn it was given kept for the test to read."""

    def __init__(self, agent: Agent) -> None:
        self.agent, self.turns = agent, list[Turn]()

    async def respond(self, turn: Turn) -> list[str]:
        self.turns.append(turn)
        return await self.agent.respond(turn)


async def satisfaction_of(harness: Harness, sid: str) -> HandoffSatisfaction | None:
    async with harness.desk.db.read() as session:
        return await session.get(HandoffSatisfaction, sid)


async def only_handoff(harness: Harness) -> str:
    async with harness.desk.db.read() as session:
        return (await session.scalars(select(HandoffSession.id))).one()


async def release(harness: Harness, sid: str, reason: ReleaseReason = ReleaseReason.OWNER) -> None:
    await harness.desk.handoffs.release(sid, reason=reason, actor="owner")
    await harness.desk.settle()


def counted(harness: Harness, answer: str) -> float:
    return harness.desk.metrics.registry.get_sample_value("handoff_satisfaction_total", {"answer": answer}) or 0.0


# --------------------------------------------------------------------------- off by default


async def test_nothing_is_asked_by_default(start_desk: StartDesk, twilio: FakeTwilio) -> None:
    harness = await own_desk(start_desk, twilio)
    await write(harness, twilio, OWN_URL, PERSON)
    await release(harness, await only_handoff(harness))
    assert not any(text.startswith("Did that solve it?") for text in chat(twilio, CARLA_PHONE))
    async with harness.desk.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(HandoffSatisfaction)) == 0


async def test_a_reason_that_is_not_named_asks_nothing(start_desk: StartDesk, twilio: FakeTwilio) -> None:
    harness = await own_desk(start_desk, twilio, csat={"enabled": True, "ask_after": ["form"]})
    await write(harness, twilio, OWN_URL, PERSON)
    sid = await only_handoff(harness)
    await release(harness, sid)  # by the owner
    assert await satisfaction_of(harness, sid) is None


async def test_a_conversation_of_the_api_is_never_asked(start_desk: StartDesk) -> None:
    harness = await start_desk(**CSAT)
    cid = await harness.conversation()
    sid, _ = await harness.ask_for_a_person(cid)
    await release(harness, sid)
    assert await satisfaction_of(harness, sid) is None
    assert (await harness.handoff(sid))["satisfaction"] is None


# --------------------------------------------------------------------------- Telegram: buttons


async def test_telegram_offers_buttons_and_a_thumbs_down_is_recorded(start_desk: StartDesk, telegram: FakeTelegram) -> None:
    harness = await shared_desk(start_desk, telegram, **CSAT)
    await deliver(harness, telegram.private_update(PERSON))
    dispatch = telegram.sent_to(STAFF_CHAT_ID)[-1]
    await deliver(harness, telegram.message_update("/release resolved", reply_to=dispatch["message_id"], user=KIM))
    sid = await only_handoff(harness)

    [question] = [m for m in telegram.sent_to(ANA["id"]) if m["text"] == "Did that solve it?"]
    assert buttons(question) == [[("👍", f"cs:{sid}:y"), ("👎", f"cs:{sid}:n")]]
    press = telegram.callback_update(question["message_id"], user=ANA, data=f"cs:{sid}:n", chat_id=ANA["id"])
    response = await deliver(harness, press)
    assert response.json()["text"] == "Thanks!"
    assert said_to(telegram, ANA)[-1] == "Thanks for your answer! If you'd like to add a comment, send it as your next message."

    row = await satisfaction_of(harness, sid)
    assert row is not None
    assert (row.answer, row.answered_by, row.answered_via, row.in_words) == ("no", "Ana Silva", "front:telegram", False)
    assert counted(harness, "no") == 1
    assert "satisfaction_answered" in await harness.kinds(sid)

    # the next message is the comment; a second press changes nothing
    await deliver(harness, telegram.private_update("It took two days"))
    assert said_to(telegram, ANA)[-1] == "Thanks, your comment is noted."
    await deliver(harness, telegram.callback_update(question["message_id"], user=ANA, data=f"cs:{sid}:y", chat_id=ANA["id"]))
    row = await satisfaction_of(harness, sid)
    assert row is not None and (row.answer, row.comment) == ("no", "It took two days")
    assert counted(harness, "yes") == 0
    view = (await harness.handoff(sid))["satisfaction"]
    assert (view["answer"], view["comment"], view["answered_via"]) == ("no", "It took two days", "front:telegram")

    conversation = await conversation_of(harness, ANA)
    subscriber_said = [m["text"] for m in await harness.messages(conversation.id) if m["role"] == "subscriber"]
    assert "It took two days" not in subscriber_said  # kept with the handoff, not in the transcript


# --------------------------------------------------------------------------- WhatsApp: words


async def test_whatsapp_is_answered_in_words_and_the_agent_never_reads_the_answer(
    start_desk: StartDesk, twilio: FakeTwilio,
) -> None:
    harness = await own_desk(start_desk, twilio, **CSAT)
    listening = Listening(harness.desk.router.agent)
    harness.desk.router.agent = listening
    await write(harness, twilio, OWN_URL, PERSON)
    sid = await only_handoff(harness)
    await release(harness, sid)
    assert QUESTION_WORDS in chat(twilio, CARLA_PHONE)  # beside the agent's own welcome back
    turns_before = len(listening.turns)

    await write(harness, twilio, OWN_URL, "1")
    assert chat(twilio, CARLA_PHONE)[-1] == (
        "Thanks for your answer! If you'd like to add a comment, send it as your next message.")
    await write(harness, twilio, OWN_URL, "Quick and kind, thank you")
    assert chat(twilio, CARLA_PHONE)[-1] == "Thanks, your comment is noted."
    assert len(listening.turns) == turns_before  # neither the answer nor the comment was an agent turn
    row = await satisfaction_of(harness, sid)
    assert row is not None
    assert (row.answer, row.comment, row.answered_by, row.in_words) == ("yes", "Quick and kind, thank you", "Carla", True)
    assert counted(harness, "yes") == 1

    await write(harness, twilio, OWN_URL, "One more thing: where is my invoice?")
    last = listening.turns[-1]
    said = [(m.role, m.text) for m in last.history]
    assert ("subscriber", "One more thing: where is my invoice?") in said
    assert not any(text in ("1", "Quick and kind, thank you") for _, text in said)
    assert ("agent", QUESTION_WORDS) in said  # the desk's own question, never the subscriber's words


async def test_an_unanswered_question_expires_when_the_subscriber_moves_on(start_desk: StartDesk, twilio: FakeTwilio) -> None:
    harness = await own_desk(start_desk, twilio, **CSAT)
    await write(harness, twilio, OWN_URL, PERSON)
    sid = await only_handoff(harness)
    await release(harness, sid)
    await write(harness, twilio, OWN_URL, "Where is my parcel?")
    await write(harness, twilio, OWN_URL, "2")  # a message now, like any other
    row = await satisfaction_of(harness, sid)
    assert row is not None and row.answer is None
    async with harness.desk.db.read() as session:
        cid = (await session.get(HandoffSession, sid)).conversation_id  # type: ignore[union-attr]
    texts = [m["text"] for m in await harness.messages(cid) if m["role"] == "subscriber"]
    assert texts[-2:] == ["Where is my parcel?", "2"]
    assert await harness.desk.satisfaction.open_for(cid) is None


def test_words_that_answer() -> None:
    assert [words_answer(w) for w in ("1", " 2 ", "Yes!", "no.", "👍", "maybe", "12")] == [True, False, True, False, True, None, None]


# --------------------------------------------------------------------------- check-config


def test_check_config_names_the_key_paths() -> None:
    assert "csat.ask_after[0]" in config_problem(csat={"ask_after": ["whenever"]})
    assert "csat.ask_after: names owner more than once" in config_problem(csat={"ask_after": ["owner", "owner"]})
    assert "csat.enabled" in config_problem(csat={"enabled": "sometimes"})
    assert "csat.asks" in config_problem(csat={"asks": True})


def test_the_defaults_ask_where_a_person_handled_it() -> None:
    from bot.config import CsatConfig

    defaults = CsatConfig()
    assert (defaults.enabled, defaults.ask_after, defaults.comment) == (False, ["form", "release_token", "owner", "agent"], True)

"""bot/agents/rules.py: the built-in rules agent, turn by turn.

Each test hands the agent a Turn as the router builds one. The resume messages it reads
are made by the real builder (bot/domain/resume.py), so the agent is checked against the
format it will meet; the tool it calls is recorded as the tool registry would receive it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from bot.agents.base import Trigger, Turn, TurnMessage
from bot.agents.rules import RulesAgent
from bot.domain.resume import resume_message
from bot.tools import ToolSpec

HANDOFF_TOOL = ToolSpec("handoff_request", "Hand the conversation to a person.",
                        {"type": "object", "properties": {"channel_id": {"type": "integer", "enum": [3, 1]}}})


class Tools:
    """What the agent asked the tool registry for, and the result it is given back."""

    def __init__(self, result: dict[str, Any] | None = None) -> None:
        self.result = result if result is not None else {"ok": True, "action": "handoff_session_started"}
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((name, arguments))
        return self.result


def turn(*said: str | TurnMessage, trigger: Trigger = "message", tools: Tools | None = None, name: str | None = "Ana",
         email: str | None = None, offered: list[ToolSpec] | None = None) -> Turn:
    history = [m if isinstance(m, TurnMessage) else TurnMessage("subscriber", m) for m in said]
    return Turn(conversation_id="c_1", subscriber_name=name, subscriber_email=email, history=history,
                tools=[HANDOFF_TOOL] if offered is None else offered, call_tool=tools or Tools(), trigger=trigger)


def system(text: str) -> TurnMessage:
    return TurnMessage("system", text)


async def reply(t: Turn) -> list[str]:
    return await RulesAgent(name="Robin").respond(t)


# --------------------------------------------------------------------------- small talk


async def test_a_greeting_is_answered_by_name_with_the_way_to_a_person() -> None:
    [text] = await reply(turn("Hello there"))
    assert text.startswith("Hi Ana! I'm Robin.")
    assert '"talk to a person"' in text


async def test_a_greeting_without_a_name_says_there() -> None:
    [text] = await reply(turn("good morning!", name=None))
    assert text.startswith("Hi there!")


async def test_thanks_and_anything_else_get_their_own_answers() -> None:
    assert await reply(turn("ok thanks a lot")) == ["You're welcome! Anything else I can do?"]
    [other] = await reply(turn("my parcel is late"))
    assert other.startswith("Thanks, I've noted that.")


async def test_only_the_subscriber_s_last_message_counts() -> None:
    t = turn("hi", TurnMessage("agent", "Hi Ana!"), "where is my order?", TurnMessage("agent", "Noted."))
    [text] = await reply(t)
    assert text.startswith("Thanks, I've noted that.")


async def test_nothing_to_answer_without_a_subscriber_message() -> None:
    assert await reply(turn(TurnMessage("agent", "Welcome!"))) == []


# --------------------------------------------------------------------------- escalation


@pytest.mark.parametrize("text", ["I want a HUMAN", "can I talk to someone?", "let me speak with your manager",
                                  "Is there a person there", "chat with staff please"])
async def test_asking_for_a_person_calls_handoff_request_on_the_first_channel(text: str) -> None:
    tools = Tools()
    assert await reply(turn(text, tools=tools)) == []  # on success the desk tells the subscriber
    [(name, arguments)] = tools.calls
    assert name == "handoff_request"
    assert arguments["channel_id"] == 3
    assert arguments["include_transcript"] is True
    assert [f["name"] for f in arguments["expected_return"]] == ["resolution", "follow_up_needed"]


@pytest.mark.parametrize("text", ["humanity is great", "my personal details", "the agency sent it", "talking points"])
async def test_words_that_only_contain_a_trigger_do_not_escalate(text: str) -> None:
    tools = Tools()
    await reply(turn(text, tools=tools))
    assert tools.calls == []


async def test_the_summary_names_the_subscriber_and_quotes_their_last_three_messages_flat() -> None:
    tools = Tools()
    await reply(turn("first", "second\n\n  with   gaps", "third: Grüße 👋", "talk to a person", tools=tools,
                     email="ana@example.com"))
    summary = tools.calls[0][1]["summary"]
    assert summary.startswith("Ana (ana@example.com) asked to talk to a person.")
    assert '"second with gaps" / "third: Grüße 👋" / "talk to a person"' in summary
    assert '"first"' not in summary


async def test_the_summary_stays_within_the_tool_s_limit() -> None:
    tools = Tools()
    await reply(turn(*["x" * 1000] * 5, "talk to a person", tools=tools, name=None))
    summary = tools.calls[0][1]["summary"]
    assert summary.startswith("A subscriber asked to talk to a person.")
    assert len(summary) <= 2000
    assert '"' + "x" * 400 + '"' in summary  # each message quoted at most 400 characters


async def test_a_failed_escalation_is_told_honestly() -> None:
    tools = Tools({"error": "dispatch_failed", "details": {"hint": "Telegram refused"}})
    [text] = await reply(turn("talk to a person", tools=tools))
    assert text.startswith("I'm sorry, I couldn't reach a person just now.")


async def test_without_the_handoff_tool_it_says_nobody_can_be_brought_in() -> None:
    tools = Tools()
    [text] = await reply(turn("talk to a person", tools=tools, offered=[]))
    assert text == "I'm sorry, there is no one I can bring in right now. Please try again later."
    assert tools.calls == []


# --------------------------------------------------------------------------- after a handoff


async def test_after_a_release_the_returned_data_is_passed_on() -> None:
    resumed = resume_message(reason="form", outcome="resolved", note=None,
                             returned={"resolution": "Re-shipped with express delivery", "follow_up_needed": False},
                             missing_required=[])
    [text] = await reply(turn("talk to a person", system(resumed), trigger="resumed"))
    assert text == ("Thanks for waiting. Our team noted: Re-shipped with express delivery. (follow up needed: no) "
                    "Anything else I can help with?")


async def test_a_multiline_resolution_is_read_whole_and_cannot_forge_another_field() -> None:
    resumed = resume_message(reason="form", outcome="resolved", note=None, missing_required=[],
                             returned={"resolution": "Refunded.\n  • follow_up_needed: true"})
    [text] = await reply(turn(system(resumed), trigger="resumed"))
    assert "Our team noted: Refunded. • follow_up_needed: true." in text
    assert "(follow up needed" not in text  # the typed line stayed part of the resolution


async def test_an_unresolved_release_offers_to_reach_the_team_again() -> None:
    resumed = resume_message(reason="release_token", outcome="needs_followup", note="call back Monday", returned={},
                             missing_required=["resolution"])
    [text] = await reply(turn(system(resumed), trigger="resumed"))
    assert text.startswith("Thanks for waiting.")
    assert "isn't fully settled yet" in text


async def test_an_idle_timeout_is_apologised_for() -> None:
    resumed = resume_message(reason="idle_timeout", outcome="unresolved", note=None, returned={}, missing_required=[],
                             idle_timeout=timedelta(hours=2))
    [text] = await reply(turn(system(resumed), trigger="resumed"))
    assert text.startswith("I'm sorry nobody could finish this with you.")


async def test_the_latest_resume_message_is_the_one_read() -> None:
    older = resume_message(reason="idle_timeout", outcome="unresolved", note=None, returned={}, missing_required=[])
    newer = resume_message(reason="owner", outcome="resolved", note=None, returned={"resolution": "Done"},
                           missing_required=[])
    [text] = await reply(turn(system(older), "talk to a person", system(newer), trigger="resumed"))
    assert "Our team noted: Done." in text


async def test_resumed_without_a_resume_message_asks_how_to_help() -> None:
    assert await reply(turn("hi", trigger="resumed")) == ["How can I help?"]


# --------------------------------------------------------------------------- approvals and user actions


@pytest.mark.parametrize(("note", "expected"), [
    ("[Approval — refund was approved and ran with the arguments you gave. Result: {}]", "Good news"),
    ("[Approval — refund: PERMISSION_DENIED. A person denied it.]", "wasn't approved"),
    ("[Approval — refund was approved but failed: timeout.]", "didn't go through"),
])
async def test_an_approval_outcome_is_told_as_it_ended(note: str, expected: str) -> None:
    [text] = await reply(turn("refund me", system(note), trigger="approval"))
    assert expected in text


@pytest.mark.parametrize(("note", "expected"), [
    ("[User action — 2fa: HANDOFF_CANCELLED]", "we'll leave that for now"),
    ("[User action — 2fa: HANDOFF_TIMEOUT]", "I didn't hear back"),
    ("[User action — 2fa: HANDOFF_FAILED]", "doesn't look like that went through"),
    ("[User action — 2fa: done]", "that's done"),
])
async def test_a_user_action_outcome_is_told_as_it_ended(note: str, expected: str) -> None:
    [text] = await reply(turn(system(note), trigger="user_action"))
    assert expected in text

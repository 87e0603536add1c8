"""The OpenAI-compatible agent: the real `openai` client against a fake server on 127.0.0.1.

The desk, tool registry, handoff lifecycle and HTTP API run for real; only the model is
scripted (tests/fake_openai.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.config import Config, ConfigError
from bot.flow.router import FALLBACK_REPLY
from tests.conftest import SECRET, Harness, StartDesk
from tests.fake_openai import FakeOpenAI

VALID_REQUEST = {
    "channel_id": 1,
    "summary": "Ana's order #1234 is a week late; she wants a person to check it.",
    "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
}


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def model() -> Any:
    server = await FakeOpenAI().start()
    yield server
    await server.stop()


async def start(start_desk: StartDesk, model: FakeOpenAI, **agent: Any) -> tuple[Harness, str]:
    harness = await start_desk(agent={
        "kind": "openai", "base_url": model.base_url, "model": "test-model", "api_key": "sk-test-key",
        "max_retries": 2, **agent,
    })
    return harness, await harness.conversation()


async def test_a_plain_answer_with_the_history_and_the_live_tools(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model, system_prompt="You are Acme's assistant.", temperature=0.2)
    model.reply("Hi Ana! How can I help?")
    result = await harness.say(cid, "hello")
    assert result["routed_to"] == "agent"
    assert [r["text"] for r in result["replies"]] == ["Hi Ana! How can I help?"]
    [sent] = model.requests
    assert sent["model"] == "test-model"
    assert sent["temperature"] == 0.2
    assert sent["messages"][0] == {"role": "system", "content": "You are Acme's assistant.\n\nThe customer: Ana, <ana@example.com>."}
    assert sent["messages"][1:] == [{"role": "user", "content": "hello"}]
    [tool] = [t for t in sent["tools"] if t["function"]["name"] == "handoff_request"]
    assert tool["function"]["parameters"]["properties"]["channel_id"]["enum"] == [1]


async def test_handoff_request_hands_over_and_the_resume_note_reaches_the_model(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model)
    model.call("handoff_request", {**VALID_REQUEST, "expected_return": [{"name": "eta", "type": "string"}]})
    result = await harness.say(cid, "I want to talk to a person about my late order")
    assert result["handoff_session_id"]
    assert [r["text"] for r in result["replies"]] == [
        "I've asked our team to join — usually within 1 business day. Your messages now go straight to them."
    ]
    assert len(model.requests) == 1  # a successful handoff_request ends the turn
    sid = result["handoff_session_id"]
    assert (await harness.say(cid, "are you there?"))["routed_to"] == "human"
    assert len(model.requests) == 1  # the bypass: the model is not asked

    model.reply("Welcome back! Your order arrives Friday.")
    released = await harness.client.post(f"/api/handoffs/{sid}/release", json={
        "outcome": "resolved", "note": "Ships Friday", "return_values": {"eta": "Friday"},
    })
    assert released.status_code == 200, released.text
    await harness.desk.settle()
    resumed = model.requests[-1]["messages"]
    notes = [m["content"] for m in resumed if m["role"] == "system" and m["content"].startswith("[Bot resumed")]
    assert len(notes) == 1
    assert "Ships Friday" in notes[0]
    assert "eta: Friday" in notes[0]
    assert resumed[-1]["role"] == "system"  # the agent picks up on the resume note, unprompted
    assert (await harness.messages(cid))[-1]["text"] == "Welcome back! Your order arrives Friday."


async def test_invalid_arguments_come_back_as_the_tool_result_and_the_model_corrects_them(
    start_desk: StartDesk, model: FakeOpenAI,
) -> None:
    harness, cid = await start(start_desk, model)
    model.call("handoff_request", {**VALID_REQUEST, "channel_id": 99})
    model.call("handoff_request", "{not json")
    model.call("handoff_request", VALID_REQUEST, content="Let me get someone for you.")
    result = await harness.say(cid, "a person please")
    # the desk's notice was stored when the handoff started, the model's words after its turn
    assert [r["text"] for r in result["replies"]] == [
        "I've asked our team to join — usually within 1 business day. Your messages now go straight to them.",
        "Let me get someone for you.",
    ]
    first, second = model.tool_results(model.requests[1]), model.tool_results(model.requests[2])
    assert first[0]["error"] == "invalid_input"
    assert first[0]["details"]["hint"].startswith("channel_id: ")
    assert second[1]["error"] == "invalid_json"
    assert "not valid JSON" in second[1]["details"]["hint"]
    assert result["handoff_session_id"]


async def test_an_unknown_tool_is_answered_and_the_turn_goes_on(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model)
    model.call("refund_order", {"order": "1234"})
    model.reply("I can't do refunds myself, but I can bring in a person.")
    result = await harness.say(cid, "refund order 1234")
    assert [r["text"] for r in result["replies"]] == ["I can't do refunds myself, but I can bring in a person."]
    [answer] = model.tool_results(model.requests[1])
    assert answer["error"] == "unknown_tool"
    assert "handoff_request" in answer["details"]["hint"]


async def test_a_rate_limit_is_retried_after_the_delay_the_server_asks(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model)
    model.fail(429, **{"retry-after-ms": "5"})
    model.reply("Sorry for the wait!")
    result = await harness.say(cid, "hello?")
    assert [r["text"] for r in result["replies"]] == ["Sorry for the wait!"]
    assert len(model.requests) == 2


async def test_a_model_that_stays_down_gets_the_fallback_reply(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model, max_retries=0)
    model.fail(503)
    result = await harness.say(cid, "hello?")
    assert [r["text"] for r in result["replies"]] == [FALLBACK_REPLY]


async def test_tool_rounds_are_bounded(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model, max_tool_rounds=2)
    for _ in range(3):
        model.call("refund_order", {})
    result = await harness.say(cid, "refund")
    assert [r["text"] for r in result["replies"]] == [FALLBACK_REPLY]
    assert len(model.requests) == 3


async def test_human_replies_are_notes_not_the_models_own_words(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model)
    model.call("handoff_request", VALID_REQUEST)
    sid = (await harness.say(cid, "a person please"))["handoff_session_id"]
    await harness.desk.handoffs.recipient_message(sid, "It ships Friday.", author="Kim", via="test")
    model.reply("Anything else?")
    await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
    await harness.desk.settle()
    history = model.requests[-1]["messages"]
    assert {"role": "system", "content": "Kim (a person from the team) wrote to the customer: It ships Friday."} in history
    assert not any(m["role"] == "assistant" and "Friday" in (m.get("content") or "") for m in history)


def test_config_names_the_missing_model_and_a_bad_url() -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "agent": {"kind": "openai", "base_url": "localhost:11434"}})
    assert str(caught.value).splitlines() == [
        "agent.base_url: must be an http(s) URL such as https://api.openai.com/v1",
        "agent.model: required",
    ]


async def test_nothing_runs_after_a_call_that_ended_the_turn(start_desk: StartDesk, model: FakeOpenAI) -> None:
    harness, cid = await start(start_desk, model)
    model.calls([("handoff_request", VALID_REQUEST), ("request_user_action", {
        "reason": "other", "details": "Please check the parcel label for me."})])
    result = await harness.say(cid, "a person please")
    assert result["handoff_session_id"]
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "agent"][-1].startswith("I've asked")
    async with harness.desk.db.read() as session:
        from sqlalchemy import func, select

        from bot.store.models import UserAction
        assert await session.scalar(select(func.count()).select_from(UserAction)) == 0

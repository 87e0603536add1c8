"""Sibling-agent handoffs: channel `kind: agent`, with the sibling played by a scripted
OpenAI-compatible model (tests/fake_openai.py) behind the real `openai` client."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from bot.config import Config, ConfigError
from bot.store.models import Conversation
from tests.conftest import SECRET, Harness, StartDesk
from tests.fake_openai import FakeOpenAI

FIELDS = [
    {"name": "order_status", "type": "enum", "enum_values": ["shipped", "lost"], "required": True, "label": "Status"},
    {"name": "eta", "type": "date", "description": "When it arrives"},
]


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def sibling() -> Any:
    server = await FakeOpenAI(model="order-agent").start()
    yield server
    await server.stop()


async def start(start_desk: StartDesk, sibling: FakeOpenAI) -> Harness:
    return await start_desk(channels=[
        {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
        {"id": 2, "kind": "agent", "label": "Order lookup agent",
         "agent": {"kind": "openai", "base_url": sibling.base_url, "model": "order-agent", "api_key": "sk-test-key"}},
    ])


async def escalate(harness: Harness, sibling: FakeOpenAI) -> tuple[str, str]:
    cid = await harness.conversation()
    await harness.say(cid, "Where is my order 1234?")
    sibling.reply("Hi Ana, I'm checking order 1234 now.")
    result = await harness.start_handoff(cid, channel_id=2, expected_return=FIELDS)
    await harness.desk.settle()
    return cid, result["handoff_session_id"]


def human_texts(messages: list[dict[str, Any]]) -> list[str]:
    return [m["text"] for m in messages if m["role"] == "human"]


async def test_the_sibling_gets_the_brief_and_speaks_first(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    cid, sid = await escalate(harness, sibling)
    assert (await harness.handoff(sid))["state"] == "active"
    [first] = sibling.requests
    brief = first["messages"][1]["content"]
    assert first["messages"][1]["role"] == "system"
    assert f'handoff_session_id "{sid}"' in brief
    assert "[EXPECTED RETURN SCHEMA]\n- order_status: enum (one of: shipped, lost), required — Status\n" in brief
    assert "- eta: date (YYYY-MM-DD), optional — When it arrives\n" in brief
    assert "[TRANSCRIPT]" in brief
    assert "Where is my order 1234?" in brief
    names = [t["function"]["name"] for t in first["tools"]]
    assert "handoff_release" in names
    assert "handoff_request" not in names  # no ping-pong
    assert human_texts(await harness.messages(cid)) == ["Hi Ana, I'm checking order 1234 now."]
    # signed with the name subscribers know the channel by, not the owner's label for it
    assert [m["author"] for m in await harness.messages(cid) if m["role"] == "human"] == ["our team"]


async def test_subscriber_and_sibling_talk_until_the_sibling_hands_back(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    cid, sid = await escalate(harness, sibling)

    sibling.reply("Could you confirm the postcode?")
    routed = await harness.say(cid, "Sure, what do you need?")
    assert routed["routed_to"] == "human"
    await harness.desk.settle()
    assert sibling.requests[-1]["messages"][-1] == {"role": "user", "content": "Sure, what do you need?"}
    assert human_texts(await harness.messages(cid))[-1] == "Could you confirm the postcode?"

    sibling.call("handoff_release", {
        "handoff_session_id": sid, "outcome": "resolved", "note": "Shipped yesterday",
        "return_values": {"order_status": "shipped", "eta": "2026-12-02"},
    })
    await harness.say(cid, "It's 10115")
    await harness.desk.settle()
    handoff = await harness.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["release_reason"] == "agent"
    assert handoff["returned"] == {"order_status": "shipped", "eta": "2026-12-02"}
    resumed = [m["text"] for m in await harness.messages(cid) if m["role"] == "system"]
    assert resumed[-1].startswith(
        "[Bot resumed — the sibling agent has handed control back. Outcome: resolved. Shipped yesterday]\nReturned data:"
    )
    assert "order_status: shipped" in resumed[-1]
    # the first agent (rules) picks the conversation up again
    assert (await harness.messages(cid))[-1]["role"] == "agent"
    assert (await harness.say(cid, "thanks"))["routed_to"] == "agent"


async def test_a_wrongly_typed_release_is_a_tool_error_the_sibling_corrects(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    cid, sid = await escalate(harness, sibling)
    sibling.call("handoff_release", {
        "handoff_session_id": sid, "outcome": "resolved",
        "return_values": {"order_status": "shipped", "eta": "next week", "carrier": "DHL"},
    })
    sibling.call("handoff_release", {
        "handoff_session_id": sid, "outcome": "resolved", "note": "Carrier is DHL.",
        "return_values": {"order_status": "shipped", "eta": "2026-12-02"},
    })
    await harness.say(cid, "any news?")
    await harness.desk.settle()
    [refused] = sibling.tool_results(sibling.requests[-1])  # what the model read before its second call
    assert refused["error"] == "invalid_return_values"
    assert refused["details"]["fields"] == {
        "return_values.eta": 'must be a date as YYYY-MM-DD, such as 2026-06-10 (got "next week")',
        "return_values.carrier": "is not a field this handoff asked for (it asked for: order_status, eta)",
    }
    handoff = await harness.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["returned"] == {"order_status": "shipped", "eta": "2026-12-02"}
    assert "release_refused" in await harness.kinds(sid)


async def test_the_sibling_cannot_release_someone_elses_handoff(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    cid, sid = await escalate(harness, sibling)
    sibling.call("handoff_release", {"handoff_session_id": "hs_someoneelse", "outcome": "resolved"})
    sibling.reply("Sorry, let me keep helping.")
    await harness.say(cid, "done?")
    await harness.desk.settle()
    [answer] = sibling.tool_results(sibling.requests[-1])
    assert answer["error"] == "invalid_input"
    assert sid in answer["details"]["hint"]
    assert (await harness.handoff(sid))["state"] == "active"


async def test_the_sibling_conversation_is_kept_for_the_record(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    _, sid = await escalate(harness, sibling)
    async with harness.desk.db.read() as session:
        [served] = (await session.scalars(select(Conversation).where(Conversation.serves_handoff_session_id == sid))).all()
    roles = [m["role"] for m in await harness.messages(served.id)]
    assert roles == ["system", "agent"]
    assert served.subscriber_name == "Ana"


async def test_an_idle_sibling_handoff_times_out_like_any_other(start_desk: StartDesk, sibling: FakeOpenAI) -> None:
    harness = await start(start_desk, sibling)
    cid, sid = await escalate(harness, sibling)
    harness.desk.clock.advance(timedelta(hours=1))  # type: ignore[attr-defined]
    result = await harness.desk.handoffs.release_if_idle(sid)
    assert result.released
    await harness.desk.settle()
    assert (await harness.handoff(sid))["release_reason"] == "idle_timeout"
    async with harness.desk.db.read() as session:
        served = await session.scalar(select(Conversation.id).where(Conversation.serves_handoff_session_id == sid))
    assert (await harness.messages(str(served)))[-1]["role"] == "system"  # the sibling is told it ended


def test_a_sibling_channel_config_names_its_agent_keys() -> None:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"secret_key": SECRET, "channels": [
            {"id": 7, "kind": "agent", "label": "Order lookup agent", "agent": {"kind": "openai", "modle": "x"}},
        ]})
    required, unknown = str(caught.value).splitlines()
    assert required == "channels[0].agent.model: required"
    assert unknown.startswith("channels[0].agent.modle: unknown key; did you mean 'model'? (allowed: kind, base_url, model,")


def test_the_agent_kind_is_registered_by_the_flow_layer_not_named_by_the_channels() -> None:
    """channels/ lists only providers; the sibling agent's module adds its own kind."""
    from bot.flow.siblings import AgentChannel
    from channels import ADAPTERS, adapter_class, known_kinds

    assert "agent" not in ADAPTERS
    assert adapter_class("agent") is AgentChannel
    assert "agent" in known_kinds()

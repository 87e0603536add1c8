"""Tool schemas as the model sees them, and validation that starts nothing on bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import func, select

from bot.store.models import HandoffSession
from channels.base import TransientChannelError
from tests.conftest import Harness, StartDesk

VALID = {
    "channel_id": 1,
    "summary": "Ana's order #1234 is a week late and she wants a person.",
    "expected_action": "Look up order #1234 and reply to Ana.",
}


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """Page and schema behaviour does not depend on the database: SQLite only."""
    return sqlite_url


async def test_handoff_request_schema_constrains_channel_id(start_desk: StartDesk) -> None:
    harness = await start_desk(channels=[
        {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
        {"id": 7, "kind": "owner_inbox", "label": "Night shift", "estimated_response": "within 8 hours"},
        {"id": 9, "kind": "owner_inbox", "label": "Switched off", "enabled": False},
    ])
    cid = await harness.conversation()
    tools = (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]
    assert [t["name"] for t in tools] == ["handoff_request", "request_user_action", "response_user_action"]
    tool = tools[0]
    schema = tool["input_schema"]
    assert schema["properties"]["channel_id"] == {
        "description": "The handoff channel to use; one of the ids listed in the description.", "type": "integer", "enum": [1, 7],
    }
    assert schema["required"] == ["channel_id", "summary", "expected_action"]
    assert schema["additionalProperties"] is False
    assert "$ref" not in json.dumps(schema)
    assert "$defs" not in schema
    assert '"title"' not in json.dumps(schema)
    assert schema["properties"]["summary"]["minLength"] == 20
    assert schema["properties"]["summary"]["maxLength"] == 2000
    assert schema["properties"]["expected_return"]["maxItems"] == 20
    field = schema["properties"]["expected_return"]["items"]
    assert field["properties"]["type"]["enum"] == ["string", "multiline", "number", "boolean", "enum", "date", "url"]
    assert "- channel_id 7: Night shift (owner_inbox); responds within 8 hours" in tool["description"]
    assert "Switched off" not in tool["description"]


async def test_tool_formats_for_openai_and_anthropic(harness: Harness) -> None:
    cid = await harness.conversation()
    openai = (await harness.client.get(f"/api/conversations/{cid}/tools", params={"format": "openai"})).json()["tools"][0]
    assert openai["type"] == "function"
    assert openai["function"]["name"] == "handoff_request"
    assert openai["function"]["parameters"]["properties"]["channel_id"]["enum"] == [1]
    anthropic = (await harness.client.get(f"/api/conversations/{cid}/tools", params={"format": "anthropic"})).json()["tools"][0]
    assert set(anthropic) == {"name", "description", "input_schema"}


async def test_no_available_channel_means_no_handoff_request(start_desk: StartDesk) -> None:
    harness = await start_desk(channels=[{"id": 1, "kind": "owner_inbox", "label": "Off", "enabled": False}])
    cid = await harness.conversation()
    tools = (await harness.client.get(f"/api/conversations/{cid}/tools")).json()["tools"]
    assert "handoff_request" not in [t["name"] for t in tools]
    result = await harness.tool(cid, "handoff_request", VALID)
    assert result["error"] == "unknown_tool"
    body = await harness.say(cid, "I want to talk to a person")  # the rules agent tells the truth
    assert body["replies"][0]["text"].startswith("I'm sorry, there is no one I can bring in right now")


async def test_specs_are_built_once_and_follow_the_channels_that_are_up(start_desk: StartDesk) -> None:
    harness = await start_desk(channels=[
        {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
        {"id": 7, "kind": "owner_inbox", "label": "Night shift"},
    ])
    cid = await harness.conversation()
    router = harness.desk.router

    async def handoff_spec() -> Any:
        return next(s for s in await router.tool_specs(cid) if s.name == "handoff_request")

    first = await handoff_spec()
    assert await handoff_spec() is first  # the same spec, not rendered again
    harness.desk.channels.lost(7, TransientChannelError("socket closed"))
    fewer = await handoff_spec()
    assert fewer.input_schema["properties"]["channel_id"]["enum"] == [1] and "Night shift" not in fewer.description
    assert first.input_schema["properties"]["channel_id"]["enum"] == [1, 7]  # a spec handed out never changes
    await harness.desk.channels.retry_unavailable()
    assert await handoff_spec() is first


def returned_fields(n: int) -> list[dict[str, Any]]:
    return [{"name": f"f{i}", "type": "string"} for i in range(n)]


@pytest.mark.parametrize(("change", "field", "message"), [
    ({"channel_id": 99}, "channel_id", "must be one of the available handoff channels [1]"),
    ({"summary": "too short"}, "summary", "String should have at least 20 characters"),
    ({"summary": "x" * 2001}, "summary", "String should have at most 2000 characters"),
    ({"expected_action": "short"}, "expected_action", "String should have at least 10 characters"),
    ({"urgency": "asap"}, "urgency", "Input should be 'low', 'normal' or 'high'"),
    ({"contact_back_email": "not-an-email"}, "contact_back_email", "value is not a valid email address"),
    ({"extra_context": {"blob": "x" * 5000}}, "extra_context", "the limit is 4096"),
    ({"extra_context": {"n": 5}}, "extra_context.n", "Input should be a valid string"),
    ({"expected_return": returned_fields(21)}, "expected_return", "List should have at most 20 items"),
    ({"expected_return": [{"name": "a", "type": "string"}, {"name": "a", "type": "date"}]}, "expected_return",
     "field names must be unique; 'a' appears more than once"),
    ({"expected_return": [{"name": "a", "type": "colour"}]}, "expected_return[0].type", "Input should be 'string'"),
    ({"expected_return": [{"name": "a", "type": "enum"}]}, "expected_return[0]", "enum_values is required when type is 'enum'"),
    ({"expected_return": [{"name": "2fast", "type": "string"}]}, "expected_return[0].name", "must be identifier-like"),
    ({"priority": "high"}, "priority", "is not a known field"),
])
async def test_invalid_input_names_the_field_and_starts_nothing(harness: Harness, change: dict, field: str, message: str) -> None:
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {**VALID, **change})
    assert result["error"] == "invalid_input"
    assert field in result["details"]["fields"], result
    assert message in result["details"]["fields"][field]
    assert result["details"]["hint"].startswith(f"{field}: ") or f"; {field}: " in result["details"]["hint"]
    assert result["details"]["handoff_event_id"]
    async with harness.desk.db.transaction() as session:
        assert await session.scalar(select(func.count()).select_from(HandoffSession)) == 0


async def test_missing_fields_are_all_named(harness: Harness) -> None:
    cid = await harness.conversation()
    result = await harness.tool(cid, "handoff_request", {})
    assert result["details"]["fields"] == {"channel_id": "is required", "summary": "is required", "expected_action": "is required"}


async def test_twenty_fields_of_every_type_are_accepted(harness: Harness) -> None:
    cid = await harness.conversation()
    types = ["string", "multiline", "number", "boolean", "date", "url"]
    fields = [{"name": f"f{i}", "type": types[i % len(types)]} for i in range(19)]
    fields.append({"name": "status", "type": "enum", "enum_values": ["ok", "late"], "required": True})
    result = await harness.tool(cid, "handoff_request", {**VALID, "expected_return": fields})
    assert result["ok"] is True


async def test_rejections_are_audited(harness: Harness) -> None:
    cid = await harness.conversation()
    await harness.tool(cid, "handoff_request", {**VALID, "summary": "short"})
    async with harness.desk.db.transaction() as session:
        from bot.store.models import HandoffEvent

        events = (await session.scalars(select(HandoffEvent).where(HandoffEvent.conversation_id == cid))).all()
    assert [(e.kind, e.detail["error"]) for e in events] == [("handoff_request_rejected", "invalid_input")]
    assert "summary" in events[0].detail["fields"]


async def test_a_non_object_input_is_a_tool_error(harness: Harness) -> None:
    cid = await harness.conversation()
    response = await harness.client.post(f"/api/conversations/{cid}/tools/handoff_request", json=[1, 2])
    assert response.status_code == 200
    assert response.json()["error"] == "invalid_input"
    response = await harness.client.post(
        f"/api/conversations/{cid}/tools/handoff_request", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"

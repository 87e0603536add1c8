"""What the framework integrations share (bot/integrations/desk_requests.py): request keys,
the paused-run files, what the model reads of an approval not given, and the desk's answers
to an agent-run action, against a real desk served in-process."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from bot.clients import DeskClient
from bot.clients.models import ApprovalOutcome
from bot.integrations.desk_requests import (
    DeskCalls,
    DeskRequest,
    RunFiles,
    approval_refusal,
    ask_for_a_person,
    once_per_call,
    request_key,
)
from tests.agent_desks import AGENT_KEY, REFUND, SECTIONS, People
from tests.agent_scenarios import HANDOFF_ARGUMENTS
from tests.conftest import desk_served


def test_a_call_keeps_its_key_and_two_calls_never_share_one() -> None:
    assert request_key("pydantic-ai", "c_1", "call-1") == request_key("pydantic-ai", "c_1", "call-1") == "pydantic-ai:c_1:call-1"
    assert len({request_key("pydantic-ai", "c_1", "call-1"), request_key("pydantic-ai", "c_2", "call-1"),
                request_key("openai-agents", "c_1", "call-1")}) == 3


def test_a_key_the_header_cannot_carry_becomes_a_digest() -> None:
    for call_id in ("x" * 300, "appel-é", "tab\there"):
        key = request_key("openai-agents", "c_1", call_id)
        assert key.startswith("openai-agents:") and len(key) <= 255 and key.isascii() and key.isprintable(), key
    assert request_key("a", "c", "é") != request_key("a", "c", "è")


@dataclass
class Paused:
    waiting_for: list[str] = field(default_factory=list)


def test_a_run_file_round_trips_and_stays_in_its_directory(tmp_path: Path) -> None:
    runs = RunFiles(tmp_path / "runs")
    assert runs.load("c_1", Paused) is None
    runs.save("c_1", Paused, Paused(["call-1"]))
    runs.save("c_1", Paused, Paused(["call-1", "call-2"]))
    assert runs.load("c_1", Paused) == Paused(["call-1", "call-2"])
    escaping = runs.path("../../etc/passwd")
    assert escaping.parent == runs.directory and escaping.name.startswith("______etc_passwd-")
    assert runs.path("a/b") != runs.path("a_b"), "two ids never share a file"
    assert [p.name for p in runs.directory.iterdir()] == [runs.path("c_1").name], "no temporary file is left behind"


def test_a_timeout_is_never_read_as_a_persons_denial() -> None:
    timed_out = json.loads(approval_refusal(ApprovalOutcome(approval_id="a1", status="timed_out", state="expired")))
    denied = json.loads(approval_refusal(ApprovalOutcome(approval_id="a2", status="denied", state="denied",
                                                         reason="Over the limit", decided_by="olga")))
    assert timed_out["status"] == "timed_out" and "reason" not in timed_out and "No person refused it" in timed_out["detail"]
    assert (denied["status"], denied["reason"], denied["decided_by"]) == ("denied", "Over the limit", "olga")


def test_a_tool_starts_once_per_call_and_the_start_is_saved_before_it_runs() -> None:
    started: list[str] = []
    saved: list[list[str]] = []
    first_start = once_per_call(started, lambda: saved.append(list(started)))
    assert first_start("call-1") and saved == [["call-1"]]
    assert not first_start("call-1") and saved == [["call-1"]]
    assert first_start("call-2") and started == ["call-1", "call-2"]


async def test_the_desks_answers_to_an_agent_run_action(sqlite_url: str) -> None:
    """Policy none: the framework runs it now (no approval made); a call the desk refuses
    (arguments its schema rejects) is refused, fail closed, with the desk's answer."""
    free = {**REFUND, "id": "check_stock", "policy": "none"}
    async with desk_served(sqlite_url, **{**SECTIONS, "actions": [REFUND, free]}) as (_, base_url):
        async with DeskClient(base_url, api_key=AGENT_KEY) as desk:
            cid = await desk.create_conversation(name="Ana")
            outcomes: dict[str, str] = {}
            calls = DeskCalls(desk, "test", cid, {}, outcomes, save=lambda: None)
            assert await calls.refusal("call-1", "check_stock", {"order_id": "A-1", "amount": 1}) is None
            refused = json.loads(await calls.refusal("call-2", "refund_order", {"order_id": "A-1"}) or "{}")
    assert outcomes == {"call-1": "approved", "call-2": "refused"} and calls.requests == {}
    assert refused["status"] == "refused" and "amount" in json.dumps(refused["desk"])


async def test_a_request_made_again_for_the_same_call_is_the_same_desk_request(sqlite_url: str) -> None:
    """A process that stopped after asking but before storing the desk's id asks again with
    the call's key: the desk answers with the first request, and holds one."""
    async with desk_served(sqlite_url, **SECTIONS) as (_, base_url), DeskClient(base_url, api_key=AGENT_KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        key = request_key("test", cid, "call-1")
        first = await ask_for_a_person(desk, cid, "handoff_request", HANDOFF_ARGUMENTS, key=key)
        again = await ask_for_a_person(desk, cid, "handoff_request", HANDOFF_ARGUMENTS, key=key)
        held = await People(base_url).handoffs_of(cid)
    assert isinstance(first, DeskRequest) and again == first
    assert [h["handoff_session_id"] for h in held] == [first.desk_id]

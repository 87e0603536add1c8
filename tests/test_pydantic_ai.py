"""The PydanticAI integration (bot/integrations/pydantic_ai.py) against a real desk, offline.

The model is PydanticAI's own `FunctionModel` with `ALLOW_MODEL_REQUESTS = False`, so no test
reaches a provider; the desk is a real `handoff serve` process (or, where a test moves time,
the same desk in-process on a `ManualClock`); people answer through the return form and the
owner's API. What the model read is taken from the inputs the model itself received.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai import Agent, models
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bot.clients import DeskClient
from bot.integrations.pydantic_ai import DeskRunner, RunFiles, StoredRun, stored_run
from tests.agent_desks import AGENT_KEY, CHANNEL_ID, People, ServedDesk, clocked_desk, eventually, printed, start_example

EXAMPLE = "pydantic_ai_agent.py"
SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."


@pytest.fixture(autouse=True)
def no_model_requests() -> Iterator[None]:
    allowed, models.ALLOW_MODEL_REQUESTS = models.ALLOW_MODEL_REQUESTS, False
    yield
    models.ALLOW_MODEL_REQUESTS = allowed


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedDesk]:
    """One `handoff serve` for the tests that do not restart it; each test has its own conversation."""
    desk = ServedDesk(tmp_path_factory.mktemp("desk"))
    try:
        yield desk.start()
    finally:
        desk.close()


@pytest.fixture
async def desk(served: ServedDesk) -> AsyncIterator[DeskClient]:
    async with DeskClient(served.base_url, api_key=AGENT_KEY) as client:
        yield client


def handoff_call(call_id: str) -> ToolCallPart:
    return ToolCallPart("handoff_request", {"channel_id": CHANNEL_ID, "summary": SUMMARY, "expected_action": ACTION,
                                            "expected_return": [{"name": "eta", "type": "string"}]}, tool_call_id=call_id)


def refund_call(call_id: str, order_id: str, amount: float) -> ToolCallPart:
    return ToolCallPart("refund_order", {"order_id": order_id, "amount": amount}, tool_call_id=call_id)


class Script:
    """A model that makes `calls` in its first turn, then answers with the tool results it
    read; `inputs` holds what each turn received."""

    def __init__(self, *calls: ToolCallPart) -> None:
        self.calls = calls
        self.inputs: list[list[ModelMessage]] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.inputs.append(list(messages))
        if len(self.inputs) == 1:
            return ModelResponse(parts=list(self.calls))
        return ModelResponse(parts=[TextPart("done")])

    def results(self, turn: int) -> dict[str, Any]:
        """What turn `turn` (0: the first) read back, by tool call id."""
        last = self.inputs[turn][-1]
        assert isinstance(last, ModelRequest), last
        return {part.tool_call_id: part.content for part in last.parts if isinstance(part, ToolReturnPart)}


class Refunds:
    """The agent's own gated tool: records every time it really runs."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, float]] = []

    def refund_order(self, order_id: str, amount: float) -> dict[str, Any]:
        self.ran.append((order_id, amount))
        return {"refunded": order_id, "amount": amount}


def runner(script: Script, desk: DeskClient, runs: Path, refunds: Refunds | None = None) -> DeskRunner:
    return DeskRunner(Agent(FunctionModel(script)), desk, RunFiles(runs), actions=[refunds.refund_order] if refunds else [])


async def test_a_person_returns_data_through_the_form_and_the_model_reads_it(desk: DeskClient, served: ServedDesk,
                                                                             tmp_path: Path) -> None:
    script, people = Script(handoff_call("call-1")), People(served.base_url)
    cid = await desk.create_conversation(name="Ana", email="ana@example.com")
    agent = runner(script, desk, tmp_path)
    running = asyncio.create_task(agent.run(cid, "My order is late, can a person check it?"))

    handoff = await people.open_handoff(cid)
    stored = await paused_run(RunFiles(tmp_path), cid)
    assert stored.requests["call-1"].desk_id == handoff["handoff_session_id"], "the paused run holds the desk's id"
    await people.fill_form(handoff, note="Re-shipped express.", eta="Thursday")
    result = await asyncio.wait_for(running, 60)

    assert result.output == "done"
    [returned] = script.results(1).values()
    assert returned["status"] == "released" and returned["reason"] == "form"
    assert returned["returned"] == {"eta": "Thursday"} and returned["note"] == "Re-shipped express."
    assert "[Bot resumed" in returned["resume_text"] and "Thursday" in returned["resume_text"]
    finished = agent.stored(cid)
    assert finished is not None and finished.waiting is None and finished.outcomes == {"call-1": "released"}


async def test_two_approvals_in_one_turn_answered_in_reverse_order_each_reach_their_call(
    desk: DeskClient, served: ServedDesk, tmp_path: Path,
) -> None:
    script, refunds, people = Script(refund_call("call-a", "A-1", 20), refund_call("call-b", "B-2", 35)), Refunds(), People(served.base_url)
    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(runner(script, desk, tmp_path, refunds).run(cid, "Refund both orders"))

    first, second = await people.approvals_of(cid, 2)
    assert (first["arguments"]["order_id"], second["arguments"]["order_id"]) == ("A-1", "B-2")
    await people.decide(second["approval_id"], approve=True)
    await people.decide(first["approval_id"], approve=False, reason="Order A-1 was already refunded")
    await asyncio.wait_for(running, 60)

    assert refunds.ran == [("B-2", 35)], "the approved call ran once, the denied one never"
    results = script.results(1)
    assert results["call-b"] == {"refunded": "B-2", "amount": 35}
    denial = json.loads(results["call-a"])
    assert denial["status"] == "denied" and denial["reason"] == "Order A-1 was already refunded"


async def test_a_handoff_and_an_approval_in_one_turn_answered_in_reverse_order(
    desk: DeskClient, served: ServedDesk, tmp_path: Path,
) -> None:
    script, refunds, people = Script(handoff_call("call-h"), refund_call("call-r", "C-3", 12)), Refunds(), People(served.base_url)
    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(runner(script, desk, tmp_path, refunds).run(cid, "Refund C-3 and find my parcel"))

    [approval] = await people.approvals_of(cid, 1)
    handoff = await people.open_handoff(cid)
    await people.decide(approval["approval_id"], approve=True)
    await people.fill_form(handoff, note="Found it.", eta="Friday")
    await asyncio.wait_for(running, 60)

    results = script.results(1)
    assert results["call-r"] == {"refunded": "C-3", "amount": 12} and refunds.ran == [("C-3", 12)]
    assert results["call-h"]["returned"] == {"eta": "Friday"}


async def test_an_approval_nobody_decides_in_time_is_a_timeout_and_the_tool_never_runs(sqlite_url: str, tmp_path: Path) -> None:
    script, refunds = Script(refund_call("call-t", "D-4", 80)), Refunds()
    async with clocked_desk(sqlite_url) as (served_desk, base_url, clock), DeskClient(base_url, api_key=AGENT_KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        agent = runner(script, desk, tmp_path, refunds)
        running = asyncio.create_task(agent.run(cid, "Refund D-4"))
        [approval] = await People(base_url).approvals_of(cid, 1)
        clock.advance(timedelta(minutes=6))  # past the action's 5m timeout
        assert await served_desk.approvals.expire_due() == 1
        await asyncio.wait_for(running, 60)
        assert (await People(base_url).approval(approval["approval_id"]))["state"] == "expired"

    assert refunds.ran == []
    told = json.loads(script.results(1)["call-t"])
    assert told["status"] == "timed_out" and "No person refused it" in told["detail"]
    stored = agent.stored(cid)
    assert stored is not None and stored.outcomes == {"call-t": "timed_out"}


async def paused_run(runs: RunFiles, cid: str) -> StoredRun:
    """The conversation's run once it is stored paused, waiting for the desk."""
    async def paused() -> StoredRun | None:
        stored = stored_run(runs, cid)
        return stored if stored is not None and stored.waiting is not None else None

    return await eventually(paused, f"conversation {cid}'s paused run on disk")


async def test_the_agent_and_the_desk_killed_mid_handoff_resume_once_with_one_desk_request(tmp_path: Path) -> None:
    """The example, a real agent process: killed with the desk while the person works, both
    started again from their files, it carries on that run, once, on the same handoff."""
    (tmp_path / "desk").mkdir()
    served = ServedDesk(tmp_path / "desk").start()
    people = People(served.base_url)
    try:
        agent = await start_example(EXAMPLE, served.base_url, tmp_path)
        cid = await printed(agent, "conversation:")
        handoff = await people.open_handoff(cid)
        runs = RunFiles(tmp_path / "agent-runs")
        await paused_run(runs, cid)
        agent.send_signal(signal.SIGKILL)
        await agent.wait()
        served.kill()

        await asyncio.to_thread(served.start)
        again = await start_example(EXAMPLE, served.base_url, tmp_path, "--conversation", cid)
        await people.fill_form(handoff, note="Re-shipped express.", eta="Thursday")
        answer = await printed(again, "answer:")
        assert await again.wait() == 0
        held = await people.handoffs_of(cid)
    finally:
        served.close()

    assert json.loads(answer.removeprefix("A person answered:"))["returned"] == {"eta": "Thursday"}
    assert [h["handoff_session_id"] for h in held] == [handoff["handoff_session_id"]], "one desk request for the call"
    stored = stored_run(runs, cid)
    assert stored is not None and stored.waiting is None
    returns = [p for m in stored.messages for p in m.parts if isinstance(p, ToolReturnPart)]
    answers = [p for m in stored.messages if isinstance(m, ModelResponse) for p in m.parts if isinstance(p, TextPart)]
    assert [r.tool_call_id for r in returns] == ["call-handoff-1"] and len(answers) == 1, "the run resumed once"


class Crash(BaseException):
    """The agent's process dying while its tool runs (a BaseException: nothing catches it)."""


async def test_an_approved_call_that_started_before_a_crash_is_never_run_again(
    desk: DeskClient, served: ServedDesk, tmp_path: Path,
) -> None:
    script, ran, people = Script(refund_call("call-c", "E-5", 9)), [], People(served.base_url)

    def refund_order(order_id: str, amount: float) -> dict[str, Any]:
        ran.append(order_id)
        raise Crash

    cid = await desk.create_conversation(name="Ana")
    crashing = DeskRunner(Agent(FunctionModel(script)), desk, RunFiles(tmp_path), actions=[refund_order])
    running = asyncio.create_task(crashing.run(cid, "Refund E-5"))
    [approval] = await people.approvals_of(cid, 1)
    await people.decide(approval["approval_id"], approve=True)
    with pytest.raises(BaseException) as crashed:
        await asyncio.wait_for(running, 60)
    assert crashed.group_contains(Crash) if isinstance(crashed.value, BaseExceptionGroup) else crashed.type is Crash

    refunds = Refunds()
    await runner(script, desk, tmp_path, refunds).resume(cid)
    assert ran == ["E-5"] and refunds.ran == [], "started once, never again"
    told = script.results(1)["call-c"]
    assert told["status"] == "unknown" and "may or may not have finished" in told["detail"]

"""What every framework integration must do with the desk, written once and run for each
framework by tests/test_integrations.py through a small `Framework` adapter
(tests/agent_frameworks.py): the framework's scripted model, its runner, its stored run.

Each scenario is the issue's list, judged from outside: what the model read (its recorded
inputs), what ran (the agent's own gated tool records each run), and what the desk holds
(its HTTP API).
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from bot.clients import DeskClient
from bot.integrations.desk_requests import NothingToResume, RunFiles, RunWaiting
from tests.agent_desks import AGENT_KEY, CHANNEL_ID, People, ServedDesk, clocked_desk, eventually, printed, start_example

SUMMARY = "Ana's order #1234 is a week late and she wants a person to check it."
ACTION = "Look up order #1234 and tell Ana when it will arrive."
HANDOFF_ARGUMENTS = {"channel_id": CHANNEL_ID, "summary": SUMMARY, "expected_action": ACTION,
                     "expected_return": [{"name": "eta", "type": "string"}]}


class Script(Protocol):
    """A framework's scripted model: the given tool calls in its first turn, then "done"."""

    model: Any

    def results(self, turn: int) -> dict[str, Any]:
        """What turn `turn` (0: the first) read back of each tool call, by call id, as sent."""


class Runner(Protocol):
    async def run(self, conversation_id: str, prompt: str) -> Any: ...
    async def resume(self, conversation_id: str) -> Any: ...


class Framework(Protocol):
    """One framework as the scenarios drive it."""

    name: str
    example: str  # examples/… that runs offline on the framework's scripted model
    page: str  # docs/integrations/…, showing how to add the desk

    def call(self, tool: str, arguments: dict[str, Any], call_id: str) -> Any:
        """One tool call as the framework's model makes it."""
    def script(self, *calls: Any) -> Script: ...
    def gated(self, refund_order: Callable[..., str]) -> Any:
        """The agent's own tool `refund_order`, needing an approval (the desk's action)."""
    def runner(self, script: Script, desk: DeskClient, runs: Path, tools: list[Any]) -> Runner: ...
    def stored(self, runs: RunFiles, conversation_id: str) -> Any: ...
    def paused(self, stored: Any) -> bool:
        """Whether a stored run waits for the desk."""
    def answered(self, stored: Any) -> list[str]:
        """The calls whose desk answer went into the stored run, in order."""
    def answers(self, stored: Any) -> int | None:
        """How many times the model answered in the stored run, None where it keeps no history."""


def handoff_call(framework: Framework, call_id: str) -> Any:
    return framework.call("handoff_request", HANDOFF_ARGUMENTS, call_id)


def refund_call(framework: Framework, call_id: str, order_id: str, amount: float) -> Any:
    return framework.call("refund_order", {"order_id": order_id, "amount": amount}, call_id)


def decoded(result: Any) -> Any:
    """A tool result as the model read it: a JSON text decoded, anything else as it is."""
    return json.loads(result) if isinstance(result, str) else result


class Refunds:
    """The agent's own gated tool, `refund_order`: records every time it really runs."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, float]] = []

        def refund_order(order_id: str, amount: float) -> str:
            """Refund an order to the original payment method."""
            self.ran.append((order_id, amount))
            return json.dumps({"refunded": order_id, "amount": amount})

        self.refund_order = refund_order


class Crash(BaseException):
    """The agent's process dying while its tool runs (a BaseException: nothing catches it)."""


async def paused_run(framework: Framework, runs: RunFiles, conversation_id: str) -> Any:
    """The conversation's run once it is stored waiting for the desk."""
    async def paused() -> Any:
        stored = framework.stored(runs, conversation_id)
        return stored if stored is not None and framework.paused(stored) else None

    return await eventually(paused, f"conversation {conversation_id}'s paused run on disk")


async def stored_request(framework: Framework, runs: RunFiles, conversation_id: str, call_id: str) -> Any:
    """The desk's request for `call_id` once the paused run has stored it."""
    async def stored() -> Any:
        run = framework.stored(runs, conversation_id)
        return run.requests.get(call_id) if run is not None and framework.paused(run) else None

    return await eventually(stored, f"conversation {conversation_id}'s desk request for {call_id} on disk")


async def a_person_returns_data_through_the_form(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """The model's next input holds what the person returned."""
    script, people = framework.script(handoff_call(framework, "call-1")), People(base_url)
    cid = await desk.create_conversation(name="Ana", email="ana@example.com")
    running = asyncio.create_task(framework.runner(script, desk, runs, []).run(cid, "My order is late, can a person check it?"))

    handoff = await people.open_handoff(cid)
    request = await stored_request(framework, RunFiles(runs), cid, "call-1")
    assert request.desk_id == handoff["handoff_session_id"], "the paused run holds the desk's id"
    await people.fill_form(handoff, note="Re-shipped express.", eta="Thursday")
    await asyncio.wait_for(running, 60)

    returned = decoded(script.results(1)["call-1"])
    assert returned["status"] == "released" and returned["reason"] == "form"
    assert returned["returned"] == {"eta": "Thursday"} and returned["note"] == "Re-shipped express."
    assert "[Bot resumed" in returned["resume_text"] and "Thursday" in returned["resume_text"]
    finished = framework.stored(RunFiles(runs), cid)
    assert not framework.paused(finished) and finished.outcomes == {"call-1": "released"}
    assert framework.answered(finished) == ["call-1"] and framework.answers(finished) in (1, None)


async def a_handoff_the_desk_refuses(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """A request the desk refuses (a summary too short) goes back to the model at once, as the
    desk's error naming the field, and nobody waits for anything."""
    script = framework.script(framework.call("handoff_request", {**HANDOFF_ARGUMENTS, "summary": "Late."}, "call-x"))
    cid = await desk.create_conversation(name="Ana")
    await asyncio.wait_for(framework.runner(script, desk, runs, []).run(cid, "A person, please"), 60)
    told = decoded(script.results(1)["call-x"])
    assert told["error"] and "summary" in json.dumps(told), told
    assert await People(base_url).handoffs_of(cid) == []
    assert framework.stored(RunFiles(runs), cid).requests == {}


async def the_subscriber_does_a_user_action(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """`request_user_action` waits too: the subscriber's Done reaches the model as `done`."""
    script = framework.script(framework.call("request_user_action", {
        "reason": "verification_code", "details": "Type the code your bank sent you on the bank's page."}, "call-u"))
    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(framework.runner(script, desk, runs, []).run(cid, "Pay my order"))
    request = await stored_request(framework, RunFiles(runs), cid, "call-u")
    assert request.kind == "user_action"
    async with httpx.AsyncClient(base_url=base_url, headers={"Authorization": f"Bearer {AGENT_KEY}"}) as subscriber_app:
        answered = await subscriber_app.post(f"/api/user_actions/{request.desk_id}/response", json={"outcome": "done"})
    assert answered.status_code == 200, answered.text
    await asyncio.wait_for(running, 60)
    told = decoded(script.results(1)["call-u"])
    assert (told["status"], told["user_action_id"]) == ("done", request.desk_id)


async def a_second_run_while_one_waits(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """Nothing to resume is an error, and so is a new run over one that waits: it would
    forget the pending requests. `resume` carries on the waiting one."""
    script, people = framework.script(handoff_call(framework, "call-1")), People(base_url)
    cid = await desk.create_conversation(name="Ana")
    with pytest.raises(NothingToResume, match=cid):
        await framework.runner(script, desk, runs, []).resume(cid)
    first = asyncio.create_task(framework.runner(script, desk, runs, []).run(cid, "Can a person check my order?"))
    await paused_run(framework, RunFiles(runs), cid)
    with pytest.raises(RunWaiting, match=cid):
        await framework.runner(script, desk, runs, []).run(cid, "Hello?")
    first.cancel()  # this process "stops"; another one resumes
    resuming = asyncio.create_task(framework.runner(script, desk, runs, []).resume(cid))
    await people.fill_form(await people.open_handoff(cid), note="Done.", eta="Monday")
    await asyncio.wait_for(resuming, 60)
    assert decoded(script.results(1)["call-1"])["returned"] == {"eta": "Monday"}


async def two_approvals_answered_in_reverse_order(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """Each decision reaches its own call: the approved one runs once, the denied one never,
    and the model reads the person's reason."""
    refunds, people = Refunds(), People(base_url)
    script = framework.script(refund_call(framework, "call-a", "A-1", 20), refund_call(framework, "call-b", "B-2", 35))
    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(framework.runner(script, desk, runs, [framework.gated(refunds.refund_order)])
                                  .run(cid, "Refund both orders"))

    asked = {approval["arguments"]["order_id"]: approval for approval in await people.approvals_of(cid, 2)}
    first, second = asked["A-1"], asked["B-2"]  # asked at once, in no set order
    await people.decide(second["approval_id"], approve=True)
    await people.decide(first["approval_id"], approve=False, reason="Order A-1 was already refunded")
    await asyncio.wait_for(running, 60)

    assert refunds.ran == [("B-2", 35)], "the approved call ran once, the denied one never"
    results = script.results(1)
    assert decoded(results["call-b"]) == {"refunded": "B-2", "amount": 35}
    denial = decoded(results["call-a"])
    assert denial["status"] == "denied" and denial["reason"] == "Order A-1 was already refunded"


async def a_handoff_and_an_approval_answered_in_reverse_order(
    framework: Framework, desk: DeskClient, base_url: str, runs: Path,
) -> None:
    refunds, people = Refunds(), People(base_url)
    script = framework.script(handoff_call(framework, "call-h"), refund_call(framework, "call-r", "C-3", 12))
    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(framework.runner(script, desk, runs, [framework.gated(refunds.refund_order)])
                                  .run(cid, "Refund C-3 and find my parcel"))

    [approval] = await people.approvals_of(cid, 1)
    handoff = await people.open_handoff(cid)
    await people.decide(approval["approval_id"], approve=True)
    await people.fill_form(handoff, note="Found it.", eta="Friday")
    await asyncio.wait_for(running, 60)

    results = script.results(1)
    assert decoded(results["call-r"]) == {"refunded": "C-3", "amount": 12} and refunds.ran == [("C-3", 12)]
    assert decoded(results["call-h"])["returned"] == {"eta": "Friday"}


async def an_approval_nobody_decides_in_time(framework: Framework, database_url: str, runs: Path) -> None:
    """A timeout, on the desk's clock moved past the deadline: the tool never runs, the model
    reads `timed_out` (not a person's denial), and the stored run records it as a timeout."""
    refunds = Refunds()
    script = framework.script(refund_call(framework, "call-t", "D-4", 80))
    async with clocked_desk(database_url) as (served_desk, base_url, clock), DeskClient(base_url, api_key=AGENT_KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        running = asyncio.create_task(framework.runner(script, desk, runs, [framework.gated(refunds.refund_order)])
                                      .run(cid, "Refund D-4"))
        [approval] = await People(base_url).approvals_of(cid, 1)
        clock.advance(timedelta(minutes=6))  # past the action's 5m timeout
        assert await served_desk.approvals.expire_due() == 1
        await asyncio.wait_for(running, 60)
        assert (await People(base_url).approval(approval["approval_id"]))["state"] == "expired"

    assert refunds.ran == []
    told = decoded(script.results(1)["call-t"])
    assert told["status"] == "timed_out" and "No person refused it" in told["detail"]
    assert framework.stored(RunFiles(runs), cid).outcomes == {"call-t": "timed_out"}


async def a_handoff_nobody_answers_in_time(framework: Framework, database_url: str, runs: Path) -> None:
    """A handoff released by the idle timer (the clock moved past it) reaches the model as
    `timed_out`, with its reason: not as a person's answer."""
    script = framework.script(handoff_call(framework, "call-i"))
    async with clocked_desk(database_url) as (served_desk, base_url, clock), DeskClient(base_url, api_key=AGENT_KEY) as desk:
        cid = await desk.create_conversation(name="Ana")
        running = asyncio.create_task(framework.runner(script, desk, runs, []).run(cid, "Can a person check my order?"))
        await People(base_url).open_handoff(cid)
        clock.advance(timedelta(hours=3))  # past the 2h idle timeout
        assert await served_desk.timers.sweep() == 1
        await asyncio.wait_for(running, 60)

    told = decoded(script.results(1)["call-i"])
    assert (told["status"], told["reason"], told["returned"]) == ("timed_out", "idle_timeout", {})
    assert framework.stored(RunFiles(runs), cid).outcomes == {"call-i": "timed_out"}


async def a_call_started_before_a_crash(framework: Framework, desk: DeskClient, base_url: str, runs: Path) -> None:
    """An approved call whose tool started before the process died is never run again."""
    script, ran, people = framework.script(refund_call(framework, "call-c", "E-5", 9)), [], People(base_url)

    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order to the original payment method."""
        ran.append(order_id)
        raise Crash

    cid = await desk.create_conversation(name="Ana")
    running = asyncio.create_task(framework.runner(script, desk, runs, [framework.gated(refund_order)]).run(cid, "Refund E-5"))
    [approval] = await people.approvals_of(cid, 1)
    await people.decide(approval["approval_id"], approve=True)
    with pytest.raises(BaseException) as crashed:
        await asyncio.wait_for(running, 60)
    assert crashed.group_contains(Crash) if isinstance(crashed.value, BaseExceptionGroup) else crashed.type is Crash

    refunds = Refunds()
    await framework.runner(script, desk, runs, [framework.gated(refunds.refund_order)]).resume(cid)
    assert ran == ["E-5"] and refunds.ran == [], "started once, never again"
    told = decoded(script.results(1)["call-c"])
    assert told["status"] == "unknown" and "may or may not have finished" in told["detail"]


async def agent_and_desk_killed_mid_handoff(framework: Framework, directory: Path) -> None:
    """The framework's example, a real agent process, killed with the desk while the person
    works; both started again from their files, it carries on that run on the same handoff
    and answers once."""
    (directory / "desk").mkdir()
    served = ServedDesk(directory / "desk").start()
    people, runs = People(served.base_url), RunFiles(directory / "agent-runs")
    try:
        agent = await start_example(framework.example, served.base_url, directory)
        cid = await printed(agent, "conversation:")
        handoff = await people.open_handoff(cid)
        await paused_run(framework, runs, cid)
        agent.send_signal(signal.SIGKILL)
        await agent.wait()
        served.kill()

        await asyncio.to_thread(served.start)
        again = await start_example(framework.example, served.base_url, directory, "--conversation", cid)
        await people.fill_form(handoff, note="Re-shipped express.", eta="Thursday")
        answer = await printed(again, "answer:")
        assert await again.wait() == 0
        held = await people.handoffs_of(cid)
    finally:
        served.close()

    assert json.loads(answer.removeprefix("A person answered:"))["returned"] == {"eta": "Thursday"}
    assert [h["handoff_session_id"] for h in held] == [handoff["handoff_session_id"]], "one desk request for the call"
    stored = framework.stored(runs, cid)
    assert not framework.paused(stored) and stored.outcomes == {"call-handoff-1": "released"}
    assert framework.answered(stored) == ["call-handoff-1"] and framework.answers(stored) in (1, None), "resumed once"

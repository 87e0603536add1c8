"""OpenAI Agents SDK: the desk's people through `needs_approval` interruptions, resumed from
a stored `RunState`.

    runner = DeskRunner(agent, desk, RunFiles("runs"))     # agent's gated tools: needs_approval=True
    result = await runner.run_or_resume(conversation_id, "Where is my parcel?")

The SDK pauses a run only at a tool that needs approval: `Runner.run` returns with
`result.interruptions` (one `ToolApprovalItem` per pending call), `result.to_state()` is a
`RunState` that serialises (`to_json()`), and a later `Runner.run(agent, state)` carries on
once each item is `state.approve()`d or `state.reject()`ed. `DeskRunner` drives those pauses:

- your function tools with `needs_approval=True` whose name is an action of the desk
  (declared with `run: {by: agent}`): each `ToolApprovalItem` becomes a desk approval keyed
  by the call's `call_id`; `approved` → `state.approve(item)` and the SDK runs your tool;
  `denied` → `state.reject(item, rejection_message=…)` with the person's reason; `timed_out`
  → rejected with a message that says nobody decided (never a person's denial);
- `handoff_request` and `request_user_action` (schemas from the desk) are stop-and-resume
  tools: they too need approval, so the model's call stops the run; the runner makes the desk
  request (keyed by `call_id`), keeps the state, waits for the outcome and approves the item,
  and the tool then returns that outcome (the returned data, the resume text) to the model.

Why stop-and-resume rather than a tool that blocks until the person is done: a handoff lasts
minutes to hours, and a blocking tool's run exists only in the memory of the process awaiting
it. A restart would lose the run, and the next one would start again from the model's first
turn. Stopped, the run is a `RunState` on disk under the desk conversation's id, with the
desk's request id beside it; a restarted process reads both, waits on the same request and
resumes the run once.

What it guards against:
- a second desk request after a restart: every request carries a key derived from the call's
  `call_id`, and the desk's id is stored with the state;
- a gated tool running twice: an approved call is noted as started before the SDK runs it; a
  call found started after a restart is not run again (the model is told it may or may not
  have finished);
- a timeout read as a person's decision: `timed_out` is rejected with its own message, and
  only `approved` approves.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents import Agent, FunctionTool, Runner, RunResult, RunState, ToolApprovalItem
from agents.tool_context import ToolContext

from bot.clients import DeskClient
from bot.integrations import desk_requests
from bot.integrations.desk_requests import DEFERRED_TOOLS, DeskCalls, DeskRequest, NothingToResume, RunFiles, RunWaiting

__all__ = ["DeskRunner", "NothingToResume", "RunFiles", "RunWaiting", "StoredRun", "desk_tools", "stored_run"]

FRAMEWORK = "openai-agents"


@dataclass
class StoredRun:
    """A desk conversation's paused run: the SDK's `RunState.to_json()` (None once the run
    answered), the desk's request per `call_id`, what each stop-and-resume tool returns, each
    answered call's outcome (`released`, `approved`, `denied`, `timed_out`, …) and the approved
    calls whose tool has started."""

    state: dict[str, Any] | None = None
    requests: dict[str, DeskRequest] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)


def stored_run(runs: RunFiles, conversation_id: str) -> StoredRun | None:
    """A conversation's stored run in `runs`, or None when it has none."""
    return runs.load(conversation_id, StoredRun)


def desk_tools(desk_listing: list[dict[str, Any]], results: Callable[[str], Any]) -> list[FunctionTool]:
    """`handoff_request` and `request_user_action` as the desk lists them for a conversation,
    as stop-and-resume tools: each call stops the run (`needs_approval`), and once the runner
    approved it the tool returns `results(call_id)`, the desk's outcome."""
    tools = []
    for entry in desk_listing:
        if entry["name"] in DEFERRED_TOOLS:
            async def answer(context: ToolContext[Any], arguments: str) -> str:
                return json.dumps(results(context.tool_call_id))

            tools.append(FunctionTool(name=entry["name"], description=entry["description"],
                                      params_json_schema=entry["input_schema"], on_invoke_tool=answer,
                                      strict_json_schema=False, needs_approval=True))
    return tools


def _once(tool: FunctionTool, first_start: Callable[[str], bool]) -> FunctionTool:
    """`tool`, run at most once per call across restarts."""
    invoke = tool.on_invoke_tool

    async def guarded(context: ToolContext[Any], arguments: str) -> Any:
        if not first_start(context.tool_call_id):
            return json.dumps(desk_requests.started_before(tool.name))
        return await invoke(context, arguments)

    return dataclasses.replace(tool, on_invoke_tool=guarded)


class DeskRunner:
    """Runs `agent` on a desk conversation until it answers, waiting for the desk's people at
    each interruption, with the run's state in `runs` between pauses."""

    def __init__(self, agent: Agent[Any], desk: DeskClient, runs: RunFiles, *, wait_timeout: float | None = None) -> None:
        self.agent, self.desk, self.runs, self.wait_timeout = agent, desk, runs, wait_timeout

    def stored(self, conversation_id: str) -> StoredRun | None:
        return stored_run(self.runs, conversation_id)

    async def run(self, conversation_id: str, prompt: str, **run_options: Any) -> RunResult:
        """One user turn: runs the agent on `prompt`, waits for people as often as the run
        stops for them, and returns the run that answered. Each turn is a new SDK run: give it
        the conversation's memory as the SDK does (`session=…` among `run_options`)."""
        waiting = self.stored(conversation_id)
        if waiting is not None and waiting.state is not None:
            raise RunWaiting(f"conversation {conversation_id}: the last run waits for the desk: resume() it first")
        stored = StoredRun()
        agent, actions = await self._agent(conversation_id, stored)
        result = await Runner.run(agent, prompt, **run_options)
        return await self._until_answered(conversation_id, stored, agent, actions, result, run_options)

    async def resume(self, conversation_id: str, **run_options: Any) -> RunResult:
        """Carry on a run that was waiting for the desk when this process stopped."""
        stored = self.stored(conversation_id)
        if stored is None or stored.state is None:
            raise NothingToResume(f"conversation {conversation_id}: no run waits for the desk")
        agent, actions = await self._agent(conversation_id, stored)
        state = await RunState.from_json(agent, stored.state)
        result = await self._answered(conversation_id, stored, agent, actions, state, run_options)
        return await self._until_answered(conversation_id, stored, agent, actions, result, run_options)

    async def run_or_resume(self, conversation_id: str, prompt: str, **run_options: Any) -> RunResult:
        """`resume()` when a run of the conversation waits for the desk (this process
        restarted), else `run()` on `prompt`."""
        stored = self.stored(conversation_id)
        if stored is not None and stored.state is not None:
            return await self.resume(conversation_id, **run_options)
        return await self.run(conversation_id, prompt, **run_options)

    async def _agent(self, conversation_id: str, stored: StoredRun) -> tuple[Agent[Any], set[str]]:
        """The agent with the desk's stop-and-resume tools added and its own desk actions run
        at most once; and the names of those actions."""
        listing = await self.desk.tools(conversation_id)
        listed = {entry["name"] for entry in listing}

        first_start = desk_requests.once_per_call(stored.started, lambda: self._save(conversation_id, stored))
        own = [_once(tool, first_start) if isinstance(tool, FunctionTool) and tool.name in listed else tool
               for tool in self.agent.tools]
        actions = {tool.name for tool in self.agent.tools if isinstance(tool, FunctionTool) and tool.name in listed}
        deferred = desk_tools(listing, lambda call_id: stored.results[call_id])
        return self.agent.clone(tools=[*own, *deferred]), actions

    def _save(self, conversation_id: str, stored: StoredRun) -> None:
        self.runs.save(conversation_id, StoredRun, stored)

    async def _until_answered(
        self, conversation_id: str, stored: StoredRun, agent: Agent[Any], actions: set[str], result: RunResult,
        run_options: dict[str, Any],
    ) -> RunResult:
        while result.interruptions:
            state = result.to_state()
            stored.state = state.to_json()
            self._save(conversation_id, stored)
            result = await self._answered(conversation_id, stored, agent, actions, state, run_options)
        stored.state = None
        self._save(conversation_id, stored)
        return result

    async def _answered(
        self, conversation_id: str, stored: StoredRun, agent: Agent[Any], actions: set[str], state: RunState[Any],
        run_options: dict[str, Any],
    ) -> RunResult:
        """Every interruption answered by the desk (waited for at once), then the run carried on."""
        desk = DeskCalls(self.desk, FRAMEWORK, conversation_id, stored.requests, stored.outcomes,
                         save=lambda: self._save(conversation_id, stored), wait_timeout=self.wait_timeout)

        async def decision(item: ToolApprovalItem) -> Callable[[RunState[Any]], None]:
            call_id, name = item.call_id or "", item.name or ""
            arguments = json.loads(item.arguments or "{}")
            if name in DEFERRED_TOOLS:
                stored.results[call_id] = await desk.result(call_id, name, arguments)
                return lambda state: state.approve(item)
            if name not in actions:
                raise ValueError(f"{name} (call {call_id}) needs an approval, and the desk has no action of that name: "
                                 "declare it under actions: with run: {by: agent}, or approve it yourself")
            refusal = await desk.refusal(call_id, name, arguments)
            if refusal is None:
                return lambda state: state.approve(item)
            return lambda state: state.reject(item, rejection_message=refusal)

        decisions = await asyncio.gather(*(decision(item) for item in state.get_interruptions()))
        for decide in decisions:
            decide(state)
        return await Runner.run(agent, state, **run_options)

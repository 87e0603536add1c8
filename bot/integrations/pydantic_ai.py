"""PydanticAI: the desk's people as deferred tools, and a runner that survives restarts.

    runner = DeskRunner(agent, desk, RunFiles("runs"), actions=[refund_order])
    result = await runner.run(conversation_id, "Where is my parcel?")   # waits for people on the way
    result = await runner.resume(conversation_id)                      # after a restart

PydanticAI pauses a run on deferred tools: the run ends with `DeferredToolRequests`, and the
next run, given the message history and `DeferredToolResults`, carries on. `desk_toolset`
maps the desk onto that primitive:

- `handoff_request` and `request_user_action` (schemas from the desk, so `channel_id` is the
  enum of the channels that can deliver now) raise `CallDeferred`: the run stops on them, and
  the model never waits inside a tool;
- each of your gated actions (an `actions:` entry of the desk config run by the agent) is a
  tool with `requires_approval=True`: PydanticAI never calls it before an approval.

`DeskRunner` drives the pauses. After each run that ends deferred it stores the message
history and the pending calls (`RunFiles`, one file per desk conversation), then makes each
call's desk request (a handoff, a user action, an approval) keyed by its `tool_call_id`,
stores the desk's id, waits for every outcome at once, and runs again with
`DeferredToolResults(calls=…, approvals=…)`: a handoff's or user action's outcome (returned
data, resume text) as the call's result, or the desk's tool-level error for the model to
correct (a summary too short); an approval as
`ToolApproved`, or `ToolDenied` whose message says `denied` with the person's reason or
`timed_out` (nobody decided; not a refusal by anyone). Two pending calls answered in any
order each get their own answer, by `tool_call_id`.

What it guards against:
- a restart while people work: `resume()` reads the stored history and waits on the same
  desk ids; a request made but whose id was not yet stored is made again with the same key,
  which the desk answers with the first request's answer, so a call never gets a second
  request (the pause is stored before any request is made);
- a gated tool running twice: the runner notes that an approved call started before running
  it; a call found started after a restart is not run again, and the model is told it may or
  may not have finished;
- a timeout read as a human decision, and a gated tool running without an approval: the only
  path to the tool is `ToolApproved`, given for an `approved` outcome alone.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai import Agent, CallDeferred, DeferredToolRequests, DeferredToolResults, FunctionToolset, RunContext, Tool
from pydantic_ai.agent import AgentRunResult
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.tools import ToolApproved, ToolDenied

from bot.clients import DeskClient
from bot.integrations import desk_requests
from bot.integrations.desk_requests import DEFERRED_TOOLS, DeskCalls, DeskRequest, NothingToResume, RunFiles, RunWaiting

__all__ = ["DeskRequest", "DeskRunner", "NothingToResume", "RunFiles", "RunWaiting", "StoredRun", "desk_toolset", "stored_run"]

FRAMEWORK = "pydantic-ai"
_METADATA_KEY = "handoff_desk"


@dataclass
class StoredRun:
    """A desk conversation's agent run as kept between pauses: the message history, the
    calls the last run ended on (None when it finished), the desk's request for each call,
    each answered call's outcome (`released`, `approved`, `denied`, `timed_out`, …) and the
    approved calls whose tool has started."""

    messages: list[ModelMessage] = field(default_factory=list)
    waiting: DeferredToolRequests | None = None
    requests: dict[str, DeskRequest] = field(default_factory=dict)
    outcomes: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)


def stored_run(runs: RunFiles, conversation_id: str) -> StoredRun | None:
    """A conversation's stored run in `runs`, or None when it has none."""
    return runs.load(conversation_id, StoredRun)


def desk_toolset(
    desk_tools: Sequence[dict[str, Any]], actions: Sequence[Callable[..., Any]] = (), *,
    on_start: Callable[[str], bool] | None = None,
) -> FunctionToolset[Any]:
    """The desk's tools for one conversation, from the desk's listing (`desk.tools(cid)`):
    `handoff_request` and `request_user_action` deferred (`CallDeferred`, marked as the
    desk's), and each of `actions` (named by its function's name after a desk action)
    requiring approval. `on_start(tool_call_id)` is asked before an approved action runs and
    returns False when that call already started once (the runner keeps that across restarts)."""
    listed = {tool["name"]: tool for tool in desk_tools}
    tools: list[Tool[Any]] = []
    for name in DEFERRED_TOOLS:
        if name in listed:
            tools.append(Tool.from_schema(_deferred, name, listed[name]["description"], listed[name]["input_schema"]))
    for action in actions:
        name = action.__name__
        if name not in listed:
            raise ValueError(f"actions: {name!r} is no action of the desk for this conversation "
                             f"(it lists {sorted(listed)}); declare it under actions: with run: {{by: agent}}")
        tool = Tool.from_schema(_gated(action, on_start), name, listed[name]["description"], listed[name]["input_schema"],
                                takes_ctx=True)
        tool.requires_approval = True
        tools.append(tool)
    return FunctionToolset(tools)


def _deferred(**arguments: Any) -> None:
    """A person answers this call later: the run stops here, and the runner asks the desk
    once the stopped run is stored (so a restart asks again under the same key, never anew)."""
    raise CallDeferred(metadata={_METADATA_KEY: True})


def _gated(action: Callable[..., Any], on_start: Callable[[str], bool] | None) -> Callable[..., Any]:
    async def run(ctx: RunContext[Any], **arguments: Any) -> Any:
        if on_start is not None and not on_start(ctx.tool_call_id or ""):
            return desk_requests.started_before(action.__name__)
        result = action(**arguments)
        return await result if inspect.isawaitable(result) else result

    return run


class DeskRunner:
    """Runs `agent` on a desk conversation until it answers, waiting for the desk's people
    whenever the run ends on deferred calls, with the run's state in `runs` between pauses."""

    def __init__(
        self, agent: Agent[Any, Any], desk: DeskClient, runs: RunFiles, *, actions: Sequence[Callable[..., Any]] = (),
        wait_timeout: float | None = None,
    ) -> None:
        self.agent, self.desk, self.runs, self.actions = agent, desk, runs, tuple(actions)
        self.wait_timeout = wait_timeout

    def stored(self, conversation_id: str) -> StoredRun | None:
        """The conversation's stored run, as the last pause or answer left it."""
        return stored_run(self.runs, conversation_id)

    async def run_or_resume(self, conversation_id: str, prompt: str, **run_options: Any) -> AgentRunResult[Any]:
        """`resume()` when a run of the conversation waits for the desk (this process
        restarted), else `run()`: what a process that may have been restarted calls."""
        state = self.stored(conversation_id)
        if state is not None and state.waiting is not None:
            return await self.resume(conversation_id, **run_options)
        return await self.run(conversation_id, prompt, **run_options)

    async def run(self, conversation_id: str, prompt: str, **run_options: Any) -> AgentRunResult[Any]:
        """One user turn: runs the agent on the stored history plus `prompt`, waits for people
        as often as the run asks for them, and returns the run that answered."""
        state = self.stored(conversation_id) or StoredRun()
        if state.waiting is not None:
            raise RunWaiting(f"conversation {conversation_id}: the last run waits for the desk "
                             f"({len(state.waiting.calls) + len(state.waiting.approvals)} calls): resume() it first")
        result = await self._run_agent(conversation_id, state, prompt, None, run_options)
        return await self._until_answered(conversation_id, state, result, run_options)

    async def resume(self, conversation_id: str, **run_options: Any) -> AgentRunResult[Any]:
        """Carry on a run that was waiting for the desk when this process stopped."""
        state = self.stored(conversation_id)
        if state is None or state.waiting is None:
            raise NothingToResume(f"conversation {conversation_id}: no run waits for the desk")
        return await self._until_answered(conversation_id, state, None, run_options)

    async def _until_answered(
        self, conversation_id: str, state: StoredRun, result: AgentRunResult[Any] | None, run_options: dict[str, Any],
    ) -> AgentRunResult[Any]:
        while True:
            if result is not None:
                self._keep(conversation_id, state, result)
                if state.waiting is None:
                    return result
            answers = await self._answers(conversation_id, state)
            result = await self._run_agent(conversation_id, state, None, answers, run_options)

    def _keep(self, conversation_id: str, state: StoredRun, result: AgentRunResult[Any]) -> None:
        state.messages = result.all_messages()
        state.waiting = result.output if isinstance(result.output, DeferredToolRequests) else None
        self._save(conversation_id, state)

    def _save(self, conversation_id: str, state: StoredRun) -> None:
        self.runs.save(conversation_id, StoredRun, state)

    async def _run_agent(
        self, conversation_id: str, state: StoredRun, prompt: str | None, answers: DeferredToolResults | None,
        run_options: dict[str, Any],
    ) -> AgentRunResult[Any]:
        toolset = desk_toolset(await self.desk.tools(conversation_id), self.actions,
                               on_start=desk_requests.once_per_call(state.started, lambda: self._save(conversation_id, state)))
        return await self.agent.run(
            prompt, message_history=state.messages, deferred_tool_results=answers, toolsets=[toolset],
            output_type=[self.agent.output_type, DeferredToolRequests], **run_options,
        )

    async def _answers(self, conversation_id: str, state: StoredRun) -> DeferredToolResults:
        """The desk's outcome of every call the run waits for, waited for at once."""
        waiting = state.waiting
        assert waiting is not None
        desk = DeskCalls(self.desk, FRAMEWORK, conversation_id, state.requests, state.outcomes,
                         save=lambda: self._save(conversation_id, state), wait_timeout=self.wait_timeout)

        async def result(call: ToolCallPart) -> dict[str, Any]:
            if _METADATA_KEY not in waiting.metadata.get(call.tool_call_id, {}):  # not the desk's to answer
                raise ValueError(f"{call.tool_name} (call {call.tool_call_id}) was deferred by something other than the desk")
            return await desk.result(call.tool_call_id, call.tool_name, call.args_as_dict())

        async def decision(call: ToolCallPart) -> ToolApproved | ToolDenied:
            arguments = waiting.validated_args.get(call.tool_call_id)
            refusal = await desk.refusal(call.tool_call_id, call.tool_name,
                                         arguments if arguments is not None else call.args_as_dict())
            return ToolApproved() if refusal is None else ToolDenied(refusal)

        answers = await asyncio.gather(*(result(call) for call in waiting.calls),
                                       *(decision(call) for call in waiting.approvals))
        results, decisions = answers[:len(waiting.calls)], answers[len(waiting.calls):]
        return DeferredToolResults(calls={c.tool_call_id: r for c, r in zip(waiting.calls, results, strict=True)},
                                   approvals={c.tool_call_id: d for c, d in zip(waiting.approvals, decisions, strict=True)})

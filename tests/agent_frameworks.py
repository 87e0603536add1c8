"""The two frameworks as tests/agent_scenarios.py drives them: each one's own scripted model
(PydanticAI's `FunctionModel`, the Agents SDK's `ScriptedModel`), its runner and its stored run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents import Agent as AgentsAgent
from agents import FunctionTool, function_tool
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bot.clients import DeskClient
from bot.integrations import openai_agents, pydantic_ai
from bot.integrations.desk_requests import RunFiles


class FunctionScript:
    """A `FunctionModel` function: `calls` in the first turn, then "done"; `inputs` holds
    what each turn received."""

    def __init__(self, *calls: ToolCallPart) -> None:
        self.calls = calls
        self.inputs: list[list[ModelMessage]] = []
        self.model = FunctionModel(self)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.inputs.append(list(messages))
        return ModelResponse(parts=list(self.calls) if len(self.inputs) == 1 else [TextPart("done")])

    def results(self, turn: int) -> dict[str, Any]:
        last = self.inputs[turn][-1]
        assert isinstance(last, ModelRequest), last
        return {part.tool_call_id: part.content for part in last.parts if isinstance(part, ToolReturnPart)}


class PydanticAI:
    name = "pydantic-ai"
    example = "pydantic_ai_agent.py"
    page = "pydantic-ai.md"

    script = FunctionScript
    stored = staticmethod(pydantic_ai.stored_run)

    def call(self, tool: str, arguments: dict[str, Any], call_id: str) -> ToolCallPart:
        return ToolCallPart(tool, arguments, tool_call_id=call_id)

    def gated(self, refund_order: Callable[..., str]) -> Callable[..., str]:
        return refund_order  # DeskRunner's actions= make it require approval

    def runner(self, script: FunctionScript, desk: DeskClient, runs: Path, tools: list[Any]) -> pydantic_ai.DeskRunner:
        return pydantic_ai.DeskRunner(Agent(script.model), desk, RunFiles(runs), actions=tools)

    def paused(self, stored: pydantic_ai.StoredRun) -> bool:
        return stored.waiting is not None

    def answered(self, stored: pydantic_ai.StoredRun) -> list[str]:
        """The calls whose result the stored history holds, in order."""
        return [p.tool_call_id for m in stored.messages for p in m.parts if isinstance(p, ToolReturnPart)]

    def answers(self, stored: pydantic_ai.StoredRun) -> int | None:
        """How many times the model answered the user in the stored history."""
        return sum(isinstance(p, TextPart) for m in stored.messages if isinstance(m, ModelResponse) for p in m.parts)


class AgentsScript:
    """The SDK's `ScriptedModel`: `calls` in the first turn, then "done"; `model.calls`
    records what each turn received."""

    def __init__(self, *calls: Any) -> None:
        done = [ModelStep.respond(lambda call: [assistant_message("done")]) for _ in range(3)]
        self.model = ScriptedModel([list(calls), *done])

    def results(self, turn: int) -> dict[str, Any]:
        call: ModelCall = self.model.calls[turn]
        return {item["call_id"]: item["output"] for item in call.input
                if isinstance(item, dict) and item.get("type") == "function_call_output"}


class OpenAIAgents:
    name = "openai-agents"
    example = "openai_agents_agent.py"
    page = "openai-agents.md"

    script = AgentsScript
    stored = staticmethod(openai_agents.stored_run)

    def call(self, tool: str, arguments: dict[str, Any], call_id: str) -> Any:
        return function_call(tool, arguments, call_id=call_id)

    def gated(self, refund_order: Callable[..., str]) -> FunctionTool:
        return function_tool(refund_order, needs_approval=True)

    def runner(self, script: AgentsScript, desk: DeskClient, runs: Path, tools: list[Any]) -> openai_agents.DeskRunner:
        return openai_agents.DeskRunner(AgentsAgent(name="Support", model=script.model, tools=tools), desk, RunFiles(runs))

    def paused(self, stored: openai_agents.StoredRun) -> bool:
        return stored.state is not None

    def answered(self, stored: openai_agents.StoredRun) -> list[str]:
        """The calls whose desk outcome the stored run handed its stop-and-resume tools."""
        return list(stored.results)

    def answers(self, stored: openai_agents.StoredRun) -> int | None:
        return None  # a finished run keeps no history here: the SDK's own session holds it


FRAMEWORKS = [PydanticAI(), OpenAIAgents()]

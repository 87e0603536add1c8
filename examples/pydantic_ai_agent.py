"""A PydanticAI agent that asks the desk's people for help, and survives a restart while it waits.

    python examples/pydantic_ai_agent.py --desk http://127.0.0.1:8000 --api-key "$HANDOFF_API_KEY" \\
        --model openai:gpt-5.2 "My order #1234 is a week late, can a person check it?"

Without `--model` it runs offline on a scripted PydanticAI `FunctionModel` that asks for a
person once and then answers with what the person returned (tests/test_integrations.py runs
it that way against a real `handoff serve`). It prints the desk conversation's id first;
started again with `--conversation ID` after being stopped, it carries on the waiting run
instead of starting a new one. `refund_order` stands for one of your own tools that a person
must approve first (declared in the desk config with `run: {by: agent}`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from desk_args import arguments  # examples/desk_args.py, beside this file
from pydantic_ai import Agent, models
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, FunctionModel

from bot.clients import DeskClient
from bot.integrations.pydantic_ai import DeskRunner, RunFiles


def refund_order(order_id: str, amount: float) -> dict[str, Any]:
    """Refund an order (your shop's code would run here, once a person approved)."""
    return {"refunded": order_id, "amount": amount}


# --8<-- [start:desk]
async def answer(desk_url: str, api_key: str, model: Model | str, prompt: str, conversation_id: str | None = None) -> str:
    async with DeskClient(desk_url, api_key=api_key) as desk:
        agent = Agent(model, instructions="You are the shop's support agent. Ask for a person when you cannot help.")
        runner = DeskRunner(agent, desk, RunFiles("agent-runs"), actions=[refund_order])
        if conversation_id is None:
            conversation_id = await desk.create_conversation(name="Ana", email="ana@example.com")
            print(f"conversation: {conversation_id}", flush=True)
        result = await runner.run_or_resume(conversation_id, prompt)  # waits for the people it asks
        return str(result.output)
# --8<-- [end:desk]


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Offline stand-in for a model: hand off once, then answer with what came back."""
    returned = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if returned:
        return ModelResponse(parts=[TextPart(f"A person answered: {json.dumps(returned[0].content, sort_keys=True)}")])
    [handoff] = [tool for tool in info.function_tools if tool.name == "handoff_request"]
    channel = handoff.parameters_json_schema["properties"]["channel_id"]["enum"][0]  # the desk's channels
    return ModelResponse(parts=[ToolCallPart("handoff_request", {
        "channel_id": channel, "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
        "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
        "expected_return": [{"name": "eta", "type": "string", "required": True}],
    }, tool_call_id="call-handoff-1")])


def main() -> None:
    args = arguments(__doc__ or "")
    if args.model is None:
        models.ALLOW_MODEL_REQUESTS = False  # offline: any real model request would fail loudly
    model: Model | str = args.model or FunctionModel(scripted)
    print(f"answer: {asyncio.run(answer(args.desk, args.api_key, model, args.prompt, args.conversation))}", flush=True)


if __name__ == "__main__":
    main()

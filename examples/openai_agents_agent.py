"""An OpenAI Agents SDK agent that asks the desk's people for help, and survives a restart while it waits.

    python examples/openai_agents_agent.py --desk http://127.0.0.1:8000 --api-key "$HANDOFF_API_KEY" \\
        --model gpt-5.2 "My order #1234 is a week late, can a person check it?"

Without `--model` it runs offline, tracing off, on the SDK's own `ScriptedModel` answering
from what it reads: it asks for a person once, then answers with what the person returned
(tests/test_integrations.py runs it that way against a real `handoff serve`). It prints the
desk conversation's id first; started again with `--conversation ID` after being stopped, it
resumes the stored run instead of starting a new one. `refund_order` stands for one of your
own tools that a person must approve first (declared in the desk config with `run: {by: agent}`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import Agent, FunctionTool, Model, function_tool, set_tracing_disabled
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from desk_args import arguments  # examples/desk_args.py, beside this file

from bot.clients import DeskClient
from bot.integrations.openai_agents import DeskRunner, RunFiles


@function_tool(needs_approval=True)
def refund_order(order_id: str, amount: float) -> str:
    """Refund an order to the original payment method (runs once a person approved)."""
    return json.dumps({"refunded": order_id, "amount": amount})


# --8<-- [start:desk]
async def answer(desk_url: str, api_key: str, model: Model | str, prompt: str, conversation_id: str | None = None) -> str:
    async with DeskClient(desk_url, api_key=api_key) as desk:
        agent = Agent(name="Support", model=model, tools=[refund_order],
                      instructions="You are the shop's support agent. Ask for a person when you cannot help.")
        runner = DeskRunner(agent, desk, RunFiles("agent-runs"))
        if conversation_id is None:
            conversation_id = await desk.create_conversation(name="Ana", email="ana@example.com")
            print(f"conversation: {conversation_id}", flush=True)
        result = await runner.run_or_resume(conversation_id, prompt)  # waits for the people it asks
        return str(result.final_output)
# --8<-- [end:desk]


def scripted(call: ModelCall) -> list[Any]:
    """Offline stand-in for a model: hand off once, then answer with what came back."""
    returned = [item["output"] for item in call.input if isinstance(item, dict) and item.get("type") == "function_call_output"]
    if returned:
        return [assistant_message(f"A person answered: {returned[-1]}")]
    [handoff] = [tool for tool in call.tools if isinstance(tool, FunctionTool) and tool.name == "handoff_request"]
    channel = handoff.params_json_schema["properties"]["channel_id"]["enum"][0]  # the desk's channels
    return [function_call("handoff_request", {
        "channel_id": channel, "summary": "Ana's order #1234 is a week late and she wants a person to check it.",
        "expected_action": "Look up order #1234 and tell Ana when it will arrive.",
        "expected_return": [{"name": "eta", "type": "string", "required": True}],
    }, call_id="call-handoff-1")]


def main() -> None:
    args = arguments(__doc__ or "")
    if args.model is None:
        set_tracing_disabled(True)  # offline: nothing is sent to OpenAI's trace exporter
    model: Model | str = args.model or ScriptedModel([ModelStep.respond(scripted) for _ in range(8)])
    print(f"answer: {asyncio.run(answer(args.desk, args.api_key, model, args.prompt, args.conversation))}", flush=True)


if __name__ == "__main__":
    main()

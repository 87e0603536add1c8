"""What the framework integrations cost per gated call, against the framework alone and the
bare client making the same desk request.

Run:  python bench/integrations.py [--n 100] [--batch 10] [--log-level warning]

One `handoff serve` child process on a fresh SQLite file, with an agent-run action whose
policy is `none`, so the desk answers at once (`APPROVED`) and no person's latency hides what
the code costs. Each round is one user turn in which a scripted model calls `check_stock`
once and then answers, measured three ways per framework, alternating in batches of `--batch`
so a shared, noisy machine slows all alike:

- `integration`: `DeskRunner.run` on a new desk conversation: the desk's tool listing, the
  run paused on the call (deferred / interrupted), the state written to its file, the desk
  asked, the run resumed, the tool run, the state written again;
- `framework`: the same agent and scripted model with the tool needing no approval, no desk;
- `client`: `DeskClient.call_tool` for the same action on a new conversation (the desk
  request alone), then the function.

Printed per framework and way: p50 and p99 latency, rounds per second, this process's CPU
per round (time.process_time: the agent's side; the desk's is in the child), and what the
integration adds over framework + client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import client as cb  # noqa: E402 - the sibling benchmark's tallies, found through the line above
import roundtrip as rt  # noqa: E402

CHECK_STOCK = {
    "id": "check_stock", "description": "Check the stock of an item", "risk": "low", "policy": "none",
    "input_schema": {"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]},
    "run": {"by": "agent"},
}
WAYS = ("integration", "framework", "client")


def check_stock(sku: str) -> str:
    """Check the stock of an item."""
    return json.dumps({"sku": sku, "in_stock": 3})


def pydantic_ai_rounds(url: str, runs: Path) -> dict[str, Callable[[], Awaitable[Any]]]:
    from pydantic_ai import Agent, models
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from bot.clients import DeskClient
    from bot.integrations.pydantic_ai import DeskRunner, RunFiles

    models.ALLOW_MODEL_REQUESTS = False

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("check_stock", {"sku": "A-1"})])
        return ModelResponse(parts=[TextPart("3 in stock")])

    desk = DeskClient(url)
    runner = DeskRunner(Agent(FunctionModel(model)), desk, RunFiles(runs), actions=[check_stock])
    alone = Agent(FunctionModel(model), tools=[check_stock])

    async def integration() -> Any:
        return await runner.run(await desk.create_conversation(), "Is A-1 in stock?")

    async def framework() -> Any:
        return await alone.run("Is A-1 in stock?")

    async def client() -> Any:
        await desk.call_tool(await desk.create_conversation(), "check_stock", {"sku": "A-1"})
        return check_stock("A-1")

    return {"integration": integration, "framework": framework, "client": client}


def openai_agents_rounds(url: str, runs: Path) -> dict[str, Callable[[], Awaitable[Any]]]:
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call

    from bot.clients import DeskClient
    from bot.integrations.openai_agents import DeskRunner, RunFiles

    set_tracing_disabled(True)

    def model(call: ModelCall) -> list[Any]:
        answered = any(isinstance(item, dict) and item.get("type") == "function_call_output" for item in call.input)
        return [assistant_message("3 in stock")] if answered else [function_call("check_stock", {"sku": "A-1"}, call_id="c1")]

    def scripted() -> ScriptedModel:
        return ScriptedModel([ModelStep.respond(model) for _ in range(2)])

    desk = DeskClient(url)

    async def integration() -> Any:
        agent = Agent(name="Support", model=scripted(), tools=[function_tool(check_stock, needs_approval=True)])
        return await DeskRunner(agent, desk, RunFiles(runs)).run(await desk.create_conversation(), "Is A-1 in stock?")

    async def framework() -> Any:
        return await Runner.run(Agent(name="Support", model=scripted(), tools=[function_tool(check_stock)]), "Is A-1 in stock?")

    async def client() -> Any:
        await desk.call_tool(await desk.create_conversation(), "check_stock", {"sku": "A-1"})
        return check_stock("A-1")

    return {"integration": integration, "framework": framework, "client": client}


async def measure(rounds: dict[str, Callable[[], Awaitable[Any]]], n: int, batch: int, name: str, tallies: cb.Tallies) -> None:
    for way in WAYS:
        for _ in range(5):  # warm-up, unmeasured
            await rounds[way]()
    for _ in range(n // batch):
        for way in WAYS:
            for _ in range(batch):
                await cb.timed_async(tallies.setdefault((name, way), cb.Tally()), rounds[way])


def report(tallies: cb.Tallies, frameworks: tuple[str, ...]) -> None:
    print(f"{'framework':<15}{'way':<13}{'p50 ms':>9}{'p99 ms':>9}{'rounds/s':>10}{'CPU µs/round':>14}")
    for name in frameworks:
        for way in WAYS:
            t = tallies[(name, way)]
            print(f"{name:<15}{way:<13}{t.p(50):>9.2f}{t.p(99):>9.2f}{t.per_second():>10.0f}{t.cpu_us():>14.0f}")
        whole, parts = tallies[(name, "integration")], (tallies[(name, "framework")], tallies[(name, "client")])
        print(f"{'':<15}{'added':<13}{whole.p(50) - sum(p.p(50) for p in parts):>9.2f}{'':>9}{'':>10}"
              f"{whole.cpu_us() - sum(p.cpu_us() for p in parts):>14.0f}   (integration - framework - client)")


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        server = rt.start_desk("integrations-bench", folder, f"sqlite:///{folder / 'desk.db'}", log_level=args.log_level,
                               extra={"actions": [CHECK_STOCK]})
        try:
            url = f"http://127.0.0.1:{server.port}"
            tallies: cb.Tallies = {}
            started = time.perf_counter()
            asyncio.run(measure(pydantic_ai_rounds(url, folder / "pai-runs"), args.n, args.batch, "pydantic-ai", tallies))
            asyncio.run(measure(openai_agents_rounds(url, folder / "oai-runs"), args.n, args.batch, "openai-agents", tallies))
            elapsed = time.perf_counter() - started
        finally:
            server.stop()
    print(f"{args.n} rounds of each way per framework, batches of {args.batch}, {elapsed:.1f} s in all\n")
    report(tallies, ("pydantic-ai", "openai-agents"))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100, help="measured rounds of each way per framework")
    parser.add_argument("--batch", type=int, default=10, help="rounds of one way before switching")
    parser.add_argument("--log-level", default="warning")
    main(parser.parse_args())

"""LangGraph benchmark: what a handoff through the desk costs a LangGraph agent, against
LangGraph's own interrupt and resume with nobody behind it.

Run:  python bench/langgraph_handoff.py [--rounds N]

Everything runs in one process: the example's graph (examples/langgraph_desk.py, its
scripted model, a `SqliteSaver` on a file), and a desk started in-process on a SQLite file
and spoken to over HTTP through httpx's ASGI transport (no sockets). Each round is a new
thread: the model calls `handoff_request`, and

- bare: a tool that calls `interrupt()` once is resumed at once with a fixed answer
  (`graph.invoke`, then `graph.invoke(Command(resume=…))`): LangGraph's own cost of a
  human in the loop, the floor;
- desk: `DeskDriver.run` opens the handoff at the desk (two interrupts, the request under
  its Idempotency-Key, a long-poll for the outcome) while a person, as a task long-polling
  the conversation, releases it over the API with a returned value as soon as it is open.

Printed per row: p50 and p99 of a round (ms), rounds per second, CPU per round (the whole
process: agent, desk and person) and the ratio desk / bare measured in the same run, then
the peak RSS. Nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run from anywhere

import httpx  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langchain_core.tools import tool  # noqa: E402
from langgraph.checkpoint.sqlite import SqliteSaver  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from bot.clients import DeskClient  # noqa: E402
from bot.config import Config  # noqa: E402
from bot.desk import Desk  # noqa: E402
from bot.integrations.langgraph import DeskDriver, send_tool_calls  # noqa: E402
from bot.runtime.clock import Clock  # noqa: E402
from bot.runtime.logs import configure_logging  # noqa: E402
from bot.web.app import create_app  # noqa: E402


def load_example() -> Any:
    spec = importlib.util.spec_from_file_location("langgraph_desk_example", ROOT / "examples" / "langgraph_desk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@tool
def handoff_request(summary: str, expected_action: str, expected_return: list[dict[str, Any]]) -> str:
    """A person looks at it (bare: LangGraph's interrupt, answered at once)."""
    return str(interrupt({"summary": summary}))


def bare_graph(model: Any, checkpointer: Any) -> Any:
    """The example's graph shape with a tool that interrupts once and nothing behind it."""
    bound = model.bind_tools([handoff_request])
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [bound.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode([handoff_request]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", send_tool_calls, ["tools", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


async def person(http: httpx.AsyncClient, cid: str) -> None:
    """Release the conversation's handoff as soon as it is open (long-polling its messages)."""
    after = 0
    while True:
        messages = (await http.get(f"/api/conversations/{cid}/messages", params={"after": after, "wait": 25})).json()["messages"]
        for message in messages:
            after = message["id"]
            if message.get("handoff_session_id"):
                released = await http.post(f"/api/handoffs/{message['handoff_session_id']}/release",
                                           json={"outcome": "resolved", "return_values": {"eta_date": "2026-12-24"}})
                assert released.status_code == 200, released.text
                return


def report(label: str, walls: list[float], cpu: float, baseline: tuple[float, float] | None) -> tuple[float, float]:
    ms = sorted(w * 1000 for w in walls)
    p50, p99 = statistics.median(ms), statistics.quantiles(ms, n=100, method="inclusive")[98]
    per_round_cpu = cpu * 1000 / len(walls)
    ratio = f"  ×{p50 / baseline[0]:.1f} wall, ×{per_round_cpu / baseline[1]:.1f} CPU" if baseline else ""
    print(f"{label:6} p50 {p50:7.2f} ms  p99 {p99:7.2f} ms  {len(walls) / (sum(walls)):7.1f} rounds/s  "
          f"CPU {per_round_cpu:6.2f} ms/round{ratio}")
    return p50, per_round_cpu


async def timed(rounds: int, one: Callable[[int], Awaitable[None]]) -> tuple[list[float], float]:
    for warm in range(5):
        await one(-1 - warm)
    walls, cpu0 = [], time.process_time()
    for index in range(rounds):
        start = time.perf_counter()
        await one(index)
        walls.append(time.perf_counter() - start)
    return walls, time.process_time() - cpu0


async def main() -> None:
    parser = argparse.ArgumentParser(description="What a handoff through the desk costs a LangGraph agent.")
    parser.add_argument("--rounds", type=int, default=200)
    rounds = parser.parse_args().rounds
    configure_logging(level="warning", fmt="console")
    example = load_example()
    folder = Path(tempfile.mkdtemp(prefix="bench-langgraph-"))
    config = Config.from_mapping({
        "database_url": f"sqlite:///{folder / 'desk.db'}", "secret_key": "bench-secret-key-0123456789",
        "server": {"public_url": "http://desk.test"},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}],
    })
    desk = Desk(config, clock=Clock(), run_timers=False)
    await desk.start()
    transport = httpx.ASGITransport(app=create_app(desk, manage_desk=False))
    try:
        with SqliteSaver.from_conn_string(str(folder / "agent.db")) as checkpointer:
            bare = bare_graph(example.ScriptedModel(responses=example.SCRIPT), checkpointer)

            async def bare_round(index: int) -> None:
                thread = {"configurable": {"thread_id": f"bare-{index}"}}
                await asyncio.to_thread(bare.invoke, {"messages": [HumanMessage("Where is my order?")]}, thread)
                await asyncio.to_thread(bare.invoke, Command(resume="eta_date: 2026-12-24"), thread)

            graph = example.build_graph(example.ScriptedModel(responses=example.SCRIPT), checkpointer)
            async with DeskClient("http://desk.test", transport=transport) as client, \
                    httpx.AsyncClient(transport=transport, base_url="http://desk.test") as http:
                driver = DeskDriver(graph, client)

                async def desk_round(index: int) -> None:
                    cid = await client.create_conversation(name="Ana")
                    releasing = asyncio.create_task(person(http, cid))
                    await driver.run({"messages": [HumanMessage("Where is my order?")]}, thread_id=f"desk-{index}",
                                     conversation_id=cid)
                    await releasing

                print(f"{rounds} rounds each, one process (agent, desk and person), SQLite files in {folder}")
                baseline = report("bare", *await timed(rounds, bare_round), None)
                report("desk", *await timed(rounds, desk_round), baseline)
    finally:
        await desk.stop()
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB (the whole run)")


if __name__ == "__main__":
    asyncio.run(main())

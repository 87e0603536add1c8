"""Handoff Desk as the human in the loop of a LangGraph agent (docs/integrations/langgraph.md).

    HANDOFF_API_KEY=… python examples/langgraph_desk.py --desk http://127.0.0.1:8000 \\
        --checkpoints agent.db --thread ana-1 "Where is my order #1234?"

The agent hands Ana to a person at the desk, asking for the delivery date back, and waits
(for hours if need be). Killed and started again with `--resume` and the same thread, it
picks up where it stopped: the checkpoint holds the desk's request id, so nothing is asked
twice. `build_graph` is the part a LangGraph user adds; `ScriptedModel` stands in for your
chat model (ChatOpenAI(...), ChatAnthropic(...)) so the example runs offline.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a clone without installing

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from pydantic import Field

from bot.clients import DeskClient
from bot.integrations.langgraph import DeskDriver, RunResult, approval_gated, desk_tools, send_tool_calls

REFUNDS: list[dict[str, Any]] = []  # what refund_order did, in this process


@tool
def refund_order(order_id: str, amount: float) -> str:
    """Refund an order (money leaves the shop: a person approves it first)."""
    REFUNDS.append({"order_id": order_id, "amount": amount})
    return f"refunded {amount:.2f} on order {order_id}"


def build_graph(model: BaseChatModel, checkpointer: BaseCheckpointSaver[Any]) -> Any:
    tools = [*desk_tools(channel_id=1), approval_gated(refund_order)]  # the desk's tools, and a gated one
    bound = model.bind_tools(tools)
    graph = StateGraph(MessagesState)
    graph.add_node("model", lambda state: {"messages": [bound.invoke(state["messages"])]})
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", send_tool_calls, ["tools", END])  # one task per call
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


async def talk(graph: Any, desk_url: str, thread_id: str, message: str | None) -> RunResult:
    """One user message on a thread (None: resume the thread where it stopped), to the end."""
    async with DeskClient(desk_url, api_key=os.environ.get("HANDOFF_API_KEY")) as desk:
        driver = DeskDriver(graph, desk, subscriber={"name": "Ana", "email": "ana@example.com"})
        start = None if message is None else {"messages": [HumanMessage(message)]}
        return await driver.run(start, thread_id=thread_id)


class ScriptedModel(FakeMessagesListChatModel):
    """LangGraph's fake chat model, answering by turn (the number of AI messages it was
    shown) instead of by a counter in memory, so a restarted process answers the same.
    It keeps what it was shown in `inputs`."""

    inputs: list[list[BaseMessage]] = Field(default_factory=list)

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.inputs.append(list(messages))
        turn = sum(isinstance(message, AIMessage) for message in messages)
        return ChatResult(generations=[ChatGeneration(message=self.responses[min(turn, len(self.responses) - 1)])])


HANDOFF_CALL = {
    "name": "handoff_request", "id": "call_handoff",
    "args": {"summary": "Ana's order #1234 is a week late and she wants a person to check it.",
             "expected_action": "Look up order #1234 and give its delivery date.",
             "expected_return": [{"name": "eta_date", "type": "date", "label": "Delivery date", "required": True}]},
}
SCRIPT = [AIMessage("", tool_calls=[HANDOFF_CALL]), AIMessage("Thanks for waiting, Ana: a colleague checked your order.")]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--desk", required=True, help="the desk's URL")
    parser.add_argument("--checkpoints", required=True, help="the SQLite file the graph is checkpointed in")
    parser.add_argument("--thread", required=True, help="the LangGraph thread id of this conversation")
    parser.add_argument("--resume", action="store_true", help="resume the thread where it stopped (after a restart)")
    parser.add_argument("message", nargs="?", default="Where is my order #1234?")
    options = parser.parse_args()

    model = ScriptedModel(responses=SCRIPT)
    with SqliteSaver.from_conn_string(options.checkpoints) as checkpointer:
        graph = build_graph(model, checkpointer)
        result = await talk(graph, options.desk, options.thread, None if options.resume else options.message)
    for message in model.inputs[-1] if model.inputs else []:
        if isinstance(message, ToolMessage):
            print(f"model read: {message.content}")
    print(f"agent: {result.values['messages'][-1].content}")


if __name__ == "__main__":
    asyncio.run(main())

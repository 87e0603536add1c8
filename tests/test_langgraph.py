"""The LangGraph integration (bot/integrations/langgraph.py) against a real `handoff serve`.

The graph is the example's (examples/langgraph_desk.py): LangGraph's own fake chat model
(`FakeMessagesListChatModel`, answering by turn), a `ToolNode` fed one call per task, and a
`SqliteSaver` on a file. The desk is a `handoff serve` subprocess on its own SQLite file
(tests/crash_harness.py's `DeskProcess`); the person acts as one would, through the desk:
replying in the owner inbox, releasing over the API with the owner token, deciding approvals.
What the model read is taken from what the fake model was shown, and what ran from the
tools' own records.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import httpx
import pytest
import yaml
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

from bot.clients import DeskClient
from bot.clients.models import ApprovalOutcome
from bot.config import AgentActionRun
from bot.integrations.langgraph import (
    AwaitOutcome,
    DeskDriver,
    OpenRequest,
    ThreadAwaitingDesk,
    descriptor_of,
    idempotency_key,
    not_run_hint,
)
from bot.runtime.clock import ManualClock
from bot.web.app import create_app
from tests.conftest import Harness, StartDesk, make_config
from tests.crash_harness import DeskProcess, free_port
from tests.test_inbox import csrf_of, nonce_of

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "langgraph_desk.py"
API_KEY = "lg-agent-key-0123456789abcdef"
OWNER_TOKEN = "lg-owner-token-0123456789abcdef"
RUN_TIMEOUT = 60.0  # a whole run on a slow, shared machine; every step is event-driven


@functools.cache
def load_example() -> ModuleType:
    """examples/langgraph_desk.py as a module (examples/ is not a package), registered so
    pydantic can resolve its models' annotations."""
    spec = importlib.util.spec_from_file_location("langgraph_desk_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


REFUND_ACTION = {
    "id": "refund_order", "description": "Refund an order", "risk": "high", "policy": "ask",  # ask: "always allow" may be given
    "approval_channels": [1], "timeout": "1h", "run": {"by": "agent"},  # the desk decides; the agent's tool runs
    "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
                     "required": ["order_id", "amount"]},
}


def write_config(path: Path, port: int) -> Path:
    """A desk on 127.0.0.1:`port`: the owner inbox as its one channel (for handoffs and
    approval prompts), the agent's API key, the owner token a person uses, and the action
    `refund_order`, which the agent runs itself once a person approved it."""
    config = {
        "server": {"host": "127.0.0.1", "port": port, "public_url": f"http://127.0.0.1:{port}"},
        "secret_key": "langgraph-secret-key-0123456789",
        "database_url": f"sqlite:///{path.parent / 'desk.db'}",
        "api": {"key": API_KEY},
        "owner": {"token": OWNER_TOKEN},
        "handoff": {"idle_timeout": "2h"},
        "logging": {"level": "warning", "format": "console"},
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}],
        "actions": [REFUND_ACTION],
    }
    path.write_text(json.dumps(config, indent=2))
    return path


class Desk:
    """A `handoff serve` process on its own config and database file, restartable."""

    def __init__(self, folder: Path) -> None:
        self.port = free_port()
        self.config = write_config(folder / "desk.json", self.port)
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = self.start()

    def start(self) -> DeskProcess:
        process = DeskProcess("langgraph", self.config, self.port)
        process.wait_ready()
        return process

    def restart_after_kill(self) -> None:
        self.process.kill()
        self.process.close()
        self.process = self.start()

    def close(self) -> None:
        self.process.close()


@pytest.fixture(scope="module")
def desk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Desk]:
    running = Desk(tmp_path_factory.mktemp("langgraph-desk"))
    yield running
    running.close()


async def until_found(look: Callable[[], Awaitable[T | None]]) -> T:
    """Ask `look` until it finds something: the owner's lists of handoffs and approvals have
    no long-poll, so this polls them (every 50 ms, within RUN_TIMEOUT)."""
    async with asyncio.timeout(RUN_TIMEOUT):
        while (found := await look()) is None:
            await asyncio.sleep(0.05)
        return found


LISTED_IDS = {"handoffs": "handoff_session_id", "approvals": "approval_id"}


async def first_listed(api: httpx.AsyncClient, listing: str, state: str,
                       matches: Callable[[dict[str, Any]], bool] = lambda item: True) -> str:
    """The id of the first of the desk's `listing` (handoffs, approvals) in `state` that
    `matches`, once there is one."""
    async def look() -> str | None:
        listed = (await api.get(f"/api/{listing}", params={"state": state})).json()[listing]
        return next((str(item[LISTED_IDS[listing]]) for item in listed if matches(item)), None)
    return await until_found(look)


def in_process_client(harness: Harness) -> DeskClient:
    """A client of the desk running in this process (its clock is the test's)."""
    return DeskClient("http://desk.test", transport=httpx.ASGITransport(app=create_app(harness.desk, manage_desk=False)))


class Person:
    """Someone at the desk: signed in to the owner inbox, and holding the owner token for the API."""

    def __init__(self, url: str) -> None:
        self.inbox = httpx.AsyncClient(base_url=url, timeout=30)
        self.api = httpx.AsyncClient(base_url=url, timeout=30, headers={"Authorization": f"Bearer {OWNER_TOKEN}"})

    async def __aenter__(self) -> Person:
        signed_in = await self.inbox.post("/inbox/login", data={"token": OWNER_TOKEN, "next": "/inbox"})
        assert signed_in.status_code == 303, signed_in.text
        page = (await self.inbox.get("/inbox/name", params={"next": "/inbox"})).text
        await self.inbox.post("/inbox/name", data={"csrf": csrf_of(page), "name": "Sam", "next": "/inbox"})
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.inbox.aclose()
        await self.api.aclose()

    async def handoff_in(self, cid: str) -> str:
        """The handoff the agent opened in conversation `cid`, once it is open."""
        return await first_listed(self.api, "handoffs", "open", lambda h: h["conversation_id"] == cid)

    async def handoff_in_any(self) -> str:
        """The first open handoff on the desk, once there is one."""
        return await first_listed(self.api, "handoffs", "open")

    async def every_handoff(self) -> list[dict[str, Any]]:
        every = []
        for state in ("open", "released", "failed"):
            every += (await self.api.get("/api/handoffs", params={"state": state})).json()["handoffs"]
        return every

    async def reply(self, sid: str, text: str) -> None:
        page = (await self.inbox.get(f"/inbox/handoffs/{sid}")).text
        sent = await self.inbox.post(f"/inbox/handoffs/{sid}/reply",
                                     data={"csrf": csrf_of(page), "nonce": nonce_of(page), "text": text})
        assert sent.status_code == 303, sent.text

    async def release(self, sid: str, note: str, **values: Any) -> None:
        released = await self.api.post(f"/api/handoffs/{sid}/release",
                                       json={"outcome": "resolved", "note": note, "return_values": values})
        assert released.status_code == 200, released.text

    async def pending_approval(self, action: str, **arguments: Any) -> str:
        """The id of the pending approval of `action` with these arguments, once the agent asked."""
        return await first_listed(self.api, "approvals", "pending", lambda a: (a["action"], a["arguments"]) == (action, arguments))

    async def decide(self, aid: str, decision: str, reason: str | None = None, *, always_allow: bool = False) -> None:
        decided = await self.api.post(f"/api/approvals/{aid}/decision", json={
            "decision": decision, "always_allow": always_allow, **({"reason": reason} if reason else {})})
        assert decided.status_code == 200, decided.text

    async def approval(self, aid: str) -> dict[str, Any]:
        return dict((await self.api.get(f"/api/approvals/{aid}")).json())


class Agent:
    """The example's graph in this process, on a checkpoint file, driven against the desk."""

    def __init__(self, folder: Path, script: list[AIMessage]) -> None:
        self.example = load_example()
        self.model = self.example.ScriptedModel(responses=script)
        self.checkpoints = str(folder / "agent.db")

    async def run(self, desk: Desk, thread_id: str, conversation_id: str, during: Callable[[], Awaitable[T]], *,
                  resume: bool = False) -> T:
        """Run one user message on `thread_id` while `during` plays the person; `during`'s result."""
        return await self.run_with(DeskClient(desk.url, api_key=API_KEY), thread_id, conversation_id, during, resume=resume)

    async def run_with(self, client: DeskClient, thread_id: str, conversation_id: str,
                       during: Callable[[], Awaitable[T]], *, resume: bool = False) -> T:
        """… through `client`; `resume`: resume the thread as it was left instead."""
        with SqliteSaver.from_conn_string(self.checkpoints) as checkpointer:
            graph = self.example.build_graph(self.model, checkpointer)
            async with client:
                driver = DeskDriver(graph, client)
                start = None if resume else {"messages": [HumanMessage("Hello")]}
                run = asyncio.create_task(driver.run(start, thread_id=thread_id, conversation_id=conversation_id))
                try:
                    async with asyncio.timeout(RUN_TIMEOUT):
                        outcome = await during()
                        result = await run
                finally:
                    run.cancel()
        assert result.interrupts == [], result.interrupts
        return outcome

    def tool_results(self) -> dict[str, Any]:
        """What the model read last, by tool call id: each tool's result, parsed when it is JSON."""
        read = {}
        for message in self.model.inputs[-1]:
            if isinstance(message, ToolMessage):
                try:
                    read[message.tool_call_id] = json.loads(str(message.content))
                except ValueError:
                    read[message.tool_call_id] = message.content
        return read


async def conversation(desk: Desk) -> str:
    async with DeskClient(desk.url, api_key=API_KEY) as client:
        return await client.create_conversation(name="Ana", email="ana@example.com")


def call(name: str, call_id: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "id": call_id, "args": args}


DONE = AIMessage("Done.")


# --------------------------------------------------------------------------- handoffs


async def test_a_person_replies_and_releases_and_the_model_reads_what_they_returned(desk: Desk, tmp_path: Path) -> None:
    agent = Agent(tmp_path, load_example().SCRIPT)
    cid = await conversation(desk)

    async def person_at_the_desk() -> str:
        async with Person(desk.url) as sam:
            sid = await sam.handoff_in(cid)
            await sam.reply(sid, "Hi Ana, Sam here: I am asking the courier.")
            await sam.release(sid, "The courier confirmed the date.", eta_date="2026-12-24")
            return sid

    sid = await agent.run(desk, "ana-1", cid, person_at_the_desk)
    read = agent.tool_results()["call_handoff"]
    assert (read["status"], read["reason"], read["returned"]) == ("released", "owner", {"eta_date": "2026-12-24"})
    assert read["note"] == "The courier confirmed the date."
    assert read["said"] == [{"author": "Sam", "text": "Hi Ana, Sam here: I am asking the courier."}]
    assert read["handoff_session_id"] == sid
    assert read["resume_text"].startswith("[Bot resumed")
    assert len(agent.model.inputs) == 2  # the call, then once more with the outcome


async def test_a_desk_restarted_while_the_driver_waits_is_waited_out(desk: Desk, tmp_path: Path) -> None:
    """Only the desk goes down (SIGKILL) and comes back from its file: the waiting driver's
    long-poll breaks, the client tries again until the desk answers, and the outcome arrives."""
    agent = Agent(tmp_path, load_example().SCRIPT)
    cid = await conversation(desk)

    async def desk_restarts() -> str:
        async with Person(desk.url) as sam:
            sid = await sam.handoff_in(cid)
        await until_found(lambda: asyncio.to_thread(awaiting_in, Path(agent.checkpoints), "ana-desk-down"))
        await asyncio.to_thread(desk.restart_after_kill)
        async with Person(desk.url) as sam:
            await sam.release(sid, "Back online: it ships Monday.", eta_date="2026-12-14")
        return sid

    client = DeskClient(desk.url, api_key=API_KEY, backoff=0.05, max_backoff=0.2)
    sid = await agent.run_with(client, "ana-desk-down", cid, desk_restarts)
    read = agent.tool_results()["call_handoff"]
    assert (read["handoff_session_id"], read["returned"]) == (sid, {"eta_date": "2026-12-14"})
    assert len(agent.model.inputs) == 2


async def test_a_thread_cut_short_between_steps_is_carried_on_by_a_resume(desk: Desk, tmp_path: Path) -> None:
    """A process that died between two steps (here: stopped after the model's step, before
    the tool node) leaves nothing waiting on the desk; `run(None, …)` carries the graph on."""
    agent = Agent(tmp_path, load_example().SCRIPT)
    cid = await conversation(desk)
    thread = {"configurable": {"thread_id": "ana-cut"}}
    with SqliteSaver.from_conn_string(agent.checkpoints) as checkpointer:
        graph = agent.example.build_graph(agent.model, checkpointer)
        await asyncio.to_thread(graph.invoke, {"messages": [HumanMessage("Hello")]}, thread, interrupt_after=["model"])
        cut = graph.get_state(thread)
    assert cut.next == ("tools",) and cut.interrupts == ()

    async def person_at_the_desk() -> str:
        async with Person(desk.url) as sam:
            sid = await sam.handoff_in(cid)
            await sam.release(sid, "Sorted.", eta_date="2026-12-13")
            return sid

    sid = await agent.run(desk, "ana-cut", cid, person_at_the_desk, resume=True)
    assert agent.tool_results()["call_handoff"]["handoff_session_id"] == sid


async def test_a_driver_that_died_after_the_desk_made_the_request_finds_that_request_again(desk: Desk, tmp_path: Path) -> None:
    """The window the key covers: the desk made the handoff, but the driver died before the
    checkpoint held its id. The next driver asks again under the same key and gets that handoff."""
    agent = Agent(tmp_path, load_example().SCRIPT)
    cid = await conversation(desk)
    thread = {"configurable": {"thread_id": "ana-lost"}}
    with SqliteSaver.from_conn_string(agent.checkpoints) as checkpointer:
        graph = agent.example.build_graph(agent.model, checkpointer)
        await asyncio.to_thread(graph.invoke, {"messages": [HumanMessage("Hello")]}, thread)
        [pending] = graph.get_state(thread).interrupts
    request = descriptor_of(pending.value)
    assert isinstance(request, OpenRequest) and request.tool == "handoff_request"
    async with DeskClient(desk.url, api_key=API_KEY) as client:  # the first driver's call, its answer lost with it
        first = await client.call_tool(cid, request.tool, request.arguments, idempotency_key=idempotency_key("ana-lost", pending.id))
        with SqliteSaver.from_conn_string(agent.checkpoints) as checkpointer:  # new input would leave the request behind
            with pytest.raises(ThreadAwaitingDesk, match="resume it with run"):
                await DeskDriver(agent.example.build_graph(agent.model, checkpointer), client).run(
                    {"messages": [HumanMessage("Anyone there?")]}, thread_id="ana-lost", conversation_id=cid)

    async def person_at_the_desk() -> list[dict[str, Any]]:
        async with Person(desk.url) as sam:
            await sam.release(await sam.handoff_in(cid), "Found it.", eta_date="2026-12-12")
            return [h for h in await sam.every_handoff() if h["conversation_id"] == cid]

    handoffs = await agent.run_with(DeskClient(desk.url, api_key=API_KEY), "ana-lost", cid, person_at_the_desk, resume=True)
    assert [h["handoff_session_id"] for h in handoffs] == [first["handoff_session_id"]]
    assert agent.tool_results()["call_handoff"]["handoff_session_id"] == first["handoff_session_id"]


# --------------------------------------------------------------------------- the driver's own rules


def test_the_docs_page_shows_the_examples_own_code_in_under_twenty_lines() -> None:
    page = (ROOT / "docs" / "integrations" / "langgraph.md").read_text()
    shown = page.split("```python\n", 1)[1].split("```", 1)[0].splitlines()
    example = EXAMPLE.read_text().splitlines()
    at = 0
    for line in shown:  # each line of the page, in the example, in the same order
        assert line in example[at:], f"docs/integrations/langgraph.md shows a line examples/langgraph_desk.py lacks: {line!r}"
        at = example.index(line, at) + 1
    assert len([line for line in shown if line.strip()]) < 20


def test_a_desk_that_could_ask_nobody_is_not_told_to_the_model_as_a_persons_no() -> None:
    unasked = ApprovalOutcome(approval_id="ap_1", status="denied", state="unrouted", reason="no approval channel")
    refused = ApprovalOutcome(approval_id="ap_2", status="denied", state="denied", reason="no receipt")
    late = ApprovalOutcome(approval_id="ap_3", status="timed_out", state="expired")
    assert "could not put this action to anyone" in not_run_hint(unasked) and "Nobody refused" in not_run_hint(unasked)
    assert "A person refused" in not_run_hint(refused)
    assert "Nobody refused" in not_run_hint(late)


def test_the_docs_pages_action_is_a_valid_config_run_by_the_agent() -> None:
    page = (ROOT / "docs" / "integrations" / "langgraph.md").read_text()
    shown = textwrap.dedent(page.split("```yaml\n", 1)[1].split("```", 1)[0])
    config = make_config("sqlite:///unused.db", **yaml.safe_load(shown))
    [action] = config.actions
    assert (action.id, type(action.run)) == ("refund_order", AgentActionRun)


async def test_a_graph_without_a_checkpointer_is_refused_with_why() -> None:
    example = load_example()
    graph = example.build_graph(example.ScriptedModel(responses=[DONE]), None)
    async with DeskClient("http://127.0.0.1:9") as client:
        with pytest.raises(ValueError, match="needs a checkpointer"):
            DeskDriver(graph, client)



def test_the_key_of_a_request_is_the_thread_and_the_interrupt_and_stays_a_valid_header() -> None:
    assert idempotency_key("ana-1", "0f3a") == "langgraph:ana-1:0f3a"
    odd = idempotency_key("Ana's thread ☂ " + "x" * 300, "0f3a")
    assert odd.startswith("langgraph:sha256-") and odd.endswith(":0f3a") and len(odd) < 255 and odd.isascii()


def test_an_interrupt_of_the_graphs_own_is_not_the_desks() -> None:
    assert descriptor_of({"question": "continue?"}) is None
    assert descriptor_of("plain") is None
    opened = OpenRequest(kind="handoff", tool="handoff_request", arguments={"summary": "…"})
    assert descriptor_of(opened.as_value()) == opened


async def test_the_agent_and_the_desk_both_killed_while_the_handoff_is_open_resume_once(tmp_path: Path) -> None:
    """The example as its own process: it opens the handoff and waits; then it and the desk
    are killed (SIGKILL) and started again from their files, the agent with --resume. The
    person releases; the restarted agent reads the returned data once, and the desk made
    one handoff."""
    desk = Desk(tmp_path)
    checkpoints = tmp_path / "agent.db"
    command = [sys.executable, str(EXAMPLE), "--desk", desk.url, "--checkpoints", str(checkpoints), "--thread", "ana-crash"]
    environment = {**os.environ, "HANDOFF_API_KEY": API_KEY, "PYTHONUNBUFFERED": "1"}
    agent = subprocess.Popen([*command, "Where is my order #1234?"], cwd=ROOT, env=environment, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        async with Person(desk.url) as sam:
            sid = await sam.handoff_in_any()
        await until_found(lambda: asyncio.to_thread(awaiting_in, checkpoints, "ana-crash"))  # the id is checkpointed
        agent.kill()
        agent.wait(timeout=30)
        desk.restart_after_kill()
        agent = subprocess.Popen([*command, "--resume"], cwd=ROOT, env=environment, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        async with Person(desk.url) as sam:
            await sam.release(sid, "Delivered by Friday.", eta_date="2026-12-11")
            output, _ = await asyncio.to_thread(agent.communicate, timeout=RUN_TIMEOUT)
            handoffs = await sam.every_handoff()
    finally:
        agent.kill()
        desk.close()
    assert agent.returncode == 0, output
    [read] = [line for line in output.splitlines() if line.startswith("model read: ")]
    result = json.loads(read.removeprefix("model read: "))
    assert (result["status"], result["returned"], result["handoff_session_id"]) == ("released", {"eta_date": "2026-12-11"}, sid)
    assert [h["handoff_session_id"] for h in handoffs] == [sid]  # one request for the call, across both restarts
    example = load_example()
    with SqliteSaver.from_conn_string(str(checkpoints)) as checkpointer:
        state = example.build_graph(example.ScriptedModel(responses=example.SCRIPT), checkpointer).get_state(
            {"configurable": {"thread_id": "ana-crash"}})
    kinds = [type(m).__name__ for m in state.values["messages"]]
    assert kinds == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"], kinds  # resumed once, answered once
    assert state.next == () and state.interrupts == ()


def awaiting_in(checkpoints: Path, thread_id: str) -> str | None:
    """The desk request id the thread's checkpoint waits on (its second interrupt), if any yet.
    None too while the agent has not made the file, or holds it locked (a SqliteSaver's first
    use sets the file up, which waits for no one): the caller looks again."""
    if not checkpoints.exists():
        return None
    example = load_example()
    try:
        with SqliteSaver.from_conn_string(str(checkpoints)) as checkpointer:
            graph = example.build_graph(example.ScriptedModel(responses=example.SCRIPT), checkpointer)
            waiting = [d for i in graph.get_state({"configurable": {"thread_id": thread_id}}).interrupts
                       if isinstance(d := descriptor_of(i.value), AwaitOutcome)]
    except sqlite3.OperationalError as error:
        if "locked" not in str(error):
            raise
        return None
    return waiting[0].request_id if waiting else None


async def test_a_user_action_the_user_did_reaches_the_model_as_done(desk: Desk, tmp_path: Path) -> None:
    details = "Open the link we sent by SMS and confirm the new address."
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[call("request_user_action", "call_u", reason="permission_confirmation",
                                                            details=details)]), DONE])
    cid = await conversation(desk)

    async def the_user_confirms() -> str:
        async with DeskClient(desk.url, api_key=API_KEY) as app:  # the app the user talks to reports their Done
            uaid = await until_found(lambda: asyncio.to_thread(awaiting_in, Path(agent.checkpoints), "ana-steps"))
            await app.respond_user_action(uaid, "done")
            return uaid

    uaid = await agent.run(desk, "ana-steps", cid, the_user_confirms)
    read = agent.tool_results()["call_u"]
    assert (read["status"], read["user_action_id"]) == ("done", uaid)


# --------------------------------------------------------------------------- approvals


async def test_two_approvals_in_one_turn_answered_in_reverse_order_each_reach_their_call(desk: Desk, tmp_path: Path) -> None:
    refunds = load_example().REFUNDS
    refunds.clear()
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[call("refund_order", "call_a", order_id="A-1", amount=10.0),
                                                       call("refund_order", "call_b", order_id="B-2", amount=20.0)]), DONE])
    cid = await conversation(desk)

    async def person_at_the_desk() -> None:
        async with Person(desk.url) as sam:
            first = await sam.pending_approval("refund_order", order_id="A-1", amount=10.0)
            second = await sam.pending_approval("refund_order", order_id="B-2", amount=20.0)
            await sam.decide(second, "approve")
            await until_found(lambda: asyncio.sleep(0, refunds or None))  # B-2 ran while A-1 still waits
            assert refunds == [{"order_id": "B-2", "amount": 20.0}]
            await sam.decide(first, "deny", "A-1 was refunded last week.")

    await agent.run(desk, "ana-two", cid, person_at_the_desk)
    read = agent.tool_results()
    assert read["call_b"] == "refunded 20.00 on order B-2"
    assert (read["call_a"]["status"], read["call_a"]["reason"]) == ("denied", "A-1 was refunded last week.")
    assert refunds == [{"order_id": "B-2", "amount": 20.0}]
    assert len(agent.model.inputs) == 2


async def test_a_handoff_and_an_approval_in_one_turn_answered_in_reverse_order_each_reach_their_call(
    desk: Desk, tmp_path: Path,
) -> None:
    refunds = load_example().REFUNDS
    refunds.clear()
    handoff = {**load_example().HANDOFF_CALL, "id": "call_h"}
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[handoff, call("refund_order", "call_r", order_id="M-5", amount=5.0)]), DONE])
    cid = await conversation(desk)

    async def person_at_the_desk() -> str:
        async with Person(desk.url) as sam:
            sid = await sam.handoff_in(cid)
            await sam.decide(await sam.pending_approval("refund_order", order_id="M-5", amount=5.0), "approve")
            await until_found(lambda: asyncio.sleep(0, refunds or None))  # the refund ran; the handoff still waits
            await sam.release(sid, "Refund sent; parcel found.", eta_date="2026-12-15")
            return sid

    sid = await agent.run(desk, "ana-mixed", cid, person_at_the_desk)
    read = agent.tool_results()
    assert read["call_r"] == "refunded 5.00 on order M-5"
    assert (read["call_h"]["handoff_session_id"], read["call_h"]["returned"]) == (sid, {"eta_date": "2026-12-15"})
    assert refunds == [{"order_id": "M-5", "amount": 5.0}]


async def test_once_always_allowed_the_next_call_runs_without_asking(desk: Desk, tmp_path: Path) -> None:
    """"Always allow" on the first refund: the desk answers the second one APPROVED at once,
    and the gated tool runs it without a second approval."""
    refunds = load_example().REFUNDS
    refunds.clear()
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[call("refund_order", "call_1", order_id="G-1", amount=1.0)]),
                             AIMessage("", tool_calls=[call("refund_order", "call_2", order_id="G-2", amount=2.0)]), DONE])
    cid = await conversation(desk)

    async def always_allowed() -> list[str]:
        async with Person(desk.url) as sam:
            await sam.decide(await sam.pending_approval("refund_order", order_id="G-1", amount=1.0), "approve", always_allow=True)
            await until_found(lambda: asyncio.sleep(0, refunds[1:] or None))
            listed = (await sam.api.get("/api/approvals")).json()["approvals"]
            return [a["approval_id"] for a in listed if a["conversation_id"] == cid]

    approvals = await agent.run(desk, "ana-always", cid, always_allowed)
    assert refunds == [{"order_id": "G-1", "amount": 1.0}, {"order_id": "G-2", "amount": 2.0}]
    assert len(approvals) == 1  # the second refund was never put to a person
    assert agent.tool_results()["call_2"] == "refunded 2.00 on order G-2"


@pytest.mark.parametrize(("decision", "reason"), [("approve", None), ("deny", "Not without the receipt.")])
async def test_an_approved_tool_runs_once_and_a_denied_one_never_with_the_reason_for_the_model(
    desk: Desk, tmp_path: Path, decision: str, reason: str | None,
) -> None:
    refunds = load_example().REFUNDS
    refunds.clear()
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[call("refund_order", "call_r", order_id="R-7", amount=35.5)]), DONE])
    cid = await conversation(desk)

    async def person_at_the_desk() -> str:
        async with Person(desk.url) as sam:
            aid = await sam.pending_approval("refund_order", order_id="R-7", amount=35.5)
            await sam.decide(aid, decision, reason)
            return aid

    aid = await agent.run(desk, f"ana-{decision}", cid, person_at_the_desk)
    read = agent.tool_results()["call_r"]
    if decision == "approve":
        assert read == "refunded 35.50 on order R-7"
        assert refunds == [{"order_id": "R-7", "amount": 35.5}]  # once, though the tool node ran three times
    else:
        assert read["status"] == "denied" and read["reason"] == reason and read["approval_id"] == aid
        assert "did not run" in read["hint"]
        assert refunds == []


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """The in-process desk of the timeout test: SQLite only (the clock is what matters)."""
    return sqlite_url


async def test_an_approval_nobody_decided_in_time_is_a_timeout_and_the_tool_never_runs(
    start_desk: StartDesk, tmp_path: Path,
) -> None:
    """The desk in this process on a manual clock (a real one would make the test wait out
    the action's timeout): the deadline passes, the desk's sweep expires the approval, and
    the model reads timed_out, not a refusal."""
    refunds = load_example().REFUNDS
    refunds.clear()
    clock = ManualClock()
    harness = await start_desk(clock=clock, actions=[{**REFUND_ACTION, "timeout": "10m"}])
    agent = Agent(tmp_path, [AIMessage("", tool_calls=[call("refund_order", "call_t", order_id="T-3", amount=12.0)]), DONE])
    cid = await harness.conversation()

    async def nobody_decides() -> str:
        aid = await first_listed(harness.client, "approvals", "pending")
        clock.advance(timedelta(minutes=11))
        assert await harness.desk.approvals.expire_due() == 1
        return aid

    aid = await agent.run_with(in_process_client(harness), "ana-late", cid, nobody_decides)
    read = agent.tool_results()["call_t"]
    assert (read["status"], read["approval_id"]) == ("timed_out", aid)
    assert "reason" not in read and "decided_by" not in read  # nobody refused it
    assert refunds == []
    assert (await harness.approval(aid))["state"] == "expired"  # the desk recorded a timeout, not a denial


async def test_a_handoff_nobody_answered_is_a_timeout_for_the_model(start_desk: StartDesk, tmp_path: Path) -> None:
    """The idle timer on a manual clock releases the handoff; the model reads timed_out (with
    the desk's reason), not a person's answer."""
    clock = ManualClock()
    harness = await start_desk(clock=clock, handoff={"idle_timeout": "30m"})
    agent = Agent(tmp_path, load_example().SCRIPT)
    cid = await harness.conversation()

    async def nobody_answers() -> str:
        sid = await first_listed(harness.client, "handoffs", "open")
        clock.advance(timedelta(minutes=31))
        await harness.desk.timers.sweep()
        return sid

    sid = await agent.run_with(in_process_client(harness), "ana-idle", cid, nobody_answers)
    read = agent.tool_results()["call_handoff"]
    assert (read["status"], read["reason"], read["handoff_session_id"]) == ("timed_out", "idle_timeout", sid)
    assert read["returned"] == {} and read["said"] == []

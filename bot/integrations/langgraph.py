"""The desk as LangGraph's human in the loop: tools that `interrupt()`, and a driver that asks the desk.

    tools = [*desk_tools(channel_id=1), approval_gated(refund_order)]    # into the graph's ToolNode,
    graph.add_conditional_edges("model", send_tool_calls, ["tools", END])  # one task per tool call
    graph = graph.compile(checkpointer=SqliteSaver(...))                   # (examples/langgraph_desk.py)
    async with DeskClient(url, api_key=...) as desk:
        result = await DeskDriver(graph, desk).run({"messages": [...]}, thread_id="t-42")

Why two halves. A LangGraph node cannot wait hours inside a process that may restart, and
it re-runs from its first line when resumed, so the node only *describes* what it needs
(`interrupt(descriptor)`) and the graph stops, checkpointed. The driver, outside the graph,
reads the pending interrupts, makes each desk request, waits for its outcome (long-poll)
and resumes the graph with `Command(resume={interrupt_id: outcome})`.

Exactly once across restarts. Each desk request is made under the `Idempotency-Key`
`langgraph:<thread id>:<interrupt id>`: both are LangGraph's own durable ids, so a driver
that restarts (or a node that re-runs) asks again with the same key and the desk answers
with the request it already made instead of a second one. The key alone lives as long as
the desk keeps answers (`api.idempotency_ttl`, 24 h), and a handoff may last longer, so the
request id is also written into the graph's own checkpoint: every tool interrupts twice,
first "open this request" (the driver resumes it with the desk's id) and then "await this
request id" (resumed with the outcome). A driver that restarts after the first resume reads
the id from the checkpoint and only waits.

Outcomes the model can act on. A handoff's outcome (returned data, note, the `[Bot resumed
— …]` text) and a user action's outcome come back to the model as the tool's result, as
JSON. An approval-gated tool runs only when a person approved it, then once; a denial
reaches the model with the person's reason; an approval nobody decided in time comes back
as `timed_out`, never as a person's "no", and the tool does not run. A request the desk
refused (bad arguments, a handoff already open) comes back as the desk's error answer, for
the model to correct and call again.

Parallel calls. The interrupts of one turn are opened together and each is resumed with
its own outcome as soon as that outcome arrives, whatever the order: resuming one leaves
the others pending with the same ids. A graph that runs its tool calls as separate tasks
(`create_react_agent`, or `send_tool_calls` in a hand-built graph) gets one interrupt per
call.

The graph runs through its synchronous `invoke` in a worker thread, so any checkpointer
works (`SqliteSaver`, and the async savers, whose sync methods hand over to their loop).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeAlias

from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph import END
from langgraph.pregel import Pregel
from langgraph.types import Command, Interrupt, Send, StateSnapshot, interrupt
from pydantic import BaseModel, Field, TypeAdapter
from pydantic_core import to_jsonable_python

from bot.clients import DeskClient, RequestAppliedAnswerLost
from bot.clients.models import ApprovalOutcome, HandoffOutcome, UserActionOutcome
from bot.domain.handoffs.inputs import HandoffRequestInput
from bot.domain.user_actions import RequestUserActionInput
from bot.tools import model_schema

KEY_PREFIX = "langgraph"
DESCRIPTOR = "handoff_desk"  # the key that marks an interrupt's value as the desk's


class RequestKind(StrEnum):
    """What a tool asks the desk for, and so which desk tool makes it and how it ends."""

    HANDOFF = "handoff"
    USER_ACTION = "user_action"
    APPROVAL = "approval"


class Said(BaseModel):
    """One message a person wrote to the user during the handoff."""

    author: str
    text: str


class HandoffResult(HandoffOutcome):
    """A handoff's outcome as the model reads it: how it ended and what came back, and what
    the person told the user meanwhile (`said`), which the model did not see happen."""

    said: list[Said] = Field(default_factory=list)


Outcome: TypeAlias = HandoffOutcome | UserActionOutcome | ApprovalOutcome
_OUTCOME_MODELS: dict[RequestKind, type[Outcome]] = {
    RequestKind.HANDOFF: HandoffResult, RequestKind.USER_ACTION: UserActionOutcome, RequestKind.APPROVAL: ApprovalOutcome,
}


# --------------------------------------------------------------------------- what crosses the interrupt


class _Descriptor(BaseModel):
    """What a desk tool's interrupt carries. Stored in the checkpoint as a plain dict
    (`as_value`), so any serialiser keeps it, and marked as the desk's by its one key."""

    kind: RequestKind
    tool: str  # the desk tool that makes it: handoff_request, request_user_action, or the action's id

    def as_value(self) -> dict[str, Any]:
        return {DESCRIPTOR: self.model_dump(mode="json")}


class OpenRequest(_Descriptor):
    """The first interrupt of a desk tool: "make this request"."""

    stage: Literal["open"] = "open"
    arguments: dict[str, Any]


class AwaitOutcome(_Descriptor):
    """The second interrupt: "resume me with the outcome of this request"."""

    stage: Literal["await"] = "await"
    conversation_id: str
    request_id: str  # handoff_session_id, user_action_id or approval_id


Descriptor: TypeAlias = OpenRequest | AwaitOutcome
_DESCRIPTORS: TypeAdapter[Descriptor] = TypeAdapter(Annotated[Descriptor, Field(discriminator="stage")])


def descriptor_of(value: Any) -> Descriptor | None:
    """The desk descriptor an interrupt carries, or None for an interrupt of the graph's own."""
    if not isinstance(value, Mapping) or DESCRIPTOR not in value:
        return None
    return _DESCRIPTORS.validate_python(value[DESCRIPTOR])


class Opened(BaseModel):
    """The driver's answer to `OpenRequest`: the desk made the request, here is its id."""

    conversation_id: str
    request_id: str


class Refused(BaseModel):
    """The driver's answer to `OpenRequest` when the desk made nothing: its answer, for the model."""

    refused: dict[str, Any]


class Granted(BaseModel):
    """The driver's answer to an approval's `OpenRequest` when the desk needs nobody's yes
    (policy none, or "always allow" given in this conversation): run the tool now."""

    granted: dict[str, Any]


_OPEN_ANSWERS: TypeAdapter[Opened | Refused | Granted] = TypeAdapter(Opened | Refused | Granted)


# --------------------------------------------------------------------------- the tools


def _ask_desk(request: OpenRequest) -> Refused | Granted | Outcome:
    """Interrupt until the desk has answered: the request's outcome, or the desk's refusal
    (or grant). Runs inside a tool, so on every re-run the answers already given come back at once."""
    answer = _OPEN_ANSWERS.validate_python(interrupt(request.as_value()))
    if isinstance(answer, Refused | Granted):
        return answer
    waiting = AwaitOutcome(kind=request.kind, tool=request.tool, conversation_id=answer.conversation_id,
                           request_id=answer.request_id)
    return _OUTCOME_MODELS[request.kind].model_validate(interrupt(waiting.as_value()))


def _for_the_model(result: BaseModel | dict[str, Any]) -> str:
    """A tool's result as the model reads it: JSON, without empty fields."""
    data = result.model_dump(mode="json", exclude_none=True) if isinstance(result, BaseModel) else result
    return json.dumps(data, ensure_ascii=False)


def _desk_tool(kind: RequestKind, name: str, description: str, schema: dict[str, Any],
               fixed: Mapping[str, Any]) -> BaseTool:
    def ask(**arguments: Any) -> str:
        answer = _ask_desk(OpenRequest(kind=kind, tool=name, arguments={**to_jsonable_python(arguments), **fixed}))
        assert not isinstance(answer, Granted)  # only an approval is granted
        return _for_the_model(answer.refused if isinstance(answer, Refused) else answer)

    return StructuredTool.from_function(func=ask, name=name, description=description, args_schema=schema)


HANDOFF_DESCRIPTION = (
    "Hand this conversation to a person through the help desk. Use it when the user asks for a human, or when you "
    "cannot safely or correctly help. Your run waits until the person hands back; the result carries how it ended "
    "(status released, failed or timed_out), the data the person returned (`returned`, as asked for in "
    "expected_return), their note, and the desk's `resume_text`. Never claim a person answered unless status is released."
)
USER_ACTION_DESCRIPTION = (
    "Ask the user to do a step only they can do on their own device: log in, enter a one-time code, confirm a "
    "permission. Never ask for a password or code in the chat. Your run waits until the user says done or cancels; "
    "the result's status is done, cancelled, timed_out or failed: look at the current state before acting on it."
)


def handoff_tool(*, channel_id: int | None = None) -> BaseTool:
    """`handoff_request` with the desk's own input schema. `channel_id`: the channel or route
    every handoff goes to (the model then does not choose one); without it the model must
    name one of the desk's channel ids, which the description should then list."""
    schema = model_schema(HandoffRequestInput)
    fixed: dict[str, Any] = {}
    if channel_id is not None:
        schema["properties"].pop("channel_id")
        schema["required"] = [name for name in schema.get("required", []) if name != "channel_id"]
        fixed["channel_id"] = channel_id
    return _desk_tool(RequestKind.HANDOFF, "handoff_request", HANDOFF_DESCRIPTION, schema, fixed)


def user_action_tool() -> BaseTool:
    """`request_user_action` with the desk's own input schema."""
    return _desk_tool(RequestKind.USER_ACTION, "request_user_action", USER_ACTION_DESCRIPTION,
                      model_schema(RequestUserActionInput), {})


def desk_tools(*, channel_id: int | None = None) -> list[BaseTool]:
    """`handoff_request` and `request_user_action`, ready for a graph's tool node."""
    return [handoff_tool(channel_id=channel_id), user_action_tool()]


class ActionNotRun(BaseModel):
    """What the model reads when a gated tool did not run: a person denied it (with their
    reason), or nobody decided before the deadline (`timed_out`, which is not a refusal)."""

    status: Literal["denied", "timed_out"]
    action: str
    approval_id: str
    reason: str | None = None
    decided_by: str | None = None
    hint: str


_NOT_RUN_HINTS = {
    "denied": "A person refused this action, so it did not run. Tell the user why; do not retry it unchanged.",
    "unasked": "The desk could not put this action to anyone, so it did not run (it fails closed). Nobody refused "
               "it: tell the user it needs a person and cannot be done now.",
    "timed_out": "Nobody decided on this action in time, so it did not run. Nobody refused it: you may tell the user "
                 "it is still unapproved and ask again later.",
}


def not_run_hint(outcome: ApprovalOutcome) -> str:
    """Why the tool did not run, in words that never turn the desk's fail-closed refusal or a
    timeout into a person's "no"."""
    if outcome.status == "denied" and outcome.state in ("unrouted", "cleared"):
        return _NOT_RUN_HINTS["unasked"]
    return _NOT_RUN_HINTS[outcome.status]


def approval_gated(tool: BaseTool, *, action_id: str | None = None) -> BaseTool:
    """`tool`, run only once a person approves it at the desk. `action_id`: the desk's action
    (declared with `run: {by: agent}`, so the desk decides and runs nothing itself); the
    tool's own name by default. The model sees the same name, description and arguments."""
    action = action_id or tool.name

    def gated(**arguments: Any) -> Any:
        answer = _ask_desk(OpenRequest(kind=RequestKind.APPROVAL, tool=action, arguments=to_jsonable_python(arguments)))
        if isinstance(answer, Refused):  # fail closed: the desk refused to ask (bad arguments, nobody to ask)
            return _for_the_model(answer.refused)
        if isinstance(answer, Granted):
            return tool.invoke(arguments)
        assert isinstance(answer, ApprovalOutcome)  # an approval's request ends in an approval's outcome
        if answer.status == "approved":
            return tool.invoke(arguments)
        return _for_the_model(ActionNotRun(status=answer.status, action=action, approval_id=answer.approval_id,
                                           reason=answer.reason, decided_by=answer.decided_by,
                                           hint=not_run_hint(answer)))

    return StructuredTool.from_function(func=gated, name=tool.name, description=tool.description, args_schema=tool.args_schema)


def send_tool_calls(state: Mapping[str, Any], *, node: str = "tools") -> list[Send] | str:
    """For a hand-built graph's conditional edge after the model: each tool call of the last
    AI message goes to `node` (a `ToolNode`) as a task of its own, so parallel calls
    interrupt, and are resumed, each on its own; no call ends the graph (END)."""
    last = state["messages"][-1]
    calls = last.tool_calls if isinstance(last, AIMessage) else []
    if not calls:
        return END
    return [Send(node, {"__type": "tool_call_with_context", "tool_call": call, "state": state}) for call in calls]


# --------------------------------------------------------------------------- the driver


def _safe(part: str) -> str:
    """A thread id as it can go into an Idempotency-Key (printable ASCII, bounded), or its hash."""
    if len(part) <= 160 and all(" " < c <= "~" for c in part):
        return part
    return "sha256-" + hashlib.sha256(part.encode()).hexdigest()[:40]


def idempotency_key(thread_id: str, interrupt_id: str) -> str:
    """The key of the desk request for one interrupt of one thread: the same on every re-run."""
    return f"{KEY_PREFIX}:{_safe(thread_id)}:{interrupt_id}"


class ThreadAwaitingDesk(Exception):
    """A new input for a thread still waiting on the desk: resume it first (`run(None, …)`)."""

    def __init__(self, thread_id: str, waiting: Sequence[Interrupt]) -> None:
        super().__init__(f"thread {thread_id!r} is waiting on {len(waiting)} desk request(s); "
                         "resume it with run(None, thread_id=...) before sending it new input")
        self.thread_id, self.waiting = thread_id, list(waiting)


@dataclass(frozen=True)
class RunResult:
    """Where a run stopped: the graph's state values, and the interrupts that are not the
    desk's (the graph's own, for the caller to answer); empty when the graph finished."""

    values: dict[str, Any]
    interrupts: list[Interrupt] = field(default_factory=list)


@dataclass
class _Thread:
    """One run's thread: its config, its desk conversation, and the outcomes being awaited."""

    thread_id: str
    config: RunnableConfig
    conversation_id: str | None
    awaiting: dict[str, asyncio.Task[dict[str, Any]]] = field(default_factory=dict)  # interrupt id → its outcome


class DeskDriver:
    """Runs a checkpointed graph to its end, answering the desk tools' interrupts from the desk.

    `subscriber` names the person the conversation is with (`name`, `email`, as the desk's
    conversations take them) when the driver makes the thread's conversation itself."""

    def __init__(self, graph: Pregel[Any, Any, Any, Any], desk: DeskClient, *,
                 subscriber: Mapping[str, str] | None = None) -> None:
        if graph.checkpointer is None:
            raise ValueError("the graph needs a checkpointer (compile(checkpointer=...)): the desk's answers can take "
                             "hours, and the run is resumed from the checkpoint")
        self.graph, self.desk, self.subscriber = graph, desk, dict(subscriber or {})

    async def run(self, input: Any | None, *, thread_id: str, conversation_id: str | None = None) -> RunResult:
        """Run `input` on `thread_id` (None: resume the thread as it was left, such as after a
        restart) until the graph ends or waits on something that is not the desk's.
        `conversation_id`: the desk conversation to make requests in; by default one per thread,
        made on the first request under the key `langgraph:<thread id>:conversation`."""
        thread = _Thread(thread_id, {"configurable": {"thread_id": thread_id}}, conversation_id)
        before = await self._state(thread)
        if input is not None:
            waiting = [i for i in before.interrupts if descriptor_of(i.value) is not None]
            if waiting:
                raise ThreadAwaitingDesk(thread_id, waiting)
            await self._invoke(input, thread)
        elif before.next and not before.interrupts:
            # Cut short between steps (a crash while a tool ran, before LangGraph saved its
            # result): nothing waits on the desk, so carry on from the last checkpoint.
            await self._invoke(None, thread)
        try:
            while resume := await self._answers(thread):
                await self._invoke(Command(resume=resume), thread)
        finally:
            for task in thread.awaiting.values():
                task.cancel()
        state = await self._state(thread)
        return RunResult(dict(state.values), [i for i in state.interrupts if descriptor_of(i.value) is None])

    async def _answers(self, thread: _Thread) -> dict[str, Any]:
        """What to resume the graph with: the desk's ids for every request to open, else the
        outcomes that have arrived (waiting for at least one); empty when nothing is the desk's."""
        pending = [(i.id, d) for i in await self._interrupts(thread) if (d := descriptor_of(i.value)) is not None]
        to_open = [(iid, d) for iid, d in pending if isinstance(d, OpenRequest)]
        if to_open:
            opened = await asyncio.gather(*(self._open(thread, iid, d) for iid, d in to_open))
            return {iid: answer.model_dump(mode="json") for (iid, _), answer in zip(to_open, opened, strict=True)}
        for iid, d in pending:
            if iid not in thread.awaiting and isinstance(d, AwaitOutcome):
                thread.awaiting[iid] = asyncio.create_task(self._outcome(d))
        if not thread.awaiting:
            return {}
        await asyncio.wait(thread.awaiting.values(), return_when=asyncio.FIRST_COMPLETED)
        done = [iid for iid, task in thread.awaiting.items() if task.done()]
        return {iid: thread.awaiting.pop(iid).result() for iid in done}

    async def _open(self, thread: _Thread, interrupt_id: str, request: OpenRequest) -> Opened | Refused | Granted:
        """Make the desk request for one interrupt, under the key the interrupt's ids give it."""
        cid = await self._conversation(thread)
        try:
            answer = await self.desk.call_tool(cid, request.tool, request.arguments,
                                               idempotency_key=idempotency_key(thread.thread_id, interrupt_id))
        except RequestAppliedAnswerLost as lost:  # made, but the answer is gone: its id is in the error
            answer = lost.ids
        if request.kind is RequestKind.APPROVAL and answer.get("status") == "APPROVED" and "error" not in answer:
            return Granted(granted=answer)  # nobody needs to say yes: the agent runs it now
        request_id = answer.get(_ID_FIELDS[request.kind])
        if "error" in answer or not isinstance(request_id, str):  # the desk made nothing: the model reads why
            return Refused(refused=answer)
        return Opened(conversation_id=cid, request_id=request_id)

    async def _outcome(self, waiting: AwaitOutcome) -> dict[str, Any]:
        outcome: Outcome = await _WAITS[waiting.kind](self.desk, waiting.request_id)
        if isinstance(outcome, HandoffOutcome):
            outcome = HandoffResult(**outcome.model_dump(), said=await self._said(waiting))
        return outcome.model_dump(mode="json")

    async def _said(self, waiting: AwaitOutcome) -> list[Said]:
        """What the people on the handoff wrote to the user, read page by page."""
        said: list[Said] = []
        after = 0
        while page := await self.desk.messages(waiting.conversation_id, after=after):
            said += [Said(author=m.author or "", text=m.text) for m in page
                     if m.role == "human" and m.handoff_session_id == waiting.request_id]
            after = page[-1].id
        return said

    async def _conversation(self, thread: _Thread) -> str:
        if thread.conversation_id is None:
            thread.conversation_id = await self.desk.create_conversation(
                name=self.subscriber.get("name"), email=self.subscriber.get("email"), external_id=thread.thread_id,
                idempotency_key=f"{KEY_PREFIX}:{_safe(thread.thread_id)}:conversation")
        return thread.conversation_id

    async def _interrupts(self, thread: _Thread) -> Sequence[Interrupt]:
        return (await self._state(thread)).interrupts

    async def _state(self, thread: _Thread) -> StateSnapshot:
        return await asyncio.to_thread(self.graph.get_state, thread.config)

    async def _invoke(self, input: Any, thread: _Thread) -> None:
        await asyncio.to_thread(self.graph.invoke, input, thread.config)


# The field of a desk tool's answer that names what it opened (an error answer opened nothing).
_ID_FIELDS = {RequestKind.HANDOFF: "handoff_session_id", RequestKind.USER_ACTION: "user_action_id",
              RequestKind.APPROVAL: "approval_id"}
_WAITS: dict[RequestKind, Callable[[DeskClient, str], Awaitable[Outcome]]] = {
    RequestKind.HANDOFF: lambda desk, sid: desk.wait_handoff(sid),
    RequestKind.USER_ACTION: lambda desk, uaid: desk.wait_user_action(uaid),
    RequestKind.APPROVAL: lambda desk, aid: desk.wait_approval(aid),
}

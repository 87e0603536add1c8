"""The model ↔ tools loop shared by agents whose brain is elsewhere (an LLM API, the owner's
webhook): ask, run the tool calls it made through the registry, feed the results back,
until it answers without calling tools.

Calls of one round run in order, and none after one that ended the turn (a person has the
conversation, or is being asked to act: a parallel refund must not run behind their back).
Rejected calls (unknown tool, invalid or unparsable arguments) are results like any other,
so the brain can correct itself; the rounds are bounded so a confused model cannot spin.
A successful `handoff_request` or `handoff_release` ends the turn at once: the conversation
belongs to someone else from then on. So does a call that waits for a person (an approval,
a user action).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from bot.agents.base import Turn
from bot.errors import error_body

# After these succeed the conversation is someone else's: a person's, or the first agent's.
ENDS_THE_TURN = ("handoff_request", "handoff_release")
WAITING_FOR_APPROVAL = "I need a person's approval for that first; I'll get back to you as soon as they decide."


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str | dict[str, Any] | None  # raw JSON text as models send it, or already parsed


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    result: dict[str, Any]


@dataclass(frozen=True)
class Answer:
    """One round of the brain: what it says, and the tools it wants run."""

    text: list[str]
    calls: list[ToolCall]


Ask = Callable[[list[ToolResult]], Awaitable[Answer]]


class ToolRoundsExhausted(RuntimeError):
    """The brain kept calling tools without answering; the router answers with its fallback."""


async def run(turn: Turn, ask: Ask, *, max_rounds: int) -> list[str]:
    """`ask(results)` gets the results of the previous round's calls (none at first)."""
    replies: list[str] = []
    results: list[ToolResult] = []
    for _ in range(max_rounds + 1):
        answer = await ask(results)
        replies.extend(t.strip() for t in answer.text if t and t.strip())
        if not answer.calls:
            return replies
        results = []
        ended: dict[str, Any] | None = None
        for call in answer.calls:  # one at a time: nothing runs after a call that ended the turn
            results.append(ToolResult(call, await _execute(turn, call)))
            if _ends_the_turn(results[-1]):
                ended = results[-1].result
                break
        if ended is not None:
            # A started handoff needs no words of the brain's: the desk tells the subscriber who was asked.
            if not replies and ended.get("status") == "APPROVAL_PENDING":
                replies.append(WAITING_FOR_APPROVAL)
            return replies
    raise ToolRoundsExhausted(f"still calling tools after {max_rounds} rounds")


WAITING_STATUSES = ("APPROVAL_PENDING", "HUMAN_HANDOFF_REQUESTED", "USER_ACTION_REQUESTED")


def _ends_the_turn(done: ToolResult) -> bool:
    """A handoff started or ended, or a person's approval or action is awaited: nothing more
    to do this turn."""
    return bool(done.call.name in ENDS_THE_TURN and done.result.get("ok")) or done.result.get("status") in WAITING_STATUSES


async def _execute(turn: Turn, call: ToolCall) -> dict[str, Any]:
    arguments = call.arguments
    if arguments is None or isinstance(arguments, str):
        try:
            arguments = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return error_body("invalid_json", f"the arguments were not valid JSON ({exc.msg} at character {exc.pos}); send a JSON object")
    return await turn.call_tool(call.name, arguments)


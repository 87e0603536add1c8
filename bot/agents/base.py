"""The agent interface: the router hands a turn over, the agent answers.

An agent reads the conversation (including `[Bot resumed — …]` system messages), may call
tools through `turn.call_tool` — which goes through the tool registry, so every call is
validated and audited the same way whoever the agent is — and returns the texts to say.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.tools import ToolSpec

Trigger = Literal["message", "resumed", "approval", "user_action"]


@dataclass(frozen=True)
class TurnMessage:
    role: str  # subscriber | agent | human | system
    text: str
    author: str | None = None


@dataclass
class Turn:
    conversation_id: str
    subscriber_name: str | None
    subscriber_email: str | None
    history: list[TurnMessage]
    tools: list[ToolSpec]
    call_tool: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
    # "message": the subscriber wrote; "resumed": a handoff just ended and the agent may
    # pick the conversation up without waiting for the subscriber; "approval": an approval
    # it asked for was decided (an [Approval — …] system message is the last message);
    # "user_action": a user action it requested ended ([User action — …]).
    trigger: Trigger = "message"
    tool_calls: list[tuple[str, dict[str, Any], dict[str, Any]]] = field(default_factory=list)

    def tool(self, name: str) -> ToolSpec | None:
        return next((t for t in self.tools if t.name == name), None)


class Agent(ABC):
    @abstractmethod
    async def respond(self, turn: Turn) -> list[str]:
        """Return the replies for this turn (possibly none)."""

    async def aclose(self) -> None:
        """Release connections (HTTP clients) when the desk stops."""

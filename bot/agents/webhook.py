"""The webhook agent: the owner's existing bot is the brain, reached by a signed JSON POST.

Each agent turn POSTs the conversation to `agent.url`:

    {"type": "turn", "conversation_id": …, "trigger": "message" | "resumed" | "approval" | "user_action",
     "round": 1,
     "subscriber": {"name": …, "email": …},
     "messages": [{"role": "subscriber" | "agent" | "human" | "system", "text": …, "author": …}],
     "tools": [{"name": …, "description": …, "input_schema": {…}}],
     "tool_results": [{"id": …, "name": …, "result": {…}}]}

and the bot answers `{"replies": ["…"], "tool_calls": [{"id": "1", "name": "handoff_request",
"arguments": {…}}]}`. When it asked for tools, the next round POSTs again with their
`tool_results` (the loop in bot/agents/loop.py). The bot may also call the HTTP API's tool
endpoints itself, at any time.

Signature, for the owner to check with `verify()` (bot/runtime/signed_http.py, importable from here too):
`X-Handoff-Signature: v1=<hex HMAC-SHA256(secret, "<X-Handoff-Timestamp>." + raw body)>`;
a request older than five minutes must be refused. `X-Handoff-Delivery` is the same for
every retry of one request, so the bot can drop a repeat.

Retries: connection errors, timeouts, 429 (after its Retry-After) and 5xx are retried with
backoff up to `max_retries`; other answers fail the turn at once, and the router answers the
subscriber with its fallback reply.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bot.agents import loop
from bot.agents.base import Agent, Turn
from bot.config import WebhookAgentConfig
from bot.runtime.signed_http import (  # noqa: F401 - the owner's side imports verify from here
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    InvalidSignature,
    post_signed,
    sign,
    verify,
)

# --------------------------------------------------------------------------- the answer


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str | None = Field(default=None, max_length=200)
    name: str = Field(min_length=1, max_length=100)
    arguments: dict[str, Any] | str | None = None


class _Reply(BaseModel):
    model_config = ConfigDict(extra="forbid")
    replies: list[str] = Field(default_factory=list, max_length=20)
    tool_calls: list[_Call] = Field(default_factory=list, max_length=20)


class WebhookAgentError(RuntimeError):
    """The owner's bot could not be reached or answered something unusable."""


class WebhookAgent(Agent):
    def __init__(self, config: WebhookAgentConfig, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.config = config
        self._http = httpx.AsyncClient(timeout=config.timeout.total_seconds(), transport=transport)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def respond(self, turn: Turn) -> list[str]:
        rounds = 0

        async def ask(results: list[loop.ToolResult]) -> loop.Answer:
            nonlocal rounds
            rounds += 1
            reply = await self._post(self._payload(turn, rounds, results))
            calls = [loop.ToolCall(c.id or str(n), c.name, c.arguments) for n, c in enumerate(reply.tool_calls, start=1)]
            return loop.Answer(reply.replies, calls)

        return await loop.run(turn, ask, max_rounds=self.config.max_tool_rounds)

    @staticmethod
    def _payload(turn: Turn, rounds: int, results: list[loop.ToolResult]) -> dict[str, Any]:
        return {
            "type": "turn",
            "conversation_id": turn.conversation_id,
            "trigger": turn.trigger,
            "round": rounds,
            "subscriber": {"name": turn.subscriber_name, "email": turn.subscriber_email},
            "messages": [{"role": m.role, "text": m.text, "author": m.author} for m in turn.history],
            "tools": [spec.render("plain") for spec in turn.tools],
            "tool_results": [{"id": r.call.id, "name": r.call.name, "result": r.result} for r in results],
        }

    async def _post(self, payload: dict[str, Any]) -> _Reply:
        body = json.dumps(payload, separators=(",", ":")).encode()
        attempts = self.config.max_retries + 1
        try:
            response = await post_signed(self._http, self.config.url, body, secret=self.config.secret.get_secret_value(),
                                         delivery=uuid.uuid4().hex, attempts=attempts)
        except httpx.HTTPError as exc:
            raise WebhookAgentError(f"{type(exc).__name__} calling {self.config.url}; gave up after {attempts} attempts") from None
        if response.status_code >= 300:
            raise WebhookAgentError(f"{self.config.url} answered {response.status_code}: {response.text[:200]}")
        return _parse(response)


def _parse(response: httpx.Response) -> _Reply:
    try:
        return _Reply.model_validate_json(response.content)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors(include_input=False))
        raise WebhookAgentError(f"the bot's answer is not {{replies, tool_calls}}: {problems}") from None


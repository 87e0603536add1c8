"""An LLM agent behind any OpenAI-compatible chat-completions endpoint.

The official `openai` package does the HTTP: it retries 429, 5xx and connection errors
with backoff (honouring Retry-After) up to `max_retries`, and applies `timeout` per request.
This module only translates: the conversation into chat messages, the live tool specs into
`tools`, and the model's tool calls into calls through the tool registry (so a model's call
is validated and audited exactly like an API client's). A call the registry rejects goes
back to the model as the tool result, so it can correct itself; the rounds are bounded.

A successful `handoff_request` ends the turn: from then on a person has the conversation
(and a sibling agent's successful `handoff_release` ends its turn: the first agent has it).
"""

from __future__ import annotations

import json
from typing import Any, cast

from openai import AsyncOpenAI, omit
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolUnionParam

from bot.agents import loop
from bot.agents.base import Agent, Turn, TurnMessage
from bot.config import OpenAIAgentConfig
from bot.store.vocabulary import Role


class OpenAIAgent(Agent):
    def __init__(self, config: OpenAIAgentConfig) -> None:
        self.config = config
        self.client = AsyncOpenAI(
            base_url=config.base_url,
            # Local servers (Ollama, llama.cpp) need no key, but the client insists on one.
            api_key=config.api_key.get_secret_value() if config.api_key else "not-needed",
            timeout=config.timeout.total_seconds(),
            max_retries=config.max_retries,
        )

    async def aclose(self) -> None:
        await self.client.close()

    async def respond(self, turn: Turn) -> list[str]:
        messages = self.messages(turn)
        tools = [spec.render("openai") for spec in turn.tools]

        async def ask(results: list[loop.ToolResult]) -> loop.Answer:
            messages.extend(
                {"role": "tool", "tool_call_id": r.call.id, "content": json.dumps(r.result)} for r in results
            )
            completion = await self.client.chat.completions.create(
                model=self.config.model,
                # Built as plain dicts in the wire format, which the SDK's TypedDicts describe.
                messages=cast("list[ChatCompletionMessageParam]", messages),
                tools=cast("list[ChatCompletionToolUnionParam]", tools) if tools else omit,
                temperature=self.config.temperature if self.config.temperature is not None else omit,
            )
            answer = completion.choices[0].message
            calls = [
                loop.ToolCall(call.id, call.function.name, call.function.arguments)
                for call in answer.tool_calls or []
                if call.type == "function"  # the only kind of tool offered: a custom-tool call cannot answer one
            ]
            if calls:  # the model's own message, so the tool results that follow answer it
                messages.append(answer.model_dump(include={"role", "content", "tool_calls"}, exclude_none=True))
            return loop.Answer([answer.content or ""], calls)

        return await loop.run(turn, ask, max_rounds=self.config.max_tool_rounds)

    def messages(self, turn: Turn) -> list[dict[str, Any]]:
        """The chat history as the model sees it: our system prompt first, then every message
        in order. `[Bot resumed — …]` notes are system messages; what a person from the team
        told the subscriber is a system note too, so the model never takes it for its own words."""
        about = ", ".join(x for x in (turn.subscriber_name, turn.subscriber_email and f"<{turn.subscriber_email}>") if x)
        prompt = self.config.system_prompt + (f"\n\nThe customer: {about}." if about else "")
        return [{"role": "system", "content": prompt}, *(_chat_message(m) for m in turn.history)]


def _chat_message(message: TurnMessage) -> dict[str, Any]:
    if message.role == Role.SUBSCRIBER:
        return {"role": "user", "content": message.text}
    if message.role == Role.AGENT:
        return {"role": "assistant", "content": message.text}
    if message.role == Role.HUMAN:
        who = message.author or "A person from the team"
        return {"role": "system", "content": f"{who} (a person from the team) wrote to the customer: {message.text}"}
    return {"role": "system", "content": message.text}


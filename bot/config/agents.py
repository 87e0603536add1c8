"""The `agent:` section (also a sibling agent's `agent:`): the built-in rules agent, an
OpenAI-compatible model, or the owner's own bot behind a signed webhook."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator

from bot.config.values import SIGNING_SECRET_HELP, Duration, SigningSecret, _Section, http_url


class RulesAgentConfig(_Section):
    """The built-in offline agent: polite answers, escalates when asked for a person."""

    kind: Literal["rules"] = "rules"
    name: str = Field(default="Assistant", min_length=1, max_length=60)


DEFAULT_SYSTEM_PROMPT = (
    "You are a helpful, concise assistant talking with a customer. Answer from what you know; "
    "when the customer needs a person, or something only a person can do, call handoff_request "
    "instead of guessing. The customer is told who was asked, and later that you are back, without "
    "you saying it. After a [Bot resumed — …] message, read it (and its returned data) and "
    "continue the conversation from there."
)


class OpenAIAgentConfig(_Section):
    """An LLM behind any OpenAI-compatible chat-completions endpoint (OpenAI, vLLM, Ollama,
    llama.cpp), called through the official `openai` package."""

    kind: Literal["openai"]
    base_url: str = Field(
        default="https://api.openai.com/v1",
        description="The API root, e.g. http://127.0.0.1:11434/v1 for Ollama or http://gpu-box:8000/v1 for vLLM.",
    )
    model: str = Field(min_length=1, max_length=200)
    api_key: SecretStr | None = Field(
        default=None, description="The server's API key (for OpenAI: platform.openai.com → API keys); "
        "leave out for local servers that need none.",
    )
    system_prompt: str = Field(default=DEFAULT_SYSTEM_PROMPT, min_length=1, max_length=20_000)
    temperature: float | None = Field(default=None, ge=0, le=2)
    timeout: Duration = Field(default=timedelta(seconds=60), description="Per request, before retries.")
    max_retries: int = Field(default=3, ge=0, le=10, description="Retries of 429 / 5xx / connection errors, with backoff.")
    max_tool_rounds: int = Field(
        default=5, ge=1, le=20, description="Model ↔ tool round trips in one turn before the turn is given up.",
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value, "https://api.openai.com/v1")


class WebhookAgentConfig(_Section):
    """The owner's own bot as the brain: each turn is a signed JSON POST to `url`, answered
    with replies and tool calls (bot/agents/webhook.py documents the exchange)."""

    kind: Literal["webhook"]
    url: str = Field(description="Where turns are POSTed, e.g. https://bot.example.com/handoff-desk/turn.")
    secret: SigningSecret = Field(
        description=f"The HMAC key your bot checks X-Handoff-Signature with, at least 16 characters: {SIGNING_SECRET_HELP}.",
    )
    timeout: Duration = Field(default=timedelta(seconds=30), description="Per request, before retries.")
    max_retries: int = Field(default=2, ge=0, le=10, description="Retries of connection errors, timeouts, 429 and 5xx.")
    max_tool_rounds: int = Field(default=5, ge=1, le=20)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value, "https://bot.example.com/handoff-desk/turn")


AgentConfig = Annotated[RulesAgentConfig | OpenAIAgentConfig | WebhookAgentConfig, Field(discriminator="kind")]

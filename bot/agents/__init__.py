"""Agents: the brain behind the conversation, built from `agent:` in the config."""

from __future__ import annotations

from bot.agents.base import Agent, Turn, TurnMessage
from bot.agents.rules import RulesAgent
from bot.config import AgentConfig, OpenAIAgentConfig, RulesAgentConfig, WebhookAgentConfig


def build_agent(config: AgentConfig) -> Agent:
    if isinstance(config, RulesAgentConfig):
        return RulesAgent(name=config.name)
    if isinstance(config, OpenAIAgentConfig):
        from bot.agents.openai_compat import OpenAIAgent  # the SDK is imported only when used

        return OpenAIAgent(config)
    if isinstance(config, WebhookAgentConfig):
        from bot.agents.webhook import WebhookAgent

        return WebhookAgent(config)
    raise ValueError(f"unsupported agent kind {config.kind!r}")  # pragma: no cover - config validation prevents it


__all__ = ["Agent", "Turn", "TurnMessage", "build_agent"]

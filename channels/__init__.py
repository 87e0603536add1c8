"""Channel adapters, one module per provider, found by `kind`.

Adapters are imported lazily by kind so that an owner who only uses the inbox never imports
a provider SDK they did not install.
"""

from __future__ import annotations

import importlib

from channels.base import ChannelAdapter

# kind -> "module:Class". Add a provider by adding its module and one line here.
ADAPTERS: dict[str, str] = {
    "agent": "bot.flow.siblings:AgentChannel",  # a sibling agent: core, not a provider
    "discord": "channels.discord:DiscordChannel",
    "email": "channels.email:EmailChannel",
    "owner_inbox": "channels.owner_inbox:OwnerInboxChannel",
    "slack": "channels.slack:SlackChannel",
    "telegram": "channels.telegram:TelegramChannel",
    "whatsapp": "channels.whatsapp:WhatsAppChannel",
}


class UnknownChannelKind(LookupError):
    pass


def known_kinds() -> list[str]:
    return sorted(ADAPTERS)


def adapter_class(kind: str) -> type[ChannelAdapter]:
    """Import and return the adapter class for `kind`."""
    try:
        target = ADAPTERS[kind]
    except KeyError:
        raise UnknownChannelKind(kind) from None
    module_name, _, class_name = target.partition(":")
    adapter: type[ChannelAdapter] = getattr(importlib.import_module(module_name), class_name)
    return adapter

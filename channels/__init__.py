"""Channel adapters, one module per provider, found by `kind`.

Adapters are imported lazily by kind so that an owner who only uses the inbox never imports
a provider SDK they did not install. A kind that is not a provider (the sibling agent, which
the flow layer owns) is registered from above with `register_kind`, so this registry never
names a layer higher than its own, not even in a string.
"""

from __future__ import annotations

import importlib
from typing import TypeVar

from channels.base import ChannelAdapter

# kind -> "module:Class". Add a provider by adding its module and one line here.
ADAPTERS: dict[str, str] = {
    "discord": "channels.discord:DiscordChannel",
    "email": "channels.email:EmailChannel",
    "owner_inbox": "channels.owner_inbox:OwnerInboxChannel",
    "slack": "channels.slack:SlackChannel",
    "telegram": "channels.telegram:TelegramChannel",
    "whatsapp": "channels.whatsapp:WhatsAppChannel",
}


# kind -> class, for the kinds a higher layer registered (register_kind).
REGISTERED: dict[str, type[ChannelAdapter]] = {}

Adapter = TypeVar("Adapter", bound=type[ChannelAdapter])


class UnknownChannelKind(LookupError):
    pass


def register_kind(adapter: Adapter) -> Adapter:
    """Add the kind of an adapter that lives above the channels (a class decorator)."""
    REGISTERED[adapter.kind] = adapter
    return adapter


def known_kinds() -> list[str]:
    return sorted({*ADAPTERS, *REGISTERED})


def adapter_class(kind: str) -> type[ChannelAdapter]:
    """Import and return the adapter class for `kind`."""
    if kind in REGISTERED:
        return REGISTERED[kind]
    try:
        target = ADAPTERS[kind]
    except KeyError:
        raise UnknownChannelKind(kind) from None
    module_name, _, class_name = target.partition(":")
    adapter: type[ChannelAdapter] = getattr(importlib.import_module(module_name), class_name)
    return adapter

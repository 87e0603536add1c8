"""Where subscribers talk to the bot (`fronts:`): the web chat, and provider fronts, each
validated against its adapter's `front_model` and matched to the channel that shares its
connection, if one does."""

from __future__ import annotations

import difflib
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import AliasChoices, BaseModel, Field, ValidationError, field_validator

from bot.config.problems import ConfigProblem, problems_from
from bot.config.values import _Section
from channels import UnknownChannelKind, adapter_class, known_kinds
from channels.base import ChannelConfig


class WebFrontConfig(_Section):
    """The web chat: subscribers talk to the bot at /chat, or in the widget a site embeds
    with <script src="{public_url}/widget.js">."""

    kind: Literal["web"]
    title: str = Field(default="Chat with us", min_length=1, max_length=80)
    greeting: str | None = Field(default=None, max_length=500, description="Shown above an empty chat.")
    embed_origins: list[str] = Field(
        default_factory=list, description="Sites allowed to embed the widget, e.g. https://shop.example.com.",
    )
    # The chat API is public, so it is rate-limited: token buckets kept in each server
    # instance's memory (N instances allow up to N times these).
    max_new_conversations_per_minute: int = Field(
        default=10, ge=1, le=100_000,
        description="New conversations one client address may start per minute (per server instance).",
    )
    max_messages_per_minute: int = Field(
        default=30, ge=1, le=100_000,
        description="Messages one conversation may send per minute (per server instance).",
    )

    @field_validator("embed_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        origins = []
        for origin in value:
            parsed = urlparse(origin)
            if parsed.scheme not in ("http", "https") or not parsed.netloc or parsed.path not in ("", "/"):
                raise ValueError(f"{origin!r} is not an origin such as https://shop.example.com")
            origins.append(f"{parsed.scheme}://{parsed.netloc}")
        return origins


class ProviderFront(_Section):
    """A front on a provider (a chat app): subscribers talk to the bot in their own chats
    with it. `channel_id` names the adapter that serves it: a channel on the same
    connection (one bot token used for the staff group and for subscribers), or an adapter
    of its own built from `settings` (the provider's front_model) and never offered to
    handoff_request."""

    kind: str
    name: str
    greeting: str | None = None
    max_messages_per_minute: int = 30
    channel_id: int
    shares_channel: bool
    settings: ChannelConfig


class _FrontKeys(_Section):
    """The keys every provider front takes besides its provider's own."""

    kind: str
    name: str | None = Field(
        default=None, pattern=r"^[a-z][a-z0-9_-]{0,39}$",
        description="Names the front in conversations and logs; defaults to the kind.",
    )
    id: int | None = Field(
        default=None, ge=1,
        description="Adapter id of a front with a connection of its own (its webhook is /webhooks/{id}); "
                    "defaults to 1000 + its position in fronts.",
    )
    greeting: str | None = Field(
        default=None, min_length=1, max_length=1000, description="What the bot says when a subscriber opens the chat.",
    )
    max_messages_per_minute: int = Field(
        default=30, ge=1, le=100_000,
        description="Messages one chat may send per minute (per server instance); more are stored, not answered.",
    )


FRONT_ID_BASE = 1000
_FRONT_KEYS = list(_FrontKeys.model_fields)
# A channel's keys that mean nothing on a front: the core sets id and label itself.
_CHANNEL_ONLY = {"id", "kind", "label", "estimated_response", "public_name", "enabled", "hours"}


def _keys_of(model: type[BaseModel]) -> list[str]:
    """The keys a model takes in a config file: its field names and their aliases."""
    keys: list[str] = []
    for name, info in model.model_fields.items():
        aliases = info.validation_alias.choices if isinstance(info.validation_alias, AliasChoices) else [info.validation_alias]
        keys.extend(k for k in (name, info.alias, *aliases) if isinstance(k, str) and k not in keys)
    return keys


def _unknown_front_key(path: str, key: str, allowed: list[str], channel_model: type[BaseModel]) -> ConfigProblem:
    if key in _keys_of(channel_model):
        return ConfigProblem(path, "belongs on a channel (channels[]), where a handoff is sent; a front only "
                                   f"takes {', '.join(allowed)}")
    close = difflib.get_close_matches(key, allowed, n=1)
    guess = f"; did you mean '{close[0]}'?" if close else ""
    return ConfigProblem(path, f"unknown key{guess} (allowed: {', '.join(allowed)})")


def _validate_fronts(raw: Any, channels: list[ChannelConfig]) -> tuple[list[Any], list[ConfigProblem]]:
    if not isinstance(raw, list):
        return [], [ConfigProblem("fronts", "must be a list of fronts such as [{kind: web}]")]
    fronts: list[tuple[int, Any]] = []  # with their position in the file, for key paths
    problems: list[ConfigProblem] = []
    for index, entry in enumerate(raw):
        front, found = _validate_front(index, entry, channels)
        problems.extend(found)
        if front is not None:
            fronts.append((index, front))
    problems.extend(_front_cross_checks(fronts, channels))
    return [front for _, front in fronts], problems


def _front_kinds() -> list[str]:
    return ["web", *(k for k in known_kinds() if adapter_class(k).front_model is not None)]


def _validate_front(index: int, entry: Any, channels: list[ChannelConfig]) -> tuple[Any, list[ConfigProblem]]:
    where = f"fronts[{index}]"
    if not isinstance(entry, dict):
        return None, [ConfigProblem(where, "must be a mapping such as {kind: web}")]
    kind = entry.get("kind")
    if kind == "web":
        try:
            return WebFrontConfig.model_validate(entry), []
        except ValidationError as exc:
            return None, problems_from(exc, WebFrontConfig, prefix=where)
    try:
        cls = adapter_class(str(kind)) if kind is not None else None
    except UnknownChannelKind:
        cls = None
    if cls is None or cls.front_model is None:
        expected = ", ".join(_front_kinds())
        message = "required" if kind is None else f"'{kind}' cannot serve subscribers"
        return None, [ConfigProblem(f"{where}.kind", f"{message} (one of: {expected})")]
    connection = [k for k in _keys_of(cls.front_model) if k not in _CHANNEL_ONLY]
    allowed = [*_FRONT_KEYS, *connection]
    problems = [_unknown_front_key(f"{where}.{key}", key, allowed, cls.config_model) for key in entry if key not in allowed]
    own = {k: v for k, v in entry.items() if k in _FRONT_KEYS}
    try:
        keys = _FrontKeys.model_validate(own)
    except ValidationError as exc:
        return None, problems + problems_from(exc, _FrontKeys, prefix=where)
    name = keys.name or str(kind)
    provider = {k: v for k, v in entry.items() if k in connection}
    own_id = keys.id or FRONT_ID_BASE + index + 1
    try:
        settings = cls.front_model.model_validate({**provider, "id": own_id, "kind": kind, "label": name})
    except ValidationError as exc:
        return None, problems + problems_from(exc, cls.front_model, prefix=where)
    shared = next(((n, c) for n, c in enumerate(channels) if c.kind == kind and cls.same_connection(c, settings)), None)
    if shared is not None:
        position, channel = shared
        for key in sorted(settings.model_fields_set - {"id", "kind", "label"}):
            if getattr(channel, key, None) != getattr(settings, key):
                problems.append(ConfigProblem(
                    f"{where}.{key}", f"differs from channels[{position}].{key}: this front and that channel are one "
                    "connection, so they share its settings (leave the key out here)",
                ))
        if keys.id is not None:
            problems.append(ConfigProblem(f"{where}.id", f"this front is served by channels[{position}] (id {channel.id}); leave id out"))
    front = ProviderFront(
        kind=str(kind), name=name, greeting=keys.greeting, max_messages_per_minute=keys.max_messages_per_minute,
        settings=settings,
        channel_id=shared[1].id if shared else own_id, shares_channel=shared is not None,
    )
    return (None if problems else front), problems


def _front_cross_checks(fronts: list[tuple[int, Any]], channels: list[ChannelConfig]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    names: dict[str, int] = {}
    earlier: list[tuple[int, ProviderFront]] = []
    channel_ids = {c.id: n for n, c in enumerate(channels)}
    for index, front in fronts:
        name = front.name if isinstance(front, ProviderFront) else "web"
        if name in names:
            what = "a second web front" if name == "web" else f"duplicate name {name!r}; give one a different name"
            problems.append(ConfigProblem(f"fronts[{index}]", f"{what} (also fronts[{names[name]}])"))
        names.setdefault(name, index)
        if not isinstance(front, ProviderFront):
            continue
        twin = next((i for i, other in earlier if other.kind == front.kind and (
            other.channel_id == front.channel_id or adapter_class(front.kind).same_connection(other.settings, front.settings)
        )), None)
        if twin is not None:
            problems.append(ConfigProblem(f"fronts[{index}]", f"same connection as fronts[{twin}]: one bot serves one front"))
        earlier.append((index, front))
        if not front.shares_channel and front.channel_id in channel_ids:
            problems.append(ConfigProblem(
                f"fronts[{index}].id", f"{front.channel_id} is taken by channels[{channel_ids[front.channel_id]}]; "
                "set a free id for this front",
            ))
    return problems

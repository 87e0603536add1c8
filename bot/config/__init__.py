"""Configuration: YAML with `${VAR}` / `${VAR:-default}`, validated into pydantic models.

Every problem is reported with its key path (`channels[1].kind: …`) and all problems are
reported at once, so an owner fixes a config in one pass instead of one error per restart.
Secrets are `SecretStr` and error messages never include the offending input, so a
misplaced token is not echoed to a terminal or a log.

Layer 2 of bot/: may import bot.errors, bot.runtime and channels/ (the registry and the port).
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import ipaddress
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin
from urllib.parse import urlparse

import yaml
from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    IPvAnyNetwork,
    SecretStr,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from channels import UnknownChannelKind, adapter_class, known_kinds
from channels.base import ChannelConfig

DEV_SECRET_KEY = "dev-only-change-me"

# --------------------------------------------------------------------------- durations

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: Any) -> timedelta:
    """Parse `30m`, `90s`, `24h`, `1h30m`, `250ms` or a number of seconds."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool):
        raise ValueError("expected a duration such as 30m, 90s or 24h")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            pos, seconds = 0, 0.0
            for match in _DURATION_PART.finditer(text):
                if match.start() != pos:
                    break
                seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
                pos = match.end()
            if pos != len(text) or not text:
                raise ValueError(f"expected a duration such as 30m, 90s or 24h, got {value!r}")
    if seconds <= 0:
        raise ValueError("must be a positive duration")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """`timedelta(minutes=30)` -> `30 minutes`, for messages people read."""
    seconds = delta.total_seconds()
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            count = int(seconds // size)
            return f"{count} {unit}{'s' if count != 1 else ''}"
    if seconds >= 60:
        return f"{seconds / 60:.1f} minutes"
    return f"{seconds:g} seconds"


Duration = Annotated[timedelta, BeforeValidator(parse_duration)]


def _empty_to_none(value: Any) -> Any:
    return None if isinstance(value, str) and not value.strip() else value


OptionalSecret = Annotated[SecretStr | None, BeforeValidator(_empty_to_none)]


def _at_least_16(value: SecretStr) -> SecretStr:
    if len(value.get_secret_value()) < 16:
        raise ValueError("must be at least 16 characters (generate one with: openssl rand -hex 32)")
    return value


# A shared HMAC key the owner makes up and gives both sides (webhook agent, action endpoint).
SigningSecret = Annotated[SecretStr, AfterValidator(_at_least_16)]
SIGNING_SECRET_HELP = "a random value you make up (openssl rand -hex 32) and give the other side too"


# --------------------------------------------------------------------------- models


def http_url(value: str, example: str) -> str:
    """An absolute http(s) URL without its trailing slash, or a ValueError naming an example."""
    parsed = urlparse(value)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"must be an http(s) URL such as {example}")
    return value.rstrip("/")


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    public_url: str | None = Field(
        default=None, description="Base URL people and providers use to reach this server (links, webhooks)."
    )

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        value = _empty_to_none(value)
        return None if value is None else http_url(value, "https://desk.example.com")

    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Extra Host names the server answers to, besides public_url's host and loopback names.",
    )
    trusted_proxies: list[IPvAnyNetwork] = Field(
        default_factory=lambda: [ipaddress.ip_network("127.0.0.1/32"), ipaddress.ip_network("::1/128")],
        description="Reverse proxies (addresses or CIDRs) whose X-Forwarded-For names the client; "
                    "only they are believed. The default trusts a proxy on this host.",
    )

    @property
    def base_url(self) -> str:
        return self.public_url or f"http://{self.host}:{self.port}"

    def trusted_hosts(self) -> list[str]:
        """Host headers to accept: anything else (DNS rebinding) gets a 400."""
        hosts = {"localhost", "127.0.0.1", "::1", "[::1]", urlparse(self.base_url).hostname or "", *self.allowed_hosts}
        if not _is_loopback(self.host) and self.host not in ("0.0.0.0", "::"):
            hosts.add(self.host)
        return sorted(h for h in hosts if h)


class ApiConfig(_Section):
    key: OptionalSecret = Field(default=None, description="Bearer token for /api; empty disables the check.")


class OwnerConfig(_Section):
    token: OptionalSecret = Field(default=None, description="Password of the owner inbox; empty leaves it open.")


class HandoffSettings(_Section):
    idle_timeout: Duration = timedelta(minutes=30)
    form_link_ttl: Duration = timedelta(hours=24)
    user_action_timeout: Duration = timedelta(minutes=5)
    dispatch_timeout: Duration = Field(
        default=timedelta(seconds=20),
        description="How long handoff_request may spend delivering (retries included) before it fails.",
    )
    sweep_interval: Duration = Field(
        default=timedelta(seconds=30),
        description="How often overdue idle deadlines are swept (catches restarts and other instances).",
    )
    transcript_messages: int = Field(default=20, ge=0, le=200, description="Recent messages attached to a dispatch.")


class DeliverySettings(_Section):
    """How the outbox retries transient channel errors (timeouts, 429, 5xx)."""

    max_attempts: int = Field(default=10, ge=1, le=100)
    base_backoff: Duration = timedelta(seconds=1)
    max_backoff: Duration = timedelta(minutes=10)


class RetentionSettings(_Section):
    """How long delivery bookkeeping is kept. The audit trail and the conversations are not
    pruned; these rows are copies made to deliver and deduplicate, and every subscriber
    message on a front adds one of each."""

    inbound_events: Duration | None = Field(
        default=timedelta(days=7),
        description="Processed inbound events (kept to drop provider redeliveries) older than this are deleted; "
                    "null keeps them.",
    )
    outbox: Duration | None = Field(
        default=timedelta(days=30),
        description="Sent or given-up outbox items (copies of the messages) older than this are deleted; null keeps them.",
    )
    every: Duration = Field(default=timedelta(hours=1), description="How often the pruning runs.")

    @field_validator("inbound_events")
    @classmethod
    def _dedupe_window(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value < timedelta(days=1):
            raise ValueError("must be at least 1d: providers redeliver events for up to a day")
        return value


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


RESERVED_TOOL_NAMES = ("handoff_request", "handoff_release", "request_user_action", "response_user_action")


class HttpActionRun(_Section):
    """Run the action by POSTing the approved arguments to the owner's endpoint, signed like
    the webhook agent's turns (X-Handoff-Signature over timestamp + body)."""

    url: str
    secret: SigningSecret = Field(
        description=f"The HMAC key the endpoint checks X-Handoff-Signature with, at least 16 characters: {SIGNING_SECRET_HELP}.",
    )
    timeout: Duration = timedelta(seconds=30)

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return http_url(value, "https://shop.example.com/hooks/refund")


class CallableActionRun(_Section):
    """Run the action by calling a Python function (sync or async) with the arguments."""

    callable: str = Field(
        description='"package.module:function", from PYTHONPATH, the installed packages or the config file\'s folder.',
    )

    @field_validator("callable")
    @classmethod
    def _importable(cls, value: str, info: ValidationInfo) -> str:
        _import_callable(value, (info.context or {}).get("config_dir"))
        return value


def _import_callable(spec: str, config_dir: Path | None) -> Callable[..., Any]:
    """Import "package.module:function" from where the server looks: the import path
    (PYTHONPATH, the installed packages), then the config file's folder. The folder is added
    at the end of the path, so a module kept beside the config (and its own imports of its
    neighbours) works under the `handoff` script, whose path does not hold the current
    directory, and never shadows an installed module of the same name."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError('must look like "package.module:function"')
    folder = str(config_dir.resolve()) if config_dir is not None else None
    try:
        if folder and folder not in sys.path and importlib.util.find_spec(module_name.partition(".")[0]) is None:
            sys.path.append(folder)
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and f"{module_name}.".startswith(f"{exc.name}."):
            raise ValueError(f"cannot import {spec!r}: no module named {exc.name!r}; looked in {_import_places(folder)}") from None
        raise ValueError(f"cannot import {spec!r}: importing {module_name} failed ({type(exc).__name__}: {exc})") from None
    except Exception as exc:  # the owner's module may raise anything while it loads
        raise ValueError(f"cannot import {spec!r}: importing {module_name} failed ({type(exc).__name__}: {exc})") from None
    target = getattr(module, attribute, None)
    if target is None:
        close = difflib.get_close_matches(attribute, [n for n in dir(module) if not n.startswith("_")], n=1)
        guess = f"; did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"cannot import {spec!r}: {module_name} ({getattr(module, '__file__', None) or 'a namespace'}) "
                         f"has no {attribute!r}{guess}")
    if not callable(target):
        raise ValueError(f"{spec!r} is not callable")
    function: Callable[..., Any] = target
    return function


def _import_places(config_folder: str | None) -> str:
    python_path = os.environ.get("PYTHONPATH", "")
    places = [f"PYTHONPATH ({python_path or 'not set'})", "the installed packages"]
    if config_folder:
        places.append(f"the config file's folder ({config_folder})")
    return ", ".join(places[:-1]) + " and " + places[-1]


def _run_form(value: Any) -> str:
    """Which form of `run:` an entry means: a callable, or else an HTTP endpoint (so a
    half-written entry gets the HTTP form's errors, naming url and secret)."""
    if isinstance(value, dict):
        return "callable" if "callable" in value else "url"
    return "callable" if isinstance(value, CallableActionRun) else "url"


ActionRun = Annotated[
    Annotated[HttpActionRun, Tag("url")] | Annotated[CallableActionRun, Tag("callable")], Discriminator(_run_form),
]


class ActionConfig(_Section):
    """An action the agent may call as a tool, gated by a person's approval per `policy`."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="The tool name the model calls, e.g. refund_order.")
    description: str = Field(min_length=10, max_length=1000, description="What it does, for the model and the approver.")
    risk: Literal["low", "medium", "high"] = "medium"
    policy: Literal["none", "ask", "ask_always"] = Field(
        default="ask", description="none: runs at once; ask: a person approves (may allow always for the conversation); "
        "ask_always: a person approves every call.",
    )
    approval_channels: list[int] = Field(default_factory=list, description="Channel ids the approval prompt goes to.")
    timeout: Duration = Field(default=timedelta(minutes=5), description="Unanswered for this long: denied.")
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object); calls are validated against it.",
    )
    run: ActionRun

    @field_validator("id")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_TOOL_NAMES:
            raise ValueError(f"{value!r} is a built-in tool name")
        return value

    @field_validator("timeout")
    @classmethod
    def _sensible_timeout(cls, value: timedelta) -> timedelta:
        if not timedelta(seconds=10) <= value <= timedelta(days=1):
            raise ValueError("must be between 10s and 24h")
        return value

    @field_validator("input_schema")
    @classmethod
    def _object_schema(cls, value: dict[str, Any]) -> dict[str, Any]:
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        try:
            Draft202012Validator.check_schema(value)
        except SchemaError as exc:
            raise ValueError(f"not a valid JSON Schema: {exc.message}") from None
        if value.get("type") != "object":
            raise ValueError('must describe an object: {type: object, properties: {…}}')
        return value


class ExpectationConfig(_Section):
    """A check that a user action really happened (the subscriber saying "done" is not
    proof): called with the user action's details, it answers {"holds": bool, "observed": "…"}."""

    id: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$", description="What request_user_action names in `expectation`.")
    description: str = Field(min_length=5, max_length=500, description="What must be true afterwards, for the model.")
    run: ActionRun


class UserActionsConfig(_Section):
    """Steps only the subscriber can do (request_user_action): what can verify them, and
    where a background task's orchestrator hears about them."""

    expectations: list[ExpectationConfig] = Field(default_factory=list)
    webhook: HttpActionRun | None = Field(
        default=None, description="For conversations run as background tasks: user actions are POSTed here, signed.",
    )


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


class LoggingConfig(_Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


class Config(_Section):
    """The whole configuration. `channels` holds each adapter's own config model."""

    server: ServerConfig = ServerConfig()
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)
    # Keys that signed links before a rotation; links signed with them keep working.
    previous_secret_keys: list[SecretStr] = Field(default_factory=list)
    database_url: str = "sqlite:///./handoff.db"
    api: ApiConfig = ApiConfig()
    owner: OwnerConfig = OwnerConfig()
    handoff: HandoffSettings = HandoffSettings()
    delivery: DeliverySettings = DeliverySettings()
    retention: RetentionSettings = RetentionSettings()
    agent: AgentConfig = RulesAgentConfig()
    actions: list[ActionConfig] = Field(default_factory=list)
    user_actions: UserActionsConfig = UserActionsConfig()
    # Where subscribers talk to the bot: WebFrontConfig and ProviderFront entries, validated
    # per kind by `Config.from_mapping` (a provider front against its adapter's front_model).
    fronts: list[Any] = Field(default_factory=list, description="Where subscribers talk to the bot.")
    logging: LoggingConfig = LoggingConfig()
    # Validated per kind against the adapter's own model by `Config.from_mapping`.
    channels: list[Any] = Field(default_factory=list)

    @field_validator("secret_key")
    @classmethod
    def _long_enough(cls, value: SecretStr) -> SecretStr:
        if len(value.get_secret_value()) < 16:
            raise ValueError("must be at least 16 characters (it signs links and cookies)")
        return value

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str) -> str:
        scheme = value.split(":", 1)[0]
        if scheme not in ("sqlite", "sqlite+aiosqlite", "postgresql", "postgres", "postgresql+asyncpg"):
            raise ValueError("must start with sqlite:/// or postgresql+asyncpg://")
        if scheme.startswith("sqlite") and ":memory:" in value:
            raise ValueError("an in-memory SQLite database is not supported; use a file path")
        return value

    @property
    def signing_keys(self) -> list[str]:
        """Oldest first, newest (the one that signs) last, as itsdangerous expects."""
        return [k.get_secret_value() for k in self.previous_secret_keys] + [self.secret_key.get_secret_value()]

    @property
    def public_url(self) -> str:
        return self.server.base_url

    @property
    def web_front(self) -> WebFrontConfig | None:
        return next((f for f in self.fronts if isinstance(f, WebFrontConfig)), None)

    @property
    def provider_fronts(self) -> list[ProviderFront]:
        return [f for f in self.fronts if isinstance(f, ProviderFront)]

    def channel(self, channel_id: int) -> ChannelConfig | None:
        return next((c for c in self.channels if c.id == channel_id), None)

    @classmethod
    def from_mapping(cls, data: Any, *, config_dir: Path | None = None) -> Config:
        """Validate a parsed mapping (after `${VAR}` expansion); raise ConfigError listing
        every problem with its key path. `config_dir` is the config file's folder, where
        `run: {callable: …}` modules are also looked for."""
        if not isinstance(data, dict):
            raise ConfigError([ConfigProblem("", "the config must be a mapping of keys to values")])
        problems: list[ConfigProblem] = []
        raw_channels = data.get("channels", [])
        raw_fronts = data.get("fronts", [])
        top = {k: v for k, v in data.items() if k not in ("channels", "fronts")}
        config: Config | None = None
        try:
            config = cls.model_validate(top, context={"config_dir": config_dir})
        except ValidationError as exc:
            problems.extend(problems_from(exc, cls))
        channels: list[ChannelConfig] = []
        if not isinstance(raw_channels, list):
            problems.append(ConfigProblem("channels", "must be a list of channel entries"))
        else:
            for index, entry in enumerate(raw_channels):
                channel, found = _validate_channel(index, entry)
                problems.extend(found)
                if channel is not None:
                    channels.append(channel)
        problems.extend(_cross_checks(raw_channels if isinstance(raw_channels, list) else []))
        fronts, found = _validate_fronts(raw_fronts, channels)
        problems.extend(found)
        if config is not None:
            problems.extend(_action_checks(config, channels))
            problems.extend(exposure_problems(config))
        if problems or config is None:
            raise ConfigError(problems)
        return config.model_copy(update={"channels": channels, "fronts": fronts})


def _validate_channel(index: int, entry: Any) -> tuple[ChannelConfig | None, list[ConfigProblem]]:
    where = f"channels[{index}]"
    if not isinstance(entry, dict):
        return None, [ConfigProblem(where, "must be a mapping such as {id: 1, kind: owner_inbox, label: …}")]
    kind = entry.get("kind")
    if kind is None:
        return None, [ConfigProblem(f"{where}.kind", f"required (one of: {', '.join(known_kinds())})")]
    try:
        model = adapter_class(str(kind)).config_model
    except UnknownChannelKind:
        close = difflib.get_close_matches(str(kind), known_kinds(), n=1)
        guess = f"; did you mean '{close[0]}'?" if close else ""
        return None, [
            ConfigProblem(f"{where}.kind", f"unknown channel kind '{kind}' (expected one of: {', '.join(known_kinds())}){guess}")
        ]
    try:
        return model.model_validate(entry), []
    except ValidationError as exc:
        return None, problems_from(exc, model, prefix=where)


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
_CHANNEL_ONLY = {"id", "kind", "label", "estimated_response", "public_name", "enabled"}


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


def _is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _cross_checks(raw_channels: list[Any]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    seen: dict[int, int] = {}
    for index, entry in enumerate(raw_channels):
        cid = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(cid, int):
            if cid in seen:
                problems.append(ConfigProblem(f"channels[{index}].id", f"duplicate id {cid} (also used by channels[{seen[cid]}])"))
            seen.setdefault(cid, index)
    return problems


def _action_checks(config: Config, channels: list[ChannelConfig]) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []
    known = sorted(c.id for c in channels)
    kinds = {c.id: c.kind for c in channels}
    seen: dict[str, int] = {}
    for index, action in enumerate(config.actions):
        if action.id in seen:
            problems.append(ConfigProblem(f"actions[{index}].id", f"duplicate id {action.id!r} (also actions[{seen[action.id]}])"))
        seen.setdefault(action.id, index)
        for position, cid in enumerate(action.approval_channels):
            where = f"actions[{index}].approval_channels[{position}]"
            if cid not in known:
                problems.append(ConfigProblem(where, f"no channel with id {cid} (configured: {', '.join(map(str, known)) or 'none'})"))
            elif kinds[cid] == "agent":
                problems.append(ConfigProblem(where, f"channel {cid} is a sibling agent: approvals need a person"))
    return problems


def exposure_problems(config: Config) -> list[ConfigProblem]:
    """What must be set before the server listens beyond this machine. Run on the final
    config, after command-line overrides such as `serve --host`."""
    host = config.server.host
    if _is_loopback(host):
        return []
    problems = []
    for path, value in (("owner.token", config.owner.token), ("api.key", config.api.key)):
        if value is None:
            problems.append(ConfigProblem(
                path, f"required when server.host ({host}) is reachable from other machines; set it or bind to 127.0.0.1"
            ))
    if config.secret_key.get_secret_value() == DEV_SECRET_KEY:
        problems.append(ConfigProblem(
            "secret_key", f"the development default is public; set a long random value when server.host ({host}) is reachable"
        ))
    return problems


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True)
class ConfigProblem:
    """One problem at one key path. `about` says what a missing secret is and where its
    owner finds it (its config field's description, so each provider says it once)."""

    path: str
    message: str
    about: str | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        return f"{text} — {self.about}" if self.about else text


class ConfigError(Exception):
    """The config has problems; `problems` lists each with its key path."""

    def __init__(self, problems: list[ConfigProblem]) -> None:
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems) or "invalid config")


def format_path(loc: tuple[Any, ...], prefix: str = "") -> str:
    path = prefix
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def _model_at(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel] | None:
    """The model that holds the keys at `loc`. `loc` keeps the tags of discriminated unions
    (`agent.openai.model`), which pick the member."""
    current: Any = model
    for part in loc:
        if isinstance(part, int):
            continue
        members = _members(current)
        tagged = [m for tag, m in members if part == tag or part in _kind_tags(m)] if len(members) > 1 else []
        if tagged:
            current = tagged[0]
            continue
        if len(members) != 1 or part not in members[0][1].model_fields:
            return None
        current = members[0][1].model_fields[part].annotation
    members = _members(current)
    return members[0][1] if len(members) == 1 else None


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the model accepts at `loc` (for 'unknown key' messages)."""
    found = _model_at(model, loc)
    return list(found.model_fields) if found is not None else []


def _secret_help(model: type[BaseModel], loc: tuple[Any, ...]) -> str | None:
    """What the secret at `loc` is and where to find it: its field's description; None
    when the key holds no secret."""
    while loc and isinstance(loc[-1], int):  # an item of a list of secrets
        loc = loc[:-1]
    holder = _model_at(model, loc[:-1]) if loc else None
    field = holder.model_fields.get(str(loc[-1])) if holder is not None else None
    return field.description if field is not None and _holds_secret(field.annotation) else None


def _holds_secret(annotation: Any) -> bool:
    return annotation is SecretStr or any(_holds_secret(arg) for arg in get_args(annotation))


def _members(annotation: Any) -> list[tuple[str | None, type[BaseModel]]]:
    """The pydantic models an annotation can hold (X, list[X], X | None, Annotated[A | B, …]),
    each with its union Tag when it has one."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(None, annotation)]
    if get_origin(annotation) is Annotated:
        inner, *metadata = get_args(annotation)
        tag = next((m.tag for m in metadata if isinstance(m, Tag)), None)
        return [(tag or inner_tag, model) for inner_tag, model in _members(inner)]
    return [member for arg in get_args(annotation) for member in _members(arg)]


def _kind_tags(model: type[BaseModel]) -> tuple[Any, ...]:
    field = model.model_fields.get("kind")
    return get_args(field.annotation) if field is not None else ()


# Discriminated unions put the tag into an error's location (`agent.rules.name`); people
# think of the key path without it (`agent.name`).
_UNION_TAGGED_KEYS = {"agent": {"rules", "openai", "webhook"}, "run": {"url", "callable"}}


def _without_union_tags(loc: tuple[Any, ...]) -> tuple[Any, ...]:
    kept: list[Any] = []
    for position, part in enumerate(loc):
        after = loc[position - 1] if position else None
        if after is not None and part in _UNION_TAGGED_KEYS.get(str(after), ()):
            continue  # the tag right after its key; a field of the same name further in stays
        kept.append(part)
    return tuple(kept)


def problems_from(exc: ValidationError, model: type[BaseModel], prefix: str = "") -> list[ConfigProblem]:
    """Turn pydantic errors into key-path problems without echoing the input (it may be a
    secret; it is only looked at to tell an empty secret from a malformed one)."""
    problems = []
    for error in exc.errors(include_url=False):
        loc = _without_union_tags(error["loc"])
        kind = error["type"]
        about = None
        if kind == "missing" or _blank(error.get("input")):
            about = _secret_help(model, error["loc"])
        if about is not None:
            message = "required"  # an empty secret too, whatever its format check says
        elif kind == "union_tag_invalid":
            loc = (*loc, "kind")
            message = f"unknown kind '{error['ctx']['tag']}' (expected one of: {error['ctx']['expected_tags']})"
        elif kind == "union_tag_not_found":
            loc = (*loc, "kind")
            message = "required"
        elif kind == "extra_forbidden":
            allowed = _allowed_keys(model, error["loc"][:-1])
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            message = "unknown key" + (f"; did you mean '{close[0]}'?" if close else "")
            if allowed:
                message += f" (allowed: {', '.join(allowed)})"
        elif kind == "missing":
            message = "required"
        else:
            message = error["msg"].removeprefix("Value error, ")
        problems.append(ConfigProblem(format_path(loc, prefix), message, about))
    return problems


def _blank(value: Any) -> bool:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    return isinstance(value, str) and not value.strip()


# --------------------------------------------------------------------------- loading

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")


def expand_env(data: Any, env: dict[str, str] | os._Environ[str] | None = None, path: str = "") -> tuple[Any, list[ConfigProblem]]:
    """Replace `${VAR}` and `${VAR:-default}` in every string value; `$$` is a literal `$`.

    Expansion happens on parsed values, never on the YAML text, so a variable's content
    cannot change the structure of the file.
    """
    env = os.environ if env is None else env
    problems: list[ConfigProblem] = []

    def walk(node: Any, where: str) -> Any:
        if isinstance(node, dict):
            return {k: walk(v, format_path((k,), where)) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if not isinstance(node, str) or "$" not in node:
            return node

        def substitute(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            problems.append(ConfigProblem(where, f"environment variable {name} is not set (use ${{{name}:-default}} for a default)"))
            return ""

        return _VAR.sub(substitute, node)

    return walk(data, path), problems


def load_config(path: str | Path, env: dict[str, str] | None = None) -> Config:
    """Read, expand and validate a YAML config file; raise ConfigError on any problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([ConfigProblem("", f"cannot read {path}: {exc.strerror or exc}")]) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError([yaml_problem(path, text, exc)]) from None
    if data is None:
        data = {}
    expanded, unset = expand_env(data, env)
    try:
        config = Config.from_mapping(expanded, config_dir=path.parent)
    except ConfigError as exc:
        raise ConfigError(_causes_once(unset, exc.problems)) from None
    if unset:
        raise ConfigError(unset)
    return config


def _causes_once(unset: list[ConfigProblem], problems: list[ConfigProblem]) -> list[ConfigProblem]:
    """An unset variable leaves its key empty, so the key also fails validation: report the
    cause alone, with what the key is when validation could tell."""
    causes = {p.path: p for p in unset}
    kept = []
    for problem in problems:
        cause = causes.get(problem.path)
        if cause is None:
            kept.append(problem)
        elif problem.about and not cause.about:
            causes[problem.path] = replace(cause, about=problem.about)
    return [*causes.values(), *kept]


# A YAML error names the token the parser choked on; what people did is usually one of these
# (the first that matches the error's text wins).
_INDENTATION = "probably indentation: the keys of one mapping start in the same column, a nested key further right than its parent"
_YAML_HINTS = (
    ("'\\t'", "a tab: YAML indents with spaces only"),
    ("got ':'", "a value holds ': ' and needs quotes"),
    ("mapping values are not allowed", f"{_INDENTATION} (or a value holds ': ' and needs quotes)"),
    ("expected <block end>", _INDENTATION),
    ("could not find expected ':'", "a key without ': ' after it, or a value that goes on without quotes"),
    ("flow sequence", "a [ that is not closed"),
    ("flow mapping", "a { that is not closed"),
    ("quoted scalar", "a quote that is not closed"),
)
_SECRET_ASSIGNMENT = re.compile(r"(\b[\w-]*(?:token|secret|password|passwd|key|auth)[\w-]*\s*:\s*)([^\s,}\]]+)", re.I)


def yaml_problem(path: Path, text: str, exc: yaml.YAMLError) -> ConfigProblem:
    """A YAML syntax error as people can act on it: the line, a caret under the spot, and
    the likely cause. Values of secret-looking keys on the shown lines are masked."""
    problem = str(getattr(exc, "problem", None) or exc)
    context = str(getattr(exc, "context", None) or "")
    hint = next((h for needle, h in _YAML_HINTS if needle in f"{problem} {context}"), None)
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return ConfigProblem("", f"{path} is not valid YAML: {problem}")
    message = f"{path} is not valid YAML: line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if hint:
        message += f"; {hint}"
    lines = text.splitlines()
    start = getattr(exc, "context_mark", None)
    carets = {mark.line: (mark.column, "")}
    if start is not None and start.line < mark.line:
        carets[start.line] = (start.column, " started here")
    shown = sorted({*carets, *([mark.line - 1] if mark.line else [])} & set(range(len(lines))))
    for position, number in enumerate(shown):
        if position and number > shown[position - 1] + 1:
            message += "\n  …"
        message += f"\n{number + 1:>5} | {_masked(lines[number])}"
        if number in carets:
            column, label = carets[number]
            message += f"\n      | {' ' * column}^{label}"
    return ConfigProblem("", message)


def _masked(line: str) -> str:
    """The line with secret-looking values (not ${VAR} references) replaced by asterisks, and
    tabs shown as → (one column each, as YAML counts them, so the caret stays in place)."""
    return _SECRET_ASSIGNMENT.sub(
        lambda m: m.group(0) if m.group(2).startswith("${") else m.group(1) + "*" * len(m.group(2)), line,
    ).replace("\t", "→")


def config_warnings(config: Config) -> list[str]:
    """Things that work but an owner should know about before going live."""
    warnings = []
    if config.secret_key.get_secret_value() == DEV_SECRET_KEY:
        warnings.append("secret_key: using the development default; set HANDOFF_SECRET_KEY before going live")
    if config.owner.token is None:
        warnings.append("owner.token: empty, so the owner inbox is open to anyone who can reach this server")
    if config.api.key is None:
        warnings.append("api.key: empty, so the HTTP API accepts unauthenticated calls")
    if not any(c.enabled for c in config.channels):
        warnings.append("channels: no enabled channel, so the agent cannot hand off to anyone")
    for index, action in enumerate(config.actions):
        if action.policy != "none" and not action.approval_channels:
            warnings.append(f"actions[{index}].approval_channels: empty, so every call of {action.id} is denied "
                            "(fail closed); name a channel that can ask a person")
    agents = [("agent", config.agent), *((f"channels[{n}].agent", getattr(c, "agent", None)) for n, c in enumerate(config.channels))]
    for where, agent in agents:
        if isinstance(agent, OpenAIAgentConfig) and "base_url" not in agent.model_fields_set:
            warnings.append(f"{where}.base_url: not set, so the agent calls OpenAI's hosted API ({agent.base_url}) "
                            "and sends it the conversations; set base_url to your own server (such as "
                            "http://127.0.0.1:11434/v1), or write that address as base_url if you mean it")
    return warnings

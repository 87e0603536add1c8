"""The root `Config` model and `Config.from_mapping`, which validates the sections, each
`channels:` entry against its adapter's own config model, the fronts, and the checks that
span sections (duplicate ids, approval channels, what must be set before listening beyond
this machine), reporting every problem at once."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, field_validator

from bot.config import sections
from bot.config.actions import ActionConfig, UserActionsConfig
from bot.config.agents import AgentConfig, RulesAgentConfig
from bot.config.csat import CsatConfig
from bot.config.fronts import ProviderFront, WebFrontConfig, _validate_fronts
from bot.config.hours import HoursConfig, ScheduleName
from bot.config.oncall import OnCallConfig, TeamConfig
from bot.config.people import PersonConfig, SignInConfig
from bot.config.problems import ConfigError, ConfigProblem, problems_from
from bot.config.reach import reach_checks
from bot.config.routes import Ladder, RouteConfig, resolve_ladders, route_checks
from bot.config.values import _Section, each_once
from channels import UnknownChannelKind, adapter_class, known_kinds
from channels.base import ChannelConfig

DEV_SECRET_KEY = "dev-only-change-me"


class Config(_Section):
    """The whole configuration. `channels` holds each adapter's own config model."""

    server: sections.ServerConfig = sections.ServerConfig()
    secret_key: SecretStr = SecretStr(DEV_SECRET_KEY)
    # Keys that signed links before a rotation; links signed with them keep working.
    previous_secret_keys: list[SecretStr] = Field(default_factory=list)
    database_url: str = "sqlite:///./handoff.db"
    api: sections.ApiConfig = sections.ApiConfig()
    owner: sections.OwnerConfig = sections.OwnerConfig()
    metrics: sections.MetricsConfig = sections.MetricsConfig()
    handoff: sections.HandoffSettings = sections.HandoffSettings()
    delivery: sections.DeliverySettings = sections.DeliverySettings()
    retention: sections.RetentionSettings = sections.RetentionSettings()
    agent: AgentConfig = RulesAgentConfig()
    actions: list[ActionConfig] = Field(default_factory=list)
    user_actions: UserActionsConfig = UserActionsConfig()
    csat: CsatConfig = CsatConfig()
    # Where subscribers talk to the bot: WebFrontConfig and ProviderFront entries, validated
    # per kind by `Config.from_mapping` (a provider front against its adapter's front_model).
    fronts: list[Any] = Field(default_factory=list, description="Where subscribers talk to the bot.")
    logging: sections.LoggingConfig = sections.LoggingConfig()
    hours: dict[ScheduleName, HoursConfig] = Field(
        default_factory=dict, description="Named office-hours schedules that channels name with hours: <name>.",
    )
    # Validated per kind against the adapter's own model by `Config.from_mapping`.
    channels: list[Any] = Field(default_factory=list)
    routes: list[RouteConfig] = Field(
        default_factory=list, description="Ladders of channels the agent can hand to like a channel (same id space).",
    )
    people: list[PersonConfig] = Field(
        default_factory=list, description="People applied on every start (added or updated, never deleted), so a team keeps its roster in git.",
    )
    sign_in: SignInConfig = SignInConfig()
    teams: list[TeamConfig] = Field(
        default_factory=list, description="Named groups of people a route's step offers handoffs to (team:<id>).",
    )
    oncall: list[OnCallConfig] = Field(
        default_factory=list, description="On-call schedules: rotations in layers, with overrides (oncall:<id> in a route's step).",
    )

    @field_validator("people")
    @classmethod
    def _people_once(cls, value: list[PersonConfig]) -> list[PersonConfig]:
        each_once([p.id for p in value], "person ids must be unique; repeated: {}")
        each_once([p.email.lower() for p in value], "e-mail addresses must be unique; repeated: {}")
        return value

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

    @property
    def ladders(self) -> dict[int, Ladder]:
        """Each route's whole ladder, the steps of the routes it falls through to appended."""
        return resolve_ladders(self.routes)

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
        problems.extend(_hours_checks(data.get("hours"), raw_channels if isinstance(raw_channels, list) else []))
        problems.extend(route_checks(data.get("routes"), channels, data.get("hours")))
        fronts, found = _validate_fronts(raw_fronts, channels)
        problems.extend(found)
        if config is not None:
            problems.extend(_action_checks(config, channels))
            problems.extend(exposure_problems(config))
            problems.extend(reach_checks(config, channels))
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
    """Action ids are unique, and each approval channel is a person's channel or a route
    (one at most per action)."""
    problems: list[ConfigProblem] = []
    known = sorted(c.id for c in channels)
    kinds = {c.id: c.kind for c in channels}
    ladders = config.ladders
    routes = f"; routes: {', '.join(map(str, sorted(ladders)))}" if ladders else ""
    seen: dict[str, int] = {}
    for index, action in enumerate(config.actions):
        if action.id in seen:
            problems.append(ConfigProblem(f"actions[{index}].id", f"duplicate id {action.id!r} (also actions[{seen[action.id]}])"))
        seen.setdefault(action.id, index)
        first_route: int | None = None
        for position, cid in enumerate(action.approval_channels):
            where = f"actions[{index}].approval_channels[{position}]"
            if cid in ladders:  # its steps notify people only (route_checks)
                if first_route is not None:
                    problems.append(ConfigProblem(where, f"a second route ({first_route} is one already); name one route at most"))
                first_route = cid if first_route is None else first_route
                if not ladders[cid].channel_ids:
                    problems.append(ConfigProblem(where, (
                        f"route {cid} names no channel: an approval is asked in a route's channels (person:, team: "
                        "and oncall: targets take handoffs only); add a channel to one of its steps")))
            elif cid not in known:
                problems.append(ConfigProblem(
                    where, f"no channel with id {cid} (configured: {', '.join(map(str, known)) or 'none'}{routes})"))
            elif kinds[cid] == "agent":
                problems.append(ConfigProblem(where, f"channel {cid} is a sibling agent: approvals need a person"))
    return problems


def _hours_checks(raw_hours: Any, raw_channels: list[Any]) -> list[ConfigProblem]:
    """Every schedule a channel names exists under `hours:`. Both are read raw, so a name is
    checked even when its schedule or its channel is refused for another key."""
    problems: list[ConfigProblem] = []
    defined = sorted(map(str, raw_hours)) if isinstance(raw_hours, dict) else []
    for index, entry in enumerate(raw_channels):
        name = entry.get("hours") if isinstance(entry, dict) else None
        if name is None or name in defined:
            continue
        close = difflib.get_close_matches(str(name), defined, n=1)
        guess = f"; did you mean '{close[0]}'?" if close else ""
        problems.append(ConfigProblem(
            f"channels[{index}].hours",
            f"no schedule named {name!r} under hours: (defined: {', '.join(defined) or 'none'}){guess}; "
            "add it there or fix the name",
        ))
    return problems


def exposure_problems(config: Config) -> list[ConfigProblem]:
    """What must be set before the server listens beyond this machine. Run on the final
    config, after command-line overrides such as `serve --host`."""
    host = config.server.host
    if sections._is_loopback(host):
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

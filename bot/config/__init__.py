"""Configuration: YAML with `${VAR}` / `${VAR:-default}`, validated into pydantic models.

Every problem is reported with its key path (`channels[1].kind: …`) and all problems are
reported at once, so an owner fixes a config in one pass instead of one error per restart.
Secrets are `SecretStr` and error messages never include the offending input, so a
misplaced token is not echoed to a terminal or a log.

The package's modules, by concern, each importing only the ones before it
(docs/architecture.md, "The layers"): `values` (durations, secrets, URLs, the section base),
`problems` (key paths and messages), `sections` (server, api, owner, metrics, handoff, delivery,
retention, logging), `agents`, `actions` (declared actions and user actions), `hours` (office-hours
schedules), `csat` (the satisfaction question), `fronts` (the web chat and provider fronts), `roles`, `sso` (single sign-on), `people` (the roster and sign-in), `root` (`Config` and the checks that span sections) and
`loading` (YAML, `${VAR}`, warnings). Import from `bot.config`: every public name is
re-exported here.

Layer 2 of bot/: may import bot.errors, bot.runtime and channels/ (the registry and the port).
"""

from bot.config.actions import (
    RESERVED_TOOL_NAMES,
    ActionConfig,
    ActionRun,
    AgentActionRun,
    CallableActionRun,
    ExpectationConfig,
    GatedActionRun,
    HttpActionRun,
    UserActionsConfig,
)
from bot.config.agents import DEFAULT_SYSTEM_PROMPT, AgentConfig, OpenAIAgentConfig, RulesAgentConfig, WebhookAgentConfig
from bot.config.csat import PERSON_HANDLED, AskAfter, CsatConfig
from bot.config.fronts import FRONT_ID_BASE, ProviderFront, WebFrontConfig
from bot.config.hours import DAY_NAMES, HoursConfig, ScheduleName, Window
from bot.config.loading import config_warnings, expand_env, load_config, yaml_problem
from bot.config.oncall import ClockTime, LayerConfig, OnCallConfig, OverrideConfig, PersonId, TeamConfig, group_id
from bot.config.people import (
    CONTACT_KINDS,
    EMAIL,
    PERSON_ID,
    ContactKind,
    PersonConfig,
    SignInConfig,
    email_address,
    person_id,
    timezone_name,
)
from bot.config.problems import ConfigError, ConfigProblem, format_path, problems_from
from bot.config.reach import reach_checks
from bot.config.roles import Role
from bot.config.root import DEV_SECRET_KEY, Config, exposure_problems
from bot.config.routes import Assign, Ladder, RouteConfig, StepConfig, StepTarget, Target, resolve_ladders, route_checks
from bot.config.sections import (
    ApiConfig,
    DeliverySettings,
    HandoffSettings,
    LoggingConfig,
    MetricsConfig,
    OwnerConfig,
    RetentionSettings,
    ServerConfig,
)
from bot.config.sso import NO_ROLE, SsoConfig, is_loopback_host, issuer_url
from bot.config.values import (
    SIGNING_SECRET_HELP,
    DataSize,
    Duration,
    OptionalSecret,
    SigningSecret,
    between,
    each_once,
    format_duration,
    format_size,
    http_url,
    parse_duration,
    parse_size,
    repeated,
)

__all__ = [
    # values
    "SIGNING_SECRET_HELP",
    "DataSize",
    "Duration",
    "between",
    "repeated",
    "each_once",
    "OptionalSecret",
    "SigningSecret",
    "format_duration",
    "format_size",
    "http_url",
    "parse_duration",
    "parse_size",
    # sections
    "Ladder",
    "LayerConfig",
    "OnCallConfig",
    "OverrideConfig",
    "Target",
    "ClockTime",
    "PersonId",
    "group_id",
    "StepTarget",
    "Assign",
    "reach_checks",
    "CONTACT_KINDS",
    "ContactKind",
    "TeamConfig",
    "RouteConfig",
    "StepConfig",
    "resolve_ladders",
    "route_checks",
    "ApiConfig",
    "DeliverySettings",
    "HandoffSettings",
    "LoggingConfig",
    "MetricsConfig",
    "OwnerConfig",
    "RetentionSettings",
    "ServerConfig",
    # agents
    "DEFAULT_SYSTEM_PROMPT",
    "AgentConfig",
    "OpenAIAgentConfig",
    "RulesAgentConfig",
    "WebhookAgentConfig",
    # actions
    "RESERVED_TOOL_NAMES",
    "ActionConfig",
    "ActionRun",
    "AgentActionRun",
    "CallableActionRun",
    "ExpectationConfig",
    "GatedActionRun",
    "HttpActionRun",
    "UserActionsConfig",
    # csat
    "PERSON_HANDLED",
    "AskAfter",
    "CsatConfig",
    # hours
    "DAY_NAMES",
    "HoursConfig",
    "ScheduleName",
    "Window",
    # fronts
    "FRONT_ID_BASE",
    "ProviderFront",
    "WebFrontConfig",
    # people
    "EMAIL",
    "PERSON_ID",
    "PersonConfig",
    "SignInConfig",
    "email_address",
    "person_id",
    "timezone_name",
    # roles
    "Role",
    # sso
    "NO_ROLE",
    "SsoConfig",
    "is_loopback_host",
    "issuer_url",
    # root
    "DEV_SECRET_KEY",
    "Config",
    "exposure_problems",
    # problems
    "ConfigError",
    "ConfigProblem",
    "format_path",
    "problems_from",
    # loading
    "config_warnings",
    "expand_env",
    "load_config",
    "yaml_problem",
    # sso
    "NO_ROLE",
    "SsoConfig",
    "is_loopback_host",
    "issuer_url",
]

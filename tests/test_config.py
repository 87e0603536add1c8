"""Config loading: every problem named by key path, secrets never echoed."""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any, get_args

import pytest
from pydantic import BaseModel, SecretStr

import bot.config
from bot.config import (
    Config,
    ConfigError,
    HttpActionRun,
    OpenAIAgentConfig,
    WebhookAgentConfig,
    config_warnings,
    expand_env,
    format_duration,
    format_size,
    load_config,
    parse_duration,
    parse_size,
)
from channels import adapter_class, known_kinds
from tests.conftest import config_problem, make_config

ROOT = Path(__file__).resolve().parent.parent
BASE = {"secret_key": "0123456789abcdef0123", "channels": [{"id": 1, "kind": "owner_inbox", "label": "Inbox"}]}


def problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping(data)
    return [str(p) for p in caught.value.problems]


def test_example_config_runs_as_is() -> None:
    config = load_config(ROOT / "config.example.yaml", env={})
    assert config.channels[0].kind == "owner_inbox"
    assert config.agent.kind == "rules"
    assert config.handoff.idle_timeout == timedelta(minutes=30)
    assert config.database_url == "sqlite:///./handoff.db"
    assert config.api.key is None
    assert config.owner.token is None  # empty env defaults mean "off"


@pytest.mark.parametrize(("text", "seconds"), [
    ("30m", 1800), ("90s", 90), ("24h", 86400), ("1h30m", 5400), ("250ms", 0.25), ("2d", 172800), (45, 45), ("1.5s", 1.5),
])
def test_durations(text: object, seconds: float) -> None:
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "-5m", "0s", "5m30", True])
def test_bad_durations(text: object) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_duration_reads_naturally() -> None:
    assert format_duration(timedelta(minutes=30)) == "30 minutes"
    assert format_duration(timedelta(hours=1)) == "1 hour"
    assert format_duration(timedelta(seconds=0.3)) == "0.3 seconds"


def test_env_expansion_with_defaults_and_literal_dollar() -> None:
    data = {"a": "${X}", "b": "${MISSING:-fallback}", "c": "cost $$5 ${X}", "d": ["${X}"]}
    expanded, problems_found = expand_env(data, {"X": "1"})
    assert expanded == {"a": "1", "b": "fallback", "c": "cost $5 1", "d": ["1"]}
    assert problems_found == []


def test_unset_variable_is_named_with_its_key_path() -> None:
    _, found = expand_env({"channels": [{"bot_token": "${TELEGRAM_BOT_TOKEN}"}]}, {})
    assert [str(p) for p in found] == [
        "channels[0].bot_token: environment variable TELEGRAM_BOT_TOKEN is not set (use ${TELEGRAM_BOT_TOKEN:-default} for a default)"
    ]


def test_env_values_cannot_change_the_yaml_structure(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("secret_key: ${KEY}\nchannels: [{id: 1, kind: owner_inbox, label: '${LABEL}'}]\n")
    config = load_config(path, env={"KEY": "x" * 20, "LABEL": "a\nchannels: []"})
    assert config.channels[0].label == "a\nchannels: []"


def test_unknown_channel_kind_suggests_the_closest() -> None:
    data = {**BASE, "channels": [{"id": 1, "kind": "owner_inbox", "label": "x"}, {"id": 2, "kind": "owner_inbx", "label": "y"}]}
    assert problems(data) == [
        "channels[1].kind: unknown channel kind 'owner_inbx' (expected one of: agent, discord, email, owner_inbox, slack, telegram, whatsapp); did you mean 'owner_inbox'?"
    ]


def test_a_channels_public_name_defaults_to_our_team_and_must_read_as_one_line() -> None:
    inbox = {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"}
    assert Config.from_mapping({"channels": [inbox]}).channels[0].public_name == "our team"
    named = Config.from_mapping({"channels": [{**inbox, "public_name": "the Acme support team"}]})
    assert named.channels[0].public_name == "the Acme support team"
    with pytest.raises(ConfigError) as caught:
        Config.from_mapping({"channels": [{**inbox, "public_name": "our\nteam"}, {**inbox, "id": 2, "public_name": " us"},
                                          {**inbox, "id": 3, "public_name": ""}]})
    assert [str(p) for p in caught.value.problems] == [
        "channels[0].public_name: must be one line of plain text (no line breaks or control characters)",
        "channels[1].public_name: must not start or end with spaces",  # refused, never trimmed behind the owner's back
        "channels[2].public_name: String should have at least 1 character",
    ]


def test_every_problem_is_reported_at_once_with_paths() -> None:
    data = {
        "secret_key": "short",
        "server": {"port": 70000, "public_url": "ftp://x"},
        "handoff": {"idle_timeout": "soon", "form_link_tl": 1},
        "agent": {"kind": "gpt"},
        "channels": [{"id": 1, "kind": "owner_inbox"}, {"id": 1, "kind": "owner_inbox", "label": "b", "bot_tokn": "SECRET-123"}, "x"],
    }
    found = problems(data)
    joined = "\n".join(found)
    assert "server.port: Input should be less than or equal to 65535" in found
    assert "server.public_url: must be an http(s) URL such as https://desk.example.com" in found
    assert "secret_key: must be at least 16 characters (it signs links and cookies)" in found
    assert any(p.startswith("handoff.idle_timeout: expected a duration such as 30m") for p in found)
    assert any(p.startswith("handoff.form_link_tl: unknown key; did you mean 'form_link_ttl'?") for p in found)
    assert any(p.startswith("agent.kind: unknown kind 'gpt'") for p in found)
    assert "channels[0].label: required" in found
    assert any(p.startswith("channels[1].bot_tokn: unknown key") for p in found)
    assert "channels[1].id: duplicate id 1 (also used by channels[0])" in found
    assert any(p.startswith("channels[2]: must be a mapping") for p in found)
    assert "SECRET-123" not in joined  # inputs are never echoed: they may be secrets


def test_a_public_host_needs_an_owner_token_and_api_key() -> None:
    found = problems({**BASE, "server": {"host": "0.0.0.0"}})
    assert any(p.startswith("owner.token: required when server.host (0.0.0.0)") for p in found)
    assert any(p.startswith("api.key: required when server.host (0.0.0.0)") for p in found)


def test_a_public_host_refuses_the_development_secret_key() -> None:
    data = {"channels": BASE["channels"], "server": {"host": "0.0.0.0"}, "owner": {"token": "t"}, "api": {"key": "k"}}
    assert problems(data) == [
        "secret_key: the development default is public; set a long random value when server.host (0.0.0.0) is reachable"
    ]


def test_trusted_hosts_are_the_public_name_and_loopback() -> None:
    config = Config.from_mapping({**BASE, "server": {"public_url": "https://desk.example.com", "allowed_hosts": ["desk.lan"]}})
    assert config.server.trusted_hosts() == ["127.0.0.1", "::1", "[::1]", "desk.example.com", "desk.lan", "localhost"]


def test_in_memory_sqlite_is_refused() -> None:
    assert problems({**BASE, "database_url": "sqlite:///:memory:"}) == [
        "database_url: an in-memory SQLite database is not supported; use a file path"
    ]


def test_secrets_are_masked_in_repr_and_warnings_explain_defaults() -> None:
    config = Config.from_mapping({**BASE, "api": {"key": "api-key-value"}, "owner": {"token": ""}})
    assert "api-key-value" not in repr(config)
    assert config.api.key is not None
    assert config.api.key.get_secret_value() == "api-key-value"
    warnings = config_warnings(Config.from_mapping({"channels": []}))
    assert any(w.startswith("secret_key: using the development default") for w in warnings)
    assert any(w.startswith("channels: no enabled channel") for w in warnings)


def yaml_problem_of(tmp_path: Path, text: str) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    [problem] = caught.value.problems
    return str(problem)


def test_yaml_syntax_errors_name_the_line(tmp_path: Path) -> None:
    problem = yaml_problem_of(tmp_path, "server:\n  host: [unclosed\n")
    assert "is not valid YAML: line 3, column 1: expected ',' or ']', but got '<stream end>'; a [ that is not closed" in problem
    assert problem.endswith("    2 |   host: [unclosed\n      |         ^ started here")


def test_a_yaml_indentation_error_says_so_and_shows_the_line(tmp_path: Path) -> None:
    problem = yaml_problem_of(tmp_path, "channels:\n  - id: 1\n    kind: slack\n    bot_token: xoxb-1-SECRET\n   label: Sales\n")
    first, *shown = problem.splitlines()
    assert first.endswith("line 5, column 4: expected <block end>, but found '<block mapping start>'; probably indentation: "
                          "the keys of one mapping start in the same column, a nested key further right than its parent")
    assert shown == [
        "    2 |   - id: 1",
        "      |   ^ started here",
        "  …",
        "    4 |     bot_token: *************",  # shown lines mask secret-looking values
        "    5 |    label: Sales",
        "      |    ^",
    ]


def test_a_tab_in_yaml_is_named(tmp_path: Path) -> None:
    problem = yaml_problem_of(tmp_path, "server:\n\thost: 127.0.0.1\n")
    assert "line 2, column 1: found character '\\t' that cannot start any token; a tab: YAML indents with spaces only" in problem
    assert problem.endswith("    2 | →host: 127.0.0.1\n      | ^")


# --------------------------------------------------------------------------- missing secrets


def secret_fields(model: type[BaseModel], where: str) -> Iterator[tuple[str, Any]]:
    """Every required secret of a model and of the models it holds, with its key path."""
    for name, field in model.model_fields.items():
        inner = [a for a in (field.annotation, *get_args(field.annotation)) if isinstance(a, type) and issubclass(a, BaseModel)]
        for nested in inner:
            yield from secret_fields(nested, f"{where}.{name}")
        if field.is_required() and SecretStr in (field.annotation, *get_args(field.annotation)):
            yield f"{where}.{name}", field


def every_required_secret() -> list[tuple[str, Any]]:
    models: list[tuple[str, type[BaseModel]]] = [(f"agent({m.__name__})", m) for m in (OpenAIAgentConfig, WebhookAgentConfig)]
    models.append(("run", HttpActionRun))
    for kind in known_kinds():
        adapter = adapter_class(kind)
        models += [(kind, adapter.config_model)] + ([(f"{kind} front", adapter.front_model)] if adapter.front_model else [])
    return [found for where, model in models for found in secret_fields(model, where)]


def test_every_required_secret_says_what_it_is_and_where_to_find_it() -> None:
    """The descriptions are what check-config shows for a missing secret: "what it is: where it comes from"."""
    secrets = every_required_secret()
    assert {where for where, _ in secrets} >= {
        "telegram.bot_token", "slack.bot_token", "slack.signing_secret", "discord.bot_token", "whatsapp.auth_token",
        "agent(WebhookAgentConfig).secret", "run.secret",
    }
    unexplained = [where for where, field in secrets if ": " not in (field.description or "")]
    assert unexplained == [], "these secrets do not say what they are and where their value comes from"


@pytest.mark.parametrize(("channel", "key", "where"), [
    ({"kind": "telegram", "chat_id": -1001234}, "bot_token", "@BotFather gives it on /newbot"),
    ({"kind": "slack", "bot_token": "xoxb-1-2", "channel": "C0123"}, "signing_secret", "Basic Information → App Credentials"),
    ({"kind": "discord", "channel_id": 123456789012345678}, "bot_token", "Bot → Reset Token"),
    ({"kind": "whatsapp", "account_sid": "AC" + "0" * 32, "from": "+14155238886", "to": "+34600111222"},
     "auth_token", "Twilio Console → Account Info"),
])
def test_a_missing_or_empty_secret_says_what_it_is_and_where_to_find_it(channel: dict, key: str, where: str) -> None:
    for value in ({}, {key: ""}):  # left out, or set to an empty string
        [problem] = problems({**BASE, "channels": [{"id": 1, "label": "Desk", **channel, **value}]})
        assert problem.startswith(f"channels[0].{key}: required — "), problem
        assert where in problem


def test_an_unset_variable_is_reported_once_with_what_the_key_is(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("secret_key: 0123456789abcdef0123\nserver: {port: '${PORT}'}\n"
                    "channels: [{id: 1, kind: telegram, label: T, chat_id: -1001234, bot_token: '${TELEGRAM_BOT_TOKEN}'}]\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert [str(p) for p in caught.value.problems] == [
        "server.port: environment variable PORT is not set (use ${PORT:-default} for a default)",
        "channels[0].bot_token: environment variable TELEGRAM_BOT_TOKEN is not set (use ${TELEGRAM_BOT_TOKEN:-default} "
        "for a default) — The bot's token (123456:ABC…): in Telegram, @BotFather gives it on /newbot and shows it again on /token.",
    ]


# --------------------------------------------------------------------------- warnings


def test_an_openai_agent_without_base_url_is_warned_that_it_calls_the_hosted_api() -> None:
    sibling = {"id": 7, "kind": "agent", "label": "Orders", "agent": {"kind": "openai", "model": "gpt-4o-mini"}}
    config = Config.from_mapping({**BASE, "agent": {"kind": "openai", "model": "gpt-4o-mini"},
                                  "channels": [*BASE["channels"], sibling]})
    hosted = [w for w in config_warnings(config) if "OpenAI's hosted API" in w]
    assert [w.split(":", 1)[0] for w in hosted] == ["agent.base_url", "channels[1].agent.base_url"]
    assert "(https://api.openai.com/v1) and sends it the conversations" in hosted[0]
    local = Config.from_mapping({**BASE, "agent": {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:11434/v1"}})
    meant = Config.from_mapping({**BASE, "agent": {"kind": "openai", "model": "m", "base_url": "https://api.openai.com/v1"}})
    assert not [w for w in config_warnings(local) + config_warnings(meant) if "hosted API" in w]


# --------------------------------------------------------------------------- action callables


def action_config(tmp_path: Path, spec: str) -> Path:
    path = tmp_path / "desk.yaml"
    path.write_text(f"secret_key: 0123456789abcdef0123\nchannels: [{{id: 1, kind: owner_inbox, label: Inbox}}]\n"
                    f"actions: [{{id: lookup, description: Look an order up, policy: none, run: {{callable: '{spec}'}}}}]\n")
    return path


def test_a_callable_beside_the_config_file_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])
    module = f"desk_actions_{tmp_path.name}"
    (tmp_path / f"{module}.py").write_text("def lookup(arguments):\n    return {'found': True}\n")
    config = load_config(action_config(tmp_path, f"{module}:lookup"), env={})
    assert config.actions[0].run.callable == f"{module}:lookup"
    assert sys.path[-1] == str(tmp_path.resolve())  # after the installed packages: it shadows none of them


def test_a_callable_that_cannot_be_imported_says_where_it_looked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])
    monkeypatch.setenv("PYTHONPATH", "/opt/desk-hooks")
    with pytest.raises(ConfigError) as caught:
        load_config(action_config(tmp_path, "no_such_hooks.orders:lookup"), env={})
    assert [str(p) for p in caught.value.problems] == [
        "actions[0].run.callable: cannot import 'no_such_hooks.orders:lookup': no module named 'no_such_hooks'; looked in "
        f"PYTHONPATH (/opt/desk-hooks), the installed packages and the config file's folder ({tmp_path.resolve()})"
    ]


def test_a_callable_module_that_fails_or_lacks_the_function_says_which(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "path", [*sys.path])
    broken, module = f"desk_broken_{tmp_path.name}", f"desk_hooks_{tmp_path.name}"
    (tmp_path / f"{broken}.py").write_text("import no_such_dependency\n")
    (tmp_path / f"{module}.py").write_text("def lookup_order(arguments):\n    return {}\n")
    for spec, expected in (
        (f"{broken}:lookup", f"importing {broken} failed (ModuleNotFoundError: No module named 'no_such_dependency')"),
        (f"{module}:lookup_ordr", f"{module} ({tmp_path.resolve() / module}.py) has no 'lookup_ordr'; did you mean 'lookup_order'?"),
    ):
        with pytest.raises(ConfigError) as caught:
            load_config(action_config(tmp_path, spec), env={})
        assert [str(p) for p in caught.value.problems] == [f"actions[0].run.callable: cannot import {spec!r}: {expected}"]


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")


def _defined_public_names(path: Path) -> list[str]:
    """The public names a module defines at its top level (classes, functions, constants),
    read from its source so that names it merely imports are left out."""
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [name for name in names if not name.startswith("_")]


def test_every_public_name_of_the_config_package_is_exported_by_bot_config() -> None:
    """bot/config/ is split by concern, but `from bot.config import X` stays the one import
    path: each module's public names are in the package's __all__, as the same objects."""
    modules = sorted(p for p in (ROOT / "bot" / "config").glob("*.py") if p.name != "__init__.py")
    assert modules, "bot/config/ holds no modules besides __init__.py"
    for path in modules:
        module = importlib.import_module(f"bot.config.{path.stem}")
        for name in _defined_public_names(path):
            assert name in bot.config.__all__, f"bot.config.__all__ lacks {name} (defined in {path.name})"
            assert getattr(bot.config, name) is getattr(module, name), f"bot.config.{name} is not {module.__name__}.{name}"
    for name in bot.config.__all__:
        assert hasattr(bot.config, name), f"bot.config.__all__ names {name}, which bot.config does not define"


def test_an_open_metrics_endpoint_is_a_warning_only_beyond_loopback() -> None:
    public = {**BASE, "server": {"host": "0.0.0.0"}, "owner": {"token": "t"}, "api": {"key": "k"},
              "secret_key": "a-long-random-secret-value"}
    [warning] = [w for w in config_warnings(Config.from_mapping(public)) if w.startswith("metrics.token")]
    assert warning == ("metrics.token: empty while server.host (0.0.0.0) is reachable from other machines, so anyone "
                       "who reaches it can read /metrics; set a token your scraper sends")
    scraped = Config.from_mapping({**public, "metrics": {"token": "scrape-123456"}})
    assert not [w for w in config_warnings(scraped) if w.startswith("metrics.token")]
    assert not [w for w in config_warnings(Config.from_mapping(BASE)) if w.startswith("metrics.token")]


def test_body_limits_and_login_failures_read_sizes_and_refuse_nonsense() -> None:
    config = Config.from_mapping({**BASE, "server": {"max_body": "2MiB", "max_form_body": "64kB"}})
    assert (config.server.max_body, config.server.max_form_body) == (2 * 1024 * 1024, 64_000)
    defaults = Config.from_mapping(BASE)
    assert (defaults.server.max_body, defaults.server.max_form_body) == (1024 * 1024, 512 * 1024)
    assert defaults.owner.max_login_failures_per_minute == 5
    assert problems({**BASE, "server": {"max_body": "lots"}}) == [
        "server.max_body: expected a size such as 1MiB, 256KiB or 65536, got 'lots'"]
    assert problems({**BASE, "server": {"max_form_body": 0}}) == ["server.max_form_body: must be a positive size"]
    assert any(p.startswith("owner.max_login_failures_per_minute:")
               for p in problems({**BASE, "owner": {"max_login_failures_per_minute": 0}}))


def test_sizes_read_and_print_in_bytes_kib_and_mib() -> None:
    assert [parse_size(v) for v in ("1MiB", "256 KiB", "64kb", "2MB", "500b", "4096", 10)] == [
        1024**2, 256 * 1024, 64_000, 2_000_000, 500, 4096, 10]
    assert [format_size(n) for n in (1024**2, 512 * 1024, 1500)] == ["1 MiB", "512 KiB", "1500 bytes"]
    for bad in ("1.5MiB", "-1", "1 TB", True, ""):
        with pytest.raises(ValueError):
            parse_size(bad)


@pytest.mark.parametrize(("delivery", "problem"), [
    ({"heartbeat": "100ms"}, "delivery.heartbeat: must be between 0.3s and 5m"),
    ({"heartbeat": "1h"}, "delivery.heartbeat: must be between 0.3s and 5m"),
    ({"lease": "5s"}, "delivery.lease: must be between 15s and 1h (each send times out 10 s before it)"),
])
def test_the_heartbeat_and_the_lease_are_refused_outside_their_bounds_with_the_key_named(
    delivery: dict[str, str], problem: str,
) -> None:
    assert problem in config_problem(delivery=delivery)


def test_the_heartbeat_and_the_lease_keep_the_value_given() -> None:
    delivery = make_config("sqlite:///x.db", delivery={"heartbeat": "1s", "lease": "2m"}).delivery
    assert (delivery.heartbeat, delivery.lease) == (timedelta(seconds=1), timedelta(minutes=2))


def test_a_date_shaped_value_that_is_no_date_is_named_by_its_key_not_a_parser_crash(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("hours:\n  office: {timezone: UTC, weekly: {mon: 09:00-17:00}, holidays: [2026-12-25, 2026-02-30]}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert [str(p) for p in caught.value.problems] == ["hours.office.holidays[1]: '2026-02-30' is not a date such as 2026-12-25"]
    path.write_text("hours:\n  office: {timezone: UTC, weekly: {mon: 09:00-17:00}, holidays: [2026-12-25]}\n")
    assert load_config(path, env={}).hours["office"].holidays == [date(2026, 12, 25)]

"""Config loading: every problem named by key path, secrets never echoed."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from bot.config import Config, ConfigError, config_warnings, expand_env, format_duration, load_config, parse_duration

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
    assert config.api.key is None and config.owner.token is None  # empty env defaults mean "off"


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
    assert config.api.key is not None and config.api.key.get_secret_value() == "api-key-value"
    warnings = config_warnings(Config.from_mapping({"channels": []}))
    assert any(w.startswith("secret_key: using the development default") for w in warnings)
    assert any(w.startswith("channels: no enabled channel") for w in warnings)


def test_yaml_syntax_errors_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("server:\n  host: [unclosed\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "is not valid YAML: line 3" in str(caught.value)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.yaml")

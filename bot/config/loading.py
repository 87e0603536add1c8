"""Loading a config file: YAML parsing with errors people can act on (line, caret, likely
cause, secrets masked), `${VAR}` / `${VAR:-default}` expansion on parsed values, and the
warnings an owner should read before going live."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from bot.config.agents import OpenAIAgentConfig
from bot.config.problems import ConfigError, ConfigProblem, format_path
from bot.config.root import DEV_SECRET_KEY, Config
from bot.config.sections import _is_loopback


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader, except that a date-shaped value that is no date (`2026-02-30`) stays
    the text it is, so the key's own check names it with its key path instead of the parser
    failing on the whole file."""

    def construct_yaml_timestamp(self, node: yaml.ScalarNode) -> Any:
        try:
            return super().construct_yaml_timestamp(node)
        except ValueError:
            return self.construct_scalar(node)


_ConfigLoader.add_constructor("tag:yaml.org,2002:timestamp", _ConfigLoader.construct_yaml_timestamp)

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
        data = yaml.load(text, Loader=_ConfigLoader)  # noqa: S506  # a SafeLoader
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
    if config.metrics.token is None and not _is_loopback(config.server.host):
        warnings.append(f"metrics.token: empty while server.host ({config.server.host}) is reachable from other "
                        "machines, so anyone who reaches it can read /metrics; set a token your scraper sends")
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
    warnings += _disabled_on_call(config)
    return warnings


def _disabled_on_call(config: Config) -> list[str]:
    """People on a schedule's layer whom `people:` disables: their shifts reach nobody."""
    disabled = {p.id: index for index, p in enumerate(config.people) if p.disabled}
    found = []
    for s_index, schedule in enumerate(config.oncall):
        for l_index, layer in enumerate(schedule.layers):
            for p_index, name in enumerate(layer.people):
                if name in disabled:
                    found.append(
                        f"oncall[{s_index}].layers[{l_index}].people[{p_index}]: {name} is disabled "
                        f"(people[{disabled[name]}].disabled), so nobody is reached on their shifts of {schedule.id}; "
                        "remove them from the rotation, enable them, or cover them with an override")
    return found

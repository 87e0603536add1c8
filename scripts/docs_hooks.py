"""MkDocs hooks (mkdocs.yml `hooks:`): the site's two reference pages, generated from the code
at every build, so they can never drift from what the desk serves and accepts.

- `reference/api.md`: the HTTP API, from the OpenAPI schema of the app `handoff serve` builds
  for `config.example.yaml` (`create_app(Desk(config)).openapi()`, nothing started).
- `reference/configuration.md`: every configuration key, walked from the pydantic models in
  bot/config/ and each channel kind's own model: its type, default and description (the
  field's `description`, else the `#` comment just above the field in the source).

The functions are importable (`tests/test_docs_reference.py` calls them) and need no MkDocs.
"""

from __future__ import annotations

import enum
import inspect
import json
import re
import types
import typing
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_CONFIG = ROOT / "config.example.yaml"
API_PAGE = "reference/api.md"
CONFIG_PAGE = "reference/configuration.md"


# --------------------------------------------------------------------------- the HTTP API


def openapi_schema() -> dict[str, Any]:
    """The schema `handoff serve --config config.example.yaml` serves at /api/openapi.json."""
    from bot.config import load_config
    from bot.desk import Desk
    from bot.web.app import create_app

    return create_app(Desk(load_config(EXAMPLE_CONFIG)), manage_desk=False).openapi()


def _cell(text: str) -> str:
    """Text fit for one Markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " \\| ".join(_schema_type(s) for s in schema["anyOf"])
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"array of {_schema_type(schema.get('items', {}))}"
    return str(schema.get("type", "any"))


def _answer_body(answer: dict[str, Any]) -> str:
    """An answer's body: its schema by media type (`application/json` left unsaid)."""
    bodies = [(media, _schema_type(content.get("schema", {}))) for media, content in answer.get("content", {}).items()]
    return ", ".join(shown if media == "application/json" else f"{media}: {shown}" for media, shown in bodies)


def api_markdown(schema: dict[str, Any]) -> str:
    """The API reference page: each operation with its parameters, body and answers."""
    out = [
        "# HTTP API reference",
        "",
        "Generated at build time from the OpenAPI schema the desk serves at `/api/openapi.json` "
        "(and shows at `/api/docs`), for `config.example.yaml`. How to use the API, with a "
        "worked example, is in [Drive it through the API](../api.md).",
        "",
        f"{schema['info']['title']} {schema['info']['version']}: {schema['info'].get('description', '')}",
        "",
    ]
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            out += [f"## `{method.upper()} {path}`", ""]
            if operation.get("summary"):
                out += [f"**{operation['summary']}**", ""]
            if operation.get("description"):
                out += [operation["description"].strip(), ""]
            if operation.get("security"):
                schemes = " or ".join(f"`{name}`" for requirement in operation["security"] for name in requirement)
                out += [f"Credentials: {schemes} ([below](#credentials)).", ""]
            parameters = operation.get("parameters", [])
            if parameters:
                out += ["| parameter | in | type | required | description |", "|---|---|---|---|---|"]
                for parameter in parameters:
                    out.append(
                        f"| `{parameter['name']}` | {parameter['in']} | {_schema_type(parameter.get('schema', {}))} "
                        f"| {'yes' if parameter.get('required') else 'no'} | {_cell(parameter.get('description', ''))} |"
                    )
                out.append("")
            body = operation.get("requestBody", {}).get("content", {})
            for media, content in body.items():
                out += [f"Request body ({media}): {_schema_type(content.get('schema', {}))}", ""]
            answers = operation.get("responses", {})
            if answers:
                out += ["| status | description | body | headers |", "|---|---|---|---|"]
                out += [f"| {status} | {_cell(answer.get('description', ''))} | {_answer_body(answer)} "
                        f"| {', '.join(f'`{name}`' for name in answer.get('headers', {}))} |"
                        for status, answer in answers.items()]
                out.append("")
    schemes = schema.get("components", {}).get("securitySchemes", {})
    if schemes:
        out += ["## Credentials", "", "Each is sent as `Authorization: Bearer <…>`.", "",
                "| scheme | what it is |", "|---|---|"]
        out += [f"| `{name}` | {_cell(scheme.get('description', ''))} |" for name, scheme in schemes.items()]
        out.append("")
    components = schema.get("components", {}).get("schemas", {})
    if components:
        out += ["## Schemas", ""]
        for name, component in components.items():
            out += [f"### {name}", ""]
            if component.get("description"):
                out += [_cell(component["description"]), ""]
            if component.get("enum"):
                out += ["One of " + ", ".join(f"`{value}`" for value in component["enum"]) + ".", ""]
            properties = component.get("properties", {})
            if properties:
                required = set(component.get("required", []))
                out += ["| field | type | required | description |", "|---|---|---|---|"]
                out += [f"| `{field}` | {_schema_type(prop)} | {'yes' if field in required else 'no'} "
                        f"| {_cell(prop.get('description', prop.get('title', '')))} |" for field, prop in properties.items()]
                out.append("")
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- the configuration


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: `duration`, `list of int`, `secret`, …"""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(arguments[0])
    if origin in (typing.Union, types.UnionType):
        names = [_type_name(a) for a in arguments if a is not type(None)]
        return " or ".join(names) + (" or null" if type(None) in arguments else "")
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in arguments)
    if origin in (list, tuple, set, frozenset):
        return f"list of {_type_name(arguments[0])}" if arguments else "list"
    if origin is dict:
        return f"mapping of {_type_name(arguments[0])} to {_type_name(arguments[1])}" if arguments else "mapping"
    if annotation is timedelta:
        return "duration"
    if annotation is SecretStr:
        return "secret"
    if annotation is typing.Any:
        return "any"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "section"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(f"`{m.value}`" for m in annotation)
    return getattr(annotation, "__name__", str(annotation))


def _shown(value: Any) -> str:
    from bot.config.values import format_duration

    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, SecretStr):
        return "(a secret)"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, BaseModel):
        return ""
    if isinstance(value, (list, tuple, dict, set, frozenset)):
        return json.dumps(sorted(value) if isinstance(value, (set, frozenset)) else value, default=_shown)
    return json.dumps(value) if isinstance(value, (str, bool)) or value is None else str(value)


def _is_size(field: Any) -> bool:
    """A size written `512KiB` in the file (parsed by bot.config.values.parse_size)."""
    from bot.config.values import parse_size

    return any(getattr(item, "func", None) is parse_size for item in field.metadata)


def _default(field: Any) -> str:
    from bot.config.values import format_size

    if field.default is not PydanticUndefined:
        value = field.default
    elif field.default_factory is not None:
        value = field.default_factory()
    else:
        return "required"
    shown = format_size(value) if _is_size(field) and isinstance(value, int) else _shown(value)
    return f"`{shown}`" if shown else ""


def _comment_above(model: type[BaseModel], name: str) -> str:
    """The `#` comment lines just above `name: …` in the model's source, if any."""
    for klass in model.__mro__:
        if name not in getattr(klass, "__annotations__", {}):
            continue
        try:
            lines = inspect.getsource(klass).splitlines()
        except (OSError, TypeError):
            return ""
        for number, line in enumerate(lines):
            if re.match(rf"\s+{re.escape(name)}\s*:", line):
                comments: list[str] = []
                for above in reversed(lines[:number]):
                    if not above.strip().startswith("#"):
                        break
                    comments.insert(0, above.strip().lstrip("#").strip())
                return " ".join(comments)
        return ""
    return ""


def _unwrapped(annotation: Any) -> Any:
    """`Annotated[str, …]` is a str."""
    return typing.get_args(annotation)[0] if typing.get_origin(annotation) is typing.Annotated else annotation


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field's type holds (itself, in a list, dict or union)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [model for argument in typing.get_args(annotation) for model in _models_in(argument)]


def _container_suffix(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _container_suffix(typing.get_args(annotation)[0])
    if origin in (list, tuple):
        return "[]"
    if origin is dict:
        return ".<name>"
    return ""


def key_rows(model: type[BaseModel], prefix: str = "", skip: frozenset[str] = frozenset()) -> list[tuple[str, str, str, str]]:
    """(key path, type, default, description) for each key of `model`, its sections' keys after it."""
    rows: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        if name in skip:
            continue
        key = field.alias or name
        path = f"{prefix}{key}"
        description = field.description or _comment_above(model, name)
        # A mapping keyed by something other than names (office hours' days) is written in
        # the file in a form of its own: its parsed model is not what an owner types.
        keyed = typing.get_origin(field.annotation) is dict and _unwrapped(typing.get_args(field.annotation)[0]) is not str
        kind = "size" if _is_size(field) else "mapping (as described)" if keyed else _type_name(field.annotation)
        rows.append((path, kind, _default(field), description))
        nested = [] if keyed else _models_in(field.annotation)
        for sub in nested:
            sub_prefix = f"{path}{_container_suffix(field.annotation)}."
            rows += key_rows(sub, sub_prefix)
    return rows


def _table(rows: list[tuple[str, str, str, str]]) -> list[str]:
    out = ["| key | type | default | description |", "|---|---|---|---|"]
    out += [f"| `{key}` | {kind} | {default} | {_cell(description)} |" for key, kind, default, description in rows]
    return out + [""]


def _doc(model: type[BaseModel]) -> str:
    """The model's own docstring (not one it inherits), on one line."""
    return " ".join((model.__dict__.get("__doc__") or "").split())


def config_markdown() -> str:
    """The configuration reference page: the top-level keys, then each channel kind, agent
    kind and front kind."""
    import bot.desk  # noqa: F401  (registers the sibling-agent channel kind)
    from bot.config import Config, OpenAIAgentConfig, RulesAgentConfig, WebFrontConfig, WebhookAgentConfig
    from bot.config.fronts import _FrontKeys
    from channels import adapter_class, known_kinds
    from channels.base import ChannelConfig

    out = [
        "# Configuration reference",
        "",
        "Generated at build time from the pydantic models in `bot/config/` and each channel "
        "kind's own model, so every key the desk accepts is here with its type and default. "
        "Durations are written `30s`, `5m`, `24h`, `7d`; sizes `512KiB`, `1MiB`; any value may be "
        "`${VAR}` or `${VAR:-default}`. The guide with examples is [Configuration](../configuration.md).",
        "",
        "## Top-level keys",
        "",
        _doc(Config),
        "",
        *_table(key_rows(Config, skip=frozenset({"agent"}))),
        "## `agent`",
        "",
        "The brain that answers subscribers, by `agent.kind` (see [Agents](../agents.md)).",
        "",
    ]
    for agent in (RulesAgentConfig, OpenAIAgentConfig, WebhookAgentConfig):
        kind = typing.get_args(agent.model_fields["kind"].annotation)
        out += [f"### `agent.kind: {kind[0] if kind else agent.__name__}`", "", _doc(agent), ""]
        out += _table(key_rows(agent, "agent."))
    out += ["## `fronts[]`", "", "Where subscribers talk to the bot (see [Fronts](../fronts.md)).", "",
            "### `kind: web`", "", _doc(WebFrontConfig), "", *_table(key_rows(WebFrontConfig, "fronts[]."))]
    out += ["### Every provider front", "", _doc(_FrontKeys), "", *_table(key_rows(_FrontKeys, "fronts[]."))]
    shared = frozenset(ChannelConfig.model_fields)
    channel_sections: list[str] = []
    for kind in known_kinds():
        adapter = adapter_class(kind)
        if adapter.front_model is not None:
            out += [f"### `kind: {kind}` (front)", "", _doc(adapter.front_model), ""]
            out += _table(key_rows(adapter.front_model, "fronts[].", skip=shared))
        channel_sections += [f"### `kind: {kind}`", "", _doc(adapter.config_model), ""]
        channel_sections += _table(key_rows(adapter.config_model, "channels[].", skip=shared))
    out += ["## `channels[]`", "", "Where handoffs go (see [Channels](../channels/index.md)). Keys every channel takes:", "",
            *_table(key_rows(ChannelConfig, "channels[].")), *channel_sections]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- MkDocs


def on_files(files: Any, config: Any) -> Any:
    """Add the generated pages to the site (they exist only in the build)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, API_PAGE, content=api_markdown(openapi_schema())))
    files.append(File.generated(config, CONFIG_PAGE, content=config_markdown()))
    return files

"""The tool registry: what the model sees, and the one place tool input is validated.

Each tool declares a pydantic input model; the registry renders it as a JSON Schema for
the conversation at hand (OpenAI and Anthropic formats), validates calls against it, and
turns every failure into a `{"error": code, "details": {"hint": …}}` result the model can
read and correct. Nothing a tool does starts before its input has validated.
"""

from __future__ import annotations

import copy
import functools
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ValidationError

from bot.errors import DeskError, error_body
from bot.runtime.bounded import BoundedDict
from bot.store.models import Conversation

if TYPE_CHECKING:
    from bot.delivery.channel_set import ChannelSet
    from bot.domain.handoffs import Handoffs


class InvalidToolInput(Exception):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["details"]["hint"])
        self.error = error


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    input_schema: dict[str, Any]

    def render(self, fmt: Literal["plain", "openai", "anthropic"] = "plain") -> dict[str, Any]:
        if fmt == "openai":
            return {"type": "function", "function": {"name": self.name, "description": self.description, "parameters": self.input_schema}}
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema}


@dataclass
class ToolContext:
    """Who is calling and with what: the conversation the agent is serving."""

    conversation: Conversation
    handoffs: Handoffs
    channels: ChannelSet
    actor: str = "agent"


class Tool(ABC):
    name: str  # set on the class, except by ActionTool: its name is the declared action's id
    input_model: ClassVar[type[BaseModel]]

    def available(self, ctx: ToolContext) -> bool:
        return True

    @abstractmethod
    def describe(self, ctx: ToolContext) -> str: ...

    def input_schema(self, ctx: ToolContext) -> dict[str, Any]:
        return model_schema(self.input_model)

    def spec_key(self, ctx: ToolContext) -> Hashable:
        """Everything of `ctx` that `describe` and `input_schema` read: the registry renders
        the spec once per key and hands the same one out after. The default, nothing: the
        spec is the same in every conversation."""
        return ()

    def validation_context(self, ctx: ToolContext) -> dict[str, Any]:
        """Facts known only at call time (e.g. which channels are up), for the input model's validators."""
        return {}

    def parse(self, ctx: ToolContext, raw: dict[str, Any]) -> Any:
        """The validated input; raise InvalidToolInput with the error result otherwise."""
        try:
            return self.input_model.model_validate(raw, context=self.validation_context(ctx))
        except ValidationError as exc:
            raise InvalidToolInput(validation_error(exc)) from None

    @abstractmethod
    async def run(self, ctx: ToolContext, args: Any) -> dict[str, Any]: ...

    async def rejected(self, ctx: ToolContext, error: dict[str, Any]) -> dict[str, Any]:
        """Called with the error result of an invalid call; may add to it (e.g. an audit id)."""
        return error


class ToolRegistry:
    def __init__(self, tools: list[Tool]) -> None:
        self._tools = {tool.name: tool for tool in tools}
        # Every agent turn asks for every tool's spec; a description and its schema change
        # only with what their `spec_key` names (the channels that are up), so each is built
        # once per key. Specs are shared: whoever reads them must not change them.
        self._specs: BoundedDict[tuple[str, Hashable], ToolSpec] = BoundedDict(256)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self, ctx: ToolContext) -> list[ToolSpec]:
        return [self._spec(tool, ctx) for tool in self._tools.values() if tool.available(ctx)]

    def _spec(self, tool: Tool, ctx: ToolContext) -> ToolSpec:
        key = (tool.name, tool.spec_key(ctx))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = ToolSpec(tool.name, tool.describe(ctx), tool.input_schema(ctx))
        return spec

    async def call(self, ctx: ToolContext, name: str, raw: Any) -> dict[str, Any]:
        tool = self._tools.get(name)
        if tool is None or not tool.available(ctx):
            offered = [t.name for t in self._tools.values() if t.available(ctx)]
            return error_body("unknown_tool", f"no tool named {name!r} is available here; available: {offered}")
        if not isinstance(raw, dict):
            return await tool.rejected(ctx, error_body("invalid_input", "the tool input must be a JSON object"))
        try:
            args = tool.parse(ctx, raw)
        except InvalidToolInput as exc:
            return await tool.rejected(ctx, exc.error)
        try:
            return await tool.run(ctx, args)
        except DeskError as exc:
            return exc.to_json()


def _field_path(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or "input"


def validation_error(exc: ValidationError) -> dict[str, Any]:
    return errors_result(exc.errors(include_url=False, include_input=False))


def errors_result(errors: list[Any], code: str = "invalid_input") -> dict[str, Any]:
    """One readable error naming every bad field (pydantic's error dicts), without echoing
    the input back: it may be long, or a secret."""
    fields: dict[str, str] = {}
    for error in errors:
        path = _field_path(tuple(error["loc"]))
        message = str(error["msg"]).removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "is not a known field"
        elif error["type"] == "missing":
            message = "is required"
        fields.setdefault(path, message)
    hint = "; ".join(f"{path}: {message}" for path, message in fields.items())
    return error_body(code, hint, fields=fields)


# --------------------------------------------------------------------------- JSON Schema


def model_schema(model: type[BaseModel]) -> dict[str, Any]:
    """A pydantic model's JSON Schema, made plain for models: `$ref`s inlined, titles and
    `null` branches of optional fields dropped (an optional field is simply left out).
    A fresh copy each time (callers may add to it) of one made once per model: generating
    it costs milliseconds, and every agent turn needs every tool's."""
    return copy.deepcopy(_plain_schema(model))


@functools.cache
def _plain_schema(model: type[BaseModel]) -> dict[str, Any]:
    raw = model.model_json_schema()
    defs = raw.pop("$defs", {})
    raw.pop("description", None)  # the class docstring is for developers; the tool has its own description
    schema: dict[str, Any] = _clean(raw, defs)
    return schema


def _clean(node: Any, defs: dict[str, Any], *, in_properties: bool = False) -> Any:
    if isinstance(node, list):
        return [_clean(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if in_properties:  # keys are field names here, not schema keywords
        return {key: _clean(value, defs) for key, value in node.items()}
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return _clean(merged, defs)
    node = dict(node)
    any_of = node.get("anyOf")
    if isinstance(any_of, list):
        non_null = [branch for branch in any_of if branch != {"type": "null"}]
        if len(non_null) == 1 and len(any_of) == 2:
            node.pop("anyOf")
            node = {**non_null[0], **node}
    if node.get("default", 0) is None:
        node.pop("default")
    node.pop("title", None)
    return {key: _clean(value, defs, in_properties=(key == "properties")) for key, value in node.items()}

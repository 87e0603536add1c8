"""Config problems with their key paths: `ConfigProblem`, `ConfigError`, and `problems_from`,
which turns pydantic's errors into `channels[1].kind: …` lines without echoing the input (it
may be a secret) and says what a missing secret is and where its owner finds it."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, SecretStr, Tag, ValidationError


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
        if part == "[key]":  # pydantic's marker for a mapping's key that failed: the path already names it
            continue
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
_UNION_TAGGED_KEYS = {"agent": {"rules", "openai", "webhook"}, "run": {"url", "callable", "agent"}}


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

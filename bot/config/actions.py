"""Declared actions (`actions:`, tools gated by a person's approval) and `user_actions:`,
with how each runs: a signed POST to the owner's endpoint, a Python callable (imported while
the config is validated so a typo is reported with its key path, not at the first call), or,
for an action only, by the agent itself (`run: {by: agent}`: the desk decides, runs nothing)."""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator

from bot.config.values import SIGNING_SECRET_HELP, Duration, SigningSecret, _Section, http_url

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


class AgentActionRun(_Section):
    """The agent runs the action itself, in its own process, once a person approved it (a
    tool of the agent's framework: LangGraph, the OpenAI Agents SDK, PydanticAI). The desk
    asks, decides and records, and runs nothing: the approval's outcome (`run_state: agent`)
    tells the agent to run it, exactly the approved arguments, once."""

    by: Literal["agent"] = Field(description='"agent": the agent runs it after approval; the desk runs nothing.')


def _gated_run_form(value: Any) -> str:
    """Which form of an action's `run:` an entry means: the agent's own (`by`), or else one
    the desk runs (`_run_form`)."""
    if isinstance(value, AgentActionRun) or (isinstance(value, dict) and "by" in value):
        return "agent"
    return _run_form(value)


GatedActionRun = Annotated[
    Annotated[HttpActionRun, Tag("url")] | Annotated[CallableActionRun, Tag("callable")]
    | Annotated[AgentActionRun, Tag("agent")],
    Discriminator(_gated_run_form),
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
    approvals_required: Literal[1, 2] = Field(
        default=1, description="2: two different people, each identified by their channel's verified id or the owner's "
        "sign-in, must approve (only with policy ask_always); one denial denies.",
    )
    approval_channels: list[int] = Field(
        default_factory=list, description="Channel ids the approval prompt goes to, or a route's id (its ladder).",
    )
    timeout: Duration = Field(default=timedelta(minutes=5), description="Unanswered for this long: denied.")
    input_schema: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON Schema of the arguments (an object); calls are validated against it.",
    )
    run: GatedActionRun = Field(description="How it runs once allowed: {url, secret} (the desk POSTs it, signed), "
                                "{callable} (the desk calls it), or {by: agent} (the agent runs it; the desk runs nothing).")

    @field_validator("id")
    @classmethod
    def _not_reserved(cls, value: str) -> str:
        if value in RESERVED_TOOL_NAMES:
            raise ValueError(f"{value!r} is a built-in tool name")
        return value

    @field_validator("approvals_required")
    @classmethod
    def _two_people_ask_every_time(cls, value: int, info: ValidationInfo) -> int:
        """Two people approve one exact call: "always allow" (policy ask) would let the next
        calls run on nobody's approval, so the rule needs ask_always."""
        if value == 2 and info.data.get("policy", "ask_always") != "ask_always":  # absent: refused for its own reason
            raise ValueError("2 needs policy: ask_always (ask can allow always, which two people never agreed to)")
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

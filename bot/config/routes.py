"""Routes (`routes:`): a ladder of steps the model can hand a conversation to, in the same id
space as the channels. A step notifies one or more channels at once and waits `claim_within`
for someone to take the handoff; nobody does, the next step runs. This module parses and
checks them; what a route does at run time is the handoff service's (`bot/domain/ladder.py`)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from bot.config.hours import ScheduleName
from bot.config.problems import ConfigProblem
from bot.config.values import Duration, _Section, between, each_once
from channels.base import DEFAULT_PUBLIC_NAME, ChannelConfig

_TARGET = re.compile(r"(person|team|oncall):([a-z][a-z0-9_-]{0,39})")


@dataclass(frozen=True)
class Target:
    """A step's target other than a channel: one person, a team, or whoever is on call."""

    kind: Literal["person", "team", "oncall"]
    id: str

    def __str__(self) -> str:
        return f"{self.kind}:{self.id}"


def _target(value: Any) -> Any:
    if isinstance(value, Target):
        return value
    if isinstance(value, str):
        found = _TARGET.fullmatch(value.strip())
        if found is None or value != value.strip():
            raise ValueError(
                f"{value!r} is no target: use a channel id (3), person:<id>, team:<id> or oncall:<schedule id>")
        return Target(found.group(1), found.group(2))  # type: ignore[arg-type]  # the pattern allows only the three kinds
    return value


StepTarget = Annotated[int, Field(ge=1)] | Annotated[Target, BeforeValidator(_target)]
Assign = Literal["broadcast", "round_robin", "least_busy"]


class StepConfig(_Section):
    """One rung: who is notified at once, how long they have to take it, and when it is open."""

    notify: list[StepTarget] = Field(
        min_length=1, max_length=10, description=(
            "Who is offered the handoff at once: channel ids (their room), person:<id> (on their own contact "
            "methods), team:<id> and oncall:<schedule id>; the first to claim takes it."
        ),
    )
    claim_within: Annotated[Duration, between("10s", "7d")] = Field(
        description="How long this step waits for a claim before the next one runs, e.g. 5m (one person at a time: each offer's time).",
    )
    assign: Assign = Field(
        default="broadcast", description=(
            "How a team or on-call target offers it: broadcast (every available person at once), round_robin or "
            "least_busy (one available person at a time for claim_within, then the next). On-call schedules always "
            "offer their layers one at a time, first layer first."
        ),
    )
    max_concurrent: int | None = Field(
        default=None, ge=1, le=1000, description="Open handoffs a person may hold before this step skips them; unset: no limit.",
    )
    contact_after: Annotated[Duration, between("10s", "1d")] | None = Field(
        default=None, description="A person who has not claimed after this long is also tried on their next contact method; unset: only when one fails.",
    )
    hours: ScheduleName | None = Field(
        default=None, description="A schedule under hours:; outside it the step is skipped.",
    )
    remind: bool = Field(
        default=False, description="Before the next step runs, remind this step's recipients that nobody has taken it.",
    )

    @field_validator("notify")
    @classmethod
    def _each_once(cls, value: list[int | Target]) -> list[int | Target]:
        return each_once(value, "names {} twice; list each channel or target once")

    @property
    def channels(self) -> list[int]:
        """The channel ids the step notifies (their rooms)."""
        return [t for t in self.notify if isinstance(t, int)]

    @property
    def targets(self) -> list[Target]:
        """The people, teams and schedules the step offers it to."""
        return [t for t in self.notify if isinstance(t, Target)]


class RouteConfig(_Section):
    """A route as the model sees it (an id, a label, an estimate) and the ladder behind it."""

    id: int = Field(ge=1, description="Stable id the agent uses as channel_id; unique among channels and routes.")
    label: str = Field(min_length=1, max_length=80, description="What the agent and the owner read, e.g. Support.")
    public_name: str = Field(
        default=DEFAULT_PUBLIC_NAME, min_length=1, max_length=80,
        description="What the subscriber is told they are waiting for, e.g. our support team.",
    )
    estimated_response: str = Field(
        default="as soon as someone is available", min_length=1, max_length=200,
        description="When a person usually takes it, as a phrase: within 10 minutes.",
    )
    steps: list[StepConfig] = Field(min_length=1, max_length=10, description="The ladder, first step first.")
    when_nobody_claims: Literal["release"] | Annotated[int, Field(ge=1)] = Field(
        default="release",
        description="After the last step: release (the agent resumes, told nobody was available) "
                    "or another route's id, whose steps follow.",
    )
    when_closed: Literal["dispatch", "refuse"] = Field(
        default="dispatch",
        description="When no step is open now: dispatch to the next step to open and say when someone is back, "
                    "or refuse the handoff (the agent is told when someone is back).",
    )


@dataclass(frozen=True)
class Ladder:
    """A route with the steps of the routes it falls through to appended (`when_nobody_claims:
    <route id>`), so the run time only ever walks one list."""

    route: RouteConfig
    steps: tuple[StepConfig, ...]

    @property
    def id(self) -> int:
        return self.route.id

    @property
    def channel_ids(self) -> list[int]:
        """Every channel the ladder may notify, in the order it would."""
        seen: list[int] = []
        for step in self.steps:
            seen.extend(cid for cid in step.channels if cid not in seen)
        return seen


def resolve_ladders(routes: Iterable[RouteConfig]) -> dict[int, Ladder]:
    """Each route's whole ladder. The config check refuses loops first; a loop met here
    (a config built around the check) stops at the route met twice."""
    by_id = {route.id: route for route in routes}
    found: dict[int, Ladder] = {}
    for route in by_id.values():
        steps: list[StepConfig] = []
        seen: set[int] = set()
        current: RouteConfig | None = route
        while current is not None and current.id not in seen:
            seen.add(current.id)
            steps.extend(current.steps)
            target = current.when_nobody_claims
            current = by_id.get(target) if isinstance(target, int) else None
        found[route.id] = Ladder(route=route, steps=tuple(steps))
    return found


def route_checks(raw_routes: Any, channels: list[ChannelConfig], raw_hours: Any) -> list[ConfigProblem]:
    """What spans routes and the rest: ids unique among channels and routes, every notified
    channel configured (and a person's, not a sibling agent's), every `hours` defined, and no
    loop through `when_nobody_claims`. Read raw, so a route refused for another key is still
    checked for these."""
    if not isinstance(raw_routes, list):
        return [] if raw_routes is None else [ConfigProblem("routes", "must be a list of routes")]
    problems: list[ConfigProblem] = []
    channel_ids = {c.id: c for c in channels}
    route_ids: dict[int, int] = {}
    schedules = sorted(map(str, raw_hours)) if isinstance(raw_hours, dict) else []
    known = ", ".join(map(str, sorted(channel_ids))) or "none"
    for index, raw in enumerate(raw_routes):
        if not isinstance(raw, dict):
            continue
        where = f"routes[{index}]"
        rid = raw.get("id")
        if isinstance(rid, int):
            if rid in channel_ids:
                problems.append(ConfigProblem(f"{where}.id", f"id {rid} is already a channel's; routes and channels share one id space, pick another"))
            elif rid in route_ids:
                problems.append(ConfigProblem(f"{where}.id", f"duplicate id {rid} (also routes[{route_ids[rid]}])"))
            route_ids.setdefault(rid, index)
        for position, step in enumerate(raw.get("steps") or []):
            if not isinstance(step, dict):
                continue
            for spot, cid in enumerate(step.get("notify") or []):
                at = f"{where}.steps[{position}].notify[{spot}]"
                if not isinstance(cid, int) or isinstance(cid, bool):
                    continue
                if cid in channel_ids and channel_ids[cid].kind == "agent":
                    problems.append(ConfigProblem(at, f"channel {cid} is a sibling agent: hand to it directly by its id; a route's steps notify people"))
                elif cid not in channel_ids:
                    hint = " (that is a route; use when_nobody_claims to continue with a route)" if any(
                        isinstance(r, dict) and r.get("id") == cid for r in raw_routes) else ""
                    problems.append(ConfigProblem(at, f"no channel with id {cid} (configured: {known}){hint}"))
            name = step.get("hours")
            if name is not None and name not in schedules:
                close = difflib.get_close_matches(str(name), schedules, n=1)
                guess = f"; did you mean '{close[0]}'?" if close else ""
                problems.append(ConfigProblem(
                    f"{where}.steps[{position}].hours",
                    f"no schedule named {name!r} under hours: (defined: {', '.join(schedules) or 'none'}){guess}",
                ))
    problems.extend(_fall_through_checks(raw_routes, route_ids))
    return problems


def _fall_through_checks(raw_routes: list[Any], route_ids: dict[int, int]) -> list[ConfigProblem]:
    """`when_nobody_claims: <id>` names a route, and following them never comes back."""
    problems: list[ConfigProblem] = []
    targets: dict[int, int] = {}
    for index, raw in enumerate(raw_routes):
        if not isinstance(raw, dict):
            continue
        target, rid = raw.get("when_nobody_claims"), raw.get("id")
        if not isinstance(target, int) or isinstance(target, bool) or not isinstance(rid, int):
            continue
        if target not in route_ids:
            problems.append(ConfigProblem(
                f"routes[{index}].when_nobody_claims",
                f"no route with id {target} (routes: {', '.join(map(str, sorted(route_ids))) or 'none'}); use release or a route's id",
            ))
            continue
        targets[rid] = target
    reported: set[int] = set()
    for start in targets:
        path, current = [start], targets.get(start)
        while current is not None and current not in path:
            path.append(current)
            current = targets.get(current)
        if current is not None and current == start and start not in reported:
            reported.update(path)
            loop = " → ".join(map(str, [*path, start]))
            problems.append(ConfigProblem(
                f"routes[{route_ids[start]}].when_nobody_claims",
                f"routes fall through in a loop ({loop}); end one of them with when_nobody_claims: release",
            ))
    return problems

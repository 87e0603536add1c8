"""What spans people, teams, on-call schedules and routes (`people:`, `teams:`, `oncall:`,
`routes:`): every person a team, a schedule or a route names is declared under `people:`,
every schedule and team a route names exists, every `hours` named exists, and every person a
route can offer a handoff to has a contact method the desk can use (a configured channel of
that kind). Checked on the validated config, so each problem names its key path once."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping

from bot.config.people import CONTACT_KINDS
from bot.config.problems import ConfigProblem
from bot.config.routes import Target
from channels.base import ChannelConfig


def _unknown(what: str, name: str, known: Iterable[str]) -> str:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    guess = f"; did you mean '{close[0]}'?" if close else ""
    return f"no {what} {name!r} (declared: {', '.join(names) or 'none'}){guess}"


def reach_checks(config: object, channels: list[ChannelConfig]) -> list[ConfigProblem]:
    """The cross-checks above, on a validated `Config` (typed loosely to keep the import one way)."""
    people = {p.id: (index, p) for index, p in enumerate(config.people)}  # type: ignore[attr-defined]  # a Config
    teams = {t.id: t for t in config.teams}  # type: ignore[attr-defined]  # a Config
    schedules = {s.id: s for s in config.oncall}  # type: ignore[attr-defined]  # a Config
    hours = set(config.hours)  # type: ignore[attr-defined]  # a Config
    problems: list[ConfigProblem] = []
    problems += _unique("teams", [t.id for t in config.teams])  # type: ignore[attr-defined]  # a Config
    problems += _unique("oncall", [s.id for s in config.oncall])  # type: ignore[attr-defined]  # a Config

    def person(path: str, name: str) -> None:
        if name not in people:
            problems.append(ConfigProblem(path, _unknown("person", name, people) + " under people:"))

    def schedule_name(path: str, name: str | None) -> None:
        if name is not None and name not in hours:
            problems.append(ConfigProblem(path, _unknown("schedule", name, hours) + " under hours:"))

    for t_index, team in enumerate(config.teams):  # type: ignore[attr-defined]  # a Config
        for m_index, member in enumerate(team.members):
            person(f"teams[{t_index}].members[{m_index}]", member)
    for s_index, schedule in enumerate(config.oncall):  # type: ignore[attr-defined]  # a Config
        for l_index, layer in enumerate(schedule.layers):
            for p_index, name in enumerate(layer.people):
                person(f"oncall[{s_index}].layers[{l_index}].people[{p_index}]", name)
            schedule_name(f"oncall[{s_index}].layers[{l_index}].hours", layer.hours)
        for o_index, override in enumerate(schedule.overrides):
            person(f"oncall[{s_index}].overrides[{o_index}].person", override.person)
            if override.covers is not None:
                person(f"oncall[{s_index}].overrides[{o_index}].covers", override.covers)
    for p_index, entry in enumerate(config.people):  # type: ignore[attr-defined]  # a Config
        schedule_name(f"people[{p_index}].working_hours", entry.working_hours)

    offered: dict[str, str] = {}  # person id -> the first key path that offers them handoffs
    for r_index, route in enumerate(config.routes):  # type: ignore[attr-defined]  # a Config
        for s_index, step in enumerate(route.steps):
            where = f"routes[{r_index}].steps[{s_index}]"
            if step.assign != "broadcast" and not any(t.kind == "team" for t in step.targets):
                problems.append(ConfigProblem(f"{where}.assign", (
                    f"assign: {step.assign} applies to a team target (team:<id>); this step names none: "
                    "remove assign or add a team")))
            for t_index, target in enumerate(step.notify):
                if not isinstance(target, Target):
                    continue
                at = f"{where}.notify[{t_index}]"
                named = _target_people(target, people, teams, schedules)
                if named is None:
                    known = {"person": people, "team": teams, "oncall": schedules}[target.kind]
                    section = {"person": "people:", "team": "teams:", "oncall": "oncall:"}[target.kind]
                    problems.append(ConfigProblem(at, _unknown(target.kind if target.kind != "oncall" else "schedule",
                                                               target.id, known) + f" under {section}"))
                    continue
                for name in named:
                    offered.setdefault(name, at)
    kinds = {c.kind for c in channels}
    for name, at in offered.items():
        if name not in people:
            continue
        index, entry = people[name]
        wanted = entry.contact if entry.contact is not None else list(CONTACT_KINDS)
        for c_index, kind in enumerate(entry.contact or []):
            if kind not in kinds:
                problems.append(ConfigProblem(
                    f"people[{index}].contact[{c_index}]",
                    f"no {kind} channel is configured, so {name} cannot be reached on {kind}; add one under channels: or remove it"))
        if not any(kind in kinds for kind in wanted):
            problems.append(ConfigProblem(
                f"people[{index}].contact",
                f"{name} is offered handoffs ({at}) but has no contact method the desk can use: configure a channel of "
                f"kind {', '.join(wanted)} (each reaches them at the identity they link, e-mail at their address)"))
    return problems


def _target_people(target: Target, people: Mapping[str, object], teams: Mapping[str, object],
                   schedules: Mapping[str, object]) -> list[str] | None:
    """Everyone a target can offer a handoff to, or None when it names nothing declared."""
    if target.kind == "person":
        return [target.id] if target.id in people else None
    if target.kind == "team":
        team = teams.get(target.id)
        return list(team.members) if team is not None else None  # type: ignore[attr-defined]  # a TeamConfig
    schedule = schedules.get(target.id)
    return list(schedule.people) if schedule is not None else None  # type: ignore[attr-defined]  # an OnCallConfig


def _unique(section: str, ids: list[str]) -> list[ConfigProblem]:
    seen: dict[str, int] = {}
    problems = []
    for index, value in enumerate(ids):
        if value in seen:
            problems.append(ConfigProblem(f"{section}[{index}].id", f"duplicate id {value!r} (also {section}[{seen[value]}])"))
        seen.setdefault(value, index)
    return problems

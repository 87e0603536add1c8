"""On-call schedules (`oncall:`) and teams (`teams:`): who a route's `oncall:<id>` and
`team:<id>` targets reach. This module parses and checks them; who is on call at a given
moment is worked out in the domain (`bot/domain/oncall.py`).

A schedule has layers, first layer first (a primary, then a secondary …). Each layer rotates
through its people: one shift each, `shift` long, the first one starting at `handover` on the
`start` date in the schedule's timezone. Shifts are counted on the local wall clock, so a
daily or weekly handover at 09:00 stays at 09:00 across the DST changes (a shift that spans
one is an hour shorter or longer). A layer may be limited to a schedule under `hours:`
(nights only, say): outside it the layer has nobody. Overrides put one person on call for a
while, in place of another (`covers`) or of whoever the first layer has.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time
from typing import Annotated, Any
from zoneinfo import ZoneInfo

from pydantic import BeforeValidator, Field, field_validator, model_validator

from bot.config.hours import ScheduleName
from bot.config.people import person_id, timezone_name
from bot.config.values import Duration, _Section, between, each_once

_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")
_GROUP_ID = re.compile(r"[a-z][a-z0-9_-]{0,39}")


def group_id(value: Any) -> str:
    """A schedule's or a team's id: lower-case letters, digits, `-` and `_`, as routes name
    them (`oncall:nights`, `team:support`)."""
    if not isinstance(value, str) or not _GROUP_ID.fullmatch(value):
        raise ValueError("must be 1-40 lower-case letters, digits, '-' or '_', starting with a letter, such as nights")
    return value


def _clock(value: Any) -> time:
    if isinstance(value, time):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 24 * 60:
        return time(value // 60, value % 60)  # YAML 1.1 reads 09:00 unquoted as sexagesimal 540
    match = _CLOCK.fullmatch(str(value).strip())
    if match is None or int(match.group(1)) > 23 or int(match.group(2)) > 59:
        raise ValueError(f"expected a time of day such as \"09:00\", got {value!r}")
    return time(int(match.group(1)), int(match.group(2)))


ClockTime = Annotated[time, BeforeValidator(_clock)]
PersonId = Annotated[str, BeforeValidator(lambda v: person_id(v) if isinstance(v, str) else v)]


class LayerConfig(_Section):
    """One layer of a schedule: a rotation through `people`, one shift each."""

    name: str = Field(min_length=1, max_length=40, description="What the inbox calls the layer, such as primary.")
    people: list[PersonId] = Field(min_length=1, max_length=100, description="The rotation, in order: people's ids.")
    shift: Annotated[Duration, between("1h", "28d")] = Field(
        description="How long each person is on call before the next takes over, such as 1d, 7d or 12h; counted on the local clock.",
    )
    handover: ClockTime = Field(default=time(9, 0), description='When a shift starts, local time, such as "09:00".')
    start: date = Field(description="The date (YYYY-MM-DD) the first person's first shift starts, at `handover`.")
    hours: ScheduleName | None = Field(
        default=None, description="A schedule under hours: the layer is limited to (nights only, say); outside it this layer has nobody.",
    )

    @field_validator("people")
    @classmethod
    def _each_once(cls, value: list[str]) -> list[str]:
        return each_once(value, "names {} twice; list each person once per layer")

    @field_validator("shift")
    @classmethod
    def _whole_minutes(cls, value: Any) -> Any:
        if value.total_seconds() % 60:
            raise ValueError("must be whole minutes, such as 12h or 1d")
        return value


class OverrideConfig(_Section):
    """Someone else on call for a while: `person` covers `covers` (wherever `covers` is on
    call), or, without `covers`, whoever the first layer has."""

    person: PersonId = Field(description="Who is on call instead: a person's id.")
    covers: PersonId | None = Field(default=None, description="Whom they stand in for; unset: the first layer's person.")
    start: datetime = Field(alias="from", description='From when, local time: "2026-12-24 18:00".')
    end: datetime = Field(alias="to", description='Until when, local time: "2026-12-25 08:00".')
    note: str | None = Field(default=None, max_length=200, description="Why, for the inbox: Ben's holiday.")

    @model_validator(mode="after")
    def _ordered(self) -> OverrideConfig:
        if (self.start.tzinfo is None) != (self.end.tzinfo is None):
            raise ValueError("from and to must both be local times (2026-12-24 18:00) or both carry an offset (+01:00)")
        if self.end <= self.start:
            raise ValueError("to must be after from")
        if self.covers is not None and self.covers == self.person:
            raise ValueError("a person cannot cover themselves: name whom they cover, or leave covers out")
        return self


class OnCallConfig(_Section):
    """A schedule as routes name it (`oncall:<id>`)."""

    id: str = Field(description="The schedule's id, as routes name it: oncall:<id>.")
    label: str = Field(min_length=1, max_length=80, description="What the inbox shows, such as Night on-call.")
    timezone: str = Field(default="UTC", description="The IANA timezone handovers and overrides are read in, such as Europe/Berlin.")
    layers: list[LayerConfig] = Field(min_length=1, max_length=5, description="First layer first: a primary, then a secondary …")
    overrides: list[OverrideConfig] = Field(default_factory=list, max_length=500, description="Cover for a while (the inbox can add more).")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return group_id(value)

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, value: str) -> str:
        return timezone_name(value)

    @field_validator("layers")
    @classmethod
    def _names_once(cls, value: list[LayerConfig]) -> list[LayerConfig]:
        names = [layer.name for layer in value]
        if len(set(names)) != len(names):
            raise ValueError("two layers have the same name; name each layer once")
        return value

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def people(self) -> list[str]:
        """Everyone the schedule names, layers and overrides, each once."""
        seen: list[str] = []
        for name in [p for layer in self.layers for p in layer.people] + [
                n for o in self.overrides for n in (o.person, o.covers) if n is not None]:
            if name not in seen:
                seen.append(name)
        return seen


class TeamConfig(_Section):
    """A named group of people that a route's step can offer a handoff to (`team:<id>`)."""

    id: str = Field(description="The team's id, as routes name it: team:<id>.")
    label: str = Field(min_length=1, max_length=80, description="What the inbox shows, such as Support.")
    members: list[PersonId] = Field(min_length=1, max_length=200, description="People's ids, in the order a round robin starts from.")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        return group_id(value)

    @field_validator("members")
    @classmethod
    def _each_once(cls, value: list[str]) -> list[str]:
        return each_once(value, "names {} twice; list each person once")

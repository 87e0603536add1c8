"""Who is on call: the engine behind `oncall:<id>` targets, the inbox's on-call page, the
config check's gaps and the gaps metric. Pure: the schedule, its overrides, the office-hours
schedules and the instant are passed in (the service in bot/domain/oncall_service.py reads
the inbox's overrides from the database).

A layer's rotation is counted on the schedule's LOCAL WALL CLOCK: shift k starts at the local
time `start` + `handover` + k × `shift`, turned into an instant in the schedule's timezone,
so a daily or weekly 09:00 handover stays at 09:00 across the changes of daylight saving time
and 12-hour shifts hand over at 09:00 and 21:00 always (the shift that spans a change is an
hour shorter or longer). The person of shift k is `people[k % len(people)]`; before the first
shift starts the layer has nobody.

A wall time the clocks skip (a handover at 02:30 on the night they spring forward) is the
moment the clocks jump (03:00 local), the first instant whose wall time is at or past it; a
wall time that happens twice (the clocks going back) is its first occurrence.

Overrides: one with `covers` puts its person in place of `covers` in every layer where
`covers` is on call during its window; one without `covers` puts its person on the first
layer, in place of whoever it has, and fills it even when it has nobody then (outside its
hours, before its first shift). When several apply at once, the last in the list wins (the
service lists the config's first, then the inbox's in the order they were made), and one
without `covers` wins over those with.

A `Shift` is one stretch of one layer with one person: it begins and ends at a handover of
the rotation, an opening or closing of the layer's hours, or an override beginning or ending.
A rotation's handover always ends a shift, even when the same person continues (a rotation of
one); an override's stretch is one shift however many handovers it spans.

The engine walks only those boundaries (never minute by minute), so a fortnight of a
schedule is a few hundred small computations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Literal, NamedTuple
from zoneinfo import ZoneInfo

from bot.config import Config, HoursConfig, LayerConfig, OnCallConfig, OverrideConfig
from bot.domain.hours import is_open

OverrideSource = Literal["config", "inbox"]
CHECK_AHEAD = timedelta(days=14)  # how far check-config and the inbox look for gaps
NEXT_WITHIN = timedelta(days=56)  # how far "who is next" looks (two of the longest shifts)


@dataclass(frozen=True)
class Override:
    """Someone on call in place of `covers` (None: whoever the first layer has) from
    `starts_at` until `ends_at` (aware, UTC). `id` is the inbox row's; None for the YAML's."""

    schedule_id: str
    person_id: str
    covers: str | None
    starts_at: datetime
    ends_at: datetime
    note: str | None = None
    source: OverrideSource = "config"
    id: int | None = None

    def active(self, at: datetime) -> bool:
        return self.starts_at <= at < self.ends_at


@dataclass(frozen=True)
class Shift:
    """`person_id` on call on layer `layer` (its name; `layer_index` 0 = the first) from
    `starts_at` until `ends_at` (aware, UTC): until the next handover on this layer.
    `override` is set when they are there in someone's place (or on an override of their own)."""

    schedule_id: str
    layer: str
    layer_index: int
    person_id: str
    starts_at: datetime
    ends_at: datetime
    override: Override | None = None


class Gap(NamedTuple):
    """A stretch when no layer of the schedule has anybody (a pair: it unpacks as one)."""

    starts_at: datetime
    ends_at: datetime

    @property
    def seconds(self) -> float:
        return (self.ends_at - self.starts_at).total_seconds()


# --------------------------------------------------------------------------- wall clock


def instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of the naive local `wall` in `zone`: its first occurrence when the
    clocks go back through it; when they skip it (spring forward), the moment they jump,
    which is the first instant whose wall time is at or past `wall`."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return first
    low = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)  # before the jump: its wall time is earlier
    high = first  # after the jump: its wall time is later
    while high - low > timedelta(seconds=1):  # the jump lies between; a gap is an hour or so
        middle = low + (high - low) / 2
        if middle.astimezone(zone).replace(tzinfo=None) >= wall:
            high = middle
        else:
            low = middle
    return high.replace(microsecond=0)


def override_of(schedule: OnCallConfig, entry: OverrideConfig) -> Override:
    """An override of the YAML: its `from` and `to` are local times in the schedule's timezone
    (a time written with an offset keeps it)."""

    def moment(value: datetime) -> datetime:
        return value.astimezone(UTC) if value.tzinfo is not None else instant(value, schedule.zone)

    return Override(schedule_id=schedule.id, person_id=entry.person, covers=entry.covers,
                    starts_at=moment(entry.start), ends_at=moment(entry.end), note=entry.note, source="config")


def config_overrides(schedule: OnCallConfig) -> list[Override]:
    return [override_of(schedule, entry) for entry in schedule.overrides]


# --------------------------------------------------------------------------- one layer


@dataclass(frozen=True)
class _State:
    """Who a layer has at an instant: the person, the override that put them there, and the
    rotation's shift number (None under an override: its stretch is one shift)."""

    person_id: str
    override: Override | None
    shift: int | None


class _Layer:
    """One layer of a schedule with the overrides and hours that bear on it."""

    def __init__(self, schedule: OnCallConfig, index: int, overrides: Sequence[Override],
                 hours: Mapping[str, HoursConfig]) -> None:
        self.schedule, self.index = schedule, index
        self.config: LayerConfig = schedule.layers[index]
        self.zone = schedule.zone
        self.hours = hours.get(self.config.hours) if self.config.hours else None
        self.first_wall = datetime.combine(self.config.start, self.config.handover)
        self.covering = [o for o in overrides if o.covers is not None]
        self.blanket = [o for o in overrides if o.covers is None] if index == 0 else []
        self._starts: dict[int, datetime] = {}

    # ---- the rotation

    def shift_start(self, k: int) -> datetime:
        found = self._starts.get(k)
        if found is None:
            found = self._starts[k] = instant(self.first_wall + k * self.config.shift, self.zone)
        return found

    def shift_number(self, at: datetime) -> int | None:
        """The rotation's shift running at `at`; None before the first."""
        if at < self.shift_start(0):
            return None
        k = int((at - self.shift_start(0)) / self.config.shift)  # real time; off by one near a DST change
        while k > 0 and self.shift_start(k) > at:
            k -= 1
        while self.shift_start(k + 1) <= at:
            k += 1
        return k

    # ---- who, at an instant

    def state(self, at: datetime) -> _State | None:
        blanket = next((o for o in reversed(self.blanket) if o.active(at)), None)
        if blanket is not None:
            return _State(blanket.person_id, blanket, None)
        k = self.shift_number(at)
        if k is None or (self.hours is not None and not is_open(self.hours, at)):
            return None
        person = self.config.people[k % len(self.config.people)]
        cover = next((o for o in reversed(self.covering) if o.covers == person and o.active(at)), None)
        if cover is not None:
            return _State(cover.person_id, cover, None)
        return _State(person, None, k)

    def bounds(self, state: _State, at: datetime) -> tuple[datetime, datetime]:
        """The most a stretch of `state` around `at` can span: its override's window, or its
        rotation shift."""
        if state.override is not None:
            return state.override.starts_at, state.override.ends_at
        k = state.shift if state.shift is not None else 0
        return self.shift_start(k), self.shift_start(k + 1)

    # ---- where it can change

    def boundaries(self, start: datetime, end: datetime) -> list[datetime]:
        """Every instant in (start, end) where this layer's state may change, in order."""
        found: set[datetime] = set()
        first = self.shift_number(start)
        k = 0 if first is None else first + 1
        while (at := self.shift_start(k)) < end:
            if at > start:
                found.add(at)
            k += 1
        if self.hours is not None:
            found.update(hours_boundaries(self.hours, start, end))
        for override in [*self.covering, *self.blanket]:
            found.update(t for t in (override.starts_at, override.ends_at) if start < t < end)
        return sorted(found)

    def stretches(self, start: datetime, end: datetime) -> list[tuple[_State | None, datetime, datetime]]:
        """[start, end) cut where the state changes: (state, from, to), neighbours different."""
        cut: list[tuple[_State | None, datetime, datetime]] = []
        inner = self.boundaries(start, end)
        for at, until in zip([start, *inner], [*inner, end], strict=True):
            state = self.state(at)
            if cut and cut[-1][0] == state:
                cut[-1] = (state, cut[-1][1], until)
            else:
                cut.append((state, at, until))
        return cut

    def shift_at(self, at: datetime) -> Shift | None:
        state = self.state(at)
        if state is None:
            return None
        low, high = self.bounds(state, at)
        for found, since, until in self.stretches(low, high):
            if since <= at < until:
                assert found is not None
                return self.shift(found, since, until)
        raise AssertionError("the stretches of a state's bounds cover the instant")  # pragma: no cover

    def shift(self, state: _State, since: datetime, until: datetime) -> Shift:
        return Shift(self.schedule.id, self.config.name, self.index, state.person_id, since, until, state.override)


def hours_boundaries(hours: HoursConfig, start: datetime, end: datetime) -> list[datetime]:
    """Every instant in (start, end) where the office-hours schedule may open or close: each
    window's start and end and each local midnight (holidays), each wall time as an instant
    (both occurrences of a repeated one)."""
    zone = hours.zone
    found: set[datetime] = set()
    day = start.astimezone(zone).date() - timedelta(days=1)
    last = end.astimezone(zone).date() + timedelta(days=1)
    while day <= last:
        minutes = {0} | {m for w in hours.windows_on(day.weekday()) for m in (w.start, w.end)}
        for minute in minutes:
            wall = datetime.combine(day, time()) + timedelta(minutes=minute)
            for at in {instant(wall, zone), wall.replace(tzinfo=zone, fold=1).astimezone(UTC)}:
                if start < at < end:
                    found.add(at)
        day += timedelta(days=1)
    return sorted(found)


def _layers(schedule: OnCallConfig, overrides: Iterable[Override], hours: Mapping[str, HoursConfig]) -> list[_Layer]:
    mine = [o for o in overrides if o.schedule_id == schedule.id]
    return [_Layer(schedule, index, mine, hours) for index in range(len(schedule.layers))]


# --------------------------------------------------------------------------- what callers ask


def shifts_at(schedule: OnCallConfig, overrides: Iterable[Override], at: datetime,
              hours: Mapping[str, HoursConfig]) -> list[Shift]:
    """Who is on call at `at` (aware), one shift per layer that has somebody, first layer first:
    the order a handoff is offered in."""
    found = [layer.shift_at(at.astimezone(UTC)) for layer in _layers(schedule, overrides, hours)]
    return [shift for shift in found if shift is not None]


def timeline(schedule: OnCallConfig, overrides: Iterable[Override], start: datetime, end: datetime,
             hours: Mapping[str, HoursConfig]) -> list[Shift]:
    """Every shift that overlaps [start, end), by when it starts (then layer): a shift running at
    `start` or past `end` keeps its real times."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    found: list[Shift] = []
    for layer in _layers(schedule, overrides, hours):
        stretches = [(s, since, until) for s, since, until in layer.stretches(start, end) if s is not None]
        for position, (state, since, until) in enumerate(stretches):
            assert state is not None
            whole = layer.shift_at(since) if position == 0 or position == len(stretches) - 1 else None
            found.append(whole or layer.shift(state, since, until))
    return sorted(found, key=lambda s: (s.starts_at, s.layer_index))


def gaps(schedule: OnCallConfig, overrides: Iterable[Override], start: datetime, end: datetime,
         hours: Mapping[str, HoursConfig]) -> list[Gap]:
    """The stretches of [start, end) when no layer has anybody."""
    start, end = start.astimezone(UTC), end.astimezone(UTC)
    covered = sorted((max(s.starts_at, start), min(s.ends_at, end))
                     for s in timeline(schedule, overrides, start, end, hours))
    found: list[Gap] = []
    at = start
    for since, until in covered:
        if since > at:
            found.append(Gap(at, since))
        at = max(at, until)
    if at < end:
        found.append(Gap(at, end))
    return found


def gap_seconds(schedule: OnCallConfig, overrides: Iterable[Override], start: datetime, end: datetime,
                hours: Mapping[str, HoursConfig]) -> float:
    return sum(gap.seconds for gap in gaps(schedule, overrides, start, end, hours))


def next_shifts(schedule: OnCallConfig, overrides: Iterable[Override], at: datetime,
                hours: Mapping[str, HoursConfig], within: timedelta = NEXT_WITHIN) -> list[Shift]:
    """Who is next on each layer: the first shift starting after `at` (within `within`), first
    layer first; a layer with nobody coming that soon is left out."""
    at = at.astimezone(UTC)
    found: list[Shift] = []
    for layer in _layers(schedule, overrides, hours):
        current = layer.shift_at(at)
        after = current.ends_at if current is not None else at
        if after >= at + within:
            continue
        for state, since, until in layer.stretches(after, at + within):
            if state is not None and since > at:
                found.append(layer.shift_at(since) or layer.shift(state, since, until))
                break
    return found


def next_change(schedule: OnCallConfig, overrides: Iterable[Override], at: datetime,
                hours: Mapping[str, HoursConfig], within: timedelta = NEXT_WITHIN) -> datetime | None:
    """The first instant after `at` when any layer's person changes (within `within`)."""
    soonest = [s.starts_at for s in next_shifts(schedule, overrides, at, hours, within)]
    soonest += [s.ends_at for s in shifts_at(schedule, overrides, at, hours)]
    return min(soonest, default=None)


# --------------------------------------------------------------------------- check-config


def local_text(at: datetime, zone: ZoneInfo) -> str:
    """`Sat 05 Dec 18:00`, the instant on the schedule's wall clock."""
    return at.astimezone(zone).strftime("%a %d %b %H:%M")


def gap_warnings(config: Config, now: datetime, overrides: Callable[[OnCallConfig], Iterable[Override]] | None = None,
                 ahead: timedelta = CHECK_AHEAD) -> list[str]:
    """check-config's warnings about the schedules: the times in the next `ahead` when nobody is
    on call, with the YAML's overrides (the inbox's are in the database: its on-call page shows
    the gaps they leave). Here, not in bot/config/loading.py, because the config does not
    import the domain."""
    warnings = []
    hours = config.hours
    for index, schedule in enumerate(config.oncall):
        given = overrides(schedule) if overrides is not None else config_overrides(schedule)
        found = gaps(schedule, given, now, now + ahead, hours)
        if not found:
            continue
        first = found[0]
        more = ""
        if len(found) > 1:
            total = sum(g.seconds for g in found) / 3600
            more = f", and {len(found) - 1} more time(s) in the next {ahead.days} days ({total:.0f} h in all)"
        warnings.append(
            f"oncall[{index}] ({schedule.id}): nobody is on call {local_text(first.starts_at, schedule.zone)} – "
            f"{local_text(first.ends_at, schedule.zone)} ({schedule.timezone}){more}; "
            "add a layer or a person, or an override")
    return warnings

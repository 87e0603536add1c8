"""On-call over the stored state: the YAML's schedules with the overrides made in the inbox
(`oncall_overrides` rows), asked at the desk's clock. Who is on call is worked out by the pure
engine (bot/domain/oncall.py); this service reads the rows, checks and writes new overrides
and removals with their audit rows, and sets the gaps metric.

An inbox override is never deleted: removing one sets `removed_at`, so the audit trail and
the reports can still say who was on call. One is refused when it would rewrite the past (it
starts more than a minute ago), names a person who is unknown or disabled, or covers someone
who is on no layer of the schedule (it would change nothing).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import structlog
from sqlalchemy import select, update
from sqlmodel import col

from bot.config import HoursConfig, OnCallConfig
from bot.domain.oncall import (
    CHECK_AHEAD,
    NEXT_WITHIN,
    Gap,
    Override,
    Shift,
    config_overrides,
    gap_seconds,
    gaps,
    next_shifts,
    shifts_at,
    timeline,
)
from bot.errors import Conflict, DeskError, NotFound, found
from bot.runtime.clock import Clock
from bot.runtime.metrics import Metrics
from bot.store import audit
from bot.store.db import Database, execute_dml
from bot.store.models import OnCallOverride, Person

log = structlog.get_logger(__name__)

GAPS_METRIC_AHEAD = timedelta(days=7)  # what handoff_oncall_gaps_seconds counts
PAST_TOLERANCE = timedelta(minutes=1)  # "from now" typed a moment ago is still now
NOTE_MAX = 200


class InvalidOverride(DeskError):
    """An override the desk refuses; the message starts with the field ("person: …")."""

    code = "invalid_override"
    status = 422


@dataclass(frozen=True)
class Board:
    """What the inbox's on-call page shows of one schedule at `at`."""

    schedule: OnCallConfig
    at: datetime
    now: list[Shift]
    next: list[Shift]
    shifts: list[Shift]  # the next `ahead`, by start
    gaps: list[Gap]
    overrides: list[Override]  # running or coming, by start

    @property
    def gap_seconds(self) -> float:
        return sum(gap.seconds for gap in self.gaps)


def _override_of(row: OnCallOverride) -> Override:
    return Override(schedule_id=row.schedule_id, person_id=row.person_id, covers=row.covers_person_id,
                    starts_at=row.starts_at.astimezone(UTC), ends_at=row.ends_at.astimezone(UTC), note=row.note,
                    source="inbox", id=row.id)


class OnCall:
    def __init__(self, db: Database, clock: Clock, schedules: Sequence[OnCallConfig],
                 hours: Mapping[str, HoursConfig], metrics: Metrics | None = None) -> None:
        self.db, self.clock, self.hours, self.metrics = db, clock, hours, metrics
        self.schedules = {schedule.id: schedule for schedule in schedules}
        self._config_overrides = {schedule.id: config_overrides(schedule) for schedule in schedules}

    def schedule(self, schedule_id: str) -> OnCallConfig:
        return found(self.schedules.get(schedule_id), "on-call schedule", schedule_id)

    # ------------------------------------------------------------------ reads

    async def overrides(self, schedule_id: str, start: datetime, end: datetime) -> list[Override]:
        """The overrides that overlap [start, end): the YAML's first, then the inbox's not
        removed, in the order they were made (the engine lets a later one win)."""
        self.schedule(schedule_id)
        statement = (select(OnCallOverride)
                     .where(col(OnCallOverride.schedule_id) == schedule_id, col(OnCallOverride.removed_at).is_(None),
                            col(OnCallOverride.ends_at) > start, col(OnCallOverride.starts_at) < end)
                     .order_by(col(OnCallOverride.id)))
        async with self.db.read() as session:
            rows = (await session.scalars(statement)).all()
        given = [o for o in self._config_overrides[schedule_id] if o.ends_at > start and o.starts_at < end]
        return given + [_override_of(row) for row in rows]

    async def _around(self, schedule_id: str, at: datetime, ahead: timedelta) -> list[Override]:
        """The overrides that can bear on a shift between `at` and `at + ahead` (a shift's
        real start and end lie up to one of the longest shifts either side)."""
        return await self.overrides(schedule_id, at - NEXT_WITHIN, at + ahead + NEXT_WITHIN)

    async def now(self, schedule_id: str, at: datetime | None = None) -> list[Shift]:
        """Who is on call at `at` (default: now), one shift per layer that has somebody, first
        layer first: the order a handoff is offered in."""
        at = at or self.clock.now()
        return shifts_at(self.schedule(schedule_id), await self._around(schedule_id, at, timedelta(0)), at, self.hours)

    async def board(self, schedule_id: str, at: datetime | None = None, ahead: timedelta = CHECK_AHEAD) -> Board:
        at = at or self.clock.now()
        schedule = self.schedule(schedule_id)
        overrides = await self._around(schedule_id, at, ahead)
        return Board(
            schedule=schedule, at=at, now=shifts_at(schedule, overrides, at, self.hours),
            next=next_shifts(schedule, overrides, at, self.hours),
            shifts=timeline(schedule, overrides, at, at + ahead, self.hours),
            gaps=gaps(schedule, overrides, at, at + ahead, self.hours),
            overrides=sorted((o for o in overrides if o.ends_at > at), key=lambda o: (o.starts_at, o.id or 0)),
        )

    async def gap_seconds(self, schedule_id: str, at: datetime | None = None, ahead: timedelta = GAPS_METRIC_AHEAD) -> float:
        at = at or self.clock.now()
        overrides = await self._around(schedule_id, at, ahead)
        return gap_seconds(self.schedule(schedule_id), overrides, at, at + ahead, self.hours)

    async def measure(self) -> None:
        """Set `handoff_oncall_gaps_seconds` for every schedule: called as /metrics is scraped,
        so the figure is as fresh as the scrape and costs nothing between scrapes. A failing
        read keeps the last figure (and is logged) rather than failing the scrape."""
        if self.metrics is None:
            return
        for schedule_id in self.schedules:
            try:
                self.metrics.oncall_gaps.labels(schedule_id).set(await self.gap_seconds(schedule_id))
            except Exception:
                log.exception("oncall_gaps_metric_failed", schedule=schedule_id)

    # ------------------------------------------------------------------ writes

    async def add_override(self, schedule_id: str, person_id: str, covers: str | None, starts_at: datetime,
                           ends_at: datetime, note: str | None, actor: str, *, by: str | None = None) -> Override:
        """Put `person_id` on call in place of `covers` (None: whoever the first layer has)
        from `starts_at` until `ends_at` (aware). `by`: the person acting, when one is."""
        schedule = self.schedule(schedule_id)
        now = self.clock.now()
        covers = covers or None
        note = (note or "").strip() or None
        self._check_times(starts_at, ends_at, now)
        if covers is not None and covers == person_id:
            raise InvalidOverride("covers: a person cannot cover themselves; name whom they cover, or leave it empty")
        if covers is not None and not any(covers in layer.people for layer in schedule.layers):
            raise InvalidOverride(f"covers: {covers!r} is on no layer of {schedule.id}, so covering them changes nothing")
        if note is not None and len(note) > NOTE_MAX:
            raise InvalidOverride(f"note: at most {NOTE_MAX} characters, got {len(note)}")
        row = OnCallOverride(schedule_id=schedule_id, person_id=person_id, covers_person_id=covers,
                             starts_at=starts_at.astimezone(UTC), ends_at=ends_at.astimezone(UTC), note=note,
                             created_by=actor[:200], created_at=now)
        async with self.db.transaction() as session:
            person = await session.get(Person, person_id) if person_id else None
            if person is None:
                raise InvalidOverride(f"person: no person {person_id[:40]!r}; pick someone of the directory")
            if person.disabled_at is not None:
                raise InvalidOverride(f"person: {person.name} is disabled, so they cannot be reached; enable them first")
            session.add(row)
            await session.flush()
            await audit.note(session, "oncall_override_added", at=now, actor=actor, person_id=by, schedule=schedule_id,
                             override_id=row.id, on_call=person_id, covers=covers, starts_at=row.starts_at.isoformat(),
                             ends_at=row.ends_at.isoformat(), note=note)
        return _override_of(row)

    def _check_times(self, starts_at: datetime, ends_at: datetime, now: datetime) -> None:
        for field, value in (("from", starts_at), ("to", ends_at)):
            if value.tzinfo is None:
                raise InvalidOverride(f"{field}: a time with its timezone is needed, got {value.isoformat()}")
        if ends_at <= starts_at:
            raise InvalidOverride("to: must be after from")
        if starts_at < now - PAST_TOLERANCE:
            raise InvalidOverride("from: is in the past; an override starts now or later (what was, stays as it was)")

    async def remove_override(self, override_id: int, actor: str, *, by: str | None = None) -> Override:
        """End an inbox override (`removed_at`); the YAML's are changed in the file."""
        now = self.clock.now()
        async with self.db.transaction() as session:
            row = await session.get(OnCallOverride, override_id)
            if row is None:
                raise NotFound("on-call override", str(override_id))
            written = await execute_dml(session, update(OnCallOverride).where(
                col(OnCallOverride.id) == override_id, col(OnCallOverride.removed_at).is_(None)).values(removed_at=now))
            if not written.rowcount:
                raise Conflict(f"override {override_id} was removed already")
            await audit.note(session, "oncall_override_removed", at=now, actor=actor, person_id=by,
                             schedule=row.schedule_id, override_id=override_id, on_call=row.person_id,
                             covers=row.covers_person_id)
        return _override_of(row)

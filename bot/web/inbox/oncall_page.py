"""The on-call page (`/inbox/oncall`): per schedule, who is on call now on each layer and
who is next, the next 14 days of shifts with the gaps marked, the overrides (the YAML's
marked as such, the inbox's with Remove), and a form to add one.

Everyone signed in sees it (viewers and agents too: they need to know whom a handoff goes
to); only admins change it, through CSRF-checked posts (bot/web/inbox/owner.py). Times are
shown and typed on the schedule's own wall clock (its timezone), as its handovers are. A
refused form answers with the page again, the field named and what was typed kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Form
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.oncall import Gap, Shift, instant, local_text
from bot.domain.oncall_service import Board, InvalidOverride, OnCall
from bot.domain.rendering import Renderer
from bot.errors import DeskError
from bot.store.models import Person
from bot.web.deps import OnCallDep, RendererDep, RosterDep
from bot.web.inbox.owner import SignedIn, needs, page, posts, redirect

router = APIRouter()
FIELDS = ("person", "covers", "from", "to", "note")


@dataclass(frozen=True)
class Row:
    """One line of the fortnight: a shift, or a gap (`person` None)."""

    layer: str
    person: str | None
    since: str
    until: str
    note: str


def _name(names: dict[str, str], pid: str | None) -> str:
    return names.get(pid, pid) if pid else ""


def _shift_note(shift: Shift, names: dict[str, str]) -> str:
    override = shift.override
    if override is None:
        return ""
    cover = f"covering {_name(names, override.covers)}" if override.covers else "override"
    return f"{cover}{': ' + override.note if override.note else ''}"


def _rows(board: Board, names: dict[str, str]) -> list[Row]:
    zone = board.schedule.zone
    items: list[tuple[datetime, int, Row]] = []
    for shift in board.shifts:
        items.append((shift.starts_at, shift.layer_index, Row(
            shift.layer, _name(names, shift.person_id), local_text(shift.starts_at, zone),
            local_text(shift.ends_at, zone), _shift_note(shift, names))))
    for gap in board.gaps:
        items.append((gap.starts_at, -1, Row("", None, local_text(gap.starts_at, zone), local_text(gap.ends_at, zone), "")))
    return [row for _, _, row in sorted(items, key=lambda item: (item[0], item[1]))]


def _gap_text(gap: Gap, board: Board) -> str:
    zone = board.schedule.zone
    return f"{local_text(gap.starts_at, zone)} – {local_text(gap.ends_at, zone)}"


async def _page(renderer: Renderer, oncall: OnCall, people: list[Person], who: SignedIn, *, status: int = 200,
                notice: str = "", form_of: str = "", typed: dict[str, str] | None = None,
                problems: dict[str, str] | None = None) -> HTMLResponse:
    names = {p.id: p.name for p in people}
    boards = [await oncall.board(sid) for sid in oncall.schedules]
    views: list[dict[str, Any]] = [{
        "board": board, "rows": _rows(board, names), "gaps": [_gap_text(g, board) for g in board.gaps],
        "hours_without": round(board.gap_seconds / 3600, 1),
        "now": [(s, _name(names, s.person_id), local_text(s.starts_at, board.schedule.zone),
                 local_text(s.ends_at, board.schedule.zone), _shift_note(s, names)) for s in board.now],
        "next": [(s, _name(names, s.person_id), local_text(s.starts_at, board.schedule.zone)) for s in board.next],
        "overrides": [(o, _name(names, o.person_id), _name(names, o.covers), local_text(o.starts_at, board.schedule.zone),
                       local_text(o.ends_at, board.schedule.zone)) for o in board.overrides],
        "covers": sorted({p for layer in board.schedule.layers for p in layer.people}, key=lambda p: _name(names, p)),
    } for board in boards]
    return page(renderer, "inbox/oncall.html", who, status=status, views=views, notice=notice[:300],
                people=[p for p in people if p.disabled_at is None], names=names, can_edit=who.role.rank >= Role.ADMIN.rank,
                form_of=form_of, typed=typed or {}, problems=problems or {})


@router.get("/inbox/oncall", response_class=HTMLResponse, include_in_schema=False)
async def oncall_page(renderer: RendererDep, oncall: OnCallDep, roster: RosterDep, notice: str = "",
                      who: SignedIn = Depends(needs(Role.VIEWER))) -> HTMLResponse:
    return await _page(renderer, oncall, await roster.people.all(), who, notice=notice)


def _wall(field: str, value: str, oncall: OnCall, schedule_id: str) -> datetime:
    """A local date and time typed in the schedule's timezone, as the instant it is."""
    try:
        wall = datetime.fromisoformat(value.strip().replace(" ", "T"))
    except ValueError:
        raise InvalidOverride(f"{field}: expected a date and time such as 2026-12-24 18:00, got {value[:40]!r}") from None
    if wall.tzinfo is not None:
        raise InvalidOverride(f"{field}: give the time on the schedule's clock ({oncall.schedule(schedule_id).timezone}), "
                              "without an offset")
    return instant(wall, oncall.schedule(schedule_id).zone)


def _problem(exc: DeskError) -> dict[str, str]:
    head = exc.message.split(":", 1)[0]
    return {head if head in FIELDS else "": exc.message}


@router.post("/inbox/oncall/{schedule_id}/overrides", include_in_schema=False)
async def add_override(
    schedule_id: str, renderer: RendererDep, oncall: OnCallDep, roster: RosterDep,
    person: str = Form(default=""), covers: str = Form(default=""), start: str = Form(default="", alias="from"),
    end: str = Form(default="", alias="to"), note: str = Form(default=""), who: SignedIn = Depends(posts(Role.ADMIN)),
) -> Response:
    """Add an override; `from` and `to` are local times in the schedule's timezone."""
    oncall.schedule(schedule_id)  # 404 for a schedule the config does not have
    typed = {"person": person[:40], "covers": covers[:40], "from": start[:40], "to": end[:40], "note": note[:300]}
    try:
        added = await oncall.add_override(
            schedule_id, person, covers or None, _wall("from", start, oncall, schedule_id), _wall("to", end, oncall, schedule_id),
            note, who.actor().label, by=who.person.id if who.person else None)
    except DeskError as exc:
        if exc.status == 404:
            raise
        return await _page(renderer, oncall, await roster.people.all(), who, status=exc.status, form_of=schedule_id,
                           typed=typed, problems=_problem(exc))
    zone, on_call = oncall.schedule(schedule_id).zone, await roster.people.get(added.person_id)
    return _back(f"Added: {on_call.name} on call {local_text(added.starts_at, zone)} – {local_text(added.ends_at, zone)} "
                 f"({oncall.schedule(schedule_id).timezone}).")


@router.post("/inbox/oncall/overrides/{override_id}/remove", include_in_schema=False)
async def remove_override(override_id: int, oncall: OnCallDep, roster: RosterDep,
                          who: SignedIn = Depends(posts(Role.ADMIN))) -> Response:
    """Remove an inbox override (the YAML's are changed in the file)."""
    try:
        removed = await oncall.remove_override(override_id, who.actor().label, by=who.person.id if who.person else None)
    except DeskError as exc:
        if exc.status == 404:
            raise
        return _back(exc.message)
    on_call = await roster.people.find(removed.person_id)
    return _back(f"Removed the override of {on_call.name if on_call else removed.person_id}.")


def _back(notice: str) -> Response:
    return redirect(f"/inbox/oncall?notice={quote(notice[:300])}")

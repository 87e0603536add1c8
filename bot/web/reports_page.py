"""The owner's Reports page (`GET /inbox/reports`) and its CSV (`GET /inbox/reports.csv`):
the aggregates of `bot/domain/reports.py` over a range (the last 24 hours, 7 or 30 days, or
custom dates) and one channel or route, drawn as inline SVG (`bot/web/charts.py`) with the
numbers of every chart in a table beside it, per person too (handled, time to claim,
satisfaction, and a route's offers made to them), and per team and on-call schedule. Any role may read it (viewer and up); GET only, nothing changes. A malformed
parameter is answered 400 naming it, never replaced."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, Response

from bot.config.people import Role
from bot.domain.reports import Distribution, OfferFigures, PersonFigures, Reports, ReportSummary, TargetFigures
from bot.errors import DeskError
from bot.web.charts import Bar, columns, rows
from bot.web.deps import ChannelsDep, ClockDep, ConfigDep, RendererDep, app_desk
from bot.web.inbox import SignedIn, needs, page
from bot.web.inbox_routes import OfferNames, target_labels

reports_page = APIRouter()

RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7), "30d": timedelta(days=30)}
MAX_CUSTOM_DAYS = 366


class BadReportQuery(DeskError):
    code = "invalid_input"
    status = 400


@dataclass(frozen=True)
class Asked:
    """What the owner asked for, checked: the range, the filter and the timezone days are counted in."""

    range: str
    start: datetime
    end: datetime
    channel_id: int | None
    route_id: int | None
    timezone: str
    picked: str  # the filter's form value: "", or "c<id>" / "r<id>"


async def reports_of(request: Request) -> Reports:
    return app_desk(request).reports


def _asked(query: dict[str, str], now: datetime, known_channels: set[int], known_routes: set[int]) -> Asked:
    chosen = query.get("range", "7d")
    timezone = query.get("tz", "UTC") or "UTC"
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadReportQuery(f"tz: {timezone[:60]!r} is not an IANA timezone such as Europe/Berlin") from None
    if chosen in RANGES:
        start, end = now - RANGES[chosen], now
    elif chosen == "custom":
        first, last = _day(query, "from"), _day(query, "to")
        if last < first:
            raise BadReportQuery(f"to: {last} is before from ({first})")
        if (last - first).days >= MAX_CUSTOM_DAYS:
            raise BadReportQuery(f"to: a custom range spans at most {MAX_CUSTOM_DAYS} days")
        start = datetime.combine(first, time(0), zone).astimezone(UTC)
        end = datetime.combine(last + timedelta(days=1), time(0), zone).astimezone(UTC)
    else:
        raise BadReportQuery(f"range: expected one of 24h, 7d, 30d or custom, got {chosen[:20]!r}")
    picked = query.get("filter", "")
    channel_id = route_id = None
    if picked:
        kind, number = picked[:1], picked[1:]
        if kind not in ("c", "r") or not number.isdigit():
            raise BadReportQuery(f"filter: expected a channel (c<id>) or a route (r<id>), got {picked[:20]!r}")
        if kind == "c":
            channel_id = int(number)
            if channel_id not in known_channels:
                raise BadReportQuery(f"filter: no channel {channel_id}")
        else:
            route_id = int(number)
            if route_id not in known_routes:
                raise BadReportQuery(f"filter: no route {route_id}")
    return Asked(chosen, start, end, channel_id, route_id, timezone, picked)


def _day(query: dict[str, str], key: str) -> date:
    text = query.get(key, "")
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise BadReportQuery(f"{key}: expected a date such as 2026-12-01, got {text[:20]!r}") from None


def _minutes(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _distribution_view(found: Distribution) -> dict[str, Any]:
    bars = [Bar(b.bucket.label, b.count) for b in found.histogram]
    return {
        "count": found.count, "missing": found.missing,
        "p50": _minutes(found.p50), "p90": _minutes(found.p90), "max": _minutes(found.max),
        "chart": rows(bars, label="how many, by how long"), "buckets": bars,
    }


@dataclass(frozen=True)
class PersonLine:
    """One row of the page's per-person table, its times in words."""

    figures: PersonFigures
    p50: str
    p90: str
    offer_p50: str  # from an offer made to them to their claim
    offer_p90: str


@dataclass(frozen=True)
class TargetLine:
    """One row of the page's table of teams and on-call schedules: its label, time in words."""

    figures: TargetFigures
    name: str  # "team Support", "on call: Night on-call"
    p50: str


def _people_view(people: tuple[PersonFigures, ...]) -> dict[str, Any]:
    lines = [PersonLine(row, _minutes(row.p50), _minutes(row.p90), _minutes(row.offered.p50), _minutes(row.offered.p90))
             for row in people]
    bars = [Bar(row.name, row.handled) for row in people]
    return {"people": lines, "people_chart": rows(bars, label="handoffs handled, by person"),
            "offers_made": any(row.offered.offers for row in people)}


def _targets_view(targets: tuple[TargetFigures, ...], labels: dict[str, str]) -> list[TargetLine]:
    names = OfferNames(targets=labels)
    return [TargetLine(row, names.target(row.target), _minutes(row.offered.p50)) for row in targets]


def _view(summary: ReportSummary, labels: dict[str, str]) -> dict[str, Any]:
    per_day: dict[date, int] = {day: 0 for day in summary.days}
    by_channel: dict[str, int] = {}
    for count in summary.per_day:
        per_day[count.day] = per_day.get(count.day, 0) + count.handoffs
        name = count.route_label or count.channel_label
        by_channel[name] = by_channel.get(name, 0) + count.handoffs
    days = [Bar(day.strftime("%d %b"), total) for day, total in per_day.items()]
    endings = summary.endings
    reasons = [Bar(t.word.replace("_", " "), t.count) for t in endings.by_reason]
    outcomes = [Bar(t.word.replace("_", " "), t.count) for t in endings.by_outcome]
    contained = summary.containment
    return {
        "handoffs": summary.handoffs,
        "days_chart": columns(days, label="handoffs per day"), "days": days,
        "by_channel": sorted(by_channel.items(), key=lambda item: -item[1]),
        "time_to_person": _distribution_view(summary.time_to_person),
        "duration": _distribution_view(summary.duration),
        "reasons_chart": rows(reasons, label="how handoffs ended"), "reasons": reasons,
        "outcomes": outcomes, "endings": endings,
        "containment": contained,
        "contained_share": f"{100 * contained.contained / contained.conversations:.0f}%" if contained.conversations else "—",
        "satisfaction": summary.satisfaction,
        **_people_view(summary.people), "targets": _targets_view(summary.targets, labels),
    }


@reports_page.get("/inbox/reports", response_class=HTMLResponse, include_in_schema=False)
async def reports(
    request: Request, renderer: RendererDep, clock: ClockDep, config: ConfigDep, channels: ChannelsDep,
    owner: SignedIn = Depends(needs(Role.VIEWER)), found: Reports = Depends(reports_of),
) -> HTMLResponse:
    known = {a.id: a.label for a in channels.adapters()}
    routes = {route.id: route.label for route in config.routes}
    try:
        asked = _asked(dict(request.query_params), clock.now(), set(known), set(routes))
    except BadReportQuery as exc:
        return page(renderer, "inbox/error.html", owner, status=400, title="Could not show the report", message=exc.message)
    summary = await found.summary(asked.start, asked.end, channel_id=asked.channel_id, route_id=asked.route_id,
                                  timezone=asked.timezone)
    return page(
        renderer, "inbox/reports.html", owner, asked=asked, channels=known, routes=routes,
        query=str(request.query_params), from_day=request.query_params.get("from", "")[:10],
        to_day=request.query_params.get("to", "")[:10], **_view(summary, target_labels(config.teams, config.oncall)),
    )


@reports_page.get("/inbox/reports.csv", include_in_schema=False)
async def reports_csv(
    request: Request, clock: ClockDep, config: ConfigDep, channels: ChannelsDep,
    owner: SignedIn = Depends(needs(Role.VIEWER)), found: Reports = Depends(reports_of),
) -> Response:
    """The rows behind the page: one line per local day and channel (or route), then the
    summary's figures, then one line per person, then one per team and on-call schedule that
    offered any, as the page shows them."""
    asked = _asked(dict(request.query_params), clock.now(), {a.id for a in channels.adapters()},
                   {route.id for route in config.routes})
    summary = await found.summary(asked.start, asked.end, channel_id=asked.channel_id, route_id=asked.route_id,
                                  timezone=asked.timezone)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["day", "channel_id", "channel", "route_id", "route", "handoffs"])
    for count in summary.per_day:
        writer.writerow([count.day.isoformat(), count.channel_id, _cell(count.channel_label), count.route_id or "",
                         _cell(count.route_label or ""), count.handoffs])
    writer.writerow([])
    writer.writerow(["figure", "value"])
    for name, value in _figures(summary):
        writer.writerow([name, value])
    writer.writerow([])
    writer.writerow(["person_id", "person", "handled", "timed", "time_to_claim_p50_seconds", "time_to_claim_p90_seconds",
                     "satisfaction_solved", "satisfaction_not_solved", "satisfaction_unanswered",
                     *(f"offers{column}" for column in OFFER_COLUMNS)])
    for row in summary.people:
        writer.writerow([row.person_id or "", _cell(row.name), row.handled, row.timed, _blank(row.p50), _blank(row.p90),
                         row.positive, row.negative, row.unanswered, *_offer_cells(row.offered)])
    if summary.targets:
        labels = target_labels(config.teams, config.oncall)
        writer.writerow([])
        writer.writerow(["target", "label", "handoffs", "unclaimed_by_target", *(f"offers{column}" for column in OFFER_COLUMNS)])
        for target in summary.targets:
            writer.writerow([target.target, _cell(labels.get(target.target, target.id)), target.handoffs, target.unclaimed,
                             *_offer_cells(target.offered)])
    if summary.satisfaction is not None and summary.satisfaction.comments:
        writer.writerow([])
        writer.writerow(["answered_at", "handoff_session_id", "answer", "comment"])
        for comment in summary.satisfaction.comments:
            writer.writerow([comment.at.isoformat(), comment.handoff_session_id, comment.answer or "", _cell(comment.text)])
    filename = f"handoff-report-{asked.start.date()}-{asked.end.date()}.csv"
    return Response(out.getvalue(), media_type="text/csv; charset=utf-8",
                    headers={"Content-Disposition": f'attachment; filename="{filename}"'})


def _figures(summary: ReportSummary) -> list[tuple[str, object]]:
    figures: list[tuple[str, object]] = [("handoffs", summary.handoffs)]
    for name, found in (("time_to_person", summary.time_to_person), ("duration", summary.duration)):
        figures += [(f"{name}_p50_seconds", _blank(found.p50)), (f"{name}_p90_seconds", _blank(found.p90)),
                    (f"{name}_max_seconds", _blank(found.max)), (f"{name}_missing", found.missing)]
    figures += [(f"released_{t.word}", t.count) for t in summary.endings.by_reason]
    figures += [(f"outcome_{t.word}", t.count) for t in summary.endings.by_outcome]
    figures += [("missing_required", summary.endings.missing_required), ("unclaimed", summary.endings.unclaimed),
                ("failed_dispatches", summary.endings.failed_dispatches),
                ("conversations", summary.containment.conversations), ("contained", summary.containment.contained)]
    if summary.satisfaction is not None:
        figures += [("satisfaction_solved", summary.satisfaction.positive),
                    ("satisfaction_not_solved", summary.satisfaction.negative),
                    ("satisfaction_unanswered", summary.satisfaction.unanswered)]
    return figures


OFFER_COLUMNS = ("", "_claimed", "_missed", "_claimed_timed", "_to_claim_p50_seconds", "_to_claim_p90_seconds")
"""The CSV's columns of a route's offers (after the ones it had before: a spreadsheet reading
those by position still finds them)."""


def _offer_cells(found: OfferFigures) -> list[object]:
    return [found.offers, found.claims, found.missed, found.timed, _blank(found.p50), _blank(found.p90)]


def _blank(value: float | None) -> object:
    """A figure nothing was measured for is an empty cell, not 0."""
    return "" if value is None else value


def _cell(text: str) -> str:
    """A spreadsheet never runs a cell a label starts with = + - @ (CSV injection)."""
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text

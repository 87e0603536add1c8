"""The on-call service (bot/domain/oncall_service.py) through a real desk on a manual clock
and a real database: who is on call now with the YAML's and the inbox's overrides, adding
and removing one (each refusal naming its field, each change in the audit trail), and the
gaps metric as /metrics is scraped."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import select
from sqlmodel import col

from bot.domain.oncall_service import InvalidOverride
from bot.errors import Conflict, NotFound
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffEvent, OnCallOverride
from tests.conftest import Harness, StartDesk

BERLIN = ZoneInfo("Europe/Berlin")
PEOPLE = [{"id": pid, "name": pid.capitalize(), "email": f"{pid}@example.com", **extra}
          for pid, extra in (("ana", {}), ("ben", {}), ("olga", {}), ("kim", {}), ("gone", {"disabled": True}))]
SUPPORT = {
    "id": "support", "label": "Support on call", "timezone": "Europe/Berlin",
    "layers": [
        {"name": "primary", "people": ["ana", "ben"], "shift": "1d", "handover": "09:00", "start": "2026-12-01"},
        {"name": "nights", "people": ["kim"], "shift": "7d", "handover": "09:00", "start": "2026-11-30", "hours": "nights"},
    ],
    "overrides": [{"person": "olga", "covers": "ben", "from": "2026-12-24 18:00", "to": "2026-12-25 08:00", "note": "Ben's holiday"}],
}
NIGHTS = {"nights": {"timezone": "Europe/Berlin", "weekly": {"mon-sun": "00:00-08:00, 18:00-24:00"}}}


def berlin(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN).astimezone(UTC)


async def desk_at(start_desk: StartDesk, at: str, **overrides: Any) -> Harness:
    return await start_desk(clock=ManualClock(berlin(at)), people=PEOPLE, oncall=[SUPPORT], hours=NIGHTS, **overrides)


async def test_now_lists_each_layer_in_order_with_the_configs_override(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-24 19:00")  # ben's day (23 days after ana's first)
    primary, nights = await harness.desk.oncall.now("support")
    assert (primary.person_id, primary.override and primary.override.note, nights.person_id) == ("olga", "Ben's holiday", "kim")
    [by_day] = await harness.desk.oncall.now("support", berlin("2026-12-24 12:00"))
    assert (by_day.layer, by_day.person_id) == ("primary", "ben")
    with pytest.raises(NotFound):
        await harness.desk.oncall.now("nope")


async def test_an_admin_adds_an_override_and_removes_it_each_in_the_audit_trail(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-02 10:00")
    oncall = harness.desk.oncall
    [before] = await oncall.now("support", berlin("2026-12-03 12:00"))
    added = await oncall.add_override("support", "olga", None, berlin("2026-12-03 08:00"), berlin("2026-12-03 20:00"),
                                      "  Ana's dentist  ", "Sam (inbox)")
    assert (added.source, added.id is not None, added.note, added.covers) == ("inbox", True, "Ana's dentist", None)
    [during] = await oncall.now("support", berlin("2026-12-03 12:00"))
    assert (before.person_id, during.person_id, during.override) == ("ana", "olga", added)  # day 2: ana's
    listed = await oncall.overrides("support", berlin("2026-12-01 00:00"), berlin("2026-12-31 00:00"))
    assert [(o.source, o.person_id) for o in listed] == [("config", "olga"), ("inbox", "olga")]

    removed = await oncall.remove_override(added.id or 0, "Sam (inbox)")
    assert removed.id == added.id
    assert [s.person_id for s in await oncall.now("support", berlin("2026-12-03 12:00"))] == ["ana"]
    with pytest.raises(Conflict):
        await oncall.remove_override(added.id or 0, "Sam (inbox)")
    with pytest.raises(NotFound):
        await oncall.remove_override(9999, "Sam (inbox)")
    async with harness.desk.db.read() as session:
        row = await session.get(OnCallOverride, added.id)
        events = (await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind).like("oncall_%"))
                                        .order_by(col(HandoffEvent.id)))).all()
    assert row is not None and row.removed_at == berlin("2026-12-02 10:00")  # kept, marked removed
    assert [(e.kind, e.actor, e.detail["override_id"], e.detail["on_call"]) for e in events] == [
        ("oncall_override_added", "Sam (inbox)", added.id, "olga"), ("oncall_override_removed", "Sam (inbox)", added.id, "olga")]
    assert events[0].detail["starts_at"] == "2026-12-03T07:00:00+00:00"


@pytest.mark.parametrize(("change", "problem"), [
    ({"schedule_id": "nope"}, None),
    ({"person_id": "zed"}, "person: no person 'zed'"),
    ({"person_id": "gone"}, "person: Gone is disabled"),
    ({"covers": "olga"}, "covers: a person cannot cover themselves"),
    ({"covers": "zed"}, "covers: 'zed' is on no layer of support"),
    ({"ends_at": berlin("2026-12-03 08:00")}, "to: must be after from"),
    ({"starts_at": berlin("2026-12-02 09:58")}, "from: is in the past"),
    ({"starts_at": datetime(2026, 12, 3, 8)}, "from: a time with its timezone is needed"),
    ({"note": "x" * 201}, "note: at most 200 characters"),
])
async def test_an_override_is_refused_naming_the_field(start_desk: StartDesk, change: dict[str, Any], problem: str | None) -> None:
    harness = await desk_at(start_desk, "2026-12-02 10:00")
    given: dict[str, Any] = {"schedule_id": "support", "person_id": "olga", "covers": None, "starts_at": berlin("2026-12-03 08:00"),
                             "ends_at": berlin("2026-12-03 20:00"), "note": None, "actor": "test", **change}
    if problem is None:
        with pytest.raises(NotFound):
            await harness.desk.oncall.add_override(**given)
    else:
        with pytest.raises(InvalidOverride) as refused:
            await harness.desk.oncall.add_override(**given)
        assert refused.value.message.startswith(problem), refused.value.message
    async with harness.desk.db.read() as session:
        assert (await session.scalars(select(OnCallOverride))).all() == []
    # a minute late still counts as now
    late = {**given, "schedule_id": "support", "person_id": "olga", "covers": None, "note": None,
            "starts_at": berlin("2026-12-02 09:59:30"), "ends_at": berlin("2026-12-03 20:00")}
    assert (await harness.desk.oncall.add_override(**late)).id is not None


async def test_the_gaps_metric_counts_the_next_seven_days_without_anybody(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-01 00:00")  # the first layer starts at 09:00 today, the nights are on
    scraped = (await harness.client.get("/metrics")).text
    assert 'handoff_oncall_gaps_seconds{schedule="support"} 3600.0' in scraped  # 08:00 – 09:00 today
    await harness.desk.oncall.add_override("support", "olga", None, berlin("2026-12-01 07:00"), berlin("2026-12-01 09:30"),
                                           None, "test")
    assert 'handoff_oncall_gaps_seconds{schedule="support"} 0.0' in (await harness.client.get("/metrics")).text
    assert await harness.desk.oncall.gap_seconds("support", ahead=timedelta(hours=1)) == 0

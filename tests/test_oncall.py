"""The on-call engine (bot/domain/oncall.py): rotations on the local wall clock across both
changes of daylight saving time in Europe/Berlin (2026-03-29 and 2026-10-25: daily, weekly and
12-hour shifts), two layers, a nights-only layer and the gaps it leaves, and an override (Olga
covers Ben 2026-12-24 18:00 – 2026-12-25 08:00)."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from bot.config import HoursConfig, OnCallConfig
from bot.domain.oncall import (
    Gap,
    Override,
    config_overrides,
    gap_seconds,
    gaps,
    instant,
    next_change,
    next_shifts,
    shifts_at,
    timeline,
)

BERLIN = ZoneInfo("Europe/Berlin")
NIGHTS = {"nights": HoursConfig.model_validate(
    {"timezone": "Europe/Berlin", "weekly": {"mon-sun": "00:00-08:00, 18:00-24:00"}})}


def berlin(text: str) -> datetime:
    """A wall time in Berlin as the instant it is (the first of two, when it happens twice)."""
    return datetime.fromisoformat(text).replace(tzinfo=BERLIN)


def wall(at: datetime) -> str:
    return at.astimezone(BERLIN).strftime("%Y-%m-%d %H:%M %Z")


def schedule(*layers: dict[str, Any], overrides: list[dict[str, Any]] | None = None) -> OnCallConfig:
    return OnCallConfig.model_validate({"id": "support", "label": "Support", "timezone": "Europe/Berlin",
                                        "layers": list(layers), "overrides": overrides or []})


def layer(name: str = "primary", people: tuple[str, ...] = ("ana", "ben", "olga"), **fields: Any) -> dict[str, Any]:
    return {"name": name, "people": list(people), "shift": "1d", "handover": "09:00", "start": "2026-03-20", **fields}


def handovers(config: OnCallConfig, start: str, end: str, hours: dict[str, HoursConfig] | None = None) -> list[str]:
    """Each shift of the timeline as `layer person from → to` on Berlin's wall clock."""
    return [f"{s.layer} {s.person_id} {wall(s.starts_at)} → {wall(s.ends_at)}"
            for s in timeline(config, config_overrides(config), berlin(start), berlin(end), hours or {})]


# --------------------------------------------------------------------------- rotations across DST


def test_a_daily_0900_handover_stays_at_0900_across_the_march_change() -> None:
    config = schedule(layer())
    assert handovers(config, "2026-03-28 10:00", "2026-03-30 10:00") == [
        "primary olga 2026-03-28 09:00 CET → 2026-03-29 09:00 CEST",  # 23 hours: the clocks spring forward
        "primary ana 2026-03-29 09:00 CEST → 2026-03-30 09:00 CEST",
        "primary ben 2026-03-30 09:00 CEST → 2026-03-31 09:00 CEST",
    ]
    [shift] = shifts_at(config, [], berlin("2026-03-29 08:59"), {})
    assert (shift.person_id, shift.ends_at - shift.starts_at) == ("olga", timedelta(hours=23))


def test_a_daily_0900_handover_stays_at_0900_across_the_october_change() -> None:
    config = schedule(layer())
    [shift] = shifts_at(config, [], berlin("2026-10-25 12:00"), {})
    assert (wall(shift.starts_at), wall(shift.ends_at)) == ("2026-10-25 09:00 CET", "2026-10-26 09:00 CET")
    [before] = shifts_at(config, [], berlin("2026-10-25 08:00"), {})
    assert (wall(before.starts_at), before.ends_at - before.starts_at) == ("2026-10-24 09:00 CEST", timedelta(hours=25))
    # 219 days after the start: the rotation has gone round 73 times and is back at ana
    assert before.person_id == ["ana", "ben", "olga"][(datetime(2026, 10, 24) - datetime(2026, 3, 20)).days % 3]


def test_a_weekly_rotation_hands_over_on_monday_at_0900_either_side_of_both_changes() -> None:
    config = schedule(layer(people=("ana", "ben"), shift="7d", start="2026-03-23"))  # a Monday
    assert handovers(config, "2026-03-24 00:00", "2026-04-07 00:00") == [
        "primary ana 2026-03-23 09:00 CET → 2026-03-30 09:00 CEST",
        "primary ben 2026-03-30 09:00 CEST → 2026-04-06 09:00 CEST",
        "primary ana 2026-04-06 09:00 CEST → 2026-04-13 09:00 CEST",
    ]
    [shift] = shifts_at(config, [], berlin("2026-10-25 12:00"), {})
    assert (wall(shift.starts_at), wall(shift.ends_at)) == ("2026-10-19 09:00 CEST", "2026-10-26 09:00 CET")
    assert shift.ends_at - shift.starts_at == timedelta(days=7, hours=1)


def test_twelve_hour_shifts_hand_over_at_0900_and_2100_always() -> None:
    config = schedule(layer(people=("ana", "ben"), shift="12h", start="2026-03-28"))
    spring = handovers(config, "2026-03-28 09:00", "2026-03-29 21:00")
    assert spring == [
        "primary ana 2026-03-28 09:00 CET → 2026-03-28 21:00 CET",
        "primary ben 2026-03-28 21:00 CET → 2026-03-29 09:00 CEST",  # 11 hours
        "primary ana 2026-03-29 09:00 CEST → 2026-03-29 21:00 CEST",
    ]
    autumn = handovers(config, "2026-10-24 21:00", "2026-10-25 21:00")
    assert [line.split(" ", 2)[2] for line in autumn] == [
        "2026-10-24 21:00 CEST → 2026-10-25 09:00 CET",  # 13 hours
        "2026-10-25 09:00 CET → 2026-10-25 21:00 CET",
    ]


def test_nobody_is_on_call_before_the_first_shift() -> None:
    config = schedule(layer(start="2026-03-20"))
    assert shifts_at(config, [], berlin("2026-03-20 08:59"), {}) == []
    assert [s.person_id for s in shifts_at(config, [], berlin("2026-03-20 09:00"), {})] == ["ana"]
    assert gaps(config, [], berlin("2026-03-20 00:00"), berlin("2026-03-21 00:00"), {}) == [
        Gap(berlin("2026-03-20 00:00").astimezone(UTC), berlin("2026-03-20 09:00").astimezone(UTC))]


def test_a_handover_the_clocks_skip_is_the_moment_they_jump() -> None:
    assert instant(datetime(2026, 3, 29, 2, 30), BERLIN) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 03:00 CEST
    assert instant(datetime(2026, 10, 25, 2, 30), BERLIN) == datetime(2026, 10, 25, 0, 30, tzinfo=UTC)  # the first 02:30
    config = schedule(layer(people=("ana", "ben"), handover="02:30", start="2026-03-28"))
    [shift] = shifts_at(config, [], berlin("2026-03-29 12:00"), {})
    assert (shift.person_id, wall(shift.starts_at), wall(shift.ends_at)) == (
        "ben", "2026-03-29 03:00 CEST", "2026-03-30 02:30 CEST")


# --------------------------------------------------------------------------- layers, hours, gaps


def test_two_layers_are_offered_in_order_and_a_nights_only_layer_has_nobody_by_day() -> None:
    config = schedule(layer(), layer("nights", people=("kim", "lee"), shift="7d", start="2026-12-07", hours="nights"))
    day, night = berlin("2026-12-09 12:00"), berlin("2026-12-09 23:00")
    assert [(s.layer, s.person_id) for s in shifts_at(config, [], day, NIGHTS)] == [("primary", "ana")]
    [primary, nights] = shifts_at(config, [], night, NIGHTS)
    assert (primary.layer_index, nights.layer_index, nights.person_id) == (0, 1, "kim")
    assert (wall(nights.starts_at), wall(nights.ends_at)) == ("2026-12-09 18:00 CET", "2026-12-10 08:00 CET")


def test_a_nights_only_schedule_leaves_the_days_as_gaps() -> None:
    config = schedule(layer("nights", people=("kim", "lee"), shift="7d", start="2026-12-07", hours="nights"))
    found = gaps(config, [], berlin("2026-12-07 00:00"), berlin("2026-12-10 00:00"), NIGHTS)
    assert [(wall(g.starts_at), wall(g.ends_at)) for g in found] == [
        ("2026-12-07 00:00 CET", "2026-12-07 18:00 CET"),  # the rotation starts at 09:00, the nights at 18:00
        ("2026-12-08 08:00 CET", "2026-12-08 18:00 CET"),
        ("2026-12-09 08:00 CET", "2026-12-09 18:00 CET"),
    ]
    assert gap_seconds(config, [], berlin("2026-12-07 00:00"), berlin("2026-12-10 00:00"), NIGHTS) == (18 + 10 + 10) * 3600
    # A day layer beside it fills them but for the hour before its own first handover
    both = schedule(layer(start="2026-12-07"), config.layers[0].model_dump())
    assert [(wall(a), wall(b)) for a, b in gaps(both, [], berlin("2026-12-07 00:00"), berlin("2026-12-10 00:00"), NIGHTS)] == [
        ("2026-12-07 00:00 CET", "2026-12-07 09:00 CET")]


# --------------------------------------------------------------------------- overrides


CHRISTMAS = {"person": "olga", "covers": "ben", "from": "2026-12-24 18:00", "to": "2026-12-25 08:00", "note": "Ben's holiday"}


def test_olga_covers_ben_on_christmas_eve_in_every_layer_he_is_on() -> None:
    # From 2026-03-19, 2026-12-24 is day 280: 280 % 3 == 1, ben's day on the first layer
    config = schedule(layer(start="2026-03-19"), layer("secondary", people=("ben", "kim"), shift="12h", start="2026-12-24"),
                      overrides=[CHRISTMAS])
    [override] = config_overrides(config)
    assert (override.starts_at, override.ends_at) == (datetime(2026, 12, 24, 17, tzinfo=UTC), datetime(2026, 12, 25, 7, tzinfo=UTC))
    assert (override.source, override.id, override.note) == ("config", None, "Ben's holiday")
    assert [s.person_id for s in shifts_at(config, [override], berlin("2026-12-24 17:59"), {})] == ["ben", "ben"]
    primary, secondary = shifts_at(config, [override], berlin("2026-12-24 19:00"), {})
    assert (primary.person_id, primary.override, wall(primary.starts_at), wall(primary.ends_at)) == (
        "olga", override, "2026-12-24 18:00 CET", "2026-12-25 08:00 CET")
    assert (secondary.person_id, secondary.override, wall(secondary.ends_at)) == ("olga", override, "2026-12-24 21:00 CET")
    assert [s.person_id for s in shifts_at(config, [override], berlin("2026-12-25 08:00"), {})] == ["ben", "kim"]
    assert handovers(config, "2026-12-24 12:00", "2026-12-25 12:00") == [
        "primary ben 2026-12-24 09:00 CET → 2026-12-24 18:00 CET",
        "secondary ben 2026-12-24 09:00 CET → 2026-12-24 18:00 CET",
        "primary olga 2026-12-24 18:00 CET → 2026-12-25 08:00 CET",
        "secondary olga 2026-12-24 18:00 CET → 2026-12-24 21:00 CET",  # ben's shift ends at 21:00, and with it the cover
        "secondary kim 2026-12-24 21:00 CET → 2026-12-25 09:00 CET",
        "primary ben 2026-12-25 08:00 CET → 2026-12-25 09:00 CET",  # the rest of his day
        "primary olga 2026-12-25 09:00 CET → 2026-12-26 09:00 CET",
        "secondary ben 2026-12-25 09:00 CET → 2026-12-25 21:00 CET",
    ]
    without = [(wall(a), wall(b)) for a, b in gaps(config, [override], berlin("2026-12-24 00:00"), berlin("2026-12-26 00:00"), {})]
    assert without == []


def test_an_override_without_covers_takes_the_first_layer_and_fills_it_when_it_is_empty() -> None:
    config = schedule(layer("nights", people=("kim",), hours="nights"), layer("backup", people=("lee",)))
    olga = Override("support", "olga", None, berlin("2026-12-24 12:00"), berlin("2026-12-24 20:00"), source="inbox", id=7)
    assert [(s.layer, s.person_id) for s in shifts_at(config, [], berlin("2026-12-24 13:00"), NIGHTS)] == [("backup", "lee")]
    first, second = shifts_at(config, [olga], berlin("2026-12-24 13:00"), NIGHTS)
    assert (first.layer, first.person_id, first.override, second.person_id) == ("nights", "olga", olga, "lee")
    assert (first.starts_at, first.ends_at) == (olga.starts_at, olga.ends_at)  # one stretch, across the nights opening
    [after] = [s for s in shifts_at(config, [olga], berlin("2026-12-24 20:00"), NIGHTS) if s.layer_index == 0]
    assert (after.person_id, wall(after.starts_at)) == ("kim", "2026-12-24 20:00 CET")


def test_an_override_given_with_an_offset_keeps_it_and_another_schedules_are_ignored() -> None:
    config = schedule(layer(), overrides=[{**CHRISTMAS, "from": "2026-12-24T18:00:00+00:00", "to": "2026-12-25T08:00:00+01:00"}])
    [override] = config_overrides(config)
    assert (override.starts_at, override.ends_at) == (datetime(2026, 12, 24, 18, tzinfo=UTC), datetime(2026, 12, 25, 7, tzinfo=UTC))
    elsewhere = Override("nights", "olga", None, berlin("2026-12-24 00:00"), berlin("2026-12-26 00:00"))
    assert [s.override for s in shifts_at(config, [elsewhere], berlin("2026-12-24 12:00"), {})] == [None]


@pytest.mark.parametrize("at", ["2026-12-24 12:00", "2026-12-24 22:00"])
def test_who_is_next_and_when_it_changes(at: str) -> None:
    config = schedule(layer(start="2026-03-19"), overrides=[CHRISTMAS])
    overrides = config_overrides(config)
    [now] = shifts_at(config, overrides, berlin(at), {})
    [following] = next_shifts(config, overrides, berlin(at), {})
    assert following.starts_at == now.ends_at == next_change(config, overrides, berlin(at), {})
    assert (now.person_id, following.person_id) == (("ben", "olga") if at.endswith("12:00") else ("olga", "ben"))


def test_a_timeline_runs_over_its_range_with_the_real_times_of_its_ends() -> None:
    config = schedule(layer(shift="7d", start="2026-12-07"))
    [shift] = timeline(config, [], berlin("2026-12-08 00:00"), berlin("2026-12-09 00:00"), {})
    assert (wall(shift.starts_at), wall(shift.ends_at)) == ("2026-12-07 09:00 CET", "2026-12-14 09:00 CET")
    assert next_shifts(config, [], berlin("2026-12-08 00:00"), {}, within=timedelta(days=1)) == []


# --------------------------------------------------------------------------- check-config


def test_check_config_reports_the_gaps_of_the_next_fortnight_and_disabled_people(tmp_path: Path) -> None:
    from tests.test_cli import handoff

    monday = date.today() - timedelta(days=date.today().weekday())
    path = tmp_path / "desk.yaml"
    path.write_text(yaml.safe_dump({
        "channels": [{"id": 1, "kind": "owner_inbox", "label": "Inbox"}],
        "people": [{"id": "kim", "name": "Kim", "email": "kim@example.com"},
                   {"id": "lee", "name": "Lee", "email": "lee@example.com", "disabled": True}],
        "hours": {"nights": {"timezone": "Europe/Berlin", "weekly": {"mon-sun": "00:00-08:00, 18:00-24:00"}}},
        "oncall": [{"id": "nights", "label": "Nights", "timezone": "Europe/Berlin", "layers": [
            {"name": "nights", "people": ["kim", "lee"], "shift": "7d", "start": monday.isoformat(), "hours": "nights"}]}],
    }))
    result = handoff("check-config", str(path))
    assert result.returncode == 0, result.stderr
    gap = re.compile(r"  warning: oncall\[0\] \(nights\): nobody is on call \w{3} \d\d \w{3} \d\d:\d\d – \w{3} \d\d \w{3} 18:00 "
                     r"\(Europe/Berlin\), and 1[345] more time\(s\) in the next 14 days \(\d+ h in all\); "
                     r"add a layer or a person, or an override$", re.M)
    assert gap.search(result.stdout), result.stdout
    assert ("  warning: oncall[0].layers[0].people[1]: lee is disabled (people[1].disabled), so nobody is reached on their "
            "shifts of nights; remove them from the rotation, enable them, or cover them with an override") in result.stdout

    data = yaml.safe_load(path.read_text())
    data["oncall"][0]["layers"][0]["people"].append("kym")
    path.write_text(yaml.safe_dump(data))
    refused = handoff("check-config", str(path))
    assert refused.returncode == 2
    assert "oncall[0].layers[0].people[2]: no person 'kym' (declared: kim, lee); did you mean 'kim'? under people:" in refused.stderr

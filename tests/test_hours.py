"""Office hours: the schedule's windows on the local wall clock (across both changes of
daylight saving time), holidays, when a schedule next opens, the config's problems with
their key paths, and what a closed channel changes in the tool description, the tool
result, the subscriber's notice and the dispatch, through a real desk on a manual clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from bot.config import Config, HoursConfig
from bot.domain.hours import is_open, next_opening
from bot.runtime.clock import ManualClock
from tests.conftest import StartDesk, config_problem
from tests.fakes import ScriptedChannel
from tests.test_readme import ROOT, doc_blocks

OFFICE = {
    "timezone": "Europe/Berlin",
    "weekly": {"mon-fri": "09:00-12:00, 13:00-18:00", "sat": "10:00-14:00"},
    "holidays": ["2026-12-25", "2026-12-26"],
}
BRIEF = {"summary": "Ana's order #1234 is a week late.", "expected_action": "Tell Ana when it arrives."}


def schedule(**overrides: Any) -> HoursConfig:
    return HoursConfig.model_validate({**OFFICE, **overrides})


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --------------------------------------------------------------------------- windows and days


@pytest.mark.parametrize(("at", "open_"), [
    ("2026-12-01 07:59", False),  # Tue 08:59 in Berlin (UTC+1)
    ("2026-12-01 08:00", True),   # 09:00: the first window opens
    ("2026-12-01 10:59", True),
    ("2026-12-01 11:00", False),  # 12:00: the lunch break between the two windows
    ("2026-12-01 12:00", True),   # 13:00
    ("2026-12-01 16:59", True),
    ("2026-12-01 17:00", False),  # 18:00: an end is not inside its window
    ("2026-12-05 09:00", True),   # Sat 10:00
    ("2026-12-05 13:00", False),  # Sat 14:00
    ("2026-12-06 10:00", False),  # Sunday is named by no key: closed
])
def test_windows_ranges_and_several_windows_a_day(at: str, open_: bool) -> None:
    assert is_open(schedule(), utc(at)) is open_


def test_holidays_are_closed_all_day() -> None:
    assert is_open(schedule(), utc("2026-12-24 10:00")) is True  # Thu
    assert is_open(schedule(), utc("2026-12-25 10:00")) is False  # Fri, a holiday
    assert is_open(schedule(), utc("2026-12-26 10:00")) is False  # Sat, a holiday


def test_lists_24h_closed_and_an_end_of_midnight() -> None:
    hours = schedule(weekly={"sat,sun": "24h", "mon": "18:00-24:00", "tue": "closed"})
    assert is_open(hours, utc("2026-12-05 23:30")) is True  # Sun 00:30
    assert is_open(hours, utc("2026-12-07 22:59")) is True  # Mon 23:59
    assert is_open(hours, utc("2026-12-07 23:00")) is False  # Tue 00:00
    assert next_opening(hours, utc("2026-12-08 12:00")) == utc("2026-12-11 23:00")  # Sat 00:00 in Berlin


def test_the_hours_follow_the_wall_clock_when_summer_time_begins() -> None:
    hours = schedule(weekly={"sun": "09:00-18:00"})  # 2026-03-29: 02:00 CET becomes 03:00 CEST
    assert is_open(hours, utc("2026-03-29 06:59")) is False  # 08:59 CEST
    assert is_open(hours, utc("2026-03-29 07:00")) is True  # 09:00 CEST, not 08:00 UTC
    assert is_open(hours, utc("2026-03-29 15:59")) is True
    assert is_open(hours, utc("2026-03-29 16:00")) is False
    assert next_opening(hours, utc("2026-03-28 12:00")) == utc("2026-03-29 07:00")


def test_a_window_that_starts_in_the_skipped_hour_opens_when_the_clocks_jump() -> None:
    hours = schedule(weekly={"sun": "02:30-04:00"})
    opening = next_opening(hours, utc("2026-03-28 12:00"))
    assert opening == utc("2026-03-29 01:00")  # 03:00 CEST, the first minute past 02:30
    assert is_open(hours, opening) and not is_open(hours, opening - timedelta(minutes=1))


def test_the_hours_follow_the_wall_clock_when_summer_time_ends() -> None:
    hours = schedule(weekly={"sun": "09:00-18:00"})  # 2026-10-25: 03:00 CEST becomes 02:00 CET
    assert is_open(hours, utc("2026-10-25 07:59")) is False  # 08:59 CET
    assert is_open(hours, utc("2026-10-25 08:00")) is True  # 09:00 CET, not 07:00 UTC
    assert next_opening(hours, utc("2026-10-24 12:00")) == utc("2026-10-25 08:00")


def test_a_wall_time_that_happens_twice_is_open_both_times() -> None:
    hours = schedule(weekly={"sun": "02:00-02:30"})
    assert is_open(hours, utc("2026-10-25 00:15")) is True  # 02:15 CEST
    assert is_open(hours, utc("2026-10-25 01:15")) is True  # 02:15 CET, an hour later
    assert is_open(hours, utc("2026-10-25 01:45")) is False  # 02:45 CET
    assert next_opening(hours, utc("2026-10-24 12:00")) == utc("2026-10-25 00:00")  # the first 02:00
    assert next_opening(hours, utc("2026-10-25 00:45")) == utc("2026-10-25 01:00")  # and again at the second


# --------------------------------------------------------------------------- next opening


def test_next_opening_is_now_while_open_and_after_the_lunch_break() -> None:
    at = utc("2026-12-01 09:00")
    assert next_opening(schedule(), at) == at
    assert next_opening(schedule(), utc("2026-12-01 11:30")) == utc("2026-12-01 12:00")


def test_next_opening_across_a_weekend() -> None:
    hours = schedule(weekly={"mon-fri": "09:00-18:00"})
    assert next_opening(hours, utc("2026-12-04 17:30")) == utc("2026-12-07 08:00")  # Fri 18:30 -> Mon 09:00


def test_next_opening_skips_holidays_and_closed_days() -> None:
    # Thu 24 Dec 19:00: Fri 25 and Sat 26 are holidays, Sunday is closed -> Mon 28 Dec 09:00.
    assert next_opening(schedule(), utc("2026-12-24 18:00")) == utc("2026-12-28 08:00")


def test_next_opening_is_none_when_never_open() -> None:
    assert next_opening(schedule(weekly={"mon-sun": "closed"}), utc("2026-12-01 10:00")) is None
    assert next_opening(schedule(weekly={}), utc("2026-12-01 10:00")) is None


# --------------------------------------------------------------------------- config problems


def hours_problem(office: dict[str, Any], channel_hours: str = "office") -> str:
    channel = {"id": 1, "kind": "owner_inbox", "label": "Inbox", "hours": channel_hours}
    return config_problem(hours={"office": {**OFFICE, **office}}, channels=[channel])


@pytest.mark.parametrize(("office", "expected"), [
    ({"timezone": "Europe/Berln"},
     "hours.office.timezone: unknown timezone 'Europe/Berln'; use an IANA name such as Europe/Berlin; "
     "did you mean 'Europe/Berlin'?"),
    ({"weekly": {"mon-frx": "09:00-18:00"}},
     "hours.office.weekly.mon-frx: 'mon-frx' is not a day (mon..sun), a range (mon-fri) or a list (sat,sun)"),
    ({"weekly": {"fri-mon": "09:00-18:00"}},
     "hours.office.weekly.fri-mon: 'fri-mon' runs backwards; write it as fri-sun,mon-mon or name the days"),
    ({"weekly": {"mon": "9-18"}},
     "hours.office.weekly.mon: '9' is not a time such as 09:00"),
    ({"weekly": {"mon": "09:00"}},
     "hours.office.weekly.mon: '09:00' is not a window"),
    ({"weekly": {"mon": "25:00-26:00"}},
     "hours.office.weekly.mon: '25:00' is not a time of day (00:00 to 23:59, or 24:00 as an end)"),
    ({"weekly": {"mon": "18:00-09:00"}},
     "hours.office.weekly.mon: 18:00-09:00 ends before it starts; a window cannot cross midnight"),
    ({"weekly": {"mon": "09:00-12:00, 11:00-18:00"}},
     "hours.office.weekly.mon: 09:00-12:00 and 11:00-18:00 overlap in '09:00-12:00, 11:00-18:00'; join them or move one"),
    ({"weekly": {"mon-fri": "09:00-18:00", "mon": "17:00-20:00"}},
     "hours.office: 09:00-18:00 and 17:00-20:00 overlap in the windows for mon; join them or move one"),
    ({"holidays": ["2026-13-25"]},
     "hours.office.holidays[0]: '2026-13-25' is not a date such as 2026-12-25"),
])
def test_config_problems_name_the_key_and_the_fix(office: dict[str, Any], expected: str) -> None:
    assert expected in hours_problem(office)


def test_the_docs_worked_example_is_a_valid_config_open_when_it_says() -> None:
    """The office-hours example of docs/channels/index.md ("Office hours")."""
    [block] = [b for b in doc_blocks(ROOT / "docs" / "channels" / "index.md") if b.lang == "yaml" and b.body and b.body[0] == "hours:" and "routes:" not in b.body]
    config = Config.from_mapping({**yaml.safe_load("\n".join(block.body)), "secret_key": "0123456789abcdef0123"})
    office = config.hours[config.channels[0].hours or ""]
    assert not is_open(office, utc("2026-12-04 18:00"))  # the page's Friday 19:00 in Berlin
    assert next_opening(office, utc("2026-12-04 18:00")) == utc("2026-12-05 09:00")  # Sat 10:00


def test_a_channel_naming_an_unknown_schedule() -> None:
    assert hours_problem({}, channel_hours="ofice") == (
        "channels[0].hours: no schedule named 'ofice' under hours: (defined: office); did you mean 'office'?; "
        "add it there or fix the name"
    )


def test_a_front_refuses_hours_as_a_channel_key() -> None:
    front = {"kind": "telegram", "bot_token": "123:abc", "webhook_secret": "0123456789abcdef", "hours": "office"}
    assert "fronts[0].hours: belongs on a channel" in config_problem(hours={"office": OFFICE}, fronts=[front])


# --------------------------------------------------------------------------- through a real desk


async def start_closed_desk(
    start_desk: StartDesk, at: str, hours: str | None = "office", office: dict[str, Any] | None = None,
) -> Any:
    channel = {"id": 1, "kind": "owner_inbox", "label": "Owner inbox", "estimated_response": "within 1 business day"}
    if hours:
        channel["hours"] = hours
    return await start_desk(
        clock=ManualClock(utc(at)), adapters={1: ScriptedChannel}, hours={"office": office or OFFICE}, channels=[channel],
    )


async def description(harness: Any, cid: str) -> str:
    specs = await harness.desk.router.tool_specs(cid)
    return next(s.description for s in specs if s.name == "handoff_request")


async def test_a_closed_channel_says_when_someone_is_back(start_desk: StartDesk) -> None:
    harness = await start_closed_desk(start_desk, "2026-12-04 18:00")  # Fri 19:00 in Berlin
    cid = await harness.conversation()
    assert "- channel_id 1: Owner inbox (scripted); closed now; back Sat 10:00 (Europe/Berlin)\n" in await description(harness, cid)

    started = await harness.tool(cid, "handoff_request", {"channel_id": 1, **BRIEF})
    assert started["human_notified"] is True  # it still goes out
    assert started["estimated_response"] == "once they are back, Sat 10:00 (Europe/Berlin)"
    told = [m["text"] for m in await harness.messages(cid) if m["role"] == "agent"]
    assert told[-1] == (
        "I've asked our team to join — usually once they are back, Sat 10:00 (Europe/Berlin). "
        "Your messages now go straight to them."
    )
    handoff = (await harness.client.get(f"/api/handoffs/{started['handoff_session_id']}")).json()
    assert handoff["estimated_response"] == "once they are back, Sat 10:00 (Europe/Berlin)"
    dispatch = harness.desk.channels.get(1).sent[0]
    assert dispatch.text.splitlines()[1] == (
        "This arrived outside your office hours; the subscriber was told to expect an answer "
        "once they are back, Sat 10:00 (Europe/Berlin)."
    )


async def test_the_description_follows_the_clock_and_dates_a_reopening_a_week_away(start_desk: StartDesk) -> None:
    new_year = [f"2026-12-{day}" for day in range(25, 32)] + ["2027-01-01"]
    harness = await start_closed_desk(start_desk, "2026-12-24 18:00", office={**OFFICE, "holidays": new_year})
    cid = await harness.conversation()
    assert "closed now; back Sat 02 Jan 10:00 (Europe/Berlin)" in await description(harness, cid)
    harness.desk.clock.advance(timedelta(days=-2))  # Tue 22 Dec 19:00
    assert "closed now; back Wed 09:00 (Europe/Berlin)" in await description(harness, cid)
    harness.desk.clock.advance(timedelta(hours=14))  # Wed 09:00: open
    assert "Owner inbox (scripted); responds within 1 business day" in await description(harness, cid)


async def test_a_schedule_that_never_opens_promises_no_time(start_desk: StartDesk) -> None:
    harness = await start_closed_desk(start_desk, "2026-12-01 09:00", office={**OFFICE, "weekly": {"mon-sun": "closed"}})
    cid = await harness.conversation()
    assert "- channel_id 1: Owner inbox (scripted); closed now; no office hours ahead\n" in await description(harness, cid)
    started = await harness.tool(cid, "handoff_request", {"channel_id": 1, **BRIEF})
    assert started["estimated_response"] == "when someone is next available"


async def test_an_open_channel_and_a_channel_without_hours_are_unchanged(start_desk: StartDesk) -> None:
    for hours in ("office", None):
        harness = await start_closed_desk(start_desk, "2026-12-01 09:00", hours=hours)  # Tue 10:00 in Berlin
        cid = await harness.conversation()
        assert "- channel_id 1: Owner inbox (scripted); responds within 1 business day\n" in await description(harness, cid)
        started = await harness.tool(cid, "handoff_request", {"channel_id": 1, **BRIEF})
        assert started["estimated_response"] == "within 1 business day"
        assert "outside your office hours" not in harness.desk.channels.get(1).sent[0].text

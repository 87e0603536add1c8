"""A route's offers to people on the handoff page (bot/web/inbox_routes.py,
bot/web/inbox/view.py): each person by name with the target
that chose them, their turn, the contact method (its address masked), when the offer was
made and reached them and how it ended; who was passed over and why, from the audit trail;
and the list card's line.
A real desk on a manual clock, driven as tests/test_offers.py drives it (the API's side is
in tests/test_api.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import update
from sqlmodel import col

from bot.store.models import Person
from channels.base import PermanentChannelError
from tests.conftest import Harness, StartDesk
from tests.test_inbox import list_updates
from tests.test_offers import MONDAY_NOON, channel, later, people_desk, reply_in_dm, request

SUPPORT_TEAM = [{"id": "support", "label": "Support desk", "members": ["olga", "ben", "ines"]}]
ROUND_ROBIN = {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"}


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """Page behaviour does not depend on the database: SQLite only."""
    return sqlite_url


async def page_of(harness: Harness, sid: str) -> str:
    response = await harness.client.get(f"/inbox/handoffs/{sid}")
    assert response.status_code == 200, response.text
    return response.text


async def route_of(harness: Harness, sid: str) -> dict[str, Any]:
    """The route as the page's live updates carry it."""
    response = await harness.client.get(f"/inbox/handoffs/{sid}/updates", params={"after": 0, "wait": 0})
    assert response.status_code == 200, response.text
    return dict(response.json()["route"])


def lines(route: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["label"], r["words"], r["detail"]) for r in route["recipients"]]


async def ines_is_away(harness: Harness) -> None:
    async with harness.desk.db.transaction() as session:
        await session.execute(update(Person).where(col(Person.id) == "ines").values(away_since=MONDAY_NOON))


async def test_the_page_lists_each_offer_its_turn_contact_method_and_result_and_who_was_passed_over(
    start_desk: StartDesk,
) -> None:
    harness = await people_desk(start_desk, ROUND_ROBIN, teams=SUPPORT_TEAM)
    await ines_is_away(harness)
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    route = await route_of(harness, sid)
    assert lines(route) == [("Olga Petrova", "offered 11:00 · notified 11:00", "team Support desk · asked 1st · Slack U-olga")]
    assert route["passed"] == "Passed over: Ines Duarte (away)"
    [card] = (await list_updates(harness.client))["handoffs"]  # type: ignore[index]  # the list's JSON
    assert card["route"]["asked"] == "Asked: Olga Petrova (notified)"

    await later(harness, timedelta(minutes=5))  # Olga lets it pass; Ben is next (Ines is passed over again: named once)
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    route = await route_of(harness, sid)
    assert lines(route) == [
        ("Olga Petrova", "offered 11:00 · notified 11:00 · missed 11:05", "team Support desk · asked 1st · Slack U-olga"),
        ("Ben Okoye", "offered 11:05 · notified 11:05 · claimed 11:05", "team Support desk · asked 2nd · Slack U-ben"),
    ]
    assert [(r["person_id"], r["result"], r["holds_claim"]) for r in route["recipients"]] == [
        ("olga", "missed", False), ("ben", "claimed", True)]
    assert route["passed"] == "Passed over: Ines Duarte (away)"
    page = await page_of(harness, sid)
    assert "offered 11:05 · notified 11:05 · claimed 11:05" in page
    assert '<p class="passed-over muted small" id="passed-over">Passed over: Ines Duarte (away)</p>' in page
    assert "Offers to people: times in UTC." in page


async def test_a_second_contact_method_shows_its_masked_address_and_a_refused_one_its_error(start_desk: StartDesk) -> None:
    harness = await people_desk(start_desk, {"notify": ["person:olga"], "claim_within": "10m"})
    channel(harness, 5).fail_next(PermanentChannelError("cannot_dm_user", hint="Slack refused the direct message"))
    _, started = await request(harness)
    sid = started["handoff_session_id"]
    route = await route_of(harness, sid)
    assert [(label, detail) for label, _, detail in lines(route)] == [
        ("Olga Petrova", "named in the route · asked 1st · Slack U-olga"),
        ("Olga Petrova", "named in the route · asked 1st · E-mail o•••@example.com (their 2nd method)"),
    ]
    failed, mailed = route["recipients"]
    assert failed["state"] == "failed" and failed["words"].startswith("offered 11:00 · failed 11:00: ")
    assert mailed["words"] == "offered 11:00 · notified 11:00"
    assert route["passed"] == ""
    page = await page_of(harness, sid)
    assert "olga@example.com" not in page  # her address is masked for anyone who may look
    assert 'id="passed-over" hidden' in page

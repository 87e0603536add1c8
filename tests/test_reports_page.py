"""The Reports page and its CSV through a real desk: the figures of a small known history,
the range and filter parameters (a malformed one is a 400 naming it), the owner login, the
charts' escaping, and, in real Chromium, the page at desktop and phone width (nothing
wider than the viewport). Set HANDOFF_WRITE_SCREENSHOTS=1 to refresh its screenshots in docs/screenshots/."""

from __future__ import annotations

import csv
import io
import os
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlmodel import col

from bot.config.people import Role
from bot.runtime.clock import ManualClock
from bot.store.db import Database
from bot.store.models import HandoffSatisfaction, HandoffSession, Message
from bot.store.vocabulary import Outcome, ReleaseReason
from bot.web.charts import Bar, columns, rows
from channels.base import RecipientText
from tests.conftest import CHROMIUM, Harness, StartDesk, desk_served, shot
from tests.test_inbox import login
from tests.test_inbox_browser import assert_fits_the_phone
from tests.test_offers import later, people_desk, reply_in_dm, request
from tests.test_reports import Planned, store

NOON = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)
CHANNELS = [
    {"id": 1, "kind": "owner_inbox", "label": "Owner inbox", "estimated_response": "within 1 business day"},
    {"id": 2, "kind": "owner_inbox", "label": "Billing <team>", "estimated_response": "within 1 business day"},
]


async def history(harness: Harness) -> None:
    """Three handoffs: one answered after 2 minutes and released by its person after 10, one
    on channel 2 still open, one nobody answered that the idle timer ended; one conversation
    without a handoff."""
    clock = harness.desk.clock
    assert isinstance(clock, ManualClock)
    first = await harness.conversation("Ana")
    sid = (await harness.start_handoff(first))["handoff_session_id"]
    clock.advance(timedelta(minutes=2))
    await harness.desk.inbound.submit_and_wait(1, RecipientText(thread_key=sid, text="On it", author="Sam"))
    clock.advance(timedelta(minutes=8))
    await harness.desk.handoffs.release(sid, reason="owner", actor="owner")
    second = await harness.conversation("Ben", email=None)
    await harness.start_handoff(second, channel_id=2)
    third = await harness.conversation("Cy", email=None)
    idle = (await harness.start_handoff(third))["handoff_session_id"]
    clock.advance(timedelta(minutes=31))
    await harness.desk.handoffs.release_if_idle(idle)
    await harness.conversation("Dee", email=None)  # the bot handled it alone
    await harness.desk.settle()
    clock.advance(timedelta(minutes=1))  # a range ends just before now: everything above is in it


async def report_desk(start_desk: StartDesk) -> Harness:
    harness = await start_desk(clock=ManualClock(NOON), owner={"token": "owner-secret"}, channels=CHANNELS)
    await login(harness.client)
    return harness


async def test_the_page_shows_the_figures_of_the_range(start_desk: StartDesk) -> None:
    harness = await report_desk(start_desk)
    await history(harness)
    page = await harness.client.get("/inbox/reports", params={"range": "24h"})
    assert page.status_code == 200
    html = page.text
    assert '<strong id="report-total">3</strong> handoffs' in html
    assert "p50 <strong>2 min</strong>" in html  # the one person who answered, after two minutes
    assert "<td>idle timeout</td><td>1</td>" in html and "<td>owner</td><td>1</td>" in html
    assert "<td>still open</td><td>1</td>" in html
    assert "Billing &lt;team&gt;" in html and "Billing <team>" not in html  # labels escaped, in tables and charts
    assert html.count('<svg class="chart"') >= 3 and "<script" not in html.split("<main", 1)[-1]
    assert "<strong>25%</strong>" in html  # one of four conversations needed no handoff

    only_billing = await harness.client.get("/inbox/reports", params={"range": "24h", "filter": "c2"})
    assert '<strong id="report-total">1</strong> handoffs' in only_billing.text


async def test_the_csv_holds_the_rows_behind_the_page(start_desk: StartDesk) -> None:
    harness = await report_desk(start_desk)
    await history(harness)
    response = await harness.client.get("/inbox/reports.csv", params={"range": "7d"})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/csv")
    assert response.headers["content-disposition"].startswith('attachment; filename="handoff-report-')
    table = list(csv.reader(io.StringIO(response.text)))
    assert table[0] == ["day", "channel_id", "channel", "route_id", "route", "handoffs"]
    assert ["2026-12-07", "1", "Owner inbox", "", "", "2"] in table and ["2026-12-07", "2", "Billing <team>", "", "", "1"] in table
    figures = dict(row for row in table if len(row) == 2)
    assert figures["handoffs"] == "3" and figures["time_to_person_p50_seconds"] in ("120", "120.0")
    assert figures["released_idle_timeout"] == "1" and figures["contained"] == "1"


async def team(harness: Harness) -> list[str]:
    """Two people of the directory and what they handled in the last day, written as the
    desk writes who acted (claims on a route, first replies straight to a channel); the
    ids of the handoffs, in order."""
    people = harness.desk.people
    await people.add(pid="olga", name="Olga <Petrova>", email="olga@example.com", role=Role.ADMIN, source="cli", actor="test")
    await people.add(pid="sam", name="=Sam Okafor", email="sam@example.com", source="cli", actor="test")
    hours_ago = NOON - timedelta(hours=3)
    return await store(
        harness.desk.db,
        Planned(hours_ago, channel=(1, "Owner inbox"), route_id=20, claimed=60, claimed_person="olga"),
        Planned(hours_ago, channel=(1, "Owner inbox"), route_id=20, claimed=300, claimed_person="olga",
                released=900, reason=ReleaseReason.OWNER, outcome=Outcome.RESOLVED, released_person="olga"),
        Planned(hours_ago, channel=(2, "Billing <team>"), human_replies=(45,), reply_people=("sam",)),
        Planned(hours_ago, channel=(1, "Owner inbox"), human_replies=(30,)),  # an unlinked provider user answered
    )


async def test_the_page_shows_each_person_beside_its_chart(start_desk: StartDesk) -> None:
    harness = await report_desk(start_desk)
    sids = await team(harness)
    await answered_these(harness.desk.db, {sids[1]: "yes"})
    html = (await harness.client.get("/inbox/reports", params={"range": "24h"})).text
    section = html.split('id="per-person"', 1)[1].split("</section>", 1)[0]
    assert "handoffs handled, by person" in section  # the chart, and its table
    rows = [row.split("</tr>")[0] for row in section.split("<tr")[2:]]
    assert [row.split("</th>")[0].rsplit(">", 1)[-1] for row in rows] == [
        "=Sam Okafor", "Olga &lt;Petrova&gt;", "not linked to a person"]  # by name; escaped
    cells = [[cell.split("</td>")[0] for cell in row.split('<td class="num">')[1:]] for row in rows]
    assert cells == [["1", "45 s", "45 s", "0", "0", "0"], ["2", "60 s", "5 min", "1", "0", "0"],
                     ["1", "30 s", "30 s", "0", "0", "0"]]

    only_billing = (await harness.client.get("/inbox/reports", params={"range": "24h", "filter": "c2"})).text
    assert '<td class="num">1</td><td class="num">45 s</td>' in only_billing.split('id="per-person"', 1)[1]

    table = list(csv.reader(io.StringIO((await harness.client.get("/inbox/reports.csv", params={"range": "24h"})).text)))
    header = table.index(["person_id", "person", "handled", "timed", "time_to_claim_p50_seconds",
                          "time_to_claim_p90_seconds", "satisfaction_solved", "satisfaction_not_solved",
                          "satisfaction_unanswered", *OFFER_HEADER])
    nothing_offered = ["0", "0", "0", "0", "", ""]
    assert table[header + 1:header + 4] == [
        ["sam", "'=Sam Okafor", "1", "1", "45.0", "45.0", "0", "0", "0", *nothing_offered],  # a leading = never runs as a formula
        ["olga", "Olga <Petrova>", "2", "2", "60.0", "300.0", "1", "0", "0", *nothing_offered],
        ["", "not linked to a person", "1", "1", "30.0", "30.0", "0", "0", "0", *nothing_offered],
    ]
    assert "offered" not in html.split('id="per-person"', 1)[1].split("</section>", 1)[0].lower()  # nobody was offered one
    assert 'id="per-target"' not in html


OFFER_HEADER = ["offers", "offers_claimed", "offers_missed", "offers_claimed_timed", "offers_to_claim_p50_seconds",
                "offers_to_claim_p90_seconds"]


async def test_the_offers_to_people_show_per_person_and_per_team(start_desk: StartDesk) -> None:
    """Olga lets a team's handoff pass and Ben claims it a minute after his offer (seven after it was asked for)."""
    harness = await people_desk(start_desk, {"notify": ["team:support"], "claim_within": "5m", "assign": "round_robin"},
                                teams=[{"id": "support", "label": "Support <desk>", "members": ["olga", "ben"]}])
    await request(harness)
    await later(harness, timedelta(minutes=6))
    await later(harness, timedelta(minutes=1))  # Ben's offer came at 5 min, on the sweep after the deadline
    assert await reply_in_dm(harness, 5, "ben") == "relayed"
    html = (await harness.client.get("/inbox/reports", params={"range": "24h"})).text
    section = html.split('id="per-person"', 1)[1].split("</section>", 1)[0]
    rows = {row.split("</th>")[0].rsplit(">", 1)[-1]: [cell.split("</td>")[0] for cell in row.split('<td class="num">')[1:]]
            for row in section.split("<tr")[2:]}
    assert rows["Ben Okoye"][-5:] == ["1", "1", "0", "60 s", "60 s"]
    assert rows["Olga Petrova"][-5:] == ["1", "0", "1", "—", "—"]
    teams = html.split('id="per-target"', 1)[1].split("</section>", 1)[0]
    assert "<th scope=\"row\">team Support &lt;desk&gt;</th>" in teams  # the config's label, escaped
    assert [cell.split("</td>")[0] for cell in teams.split('<td class="num">')[1:]] == ["1", "2", "1", "1", "60 s", "0"]

    table = list(csv.reader(io.StringIO((await harness.client.get("/inbox/reports.csv", params={"range": "24h"})).text)))
    header = table.index(["target", "label", "handoffs", "unclaimed_by_target", *OFFER_HEADER])
    assert table[header + 1:] == [["team:support", "Support <desk>", "1", "0", "2", "1", "1", "1", "60.0", "60.0"]]
    people = table.index(["person_id", "person", "handled", "timed", "time_to_claim_p50_seconds",
                          "time_to_claim_p90_seconds", "satisfaction_solved", "satisfaction_not_solved",
                          "satisfaction_unanswered", *OFFER_HEADER])
    assert [row for row in table[people + 1:header] if row and row[0] == "ben"] == [
        ["ben", "Ben Okoye", "1", "1", "420.0", "420.0", "0", "0", "0", "1", "1", "0", "1", "60.0", "60.0"]]  # from the activation, and from his offer


async def answered_these(db: Database, answers: dict[str, str | None]) -> None:
    """The satisfaction question asked after these handoffs (by id), answered so."""
    async with db.transaction() as session:
        for sid, answer in answers.items():
            handoff = await session.get(HandoffSession, sid)
            assert handoff is not None
            session.add(HandoffSatisfaction(
                handoff_session_id=sid, conversation_id=handoff.conversation_id, asked_at=NOON, asked_on="web",
                in_words=False, question_message_id=1, answer=answer, answered_at=NOON if answer else None,
            ))


async def answered(db: Database, answers: list[tuple[str | None, str | None]]) -> None:
    """The satisfaction question asked after each released handoff, newest first, with these
    (answer, comment) pairs (the asking and answering are tests/test_satisfaction*.py's)."""
    async with db.transaction() as session:
        released = (await session.execute(
            select(HandoffSession).where(col(HandoffSession.state) == "released").order_by(col(HandoffSession.released_at))
        )).scalars().all()
        for minutes, (handoff, (answer, comment)) in enumerate(zip(released, answers, strict=False)):
            at = (handoff.released_at or NOON) + timedelta(seconds=30)
            session.add(HandoffSatisfaction(
                handoff_session_id=handoff.id, conversation_id=handoff.conversation_id, asked_at=at, asked_on="web",
                in_words=False, question_message_id=1, answer=answer, comment=comment,
                answered_at=at + timedelta(minutes=minutes) if answer else None,
            ))


async def test_satisfaction_shows_the_answers_and_what_subscribers_wrote(start_desk: StartDesk) -> None:
    harness = await report_desk(start_desk)
    await history(harness)
    await answered(harness.desk.db, [("no", "Took <b>ages</b> =1+1"), ("yes", None)])
    html = (await harness.client.get("/inbox/reports", params={"range": "24h"})).text
    assert "<td>👍 solved</td><td>1</td>" in html and "<td>👎 not solved</td><td>1</td>" in html
    assert "<q>Took &lt;b&gt;ages&lt;/b&gt; =1+1</q>" in html and "<b>ages" not in html
    async with harness.desk.db.read() as session:
        commented = (await session.scalars(
            select(col(HandoffSatisfaction.handoff_session_id)).where(col(HandoffSatisfaction.comment).is_not(None))
        )).one()
    assert f'<a href="/inbox/handoffs/{commented}">the handoff</a>' in html  # the comment links to its own handoff
    table = list(csv.reader(io.StringIO((await harness.client.get("/inbox/reports.csv", params={"range": "24h"})).text)))
    figures = dict(row for row in table if len(row) == 2)
    assert (figures["satisfaction_solved"], figures["satisfaction_not_solved"]) == ("1", "1")
    [comment] = [row for row in table if len(row) == 4 and row[2] == "no"]
    assert comment[3] == "Took <b>ages</b> =1+1"  # starts with no formula character: kept as written


@pytest.mark.parametrize(("params", "expected"), [
    ({"range": "week"}, "range: expected one of 24h, 7d, 30d or custom, got 'week'"),
    ({"range": "custom", "from": "2026-12-07", "to": "2026-12-01"}, "to: 2026-12-01 is before from (2026-12-07)"),
    ({"range": "custom", "from": "yesterday", "to": "2026-12-01"}, "from: expected a date such as 2026-12-01, got 'yesterday'"),
    ({"filter": "c9"}, "filter: no channel 9"),
    ({"filter": "x1"}, "filter: expected a channel (c&lt;id&gt;) or a route (r&lt;id&gt;), got &#39;x1&#39;"),
    ({"tz": "Mars/Base"}, "tz: &#39;Mars/Base&#39; is not an IANA timezone such as Europe/Berlin"),
])
async def test_a_malformed_parameter_is_refused_by_name(start_desk: StartDesk, params: dict[str, str], expected: str) -> None:
    harness = await report_desk(start_desk)
    page = await harness.client.get("/inbox/reports", params=params)
    assert page.status_code == 400
    assert expected.replace("'", "&#39;") in page.text or expected in page.text


async def test_a_custom_range_counts_local_days(start_desk: StartDesk) -> None:
    harness = await report_desk(start_desk)
    await history(harness)
    page = await harness.client.get("/inbox/reports", params={
        "range": "custom", "from": "2026-12-07", "to": "2026-12-07", "tz": "Europe/Berlin"})
    assert '<strong id="report-total">3</strong> handoffs' in page.text
    assert "2026-12-06 23:00 – 2026-12-07 23:00 UTC · days counted in Europe/Berlin" in page.text
    before = await harness.client.get("/inbox/reports", params={"range": "custom", "from": "2026-12-01", "to": "2026-12-06"})
    assert '<strong id="report-total">0</strong> handoffs' in before.text


async def test_the_page_needs_the_owner(start_desk: StartDesk) -> None:
    harness = await start_desk(owner={"token": "owner-secret"})
    for path in ("/inbox/reports", "/inbox/reports.csv"):
        response = await harness.client.get(path)
        assert response.status_code == 303 and response.headers["location"].startswith("/inbox/login")


def test_charts_escape_their_labels_and_say_when_empty() -> None:
    drawn = str(columns([Bar("<b>Mon</b>", 3), Bar("Tue", 0)], label="per day"))
    assert "&lt;b&gt;Mon&lt;/b&gt;" in drawn and "<b>" not in drawn
    assert 'role="img" aria-label="per day"' in drawn
    assert str(rows([], label="endings")) == '<p class="chart-empty">endings: nothing in this range.</p>'
    assert str(rows([Bar("<1m", 0)], label="waits")) == '<p class="chart-empty">waits: nothing in this range.</p>'


# --------------------------------------------------------------------------- in Chromium


@pytest.mark.skipif(not os.path.exists(CHROMIUM) and not os.environ.get("HANDOFF_REQUIRE_BROWSER"),
                    reason="Chromium is not installed (apt-get install -y chromium; .ci/run does)")
async def test_the_reports_page_fits_a_desktop_and_a_phone(sqlite_url: str, page: Any) -> None:
    async with desk_served(sqlite_url, channels=CHANNELS) as (desk, base):
        async with httpx.AsyncClient(base_url=base) as api:
            for name, channel in (("Ana", 1), ("Ben", 2), ("Cy", 1)):
                cid = (await api.post("/api/conversations", json={"subscriber": {"name": name}})).json()["conversation_id"]
                started = (await api.post(f"/api/conversations/{cid}/tools/handoff_request", json={
                    "channel_id": channel, "summary": f"{name}'s order is a week late and they want a person.",
                    "expected_action": "Look the order up and tell them when it arrives."})).json()
                sid = started["handoff_session_id"]
                if name != "Cy":  # Cy is still waiting
                    author = "Sam Okafor" if name == "Ana" else "Olga Petrova"
                    await desk.inbound.submit_and_wait(channel, RecipientText(thread_key=sid, text="On it", author=author))
                    await api.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})
            await api.post("/api/conversations", json={"subscriber": {"name": "Dee"}})
        await desk.settle()
        # The two people of the directory, their replies and the handoffs they handled marked theirs as the desk marks a linked person's
        for pid, person, role in (("olga", "Olga Petrova", Role.ADMIN), ("sam", "Sam Okafor", Role.AGENT)):
            await desk.people.add(pid=pid, name=person, email=f"{pid}@example.com", role=role, source="cli", actor="test")
            async with desk.db.transaction() as session:
                await session.execute(update(Message).where(col(Message.author) == person).values(person_id=pid))
                await session.execute(update(HandoffSession).where(col(HandoffSession.id).in_(
                    select(col(Message.handoff_session_id)).where(col(Message.author) == person))).values(handled_by=pid))
        await answered(desk.db, [("yes", "Sam found the parcel at the depot and it came the next morning — thank you!"),
                                 ("no", None)])
        await page.goto(f"{base}/inbox/reports?range=7d")
        await page.wait_for_selector("#report-total")
        assert await page.inner_text("#report-total") == "3"
        assert await page.locator("svg.chart").count() >= 3
        assert (await page.inner_text(".report-people tbody tr:first-child")).split("\t")[:2] == ["Olga Petrova", "1"]
        assert page.problems == []  # no CSP violation, no script error
        await shot(page, "inbox-reports")
        await page.set_viewport_size({"width": 375, "height": 800})
        await page.reload()
        await assert_fits_the_phone(page, "the reports page")
        await shot(page, "inbox-reports-phone")

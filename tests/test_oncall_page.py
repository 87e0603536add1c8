"""The on-call page (bot/web/inbox/oncall_page.py): everyone signed in sees who is on call now
and next, the fortnight with its gaps and the overrides; an admin adds an override (in the
schedule's timezone) and removes it, a refused one names its field and keeps what was typed,
and a viewer can do neither (403)."""

from __future__ import annotations

import html

from sqlalchemy import select

from bot.config.people import Role
from bot.runtime.clock import ManualClock
from bot.store.models import OnCallOverride
from tests.conftest import Harness, StartDesk
from tests.test_inbox import csrf_of
from tests.test_oncall_service import NIGHTS, PEOPLE, SUPPORT, berlin
from tests.test_people_page import notice, signed_in, text

ROLES = [{**p, "role": role} for p, role in zip(PEOPLE, ("admin", "viewer", "agent", "agent", "agent"), strict=True)]


def words_of(page: str) -> str:
    return html.unescape(text(page))


async def desk_at(start_desk: StartDesk, at: str) -> Harness:
    return await start_desk(clock=ManualClock(berlin(at)), people=ROLES, oncall=[SUPPORT], hours=NIGHTS,
                            owner={"token": "owner-secret"})


async def test_everyone_signed_in_sees_now_next_the_gaps_and_the_overrides(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-01 07:00")  # kim's night; the first layer starts at 09:00
    ben = await harness.desk.people.get("ben")  # a viewer
    nobody = await harness.client.get("/inbox/oncall")
    assert (nobody.status_code, nobody.headers["location"]) == (303, "/inbox/login?next=/inbox/oncall")
    async with signed_in(harness, ben) as viewer:
        answer = await viewer.get("/inbox/oncall")
        assert 'href="/inbox/oncall"' in (await viewer.get("/inbox")).text  # in the nav, for every role
    assert answer.status_code == 200, answer.text
    words = words_of(answer.text)
    assert "Support on call oncall:support times in Europe/Berlin" in words
    assert "Now nights Kim since Mon 30 Nov 18:00, until Tue 01 Dec 08:00" in words
    assert "Next primary Ana from Tue 01 Dec 09:00 nights Kim from Tue 01 Dec 18:00" in words
    assert "Nobody is on call for 1.0 h: Tue 01 Dec 08:00 – Tue 01 Dec 09:00." in words
    assert "— nobody Tue 01 Dec 08:00 Tue 01 Dec 09:00 gap" in words
    assert "primary Ben Wed 02 Dec 09:00 Thu 03 Dec 09:00" in words
    assert "Olga covers Ben, Thu 24 Dec 18:00 – Fri 25 Dec 08:00 (Ben's holiday) from the config" in words
    assert "Add an override" not in words and "Remove" not in words  # a viewer sees, does not edit


async def test_an_admin_adds_and_removes_an_override_and_a_viewer_cannot(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-01 07:00")
    ana, ben = await harness.desk.people.get("ana"), await harness.desk.people.get("ben")
    async with signed_in(harness, ana) as admin:
        token = csrf_of((await admin.get("/inbox/oncall")).text)
        refused = await admin.post("/inbox/oncall/support/overrides", data={
            "csrf": token, "person": "olga", "covers": "ben", "from": "2026-12-02T18:00", "to": "2026-12-02T08:00", "note": "swap"})
        assert refused.status_code == 422
        assert "to: must be after from" in words_of(refused.text)
        assert 'value="2026-12-02T18:00"' in refused.text and 'value="swap"' in refused.text  # what was typed, kept
        added = await admin.post("/inbox/oncall/support/overrides", data={
            "csrf": token, "person": "olga", "covers": "ben", "from": "2026-12-02T08:00", "to": "2026-12-02T20:00", "note": "swap"})
        assert notice(added) == "Added: Olga on call Wed 02 Dec 08:00 – Wed 02 Dec 20:00 (Europe/Berlin)."
        [row] = await all_overrides(harness)
        assert (row.person_id, row.covers_person_id, row.starts_at, row.created_by) == ("olga", "ben", berlin("2026-12-02 08:00"), "Ana (inbox)")
        shown = words_of((await admin.get("/inbox/oncall")).text)
        assert "Olga covers Ben, Wed 02 Dec 08:00 – Wed 02 Dec 20:00 (swap) Remove" in shown
        assert "primary Olga Wed 02 Dec 09:00 Wed 02 Dec 20:00 covering Ben: swap" in shown

        async with signed_in(harness, ben) as viewer:
            viewer_token = csrf_of((await viewer.get("/inbox/oncall")).text)
            assert (await viewer.post(f"/inbox/oncall/overrides/{row.id}/remove", data={"csrf": viewer_token})).status_code == 403
            assert (await viewer.post("/inbox/oncall/support/overrides", data={
                "csrf": viewer_token, "person": "ben", "from": "2026-12-02T08:00", "to": "2026-12-02T20:00"})).status_code == 403
        assert (await all_overrides(harness))[0].removed_at is None

        removed = await admin.post(f"/inbox/oncall/overrides/{row.id}/remove", data={"csrf": token})
        assert notice(removed) == "Removed the override of Olga."
        assert (await all_overrides(harness))[0].removed_at is not None
        assert "Olga covers Ben, Wed 02 Dec" not in words_of((await admin.get("/inbox/oncall")).text)
        again = await admin.post(f"/inbox/oncall/overrides/{row.id}/remove", data={"csrf": token})
        assert notice(again) == f"override {row.id} was removed already"
        assert (await admin.post("/inbox/oncall/nope/overrides", data={"csrf": token, "person": "olga"})).status_code == 404
        assert (await admin.post("/inbox/oncall/support/overrides", data={"person": "olga"})).status_code == 403  # no CSRF token


async def test_a_badly_typed_time_is_named(start_desk: StartDesk) -> None:
    harness = await desk_at(start_desk, "2026-12-01 07:00")
    async with signed_in(harness, await harness.desk.people.get("ana")) as admin:
        token = csrf_of((await admin.get("/inbox/oncall")).text)
        refused = await admin.post("/inbox/oncall/support/overrides", data={
            "csrf": token, "person": "olga", "from": "tomorrow", "to": "2026-12-02T20:00"})
        assert refused.status_code == 422
        assert "from: expected a date and time such as 2026-12-24 18:00, got 'tomorrow'" in words_of(refused.text)


async def test_without_schedules_the_page_says_how_to_add_one(start_desk: StartDesk) -> None:
    harness = await start_desk(people=[{**PEOPLE[0], "role": Role.ADMIN.value}], owner={"token": "owner-secret"})
    async with signed_in(harness, await harness.desk.people.get("ana")) as admin:
        assert "No on-call schedule is configured." in words_of((await admin.get("/inbox/oncall")).text)


async def all_overrides(harness: Harness) -> list[OnCallOverride]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(OnCallOverride))).all())

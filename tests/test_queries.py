"""The read side (bot/domain/queries.py), against a real SQLite file: the data is made by a
running desk through its API, and read back by a `Queries` of its own on the same file."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.domain.queries import Queries
from bot.errors import NotFound
from bot.store.db import Database
from bot.store.vocabulary import ENDED_STATES, OPEN_STATES, HandoffState
from tests.approval_actions import refund_action
from tests.conftest import Harness, StartDesk


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def queries(sqlite_url: str) -> AsyncIterator[Queries]:
    """A `Queries` on its own connection to the test's database file."""
    db = Database(sqlite_url)
    yield Queries(db)
    await db.dispose()


async def test_handoffs_lists_the_newest_first_per_state_and_keeps_the_limit(harness: Harness, queries: Queries) -> None:
    first, second, third = [await harness.conversation(name) for name in ("Ana", "Ben", "Cy")]
    ids = [(await harness.start_handoff(cid))["handoff_session_id"] for cid in (first, second, third)]
    response = await harness.client.post(f"/api/handoffs/{ids[0]}/release", json={"outcome": "resolved"})
    assert response.status_code == 200

    assert [h.id for h in await queries.handoffs(states=OPEN_STATES)] == [ids[2], ids[1]]
    assert [h.id for h in await queries.handoffs(states=OPEN_STATES, limit=1)] == [ids[2]]
    assert [h.id for h in await queries.handoffs(states=ENDED_STATES)] == [ids[0]]
    assert await queries.handoffs(states=(HandoffState.FAILED,)) == []


async def test_events_are_the_audit_trail_in_order_and_an_unknown_handoff_is_not_found(harness: Harness, queries: Queries) -> None:
    sid = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    events = await queries.events(sid)
    assert [e.kind for e in events] == [e["kind"] for e in await harness.events(sid)]
    assert [e.id for e in events] == sorted(e.id for e in events)
    with pytest.raises(NotFound, match="handoff session 'hs_nope' not found"):
        await queries.events("hs_nope")


async def test_the_resume_message_of_a_released_handoff_and_none_before(harness: Harness, queries: Queries) -> None:
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    await harness.say(cid, "Any news?")
    handoff = await harness.desk.handoffs.get(sid)
    assert await queries.resume_message(handoff) is None
    released = (await harness.client.post(f"/api/handoffs/{sid}/release", json={"outcome": "resolved"})).json()
    await harness.say(cid, "Thanks!")  # later messages of the conversation are not it
    resume = await queries.resume_message(await harness.desk.handoffs.get(sid))
    assert resume is not None and resume.id == released["resume_message_id"]
    assert resume.text.startswith("[Bot resumed — the owner released the conversation.")


async def test_previews_hold_the_newest_message_and_the_subscribers_newest(harness: Harness, queries: Queries) -> None:
    cid = await harness.conversation("Ana")
    quiet = await harness.conversation("Ben")
    await harness.start_handoff(cid)
    await harness.say(cid, "Any news?")
    said = (await harness.messages(cid))[-1]
    await harness.desk.settle()
    newest = (await harness.messages(cid))[-1]

    previews = await queries.previews([cid, quiet, "c_missing"])
    assert set(previews) == {cid, quiet}
    assert previews[cid].conversation.subscriber_name == "Ana"
    assert previews[cid].said is not None
    assert previews[cid].said.id == said["id"]
    assert previews[cid].said.text == "Any news?"
    assert previews[cid].last is not None
    assert previews[cid].last.id == newest["id"]
    assert previews[quiet].last is None
    assert previews[quiet].said is None
    assert await queries.previews([]) == {}


async def test_subscriber_names_of_the_conversations_that_exist(harness: Harness, queries: Queries) -> None:
    ana = await harness.conversation("Ana")
    response = await harness.client.post("/api/conversations", json={})
    anonymous = response.json()["conversation_id"]
    assert await queries.subscriber_names({ana, anonymous, "c_missing"}) == {ana: "Ana", anonymous: None}
    assert await queries.subscriber_names(set()) == {}


async def test_person_names_of_the_people_that_exist(start_desk: StartDesk, queries: Queries) -> None:
    await start_desk(people=[{"id": "olga", "name": "Olga Petrova", "email": "olga@example.com"}])
    assert await queries.person_names({"olga", "nobody"}) == {"olga": "Olga Petrova"}
    assert await queries.person_names(set()) == {}


async def test_conversation_approvals_oldest_first(start_desk: StartDesk, queries: Queries) -> None:
    harness = await start_desk(actions=[refund_action(1)])
    cid, other = await harness.conversation("Ana"), await harness.conversation("Ben")
    first = await harness.tool(cid, "refund_order", {"order_id": "A1", "amount": 5})
    second = await harness.tool(cid, "refund_order", {"order_id": "A2", "amount": 7})
    await harness.tool(other, "refund_order", {"order_id": "B1", "amount": 1})

    approvals = await queries.conversation_approvals(cid)
    assert [a.id for a in approvals] == [first["approval_id"], second["approval_id"]]
    assert [a.arguments["order_id"] for a in approvals] == ["A1", "A2"]
    assert await queries.conversation_approvals("c_missing") == []


async def test_a_form_link_and_the_handoff_it_hands_back(harness: Harness, queries: Queries) -> None:
    sid = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    handoff = await harness.desk.handoffs.get(sid)
    assert handoff.form_link_id is not None

    link = await queries.form_link(handoff.form_link_id)
    assert link is not None
    assert link.handoff_session_id == sid
    linked = await queries.linked_handoff(handoff.form_link_id)
    assert linked is not None
    assert linked.link.id == handoff.form_link_id
    assert linked.handoff.id == sid
    assert await queries.form_link("fl_missing") is None
    assert await queries.linked_handoff("fl_missing") is None


async def test_the_inbox_version_changes_with_what_the_list_shows_and_only_then(harness: Harness, queries: Queries) -> None:
    now = harness.desk.clock.now()
    empty = await queries.inbox_version(now, limit=100)
    assert empty == await queries.inbox_version(now, limit=100)
    assert len(empty) == 20

    cid = await harness.conversation()
    assert await queries.inbox_version(now, limit=100) == empty  # a conversation alone is not on the list
    await harness.start_handoff(cid)
    started = await queries.inbox_version(now, limit=100)
    assert started != empty
    await harness.say(cid, "Hello?")
    assert await queries.inbox_version(now, limit=100) != started  # the card's newest message changed


async def test_ping_answers_on_a_reachable_database_and_raises_on_a_broken_one(queries: Queries, tmp_path: Path) -> None:
    await queries.ping()
    broken = Database(f"sqlite:///{tmp_path / 'missing-dir' / 'desk.db'}")
    try:
        with pytest.raises(Exception):  # noqa: B017 (whatever the driver raises: /healthz reports its type)
            await Queries(broken).ping()
    finally:
        await broken.dispose()

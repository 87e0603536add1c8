"""bot/flow/inbound.py: store first (deduplicated), work after, each event once.

A real desk on a real database; the provider is tests/fakes.py's ScriptedChannel (threads:
the thread key of a handoff is `thread-<handoff id>`), and its inbound messages are handed
to `Inbound` as an adapter hands them over."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import event, select, update
from sqlmodel import col

from bot.domain.people import People
from bot.domain.people.directory import IDENTIFY_TTL
from bot.runtime.clock import ManualClock
from bot.store.db import Database
from bot.store.instances import Instances
from bot.store.models import DeskInstance, HandoffEvent, HandoffSession, InboundEvent, Message
from channels.base import RecipientText, ReleasePress
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fake_slack import FakeSlack, message_event, signed_headers
from tests.fake_telegram import SAM, STAFF_CHAT_ID, FakeTelegram

SECOND_CHANNEL = {"id": 2, "kind": "owner_inbox", "label": "Second inbox"}


async def desk_with_handoff(start_desk: StartDesk, scripted: Any) -> tuple[Harness, str, str]:
    """A desk whose channel 1 is scripted, with one active handoff: (harness, conversation, handoff)."""
    h = await start_desk(adapters={1: scripted},
                         channels=[{"id": 1, "kind": "owner_inbox", "label": "Scripted"}, SECOND_CHANNEL])
    cid = await h.conversation()
    sid = (await h.start_handoff(cid))["handoff_session_id"]
    return h, cid, sid


def reply(sid: str, text: str, key: str | None = None) -> RecipientText:
    return RecipientText(thread_key=f"thread-{sid}", text=text, author="Sam", dedupe_key=key)


async def human_texts(h: Harness, cid: str) -> list[str]:
    return [m["text"] for m in await h.messages(cid) if m["role"] == "human"]


async def events(h: Harness) -> list[InboundEvent]:
    async with h.desk.db.read() as session:
        return list(await session.scalars(select(InboundEvent).order_by(col(InboundEvent.id))))


async def test_a_redelivery_with_the_same_key_is_dropped(start_desk: StartDesk, scripted: Any) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    assert await h.desk.inbound.submit_and_wait(1, reply(sid, "Only once", key="upd-1")) == "relayed"
    assert await h.desk.inbound.submit_and_wait(1, reply(sid, "Only once", key="upd-1")) == "duplicate"
    assert await human_texts(h, cid) == ["Only once"]
    [event] = await events(h)
    assert event.state == "done"
    assert event.result == "relayed"


async def test_messages_without_a_provider_key_are_never_taken_for_redeliveries(start_desk: StartDesk, scripted: Any) -> None:
    """A person may well send "ok" twice."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    for _ in range(2):
        assert await h.desk.inbound.submit_and_wait(1, reply(sid, "ok")) == "relayed"
    assert await human_texts(h, cid) == ["ok", "ok"]


async def test_the_same_key_on_another_channel_is_another_event(start_desk: StartDesk, scripted: Any) -> None:
    h, _cid, sid = await desk_with_handoff(start_desk, scripted)
    first = await h.desk.inbound.store(1, reply(sid, "hi", key="Ev-1"))
    other = await h.desk.inbound.store(2, reply(sid, "hi", key="Ev-1"))
    again = await h.desk.inbound.store(1, reply(sid, "hi", key="Ev-1"))
    assert first is not None
    assert other is not None
    assert other != first
    assert again is None


async def test_an_event_is_processed_once(start_desk: StartDesk, scripted: Any) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    event_id = await h.desk.inbound.store(1, reply(sid, "hello", key="k"))
    assert event_id is not None
    assert await h.desk.inbound.process(event_id, 1) == "relayed"
    assert await h.desk.inbound.process(event_id, 1) == "already processed"
    assert await human_texts(h, cid) == ["hello"]


async def test_a_reply_in_a_thread_without_an_active_handoff_is_ignored_and_recorded(
    start_desk: StartDesk, scripted: Any,
) -> None:
    h, cid, _sid = await desk_with_handoff(start_desk, scripted)
    stray = RecipientText(thread_key="thread-of-nothing", text="anyone?", dedupe_key="k")
    assert await h.desk.inbound.submit_and_wait(1, stray) == "no active handoff in this thread"
    [event] = await events(h)
    assert event.state == "ignored"
    assert await human_texts(h, cid) == []


async def test_release_typed_in_the_thread_releases_and_later_replies_are_ignored(
    start_desk: StartDesk, scripted: Any,
) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    assert await h.desk.inbound.submit_and_wait(1, reply(sid, "/release resolved done")) == "released"
    handoff = await h.handoff(sid)
    assert handoff["state"] == "released"
    assert handoff["released_by"] == "Sam"
    assert await h.desk.inbound.submit_and_wait(1, reply(sid, "one more thing")) == "no active handoff in this thread"
    assert await human_texts(h, cid) == []


async def test_events_stored_but_not_processed_are_finished_on_recovery(start_desk: StartDesk, scripted: Any) -> None:
    """A crash between storing and processing leaves the event pending; the next run (or
    the sweep) finishes it, in the order the events arrived."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    for n, text in enumerate(("first", "second")):
        assert await h.desk.inbound.store(1, reply(sid, text, key=f"k{n}")) is not None
    assert await h.desk.inbound.process_pending() == 2
    assert await human_texts(h, cid) == ["first", "second"]
    assert await h.desk.inbound.process_pending() == 0


async def claimed_by(h: Harness, event_id: int | None, owner: str, state: str = "processing") -> None:
    """Make the event `owner`'s, as if that instance had stored it and then claimed it."""
    async with h.desk.db.transaction() as session:
        await session.execute(update(InboundEvent).where(col(InboundEvent.id) == event_id)
                              .values(state=state, claimed_by=owner, processed_at=h.desk.clock.now()))


async def test_an_event_left_processing_by_an_instance_that_died_is_taken_over_at_once(
    start_desk: StartDesk, scripted: Any,
) -> None:
    """No stale timer: the owner's missing heartbeat is what ends its claim."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    event_id = await h.desk.inbound.store(1, reply(sid, "lost in a crash", key="k"))
    await claimed_by(h, event_id, "in_gone")  # no such instance beats any more
    assert await h.desk.inbound.process_pending() == 1
    assert await h.desk.inbound.process_pending() == 0
    assert await human_texts(h, cid) == ["lost in a crash"]
    assert h.desk.metrics.registry.get_sample_value("handoff_taken_over_total", {"what": "inbound_event"}) == 1
    [event] = await events(h)
    assert (event.state, event.claimed_by) == ("done", h.desk.instances.id)


async def test_an_event_of_a_live_instance_is_left_to_it_until_its_heartbeat_stops(
    start_desk: StartDesk, scripted: Any,
) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    other = Instances(h.desk.db, h.desk.clock, heartbeat=h.desk.config.delivery.heartbeat)
    await other.register()
    pending_id = await h.desk.inbound.store(1, reply(sid, "stored there", key="k1"))
    working_id = await h.desk.inbound.store(1, reply(sid, "worked there", key="k2"))
    await claimed_by(h, pending_id, other.id, state="pending")
    await claimed_by(h, working_id, other.id)
    assert await h.desk.inbound.process_pending() == 0  # still beating: its work, in its order
    async with h.desk.db.transaction() as session:  # its last beat was a heartbeat and more ago
        await session.execute(update(DeskInstance).where(col(DeskInstance.id) == other.id)
                              .values(beat_at=DeskInstance.beat_at - h.desk.instances.dead_after - 1))
    assert await h.desk.inbound.process_pending() == 2
    assert await human_texts(h, cid) == ["stored there", "worked there"]


async def test_an_instance_taken_for_dead_mid_work_commits_nothing_of_the_event(start_desk: StartDesk, scripted: Any) -> None:
    """Its loop stalled past a heartbeat and another instance took the event over: the done
    mark finds the claim gone, so the relay rolls back here (the new owner relays it once)."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    stored = await h.desk.inbound._store_claimed(1, reply(sid, "taken over meanwhile", key="k"))
    assert stored is not None
    await claimed_by(h, stored.id, "in_other")  # the instance that took it over
    assert await h.desk.inbound._work(stored, (1, "thread", f"thread-{sid}")) == "claim lost"
    assert await human_texts(h, cid) == []
    [event] = await events(h)
    assert (event.state, event.claimed_by) == ("processing", "in_other")


async def test_a_reply_is_marked_done_in_the_transaction_that_relays_it(start_desk: StartDesk, scripted: Any) -> None:
    """A kill -9 straight after the relay commits finds the event done: it is never relayed
    again (and one that dies before that commit left nothing, so it is worked again)."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    if not h.desk.db.is_sqlite:
        pytest.skip("reads the database file with sqlite3 from inside the commit")
    seen_at_commit: list[str] = []

    async def read_states_at_commit(session: Any, message: Any, *_extras: Any) -> None:
        if message.role != "human":
            return

        def after_commit(_session: Any) -> None:  # runs inside the commit, before anything else
            with sqlite3.connect(h.desk.db.url.split("///", 1)[1]) as raw:
                seen_at_commit.extend(state for (state,) in raw.execute("SELECT state FROM inbound_events"))

        event.listen(session.sync_session, "after_commit", after_commit, once=True)

    h.desk.db.message_hooks.append(read_states_at_commit)
    assert await h.desk.inbound.submit_and_wait(1, reply(sid, "exactly once", key="k")) == "relayed"
    assert seen_at_commit == ["done"]
    assert await h.desk.inbound.process_pending() == 0
    assert await human_texts(h, cid) == ["exactly once"]


async def test_a_release_press_releases_the_handoff_of_its_thread_with_the_outcome_it_names(
    start_desk: StartDesk, scripted: Any,
) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    stray = ReleasePress(thread_key="thread-of-nothing", author="Sam")
    assert await h.desk.inbound.submit_and_wait(1, stray) == "no active handoff in this thread"
    press = ReleasePress(thread_key=f"thread-{sid}", author="  Sam \n Lee ", outcome="needs_followup", dedupe_key="press-1")
    assert await h.desk.inbound.submit_and_wait(1, press) == "released"
    handoff = await h.handoff(sid)
    assert (handoff["state"], handoff["release_reason"], handoff["outcome"]) == ("released", "release_token", "needs_followup")
    assert handoff["released_by"] == "Sam Lee"
    again = ReleasePress(thread_key=f"thread-{sid}", author="Kim", dedupe_key="press-2")
    assert await h.desk.inbound.submit_and_wait(1, again) == "no active handoff in this thread"
    assert await human_texts(h, cid) == []


async def test_events_submitted_back_to_back_in_one_lane_are_worked_once_each_in_arrival_order(
    start_desk: StartDesk, scripted: Any,
) -> None:
    """The first is stored claimed (its lane is idle, its work starts at once); those that
    arrive while it is worked are stored pending and claimed in turn."""
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    texts = [f"reply {n}" for n in range(5)]
    for n, text in enumerate(texts):
        await h.desk.inbound.submit(1, reply(sid, text, key=f"b{n}"))
    await h.desk.settle()
    assert await human_texts(h, cid) == texts
    stored = await events(h)
    assert [e.state for e in stored] == ["done"] * len(texts)
    assert stored[0].processed_at == stored[0].received_at  # claimed as it was stored
    assert await h.desk.inbound.process_pending() == 0


async def test_an_event_stored_claimed_by_an_instance_that_died_before_its_turn_is_taken_over(
    start_desk: StartDesk, scripted: Any,
) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    stored = await h.desk.inbound._store_claimed(1, reply(sid, "lost before its turn", key="k"))
    assert stored is not None
    assert await h.desk.inbound.process_pending() == 0  # ours, and we are alive: our lane works it
    await claimed_by(h, stored.id, "in_gone")
    assert await h.desk.inbound.process_pending() == 1
    assert await human_texts(h, cid) == ["lost before its turn"]


# --------------------------------------------------------------------------- who did it: a person of the directory

SLACK_TOKEN, SLACK_SECRET, SLACK_CHANNEL = "xoxb-test-token", "slack-signing-secret-for-tests", "C0HANDOFF"
TELEGRAM_SECRET = "test_webhook-secret-1"
SLACK, TELEGRAM, ROUTE = 3, 2, 20


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack(token=SLACK_TOKEN, channels=(SLACK_CHANNEL,), users={"U0OLGA": "olga.p", "U0SAM": "Sam"}).start()
    yield fake
    await fake.stop()


def slack_entry(slack: FakeSlack) -> dict[str, Any]:
    return {"id": SLACK, "kind": "slack", "label": "Slack support", "bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET,
            "channel": SLACK_CHANNEL, "api_base_url": slack.url}


def telegram_entry(telegram: FakeTelegram) -> dict[str, Any]:
    return {"id": TELEGRAM, "kind": "telegram", "label": "Telegram support", "bot_token": TELEGRAM_TOKEN,
            "chat_id": STAFF_CHAT_ID, "api_base_url": telegram.base_url, "mode": "webhook", "webhook_secret": TELEGRAM_SECRET}


async def olga(h: Harness, *identities: tuple[str, str]) -> None:
    await h.desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", source="cli", actor="test")
    for kind, value in identities:
        await h.desk.people.link("olga", kind, value, verified_via="cli", actor="test")


async def slack_reply(h: Harness, thread_ts: str, text: str, user: str) -> None:
    body = message_event(channel=SLACK_CHANNEL, text=text, user=user, thread_ts=thread_ts)
    answered = await h.client.post(f"/webhooks/{SLACK}", content=body, headers=signed_headers(SLACK_SECRET, body))
    assert answered.status_code == 200, answered.text
    await h.desk.settle()


async def telegram_update(h: Harness, update: dict[str, Any]) -> None:
    answered = await h.client.post(f"/webhooks/{TELEGRAM}", json=update,
                                   headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET})
    assert answered.status_code == 200, answered.text
    await h.desk.settle()


async def stored_messages(h: Harness, cid: str) -> list[tuple[str | None, str | None, str]]:
    """(author, person_id, text) of the conversation's human messages, as stored."""
    async with h.desk.db.read() as session:
        rows = await session.scalars(select(Message).where(col(Message.conversation_id) == cid, col(Message.role) == "human")
                                     .order_by(col(Message.id)))
        return [(m.author, m.person_id, m.text) for m in rows]


async def test_a_linked_persons_slack_reply_reaches_the_subscriber_under_their_name(
    start_desk: StartDesk, slack: FakeSlack,
) -> None:
    """The web chat's subscriber sees "Olga Petrova", never the Slack handle; the message row and
    the audit row carry her id. Someone linked to nobody still speaks under Slack's name."""
    h = await start_desk(channels=[slack_entry(slack)], delivery={"base_backoff": "10ms"})
    await olga(h, ("slack", "U0OLGA"))
    cid = await h.conversation()
    sid = (await h.start_handoff(cid, channel_id=SLACK))["handoff_session_id"]
    [dispatch] = slack.top_level(SLACK_CHANNEL)
    await slack_reply(h, dispatch["ts"], "Hi Ana, I'm on it", "U0OLGA")
    await slack_reply(h, dispatch["ts"], "Me too", "U0SAM")
    assert await h.human_texts(cid) == [("Olga Petrova", "Hi Ana, I'm on it"), ("Sam", "Me too")]  # what the chat shows
    assert await stored_messages(h, cid) == [("Olga Petrova", "olga", "Hi Ana, I'm on it"), ("Sam", None, "Me too")]
    relayed = [e for e in await h.events(sid) if e["kind"] == "relayed_to_subscriber"]
    assert [e["actor"] for e in relayed] == ["Olga Petrova", "Sam"]
    async with h.desk.db.read() as session:
        assert list(await session.scalars(select(HandoffEvent.person_id).where(
            col(HandoffEvent.kind) == "relayed_to_subscriber").order_by(col(HandoffEvent.id)))) == ["olga", None]


async def test_a_claim_and_a_release_by_a_linked_telegram_user_are_theirs(
    start_desk: StartDesk, telegram: FakeTelegram,
) -> None:
    route = {"id": ROUTE, "label": "Support", "steps": [{"notify": [TELEGRAM], "claim_within": "5m"}]}
    h = await start_desk(channels=[telegram_entry(telegram)], routes=[route], delivery={"base_backoff": "10ms"})
    await olga(h, ("telegram", str(SAM["id"])))
    cid = await h.conversation()
    sid = (await h.start_handoff(cid, channel_id=ROUTE))["handoff_session_id"]
    await h.desk.settle()
    [dispatch] = telegram.sent_to(STAFF_CHAT_ID)
    await telegram_update(h, telegram.callback_update(dispatch["message_id"], user=SAM, data="claim"))
    async with h.desk.db.read() as session:
        row = await session.get(HandoffSession, sid)
        assert row is not None
        assert (row.claimed_by, row.claimed_person_id) == ("Olga Petrova", "olga")
    assert (await h.messages(cid))[-1]["text"] == "Olga Petrova from our team has joined the conversation."
    await telegram_update(h, telegram.message_update("/release resolved", user=SAM, reply_to=dispatch["message_id"]))
    async with h.desk.db.read() as session:
        row = await session.get(HandoffSession, sid, populate_existing=True)
        assert row is not None
        assert (row.state, row.released_by, row.released_person_id) == ("released", "Olga Petrova", "olga")
        people = dict((await session.execute(select(HandoffEvent.kind, HandoffEvent.person_id).where(
            col(HandoffEvent.kind).in_(["handoff_claimed", "handoff_released"])))).all())
    assert people == {"handoff_claimed": "olga", "handoff_released": "olga"}


async def test_an_identity_unlinked_here_is_nobodys_at_once(start_desk: StartDesk, scripted: Any) -> None:
    h, cid, sid = await desk_with_handoff(start_desk, scripted)
    await olga(h, ("owner_inbox", "U1"))
    said = RecipientText(thread_key=f"thread-{sid}", text="first", author="olga.p", user_id="U1")
    assert await h.desk.inbound.submit_and_wait(1, said) == "relayed"
    [identity] = await h.desk.people.identities("olga")
    assert await h.desk.people.unlink("olga", int(identity.id or 0), actor="test")
    assert await h.desk.inbound.submit_and_wait(1, said.model_copy(update={"text": "second"})) == "relayed"
    assert await stored_messages(h, cid) == [("Olga Petrova", "olga", "first"), ("olga.p", None, "second")]


async def test_another_instances_link_is_seen_within_the_cache_ttl(db: Database) -> None:
    """`identify` keeps what it read for IDENTIFY_TTL: a link made by another instance (or the
    command line) is seen here after it at the latest; this process's own, at once."""
    clock = ManualClock()
    here, there = People(db, clock), People(db, clock)
    await there.add(pid="olga", name="Olga Petrova", email="olga@example.com", source="cli", actor="test")
    assert await here.identify("slack", "U0OLGA") is None
    await there.link("olga", "slack", "U0OLGA", verified_via="cli", actor="test")
    assert await here.identify("slack", "U0OLGA") is None  # still what it read
    clock.advance(IDENTIFY_TTL)
    found = await here.identify("slack", "U0OLGA")
    assert found is not None and found.id == "olga"
    await here.set_disabled("olga", True, actor="test")  # here: seen at once
    assert await here.identify("slack", "U0OLGA") is None

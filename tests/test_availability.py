"""bot/domain/people/availability.py and bot/flow/availability.py: a person is away (with a
note, until a moment or until they are back) or available, each change one update and one
audit row; `/away` and `/back` from a channel reach the core as an `AvailabilityRequest`
and are answered where they were written, through the real inbound path, outbox and
Telegram adapter (tests/fake_telegram.py), worked once when redelivered.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import select, update
from sqlmodel import col

from bot.domain.people.availability import InvalidAvailability
from bot.domain.people.reach import Presence
from bot.errors import NotFound
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffEvent, InboundEvent, Person
from channels.base import AvailabilityRequest
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fake_telegram import SAM, STAFF_CHAT_ID, FakeTelegram

TELEGRAM, TELEGRAM_SECRET = 2, "test_webhook-secret-1"
NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # a Wednesday


async def desk(start_desk: StartDesk, telegram: FakeTelegram | None = None, **overrides: Any) -> Harness:
    channels = [] if telegram is None else [{
        "id": TELEGRAM, "kind": "telegram", "label": "Telegram support", "bot_token": TELEGRAM_TOKEN,
        "chat_id": STAFF_CHAT_ID, "api_base_url": telegram.base_url, "mode": "webhook", "webhook_secret": TELEGRAM_SECRET,
    }]
    h = await start_desk(clock=ManualClock(NOON), delivery={"base_backoff": "10ms"},
                         **({"channels": channels} if channels else {}), **overrides)
    await h.desk.people.add(pid="olga", name="Olga Petrova", email="olga@example.com", source="cli", actor="test")
    return h


async def audit_rows(h: Harness, *kinds: str) -> list[HandoffEvent]:
    async with h.desk.db.read() as session:
        return list((await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind).in_(kinds))
                                           .order_by(col(HandoffEvent.id)))).all())


# --------------------------------------------------------------------------- the service


async def test_away_with_a_note_until_a_moment_then_available_by_itself(start_desk: StartDesk) -> None:
    h = await desk(start_desk)
    availability, clock = h.desk.availability, h.desk.clock
    assert isinstance(clock, ManualClock)
    until = NOON + timedelta(hours=2)
    away = await availability.set_away("olga", until=until, note="  at the   dentist ", via="inbox", actor="Olga Petrova")
    assert (away.away_since, away.away_until, away.away_note) == (NOON, until, "at the dentist")
    assert availability.presence_of(away) is Presence.AWAY
    clock.advance(timedelta(hours=1))
    again = await availability.set_away("olga", note="still at the dentist", until=until, via="inbox", actor="Olga Petrova")
    assert again.away_since == NOON  # away since she went, not since she changed the note
    assert availability.presence_of(again, until) is Presence.AVAILABLE  # until has passed: no timer needed
    back = await availability.set_available("olga", via="channel:2", actor="Olga Petrova (channel:2)")
    assert (back.away_since, back.away_until, back.away_note) == (None, None, None)
    rows = await audit_rows(h, "person_away", "person_available")
    assert [(r.kind, r.person_id, r.actor, r.detail) for r in rows] == [
        ("person_away", "olga", "Olga Petrova", {"via": "inbox", "note": "at the dentist", "until": until.isoformat()}),
        ("person_away", "olga", "Olga Petrova",
         {"via": "inbox", "note": "still at the dentist", "until": until.isoformat(), "already_away": True}),
        ("person_available", "olga", "Olga Petrova (channel:2)",
         {"via": "channel:2", "note": "still at the dentist", "was_away": True}),
    ]


async def test_bad_input_is_refused_naming_the_field_and_changes_nothing(start_desk: StartDesk) -> None:
    h = await desk(start_desk)
    availability = h.desk.availability
    refusals = [
        ({"until": NOON - timedelta(minutes=1)}, "until: 2026-12-02T11:59:00+00:00 has passed"),
        ({"until": datetime(2026, 12, 3, 9, 0)}, "until: give a timezone"),
        ({"note": "x" * 201}, "note: at most 200 characters, got 201"),
    ]
    for given, message in refusals:
        with pytest.raises(InvalidAvailability) as refused:
            await availability.set_away("olga", via="inbox", actor="test", **given)
        assert refused.value.message.startswith(message)
    with pytest.raises(NotFound):
        await availability.set_away("nobody", via="inbox", actor="test")
    assert (await h.desk.people.get("olga")).away_since is None
    assert await audit_rows(h, "person_away") == []


async def test_presence_reads_their_working_hours_and_a_disabled_person_is_disabled(start_desk: StartDesk) -> None:
    h = await desk(start_desk, hours={"office": {"timezone": "UTC", "weekly": {"mon-fri": "09:00-17:00"}}})
    people, availability = h.desk.people, h.desk.availability
    await people.add(pid="ben", name="Ben", email="ben@example.com", source="cli", actor="test")
    async with h.desk.db.transaction() as session:  # as the YAML's working_hours: sets it (tests/test_people_directory.py)
        await session.execute(update(Person).where(col(Person.id) == "ben").values(working_hours="office"))
    ben = await people.get("ben")
    assert availability.presence_of(ben) is Presence.AVAILABLE  # Wednesday noon
    assert availability.presence_of(ben, NOON.replace(hour=20)) is Presence.OFF_HOURS
    assert availability.presence_of(await people.get("olga"), NOON.replace(hour=20)) is Presence.AVAILABLE  # always
    disabled = await people.set_disabled("ben", True, actor="test")
    assert availability.presence_of(disabled) is Presence.DISABLED


# --------------------------------------------------------------------------- from a channel


def request(*, away: bool, note: str | None = None, user: dict[str, Any] = SAM, key: str = "tg:1") -> AvailabilityRequest:
    """What the Telegram adapter makes of `/away …` or `/back` in the person's private chat."""
    return AvailabilityRequest(away=away, note=note, reply_to={"chat_id": user["id"], "message_id": 7, "topic_id": None},
                               author=user["first_name"], user_id=str(user["id"]), dedupe_key=key)


async def test_away_and_back_from_a_channel_are_answered_there_and_redelivery_is_worked_once(
    start_desk: StartDesk, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, telegram)
    telegram.private_update("/away lunch, back at 1", user=SAM)  # her private chat with the bot, as Telegram has it
    await h.desk.people.link("olga", "telegram", str(SAM["id"]), verified_via="code", actor="test")
    for _ in range(2):  # Telegram resends an update it thinks was not acknowledged: the same update id
        await h.desk.inbound.submit(TELEGRAM, request(away=True, note="lunch, back at 1"))
        await h.desk.settle()
    assert [m["text"] for m in telegram.sent_to(SAM["id"])] == [
        "You are away now, Olga Petrova (lunch, back at 1): teams and on-call schedules pass you over until you send /back."]
    olga = await h.desk.people.get("olga")
    assert (olga.away_since, olga.away_note, h.desk.availability.presence_of(olga)) == (NOON, "lunch, back at 1", Presence.AWAY)
    assert len(await audit_rows(h, "person_away")) == 1
    assert await h.desk.inbound.submit_and_wait(TELEGRAM, request(away=False, key="tg:2")) == "olga is available"
    await h.desk.settle()
    assert telegram.sent_to(SAM["id"])[-1]["text"] == "Welcome back, Olga Petrova: you are available again."
    assert (await h.desk.people.get("olga")).away_since is None
    async with h.desk.db.read() as session:
        events = (await session.scalars(select(InboundEvent).order_by(col(InboundEvent.id)))).all()
    assert [(e.state, e.result) for e in events] == [("done", "olga is away"), ("done", "olga is available")]


async def test_an_identity_linked_to_nobody_is_told_to_link_it_and_nothing_changes(
    start_desk: StartDesk, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, telegram)
    telegram.private_update("/away off", user=SAM)
    said = await h.desk.inbound.submit_and_wait(TELEGRAM, request(away=True, note="off"))
    await h.desk.settle()
    assert said == "not changed: this identity is not linked to a person"
    [answer] = telegram.sent_to(SAM["id"])
    assert answer["text"] == ("This Telegram account is not linked to a person of the desk: link it first (Link a channel, "
                              f"on your account page: {h.desk.config.public_url.rstrip('/')}/inbox/account/linking), then "
                              "send it again.")
    assert (await h.desk.people.get("olga")).away_since is None
    assert await audit_rows(h, "person_away", "person_available") == []


async def test_a_disabled_persons_away_changes_nothing(start_desk: StartDesk, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, telegram)
    await h.desk.people.link("olga", "telegram", str(SAM["id"]), verified_via="code", actor="test")
    await h.desk.people.set_disabled("olga", True, actor="test")
    assert await h.desk.inbound.submit_and_wait(TELEGRAM, request(away=True)) == (
        "not changed: this identity is not linked to a person")
    assert (await h.desk.people.get("olga")).away_since is None


def test_the_answers_name_the_kind_of_account_and_leave_escaping_to_the_adapters() -> None:
    from bot.domain.rendering import Renderer

    render = Renderer().render
    assert render("messages/availability.txt", outcome="not_linked", kind="email", linking="L").strip().startswith(
        "This e-mail address is not linked")
    assert render("messages/availability.txt", outcome="away", kind="slack", person="Olga <b>", note="a & b").strip() == (
        "You are away now, Olga <b> (a & b): teams and on-call schedules pass you over until you send /back.")

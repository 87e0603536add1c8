"""bot/flow/linking.py: `/link CODE` from a channel links the sender's provider identity to the
code's person, and the desk answers where it was written.

The real desk, the real Slack and Telegram adapters against tests/fake_slack.py and
tests/fake_telegram.py (every call into the desk signed as the provider signs it), and a
ManualClock for the code's ten minutes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import select
from sqlmodel import col

from bot.domain.people.linking import CODE_LIFETIME
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffEvent, LinkCode
from channels.base import RecipientText
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk
from tests.fake_slack import FakeSlack, message_event, signed_headers
from tests.fake_telegram import BOT_USER, KIM, SAM, STAFF_CHAT_ID, FakeTelegram

SLACK_TOKEN, SLACK_SECRET, SLACK_CHANNEL, OLGA_DM = "xoxb-test-token", "slack-signing-secret-for-tests", "C0HANDOFF", "D0OLGA"
TELEGRAM_SECRET = "test_webhook-secret-1"
SLACK, TELEGRAM = 3, 2
LINKED = "Linked: you are Olga Petrova here now."
UNKNOWN = "That code is unknown, used or expired."


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    fake = await FakeSlack(token=SLACK_TOKEN, channels=(SLACK_CHANNEL, OLGA_DM),
                           users={"U0OLGA": "olga.p", "U0SAM": "Sam", "U0KIM": "Kim"}).start()
    yield fake
    await fake.stop()


async def desk(start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram) -> Harness:
    h = await start_desk(channels=[
        {"id": SLACK, "kind": "slack", "label": "Slack support", "bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET,
         "channel": SLACK_CHANNEL, "api_base_url": slack.url},
        {"id": TELEGRAM, "kind": "telegram", "label": "Telegram support", "bot_token": TELEGRAM_TOKEN,
         "chat_id": STAFF_CHAT_ID, "api_base_url": telegram.base_url, "mode": "webhook", "webhook_secret": TELEGRAM_SECRET},
    ], delivery={"base_backoff": "10ms"})
    for pid, name in (("olga", "Olga Petrova"), ("kim", "Kim Ito")):
        await h.desk.people.add(pid=pid, name=name, email=f"{pid}@example.com", source="cli", actor="test")
    return h


async def code_of(h: Harness, pid: str = "olga") -> str:
    return await h.desk.link_codes.issue(await h.desk.people.get(pid))


async def slack_says(h: Harness, text: str, *, user: str = "U0OLGA", thread_ts: str | None = None,
                     channel: str = SLACK_CHANNEL, **extra: Any) -> None:
    body = message_event(channel=channel, text=text, user=user, thread_ts=thread_ts, **extra)
    answered = await h.client.post(f"/webhooks/{SLACK}", content=body, headers=signed_headers(SLACK_SECRET, body))
    assert answered.status_code == 200, answered.text
    await h.desk.settle()


async def telegram_update(h: Harness, update: dict[str, Any]) -> None:
    answered = await h.client.post(f"/webhooks/{TELEGRAM}", json=update,
                                   headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET})
    assert answered.status_code == 200, answered.text
    await h.desk.settle()


async def slack_handoff(h: Harness, slack: FakeSlack) -> tuple[str, str]:
    """A conversation handed off to the Slack channel: (conversation id, the dispatch's thread ts)."""
    cid = await h.conversation()
    await h.start_handoff(cid, channel_id=SLACK)
    [dispatch] = slack.top_level(SLACK_CHANNEL)
    return cid, str(dispatch["ts"])


def thread_texts(slack: FakeSlack, thread_ts: str) -> list[str]:
    return [m["text"] for m in slack.posts(SLACK_CHANNEL, thread_ts=thread_ts)]


async def identities(h: Harness, pid: str = "olga") -> list[tuple[str, str, str]]:
    return [(i.kind, i.value, i.verified_via) for i in await h.desk.people.identities(pid)]


# --------------------------------------------------------------------------- in a handoff's thread


async def test_link_in_a_slack_thread_links_answers_there_and_never_reaches_the_subscriber(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    cid, thread = await slack_handoff(h, slack)
    code = await code_of(h)
    # Slack's client takes a leading "/" for its own commands, so `link CODE` counts too; case and a dash do not matter
    await slack_says(h, f" link {code[:4].lower()}-{code[4:].lower()}", thread_ts=thread)
    assert thread_texts(slack, thread)[-1] == LINKED
    assert await h.human_texts(cid) == []  # never relayed
    assert await identities(h) == [("slack", "U0OLGA", "code")]
    # from now on what she writes there is hers
    await slack_says(h, "Hi Ana, I'm on it", thread_ts=thread)
    assert await h.human_texts(cid) == [("Olga Petrova", "Hi Ana, I'm on it")]
    async with h.desk.db.read() as session:
        linked = (await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind) == "identity_linked"))).one()
        row = (await session.scalars(select(LinkCode))).one()
    assert (linked.person_id, linked.detail["identity"], linked.detail["verified_via"]) == ("olga", "U0OLGA", "code")
    assert row.used_at is not None


async def test_a_used_or_expired_code_is_refused_and_links_nothing(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    _, thread = await slack_handoff(h, slack)
    code = await code_of(h)
    await slack_says(h, f"/link {code}", thread_ts=thread)
    await slack_says(h, f"/link {code}", user="U0SAM", thread_ts=thread)  # used already
    assert thread_texts(slack, thread)[-2:] == [LINKED, UNKNOWN]
    late = await code_of(h, "kim")
    clock = h.desk.clock
    assert isinstance(clock, ManualClock)
    clock.advance(CODE_LIFETIME)
    await slack_says(h, f"/link {late}", user="U0KIM", thread_ts=thread)  # ten minutes on: expired
    await slack_says(h, "/link NOTACODE", user="U0KIM", thread_ts=thread)
    assert thread_texts(slack, thread)[-2:] == [UNKNOWN, UNKNOWN]
    assert await identities(h, "kim") == []
    assert [(i.kind, i.value) for i in await h.desk.people.identities("olga")] == [("slack", "U0OLGA")]
    async with h.desk.db.read() as session:
        refused = (await session.scalars(select(HandoffEvent).where(col(HandoffEvent.kind) == "link_code_refused"))).all()
    assert [e.detail["identity"] for e in refused] == ["U0SAM", "U0KIM", "U0KIM"]


async def test_an_identity_already_someone_elses_is_refused_and_the_code_stays_good(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    await h.desk.people.link("kim", "slack", "U0KIM", verified_via="cli", actor="test")
    _, thread = await slack_handoff(h, slack)
    code = await code_of(h)
    await slack_says(h, f"/link {code}", user="U0KIM", thread_ts=thread)
    assert thread_texts(slack, thread)[-1] == "This Slack account is already linked to someone else."
    assert await identities(h, "kim") == [("slack", "U0KIM", "cli")]  # never moved
    await slack_says(h, f"/link {code}", thread_ts=thread)  # from her own account the same code still works
    assert thread_texts(slack, thread)[-1] == LINKED
    assert await identities(h) == [("slack", "U0OLGA", "code")]


async def test_a_redelivered_link_is_worked_once(start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, slack, telegram)
    _, thread = await slack_handoff(h, slack)
    code = await code_of(h)
    for _ in range(2):  # Slack retries an event it thinks was not acknowledged: the same event id
        await slack_says(h, f"/link {code}", thread_ts=thread, event_id="Ev0LINK")
    assert thread_texts(slack, thread)[-1:] == [LINKED]
    assert thread_texts(slack, thread).count(LINKED) == 1


async def test_a_link_without_a_sender_is_answered_and_links_nobody(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    """An event whose provider did not say who sent it (an anonymous group admin) has no
    identity to link; the code stays unused."""
    h = await desk(start_desk, slack, telegram)
    cid, thread = await slack_handoff(h, slack)
    code = await code_of(h)
    said = RecipientText(thread_key=f"{SLACK_CHANNEL}:{thread}", text=f"/link {code}", author="Group admin")
    assert await h.desk.inbound.submit_and_wait(SLACK, said) == "not linked: this message does not say who sent it"
    await h.desk.settle()
    assert thread_texts(slack, thread)[-1] == "This message does not say who sent it, so nothing was linked."
    assert await h.human_texts(cid) == []
    async with h.desk.db.read() as session:
        assert (await session.scalars(select(LinkCode))).one().used_at is None


async def test_a_link_in_a_thread_without_an_active_handoff_links_and_says_nobody_could_be_told(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    said = RecipientText(thread_key=f"{SLACK_CHANNEL}:1699999999.000001", text=f"/link {code}", author="olga.p",
                         user_id="U0OLGA")
    assert await h.desk.inbound.submit_and_wait(SLACK, said) == (
        "linked to olga (no active handoff in this thread to answer in)")
    assert await identities(h) == [("slack", "U0OLGA", "code")]


# --------------------------------------------------------------------------- outside any handoff


async def test_link_in_a_slack_direct_message_is_answered_there(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    await slack_says(h, f"link {code}", channel=OLGA_DM, channel_type="im")
    assert [m["text"] for m in slack.posts(OLGA_DM)] == [LINKED]
    assert slack.calls_to("chat.postMessage")[-1].args.get("thread_ts") in (None, "")
    assert await identities(h) == [("slack", "U0OLGA", "code")]
    await slack_says(h, "hello there", user="U0SAM", channel=OLGA_DM, channel_type="im")  # anything else in a DM: not ours
    assert len(slack.posts(OLGA_DM)) == 1


async def test_link_as_a_top_level_slack_message_is_answered_in_its_thread(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    ts = "1800000099.000100"
    slack.messages[SLACK_CHANNEL].append({"type": "message", "ts": ts, "user": "U0OLGA", "text": f"link {code}"})  # as Slack has it
    await slack_says(h, f"link {code}", ts=ts)
    assert thread_texts(slack, ts) == [LINKED]
    await slack_says(h, "good morning everyone", ts="1800000100.000100")  # chatter in the channel: not ours
    assert len(slack.calls_to("chat.postMessage")) == 1


async def test_the_telegram_deep_link_in_a_private_chat_links_and_is_answered_there(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    """The inbox offers t.me/<bot>?start=link-CODE: Telegram sends `/start link-CODE` from the
    person's private chat with the bot, which serves no front here (a staff bot)."""
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    adapter = h.desk.channels.get(TELEGRAM)
    assert adapter is not None
    assert adapter.link_hint(code) == f"https://t.me/{BOT_USER['username']}?start=link-{code}"
    await telegram_update(h, telegram.private_update(f"/start link-{code}", user=SAM))
    [answer] = telegram.sent_to(SAM["id"])
    assert answer["text"] == LINKED
    assert await identities(h) == [("telegram", str(SAM["id"]), "code")]
    await telegram_update(h, telegram.private_update(f"/link {code}", user=KIM))  # used: answered the same way
    assert [m["text"] for m in telegram.sent_to(KIM["id"])] == [UNKNOWN]
    await telegram_update(h, telegram.private_update("hello?", user=KIM))  # a staff bot hears nothing else there
    assert len(telegram.sent_to(KIM["id"])) == 1


async def test_link_in_the_telegram_staff_group_outside_a_thread_is_answered_as_a_reply(
    start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram,
) -> None:
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    update = telegram.message_update(f"/link@{BOT_USER['username']} {code}", user=SAM)
    await telegram_update(h, update)
    [answer] = telegram.sent_to(STAFF_CHAT_ID)
    assert answer["text"] == LINKED
    assert answer["reply_to_message"]["message_id"] == update["message"]["message_id"]
    await telegram_update(h, telegram.message_update("just chatting among ourselves", user=KIM))
    assert len(telegram.sent_to(STAFF_CHAT_ID)) == 1


async def test_a_disabled_persons_code_links_nothing(start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram) -> None:
    h = await desk(start_desk, slack, telegram)
    code = await code_of(h)
    await h.desk.people.set_disabled("olga", True, actor="test")
    await slack_says(h, f"link {code}", channel=OLGA_DM, channel_type="im")
    assert [m["text"] for m in slack.posts(OLGA_DM)] == [UNKNOWN]
    assert await identities(h) == []


def test_the_answer_names_the_kind_of_account() -> None:
    from bot.domain.rendering import Renderer

    render = Renderer().render
    assert [render("messages/link_answer.txt", outcome="taken", kind=kind, person=None).strip()
            for kind in ("telegram", "email", "whatsapp", "discord")] == [
        "This Telegram account is already linked to someone else.", "This e-mail address is already linked to someone else.",
        "This WhatsApp number is already linked to someone else.", "This Discord account is already linked to someone else."]

"""Several handoffs on one line (a channel without threads): focus, #CODE, /list, acknowledgements.

The line is played by LineChannel (tests/fakes.py), a provider whose receipts all carry the
same thread key; the routing, the outbox and the audit trail run for real.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from bot.store.models import InboundEvent
from channels.base import RecipientText, short_code_of
from tests.conftest import Harness, StartDesk
from tests.fakes import LineChannel, ScriptedChannel


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


class Line:
    """Two subscribers, Ana and Ben, handed to the same person on one line (Ben's is newer)."""

    def __init__(self, harness: Harness) -> None:
        self.harness = harness
        self.channel: LineChannel = harness.desk.channels.get(1)  # type: ignore[assignment]

    async def open(self, name: str) -> tuple[str, str, str]:
        self.harness.desk.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]
        cid = await self.harness.conversation(name, None)
        result = await self.harness.start_handoff(cid, summary=f"{name} needs a refund checked.")
        sid = result["handoff_session_id"]
        return cid, sid, short_code_of(sid)

    async def reply(self, text: str) -> str:
        """The recipient writes on the line; returns what the desk did with it."""
        message = RecipientText(thread_key=LineChannel.LINE, text=text, author="Kim")
        self.harness.desk.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]
        result = await self.harness.desk.inbound.submit_and_wait(1, message)
        await self.harness.desk.settle()
        return result

    async def human_texts(self, cid: str) -> list[str]:
        return [m["text"] for m in await self.harness.messages(cid) if m["role"] == "human"]


@pytest.fixture
async def line(start_desk: StartDesk) -> Line:
    return Line(await start_desk(adapters={1: LineChannel}))


async def test_a_plain_reply_goes_to_the_newest_handoff_and_says_so(line: Line) -> None:
    ana, _, a = await line.open("Ana")
    ben, _, b = await line.open("Ben")
    assert await line.reply("Checking your refund now") == "relayed"
    assert await line.human_texts(ben) == ["Checking your refund now"]
    assert await line.human_texts(ana) == []
    [ack] = line.channel.routing()
    assert ack.startswith(f"↪ Sent to #{b} · Ben.")
    assert f"#{a}" in ack
    assert "/list" in ack


async def test_one_handoff_on_the_line_needs_no_acknowledgement(line: Line) -> None:
    ana, _, _ = await line.open("Ana")
    await line.reply("Hello Ana")
    assert await line.human_texts(ana) == ["Hello Ana"]
    assert line.channel.routing() == []


async def test_a_code_addresses_a_handoff_and_keeps_the_focus_on_it(line: Line) -> None:
    ana, _, a = await line.open("Ana")
    ben, _, _ = await line.open("Ben")
    await line.reply(f"#{a.lower()}: your refund is on its way")
    await line.reply("Anything else?")
    assert await line.human_texts(ana) == ["your refund is on its way", "Anything else?"]
    assert await line.human_texts(ben) == []
    # the addressed message is not acknowledged; the plain one after it is (Ben is still open)
    [ack] = line.channel.routing()
    assert ack.startswith(f"↪ Sent to #{a} · Ana.")


async def test_a_code_alone_only_moves_the_focus(line: Line) -> None:
    ana, _, a = await line.open("Ana")
    await line.open("Ben")
    assert await line.reply(f"#{a}") == f"focused #{a}"
    assert await line.human_texts(ana) == []
    assert line.channel.routing() == [f"Replies now go to #{a} · Ana — Ana needs a refund checked."]
    await line.reply("Back to you, Ana")
    assert await line.human_texts(ana) == ["Back to you, Ana"]


async def test_list_shows_the_open_handoffs_focused_first(line: Line) -> None:
    _, _, a = await line.open("Ana")
    _, _, b = await line.open("Ben")
    assert await line.reply("/list") == "listed the open handoffs"
    [listing] = line.channel.routing()
    rows = listing.splitlines()
    assert rows[0] == "2 open handoffs here:"
    assert rows[1] == f"#{b} · Ben — Ben needs a refund checked.  ← replies go here"
    assert rows[2] == f"#{a} · Ana — Ana needs a refund checked."


async def test_release_ends_the_focused_handoff_or_the_addressed_one(line: Line) -> None:
    ana, ana_sid, a = await line.open("Ana")
    ben, ben_sid, _ = await line.open("Ben")
    carl, carl_sid, _ = await line.open("Carl")
    assert await line.reply("/release resolved done") == "released"
    assert (await line.harness.handoff(carl_sid))["state"] == "released"
    assert await line.reply(f"#{a} /release unresolved") == "released"
    assert (await line.harness.handoff(ana_sid))["state"] == "released"
    assert (await line.harness.handoff(ben_sid))["state"] == "active"
    assert any(m["text"].startswith("[Bot resumed") for m in await line.harness.messages(ana))
    assert await line.human_texts(ben) == []


async def test_a_message_for_an_ended_handoff_is_answered_not_passed_to_another(line: Line) -> None:
    ana, _, a = await line.open("Ana")
    ben, _, b = await line.open("Ben")
    await line.reply(f"#{a} /release")
    assert await line.reply(f"#{a} one more thing") == f"#{a} has ended; not relayed"
    assert await line.human_texts(ben) == []
    assert await line.human_texts(ana) == []
    assert line.channel.routing()[-1] == (
        f"Handoff #{a} (Ana) has ended, so your message was not passed on. Open here: #{b} · Ben."
    )


async def test_text_that_only_looks_like_a_code_is_relayed_whole(line: Line) -> None:
    ana, _, _ = await line.open("Ana")
    await line.reply("#1234 is the order number I found")
    assert await line.human_texts(ana) == ["#1234 is the order number I found"]


async def test_a_line_without_handoffs_ignores_messages_and_records_why(line: Line) -> None:
    assert await line.reply("/list") == "no active handoff on this line"
    async with line.harness.desk.db.read() as session:
        [event] = (await session.scalars(select(InboundEvent))).all()
    assert (event.state, event.result) == ("ignored", "no active handoff on this line")
    assert line.channel.routing() == []


async def test_threaded_channels_do_not_parse_codes(start_desk: StartDesk) -> None:
    harness = await start_desk(adapters={1: ScriptedChannel})
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    code = short_code_of(sid)
    message: Any = RecipientText(thread_key=f"thread-{sid}", text=f"#{code} /list", author="Kim")
    assert await harness.desk.inbound.submit_and_wait(1, message) == "relayed"
    assert [m["text"] for m in await harness.messages(cid) if m["role"] == "human"] == [f"#{code} /list"]


async def test_two_subscribers_on_one_whatsapp_number_end_to_end(start_desk: StartDesk) -> None:
    """The real twilio SDK against tests/fake_twilio.py: the recipient answers two handoffs
    from one chat, addresses one by its code, lists them and releases them one by one."""
    from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, FakeTwilio

    twilio = await FakeTwilio().start()
    try:
        harness = await start_desk(channels=[{
            "id": 1, "kind": "whatsapp", "label": "On-call", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN,
            "from": "+1 415 523 8886", "to": [ANA_PHONE], "api_base_url": twilio.base_url}])
        line = Line(harness)

        async def write(text: str) -> None:
            harness.desk.clock.advance(timedelta(seconds=1))  # type: ignore[attr-defined]
            body, headers = twilio.inbound("http://desk.test/webhooks/1", body=text, sender=ANA_PHONE, profile_name="Kim")
            assert (await harness.client.post("/webhooks/1", content=body, headers=headers)).status_code == 200
            await harness.desk.settle()

        def received() -> list[str]:
            return [m["body"] for m in twilio.sent_to(ANA_PHONE)]

        carla, carla_sid, c = await line.open("Carla")
        dan, dan_sid, d = await line.open("Dan")
        await harness.say(carla, "Any news on my refund?")
        await harness.desk.settle()
        assert received()[-1].startswith(f"#{c} ")  # the recipient sees whose message it is

        await write("Looking into it now")  # plain: the newest handoff (Dan), acknowledged
        assert await line.human_texts(dan) == ["Looking into it now"]
        assert received()[-1].startswith(f"↪ Sent to #{d} · Dan.")

        await write(f"#{c} Your refund went out today")
        assert await line.human_texts(carla) == ["Your refund went out today"]
        await write("/list")
        assert received()[-1].splitlines()[1].startswith(f"#{c} · Carla")  # focused first now

        await write("/release resolved refunded")
        assert (await harness.handoff(carla_sid))["state"] == "released"
        assert (await harness.handoff(dan_sid))["state"] == "active"
        await write("Dan, still there?")  # one handoff left: no acknowledgement needed
        assert (await line.human_texts(dan))[-1] == "Dan, still there?"
        assert not received()[-1].startswith("↪")
        assert (await harness.messages(carla))[-2]["text"].startswith("[Bot resumed")
    finally:
        await twilio.stop()

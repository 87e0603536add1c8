"""A handoff mailed to one person directly (`Dispatch.direct`): to them alone, on a thread of
its own, and their replies back through the built-in receiver. Real aiosmtplib against the
fake SMTP server (tests/fake_smtp.py), replies sent with aiosmtplib to the real aiosmtpd
receiver; the adapter on its own (the core's side is tested with the core)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from email.message import EmailMessage
from email.utils import make_msgid

import aiosmtplib
import pytest

from bot.domain.rendering import Renderer
from channels.base import (
    ChannelContext,
    Dispatch,
    InboundMessage,
    Notice,
    PermanentChannelError,
    RecipientText,
    Relay,
    TransientChannelError,
)
from channels.email import EmailChannel, EmailConfig
from tests.fake_smtp import FakeSMTP, Received
from tests.route_dispatches import FORM_URL, route_dispatch

TEAM = "team@example.com"
DESK = "desk@example.com"
OLGA = "Olga@Example.com"  # as her people: entry spells it


@pytest.fixture
async def smtp() -> AsyncIterator[FakeSMTP]:
    server = await FakeSMTP().start()
    yield server
    await server.stop()


@pytest.fixture
async def received() -> list[InboundMessage]:
    return []


@pytest.fixture
async def adapter(smtp: FakeSMTP, received: list[InboundMessage]) -> AsyncIterator[EmailChannel]:
    channel = EmailChannel(EmailConfig.model_validate({
        "id": 4, "label": "Support mail", "to": [TEAM], "from": DESK,
        "smtp": {"host": "127.0.0.1", "port": smtp.port, "security": "none", "timeout": 5},
        "inbound": {"host": "127.0.0.1", "port": 0, "address": DESK}, "reply_token_secret": "reply-token-secret-for-tests",
    }))

    async def deliver(message: InboundMessage) -> None:
        received.append(message)

    await channel.start(ChannelContext(public_url="http://desk.test", deliver_inbound=deliver, render=Renderer().render))
    yield channel
    await channel.stop()


def to_olga(sid: str = "hs_route1", address: str = OLGA) -> Dispatch:
    return route_dispatch(sid).model_copy(update={"direct": address})


def reply_to(original: Received, text: str, *, sender: str, in_thread_only: bool = False) -> EmailMessage:
    """A reply as a mail client writes it (to the Reply-To address, or, `in_thread_only`, to
    the plain desk address with only the thread headers to go by)."""
    message = EmailMessage()
    message["From"] = sender
    message["To"] = DESK if in_thread_only else str(original.message["Reply-To"])
    message["Subject"] = "Re: " + str(original.message["Subject"])
    message["Message-ID"] = make_msgid(domain="example.com")
    message["In-Reply-To"] = original.message["Message-ID"]
    message["References"] = original.message["Message-ID"]
    message.set_content(f"{text}\n\n> the brief, quoted")
    return message


async def mail_in(adapter: EmailChannel, message: EmailMessage) -> None:
    async with aiosmtplib.SMTP(hostname="127.0.0.1", port=adapter.inbound_port, timeout=10,
                               local_hostname="mx.example.com") as client:
        await client.sendmail(message["From"].addresses[0].addr_spec, [message["To"].addresses[0].addr_spec],
                              message.as_bytes())


async def test_a_direct_dispatch_goes_to_the_person_alone_and_their_replies_come_back_on_its_thread(
    smtp: FakeSMTP, adapter: EmailChannel, received: list[InboundMessage],
) -> None:
    assert adapter.capabilities.direct is True
    receipt = await adapter.send(to_olga())
    [dispatch] = smtp.messages
    assert dispatch.rcpt_tos == [OLGA]
    assert str(dispatch.message["To"]) == OLGA  # not the channel's `to`
    assert FORM_URL in dispatch.part("text/plain")
    assert receipt.thread_key == adapter.direct_thread_key_of("hs_route1", OLGA)
    assert receipt.thread_key != adapter.thread_key_of("hs_route1")  # the room's thread of the same handoff is another
    assert receipt.thread["direct"] == OLGA
    assert str(dispatch.message["Reply-To"]).startswith("desk+")

    await adapter.send(Relay(handoff_id="hs_route1", text="Ana: hi", author="Ana", body="Is it coming?", thread=receipt.thread))
    await adapter.send(Notice(handoff_id="hs_route1", text="A new form link.", about="form_link", thread=receipt.thread))
    relay, notice = smtp.messages[1:]
    for mail in (relay, notice):
        assert mail.rcpt_tos == [OLGA]
        assert str(mail.message["In-Reply-To"]) == str(dispatch.message["Message-ID"])
        assert str(mail.message["Reply-To"]) == str(dispatch.message["Reply-To"])
    assert "Is it coming?" in relay.part("text/plain")

    await mail_in(adapter, reply_to(relay, "Tomorrow, Ana.", sender=f"Olga K <{OLGA.lower()}>"))
    await mail_in(adapter, reply_to(dispatch, "And the form is sent.", sender=OLGA, in_thread_only=True))
    first, second = received
    assert isinstance(first, RecipientText) and isinstance(second, RecipientText)
    assert first.thread_key == second.thread_key == receipt.thread_key
    assert (first.text, first.author, first.user_id) == ("Tomorrow, Ana.", "Olga K", OLGA.lower())
    assert second.text == "And the form is sent."


async def test_a_direct_mails_token_answers_only_from_the_persons_own_address(
    smtp: FakeSMTP, adapter: EmailChannel, received: list[InboundMessage],
) -> None:
    await adapter.send(to_olga())
    [dispatch] = smtp.messages
    for sender in (TEAM, "mallory@example.net"):  # a room recipient, a stranger: neither holds Olga's thread
        with pytest.raises(aiosmtplib.SMTPDataError) as refused:
            await mail_in(adapter, reply_to(dispatch, "I'll take it", sender=sender))
        assert refused.value.code == 550
    assert received == []
    # The room's mail of the same handoff still answers from the room's addresses
    room = await adapter.send(route_dispatch())
    await mail_in(adapter, reply_to(smtp.messages[-1], "Room reply", sender=TEAM))
    [reply] = received
    assert isinstance(reply, RecipientText) and reply.thread_key == room.thread_key == adapter.thread_key_of("hs_route1")


async def test_a_refused_person_is_permanent_and_a_deferred_one_transient(smtp: FakeSMTP, adapter: EmailChannel) -> None:
    smtp.fail("RCPT", "550 5.1.1 no such user")
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(to_olga())
    assert f"{OLGA}: 550 5.1.1 no such user" in refused.value.hint
    smtp.fail("RCPT", "451 4.3.0 try later")
    with pytest.raises(TransientChannelError):
        await adapter.send(to_olga())
    assert smtp.messages == []


async def test_a_direct_address_that_is_not_one_address_is_refused_naming_it(smtp: FakeSMTP, adapter: EmailChannel) -> None:
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(to_olga(address="Olga <olga@example.com>"))
    assert "'Olga <olga@example.com>'" in str(refused.value)
    assert smtp.messages == []

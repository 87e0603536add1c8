"""A handoff sent to one person's own WhatsApp number (`Dispatch.direct`), on a line of its
own, and their answers from that number: the real twilio SDK against the fake Twilio API
(tests/fake_twilio.py), webhook calls signed as Twilio signs them; the adapter on its own
(the core routes a line's messages, bot/flow/shared_lines.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from bot.domain.rendering import Renderer
from channels.base import (
    ChannelContext,
    DirectLine,
    Dispatch,
    InboundMessage,
    Notice,
    PermanentChannelError,
    RecipientText,
    Relay,
    SubscriberText,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookRequest,
)
from channels.whatsapp import LINE_KEY, WhatsAppChannel, WhatsAppConfig
from tests.fake_twilio import ACCOUNT_SID, ANA_PHONE, AUTH_TOKEN, BEN_PHONE, CARLA_PHONE, FakeTwilio
from tests.route_dispatches import FORM_URL, route_dispatch

WEBHOOK_URL = "http://desk.test/webhooks/1"
OLGA_PHONE = "whatsapp:+4930123456789"  # a person reached directly, not one of the staff numbers


@pytest.fixture
async def fake() -> AsyncIterator[FakeTwilio]:
    server = await FakeTwilio().start()
    yield server
    await server.stop()


async def _drop(_message: InboundMessage) -> None:
    return None


async def standalone(fake: FakeTwilio, lines: list[DirectLine] | None = None) -> WhatsAppChannel:
    """The staff's channel (Ana and Ben) whose sender is also a front; `lines`: what the desk
    says this channel sent people directly and is still open (read on start)."""

    async def open_lines() -> list[DirectLine]:
        return list(lines or [])

    adapter = WhatsAppChannel(WhatsAppConfig.model_validate({
        "id": 1, "label": "On-call", "account_sid": ACCOUNT_SID, "auth_token": AUTH_TOKEN, "from": "+14155238886",
        "to": [ANA_PHONE, BEN_PHONE], "api_base_url": fake.base_url}))
    await adapter.start(ChannelContext(public_url="http://desk.test", deliver_inbound=_drop, render=Renderer().render,
                                       subscribers=True, open_lines=open_lines))
    return adapter


@pytest.fixture
async def adapter(fake: FakeTwilio) -> AsyncIterator[WhatsAppChannel]:
    channel = await standalone(fake)
    yield channel
    await channel.stop()


def to_person(sid: str = "hs_route1", number: str = "+4930123456789") -> Dispatch:
    """As the core sends it: the number as the person's linked identity holds it (with or without `whatsapp:`)."""
    return route_dispatch(sid).model_copy(update={"direct": number})


async def written(adapter: WhatsAppChannel, fake: FakeTwilio, text: str, sender: str) -> InboundMessage | None:
    body, headers = fake.inbound(WEBHOOK_URL, body=text, sender=sender)
    headers = {k.lower(): v for k, v in headers.items()}  # as the desk's web server hands them over
    reply = await adapter.handle_webhook(WebhookRequest(body=body, headers=headers, query={}, url=WEBHOOK_URL))
    assert reply.status == 200
    return reply.messages[0] if reply.messages else None


async def test_a_direct_dispatch_reaches_the_persons_number_alone_and_their_answers_come_back_on_its_line(
    fake: FakeTwilio, adapter: WhatsAppChannel,
) -> None:
    assert adapter.capabilities.direct is True
    receipt = await adapter.send(to_person())
    assert fake.sent_to(ANA_PHONE) == fake.sent_to(BEN_PHONE) == []  # not the staff's line
    [dispatch] = fake.sent_to(OLGA_PHONE)
    assert FORM_URL in dispatch["body"]
    assert receipt.thread_key == OLGA_PHONE != LINE_KEY
    assert receipt.thread == {"line": OLGA_PHONE, "direct": OLGA_PHONE, "code": "UTE1"}
    await adapter.send(Relay(handoff_id="hs_route1", text="Ana: hi", author="Ana", body="Is it coming?", thread=receipt.thread))
    await adapter.send(Notice(handoff_id="hs_route1", text="You have it.", about="claimed", thread=receipt.thread))
    relay, notice = fake.sent_to(OLGA_PHONE)[1:]
    assert "Is it coming?" in relay["body"] and "You have it." in notice["body"]

    answer = await written(adapter, fake, "#UTE1 tomorrow", OLGA_PHONE)
    assert isinstance(answer, RecipientText)
    assert (answer.thread_key, answer.text, answer.user_id) == (receipt.thread_key, "#UTE1 tomorrow", OLGA_PHONE)
    # A subscriber on the front is still one, and a staff number still answers on the staff's line
    assert isinstance(await written(adapter, fake, "Where is my order?", CARLA_PHONE), SubscriberText)
    staff = await written(adapter, fake, "on it", BEN_PHONE)
    assert isinstance(staff, RecipientText) and staff.thread_key == LINE_KEY
    # Released there: the number is no line any more (a stranger again: ignored here, a subscriber on a front)
    await adapter.send(Notice(handoff_id="hs_route1", text="Released.", about="released", thread=receipt.thread))
    assert isinstance(await written(adapter, fake, "hello?", OLGA_PHONE), SubscriberText)


async def test_a_staff_number_reached_directly_has_its_own_line_beside_the_staffs(
    fake: FakeTwilio, adapter: WhatsAppChannel,
) -> None:
    receipt = await adapter.send(to_person(number=ANA_PHONE))
    assert receipt.thread_key == ANA_PHONE
    plain = await written(adapter, fake, "looking", ANA_PHONE)
    assert isinstance(plain, RecipientText) and plain.thread_key == ANA_PHONE
    # A #CODE of none of her direct handoffs is for the staff's line
    other = await written(adapter, fake, "#ZZZ9 done", ANA_PHONE)
    assert isinstance(other, RecipientText) and other.thread_key == LINE_KEY
    mine = await written(adapter, fake, "#ute1 done", ANA_PHONE)
    assert isinstance(mine, RecipientText) and mine.thread_key == ANA_PHONE


async def test_after_a_restart_the_number_s_line_comes_back_from_the_desk(fake: FakeTwilio) -> None:
    first = await standalone(fake)
    try:
        receipt = await first.send(to_person())
    finally:
        await first.stop()
    forgetful = await standalone(fake)  # a desk that kept nothing: the number is a subscriber's again
    try:
        assert isinstance(await written(forgetful, fake, "hi", OLGA_PHONE), SubscriberText)
    finally:
        await forgetful.stop()
    again = await standalone(fake, lines=[DirectLine("hs_route1", "ROUT", dict(receipt.thread))])
    try:
        answer = await written(again, fake, "hi again", OLGA_PHONE)
    finally:
        await again.stop()
    assert isinstance(answer, RecipientText) and answer.thread_key == receipt.thread_key


@pytest.mark.parametrize("code", [21211, 21614])
async def test_a_number_that_is_not_on_whatsapp_is_permanent_with_a_hint(fake: FakeTwilio, adapter: WhatsAppChannel,
                                                                          code: int) -> None:
    fake.fail(400, code, "Invalid 'To' Phone Number", to=OLGA_PHONE)
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(to_person())
    assert f"+4930123456789 is not a valid WhatsApp number ({code})" in refused.value.hint
    assert "the person's linked WhatsApp number" in refused.value.hint and "check `to`" not in refused.value.hint


async def test_twilio_trouble_on_a_direct_dispatch_stays_transient(fake: FakeTwilio, adapter: WhatsAppChannel) -> None:
    fake.fail(429, 20429, "Too Many Requests", retry_after=3)
    with pytest.raises(TransientChannelError) as limited:
        await adapter.send(to_person())
    assert limited.value.retry_after == 3
    fake.fail(500, 20500, "Internal Server Error")
    with pytest.raises(UncertainDeliveryError):
        await adapter.send(to_person())


async def test_a_direct_address_that_is_no_number_is_refused_naming_it(fake: FakeTwilio, adapter: WhatsAppChannel) -> None:
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(to_person(number="olga"))
    assert "'olga' is not a phone number in E.164 form" in str(refused.value)
    assert fake.requests() == []

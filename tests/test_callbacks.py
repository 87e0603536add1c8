"""The callback sender against a real local endpoint: what each answer means to the outbox
(delivered, retried, refused for good, maybe arrived), the signature and the delivery id;
and a callback carried by the outbox of a running desk."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from bot.config import HttpActionRun
from bot.delivery.callbacks import CALLBACKS, ORCHESTRATOR, CallbackSender, CallbackSettled, action_endpoint
from bot.store.models import HandoffEvent, OutboxItem
from channels.base import (
    Callback,
    Notice,
    PermanentChannelError,
    TransientChannelError,
    UncertainDeliveryError,
)
from tests.conftest import Harness, StartDesk
from tests.fake_endpoint import Answer, FakeEndpoint

SECRET = "callback-secret-0123456789"


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def endpoint() -> AsyncIterator[FakeEndpoint]:
    server = await FakeEndpoint(SECRET).start()
    yield server
    await server.stop()


def sender_for(endpoint: FakeEndpoint, timeout: str = "5s") -> CallbackSender:
    return CallbackSender({ORCHESTRATOR: HttpActionRun(url=endpoint.url, secret=SECRET, timeout=timeout)})  # type: ignore[arg-type]


def callback(**overrides: Any) -> Callback:
    fields: dict[str, Any] = {
        "text": "user_action_requested ua_1", "endpoint": ORCHESTRATOR, "event": "user_action_requested",
        "body": '{"type":"user_action_requested","user_action_id":"ua_1"}', "conversation_id": "c_1",
        "ordered_by": "c_1:orchestrator", "user_action_id": "ua_1", "delivery_key": "hd_1",
    }
    return Callback(**{**fields, **overrides})


async def test_a_2xx_is_delivered_signed_with_the_delivery_key_and_its_json_is_the_answer(endpoint: FakeEndpoint) -> None:
    endpoint.plan(Answer(200, {"holds": True}), Answer(204, None))
    sender = sender_for(endpoint)
    first = await sender.send(callback())
    second = await sender.send(callback(delivery="ap_1"))
    assert first.answer == {"holds": True}
    assert second.answer == {"status": 204, "body": ""}
    assert [(c.body["user_action_id"], c.delivery) for c in endpoint.calls] == [("ua_1", "hd_1"), ("ua_1", "ap_1")]


@pytest.mark.parametrize("status", [408, 429, 500, 503])
async def test_a_busy_or_failing_endpoint_is_worth_retrying_after_what_it_asked(endpoint: FakeEndpoint, status: int) -> None:
    endpoint.plan(Answer(status, {"error": "busy"}, retry_after="7"))
    with pytest.raises(TransientChannelError) as caught:
        await sender_for(endpoint).send(callback())
    assert not isinstance(caught.value, UncertainDeliveryError)  # it answered: the call did not go through
    assert caught.value.retry_after == 7.0
    assert str(caught.value) == f"{endpoint.url} answered {status}"


@pytest.mark.parametrize("status", [400, 401, 404, 422, 302])
async def test_any_other_refusal_is_permanent_and_its_body_is_kept_for_the_owner(endpoint: FakeEndpoint, status: int) -> None:
    endpoint.plan(Answer(status, {"error": "no such order"}))
    with pytest.raises(PermanentChannelError) as caught:
        await sender_for(endpoint).send(callback())
    assert str(caught.value) == f"{endpoint.url} answered {status}"
    assert "no such order" in caught.value.hint


async def test_no_answer_in_time_may_have_arrived(endpoint: FakeEndpoint) -> None:
    endpoint.plan(Answer(hang=True))
    with pytest.raises(UncertainDeliveryError) as caught:
        await sender_for(endpoint, timeout="200ms").send(callback())
    assert "may or may not" in str(caught.value)
    assert len(endpoint.calls) == 1


async def test_an_endpoint_nobody_listens_on_is_worth_retrying(endpoint: FakeEndpoint) -> None:
    sender = sender_for(endpoint)
    await endpoint.stop()
    with pytest.raises(TransientChannelError) as caught:
        await sender.send(callback())
    assert not isinstance(caught.value, UncertainDeliveryError)
    assert "could not reach" in str(caught.value)


async def test_an_endpoint_gone_from_the_config_or_a_message_for_a_channel_is_refused(endpoint: FakeEndpoint) -> None:
    sender = sender_for(endpoint)
    with pytest.raises(PermanentChannelError, match="no longer configured"):
        await sender.send(callback(endpoint=action_endpoint("refund_order")))
    with pytest.raises(PermanentChannelError, match="handed a notice"):
        await sender.send(Notice(text="released", handoff_id="hs_1", about="released"))
    assert endpoint.calls == []


async def queued_on_a_desk(start_desk: StartDesk, endpoint: FakeEndpoint) -> tuple[Harness, list[CallbackSettled]]:
    """A desk whose orchestrator is `endpoint`, with one callback queued and sent as far as
    it goes now; and the `CallbackSettled` signals it records."""
    harness = await start_desk(user_actions={"webhook": {"url": endpoint.url, "secret": SECRET}})
    settled: list[CallbackSettled] = []
    harness.desk.signals.on(CallbackSettled, settled.append)
    async with harness.desk.db.transaction() as session:
        await harness.desk.outbox.queue(session, channel_id=CALLBACKS, outbound=callback(delivery_key=None),
                                        now=harness.desk.clock.now())
    await harness.desk.settle()
    return harness, settled


async def test_the_desk_carries_a_callback_through_its_outbox_and_says_when_it_settled(
    start_desk: StartDesk, endpoint: FakeEndpoint,
) -> None:
    """Refused once (503), retried when due with the same delivery key, delivered, every
    attempt audited, and `CallbackSettled` heard once, with the answer, after its commit."""
    endpoint.plan(Answer(503, {"error": "busy"}, retry_after="0"), Answer(200, {"seen": True}))
    harness, settled = await queued_on_a_desk(start_desk, endpoint)
    assert [c.answered for c in endpoint.calls] == [503]
    assert settled == []
    harness.desk.clock.advance(timedelta(seconds=2))  # type: ignore[attr-defined]
    await harness.desk.settle()
    async with harness.desk.db.read() as session:
        item = (await session.scalars(select(OutboxItem))).one()
        trail = [e.kind for e in (await session.scalars(
            select(HandoffEvent).where(HandoffEvent.conversation_id == "c_1").order_by(HandoffEvent.id))).all()]
    assert (item.state, item.attempts, item.channel_id, item.receipt["answer"]) == ("sent", 2, CALLBACKS, {"seen": True})
    assert [c.delivery for c in endpoint.calls] == [item.delivery_key] * 2
    assert trail == ["delivery_retry_scheduled", "callback_delivered"]
    [done] = settled
    assert (done.callback.user_action_id, done.answer, done.error) == ("ua_1", {"seen": True}, None)


async def test_a_refused_callback_fails_at_once_and_says_so(start_desk: StartDesk, endpoint: FakeEndpoint) -> None:
    endpoint.plan(Answer(400, {"error": "unknown task"}))
    harness, settled = await queued_on_a_desk(start_desk, endpoint)
    async with harness.desk.db.read() as session:
        item = (await session.scalars(select(OutboxItem))).one()
        [event] = (await session.scalars(select(HandoffEvent).where(HandoffEvent.conversation_id == "c_1"))).all()
    assert (item.state, item.attempts) == ("failed", 1)
    assert (event.kind, event.detail["error_type"], event.detail["user_action_id"]) == (
        "delivery_failed", "PermanentChannelError", "ua_1")
    assert "unknown task" in event.detail["hint"]
    [failed] = settled
    assert (failed.answer, failed.error) == (None, f"{endpoint.url} answered 400")

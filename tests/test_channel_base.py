"""channels/base.py: the typed port. What the core sends and receives is one class per kind,
stored as JSON and read back as the same kind; the base class's `send` calls the adapter's
method for each kind; each message names its stream (what orders it) and the ids its audit
records are filed under."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from bot.store.vocabulary import Outcome
from channels.base import (
    Answer,
    ApprovalClosed,
    ApprovalPrompt,
    Callback,
    Capabilities,
    ChannelAdapter,
    ChannelConfig,
    ChatOpened,
    Decision,
    DeliveryFailure,
    Dispatch,
    HandoffBrief,
    InboundMessage,
    MalformedWebhook,
    Notice,
    Outbound,
    PermanentChannelError,
    Receipt,
    RecipientText,
    Relay,
    ReleaseOutcome,
    ReleasePress,
    SubscriberText,
    ToSubscriber,
    UserActionAnswer,
    UserActionPrompt,
    json_object,
    stored_inbound,
    stored_outbound,
)
from forms.fields import ReturnField
from tests.approval_actions import TWO_PEOPLE, refund_brief

BRIEF = HandoffBrief(
    handoff_session_id="hs_a7f3", short_code="A7F3", conversation_id="c_1", summary="Ana's parcel is lost.",
    expected_action="Find it.", expected_return=[ReturnField(name="eta_date", type="date", required=True, label="ETA")],
)
APPROVAL = refund_brief("ap_1")
RUN = Callback(text="action_run ap_1", endpoint="actions.refund_order.run", event="action_run", body='{"arguments":{}}',
               conversation_id="c_1", ordered_by="ap_1:run", approval_id="ap_1", delivery="ap_1")

MESSAGES: list[Outbound] = [
    Dispatch(handoff_id="hs_a7f3", text="the brief", subject="[Handoff A7F3] lost parcel", brief=BRIEF),
    Relay(handoff_id="hs_a7f3", text="Ana: hi", author="Ana", body="hi", thread={"ts": "1"}),
    Notice(handoff_id="hs_a7f3", text="Handoff A7F3 released.", about="released", thread={"ts": "1"}),
    ApprovalPrompt(text="May the assistant refund?", approval=APPROVAL),
    ApprovalClosed(text="Approved by Kim.", approval=APPROVAL, prompt={"message_id": "9"}),
    ToSubscriber(conversation_id="c_1", chat="4242", text="Sam: hello", body="hello", author="Sam",
                 user_action=UserActionPrompt(user_action_id="ua_1", steps=2)),
    RUN,
]

EVENTS: list[InboundMessage] = [
    RecipientText(thread_key="t1", text="/release resolved", author="Sam", dedupe_key="k1"),
    ReleasePress(thread_key="t1", author="Kim", outcome="resolved"),
    Decision(approval_id="ap_1", approve=True, always_allow=True, author="Kim"),
    SubscriberText(chat="4242", text="hello", author="Ana"),
    ChatOpened(chat="4242", author="Ana"),
    UserActionAnswer(chat="4242", user_action_id="ua_1", move="next"),
    DeliveryFailure(message_id="SM1", error="undelivered", hint="write first", dedupe_key="status:SM1"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: m.kind)
def test_an_outbound_message_reads_back_from_its_outbox_row_as_the_same_kind(message: Outbound) -> None:
    assert stored_outbound(message.model_dump(mode="json")) == message


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.kind)
def test_an_inbound_event_reads_back_from_its_row_as_the_same_kind(event: InboundMessage) -> None:
    assert stored_inbound(event.model_dump(mode="json")) == event


@pytest.mark.parametrize(("message", "stream", "trail", "purpose"), [
    (MESSAGES[0], "hs_a7f3", {"handoff_session_id": "hs_a7f3"}, "dispatch"),
    (MESSAGES[1], "hs_a7f3", {"handoff_session_id": "hs_a7f3"}, "relay"),
    (MESSAGES[2], "hs_a7f3", {"handoff_session_id": "hs_a7f3"}, "notice"),
    (MESSAGES[3], "ap_1", {"conversation_id": "c_1", "approval_id": "ap_1"}, "notice"),
    (MESSAGES[4], "ap_1", {"conversation_id": "c_1", "approval_id": "ap_1"}, "notice"),
    (MESSAGES[5], "c_1", {"conversation_id": "c_1"}, "subscriber"),
    (MESSAGES[6], "ap_1:run", {"conversation_id": "c_1", "approval_id": "ap_1"}, "callback"),
], ids=lambda value: value.kind if hasattr(value, "kind") else None)
def test_each_message_names_what_orders_it_and_where_its_audit_records_go(
    message: Outbound, stream: str, trail: dict[str, str], purpose: str,
) -> None:
    assert message.stream == stream
    assert message.trail() == trail
    assert message.purpose == purpose


def test_the_release_outcomes_a_press_may_carry_are_the_desks_outcomes() -> None:
    assert set(get_args(ReleaseOutcome)) == {outcome.value for outcome in Outcome}


def test_an_approval_brief_carries_the_two_person_line_only_when_two_people_must_approve() -> None:
    assert (APPROVAL.approvals_required, APPROVAL.two_people_line) == (1, None)
    two_people = refund_brief("ap_2", approvals_required=2)
    assert two_people.two_people_line == TWO_PEOPLE
    prompt = ApprovalPrompt(text="…", approval=two_people)
    assert stored_outbound(prompt.model_dump(mode="json")) == prompt
    for impossible in (0, 3):
        with pytest.raises(ValidationError):
            refund_brief("ap_3", approvals_required=impossible)
    # a prompt the outbox stored before briefs said how many people approve reads back as one person's
    row = ApprovalPrompt(text="…", approval=APPROVAL).model_dump(mode="json")
    del row["approval"]["approvals_required"]
    assert stored_outbound(row) == ApprovalPrompt(text="…", approval=APPROVAL)


def test_the_brief_lists_its_return_fields_once_for_every_rendering() -> None:
    assert BRIEF.field_lines == ["ETA [date, YYYY-MM-DD] (required)"]


class Recording(ChannelAdapter):
    """A provider that says which method the base class chose; it implements only what every
    adapter must, so the other kinds meet the base class's defaults."""

    kind = "recording"
    config_model = ChannelConfig
    capabilities = Capabilities()

    def __init__(self) -> None:
        super().__init__(ChannelConfig(id=3, kind="recording", label="Recording"))
        self.called: list[str] = []

    async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
        self.called.append("dispatch")
        return Receipt(message_id="d", thread_key=dispatch.handoff_id)

    async def send_relay(self, relay: Relay) -> Receipt:
        self.called.append("relay")
        return Receipt(message_id="r")

    async def send_notice(self, notice: Notice) -> Receipt:
        self.called.append(f"notice:{notice.about}")
        return Receipt(message_id="n")


async def test_send_calls_the_adapters_method_for_the_kind_and_defaults_say_what_a_provider_cannot() -> None:
    adapter = Recording()
    for message in MESSAGES[:3]:
        await adapter.send(message)
    assert adapter.called == ["dispatch", "relay", "notice:released"]

    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(MESSAGES[3])  # no `approvals` capability: no prompt method
    assert "cannot ask for approvals" in str(refused.value)
    assert await adapter.send(MESSAGES[4]) == Receipt()  # nothing to close where nothing was asked
    with pytest.raises(PermanentChannelError) as no_front:
        await adapter.send(MESSAGES[5])
    assert "serves no subscribers" in str(no_front.value)
    with pytest.raises(PermanentChannelError) as callback:
        await adapter.send(MESSAGES[6])  # the owner's endpoints are the callback sender's, never a channel's
    assert "handed a callback" in str(callback.value)


async def test_a_direct_dispatch_to_an_adapter_that_cannot_reach_a_person_is_refused_unsent() -> None:
    adapter = Recording()
    direct = Dispatch(handoff_id="hs_a7f3", text="the brief", brief=BRIEF, direct="U0123")
    with pytest.raises(PermanentChannelError, match="cannot reach one person directly") as refused:
        await adapter.send(direct)
    assert "capabilities.direct" in (refused.value.hint or "")
    assert adapter.called == []


def test_a_callback_names_the_delivery_id_its_endpoint_drops_a_repeat_by() -> None:
    orchestrator = Callback(text="e", endpoint="user_actions.webhook", event="user_action_requested", body="{}",
                            conversation_id="c_1", ordered_by="c_1:orchestrator", user_action_id="ua_1", delivery_key="hd_1")
    assert (orchestrator.delivery_id, orchestrator.trail()) == ("hd_1", {"conversation_id": "c_1", "user_action_id": "ua_1"})
    assert RUN.model_copy(update={"delivery_key": "hd_2"}).delivery_id == "ap_1"  # the approval id, on every attempt


def test_a_webhook_body_parses_to_a_json_object_or_a_400_that_says_why() -> None:
    assert json_object(b'{"update_id": 1}') == {"update_id": 1}
    for body, reason in ((b"{nope", "is not valid JSON"), (b"\xff", "is not valid JSON"), (b"[1]", "is JSON but not an object")):
        with pytest.raises(MalformedWebhook) as refused:
            json_object(body, "the payload")
        assert (refused.value.status, refused.value.code, refused.value.message) == (400, "invalid_json", f"the payload {reason}")


# --------------------------------------------------------------------------- answers outside a handoff


def test_an_answer_is_ordered_per_place_and_filed_under_nothing() -> None:
    here, again, there = (Answer(text="Linked.", to={"chat_id": 501}), Answer(text="Other.", to={"chat_id": 501}),
                          Answer(text="Linked.", to={"chat_id": 502}))
    assert here.stream == again.stream != there.stream
    assert len(here.stream) <= 40  # the outbox's stream column
    assert (here.purpose, here.trail()) == ("notice", {})


async def test_an_adapter_that_sends_no_link_request_refuses_an_answer() -> None:
    class Bare(ChannelAdapter):
        kind = "bare"
        config_model = ChannelConfig

        async def send_dispatch(self, dispatch: Dispatch) -> Receipt:
            return Receipt()

        async def send_relay(self, relay: Relay) -> Receipt:
            return Receipt()

        async def send_notice(self, notice: Notice) -> Receipt:
            return Receipt()

    bare = Bare(ChannelConfig(id=1, kind="bare", label="Bare"))
    with pytest.raises(PermanentChannelError, match="cannot answer outside a handoff"):
        await bare.send(Answer(text="Linked.", to={"chat_id": 1}))
    assert bare.link_hint("7H3K9QXW") is None

"""A person reached directly on Slack, and the `/handoff` slash command, through the real
slack_sdk client against the fake Slack (tests/fake_slack.py): conversations.open gives the
person's direct message, the dispatch and everything after it go there, and what the
person does there comes back under the dispatch's thread_key."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from channels.base import (
    Answer,
    AvailabilityRequest,
    ClaimPress,
    InboundMessage,
    LinkRequest,
    Notice,
    PermanentChannelError,
    RecipientText,
    Relay,
    ReleasePress,
    TransientChannelError,
    UncertainDeliveryError,
    WebhookReply,
    WebhookRequest,
)
from channels.slack import SlackChannel, SlackConfig
from tests.conftest import Harness, StartDesk
from tests.fake_slack import BOT, FakeSlack, Fault, block_actions, message_event, signed_headers
from tests.fakes import standalone_context
from tests.route_dispatches import FORM_URL, route_dispatch
from tests.test_channel_slack import inbound_count, slack_entry, standalone

TOKEN = "xoxb-test-token"
SIGNING_SECRET = "slack-signing-secret-for-tests"
CHANNEL = "C0HANDOFF"
FORM = "application/x-www-form-urlencoded"
SAM_DM = "D0SAM"  # the fake's direct message with U0SAM


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    return sqlite_url


@pytest.fixture
async def fake() -> AsyncIterator[FakeSlack]:
    slack = await FakeSlack(token=TOKEN, channels=(CHANNEL,), users={"U0SAM": "Sam", "U0KIM": "Kim"}).start()
    yield slack
    await slack.stop()


@pytest.fixture
async def adapter(fake: FakeSlack) -> AsyncIterator[SlackChannel]:
    """The adapter alone, started against the fake (tests/test_channel_slack.py's `standalone`)."""
    channel = await standalone(fake)
    yield channel
    await channel.stop()


def direct(sid: str = "hs_route1", to: str = "U0SAM") -> Any:
    return route_dispatch(sid).model_copy(update={"direct": to})


async def called(adapter: SlackChannel, body: bytes, content_type: str = FORM, secret: str = SIGNING_SECRET) -> WebhookReply:
    request = WebhookRequest(body=body, headers=signed_headers(secret, body, content_type=content_type), query={},
                             url="http://desk.test/webhooks/2")
    return await adapter.handle_webhook(request)


async def events(adapter: SlackChannel, body: bytes, content_type: str = FORM) -> list[InboundMessage]:
    reply = await called(adapter, body, content_type)
    assert (reply.status, reply.body) == (200, b"")
    return reply.messages


def action_ids(message: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in message["blocks"] if b["type"] == "actions" for e in b["elements"]]


def texts(message: dict[str, Any]) -> list[str]:
    return [b["text"]["text"] for b in message["blocks"] if b.get("text")]


# --------------------------------------------------------------------------- the dispatch and what follows it


async def test_a_direct_dispatch_lands_in_the_persons_direct_message_with_the_claim_button_and_form_link(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    receipt = await adapter.send(direct())
    second = await adapter.send(direct("hs_route2"))
    first_post, second_post = fake.top_level(SAM_DM)
    assert [c.args["users"] for c in fake.calls_to("conversations.open")] == ["U0SAM"]  # opened once, then known
    assert fake.top_level(CHANNEL) == []  # nothing in the room
    assert action_ids(first_post) == ["handoff_claim", "handoff_form", "handoff_release"]
    form = next(e for b in first_post["blocks"] if b["type"] == "actions" for e in b["elements"] if e["action_id"] == "handoff_form")
    assert form["url"] == FORM_URL
    assert (receipt.message_id, receipt.thread_key, receipt.thread) == (
        first_post["ts"], f"{SAM_DM}:{first_post['ts']}", {"channel": SAM_DM, "thread_ts": first_post["ts"]})
    assert second.thread_key == f"{SAM_DM}:{second_post['ts']}"
    assert SlackChannel.capabilities.direct is True


async def test_a_relay_and_notices_follow_into_the_direct_message_and_taken_edits_its_dispatch(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    receipt = await adapter.send(direct())
    relay = await adapter.send(Relay(handoff_id="hs_route1", text="Ana: still there?", author="Ana", body="still there?",
                                     thread=receipt.thread))
    await adapter.send(Notice(handoff_id="hs_route1", text="You claimed handoff UTE1.", about="claimed", thread=receipt.thread))
    [dispatch] = fake.top_level(SAM_DM)
    replies = fake.posts(SAM_DM, thread_ts=dispatch["ts"])
    assert [texts(m)[-1] for m in replies] == ["still there?", "You claimed handoff UTE1."]
    assert relay.thread_key == receipt.thread_key
    assert action_ids(dispatch) == ["handoff_form", "handoff_release"]  # the claim button went

    other = await adapter.send(direct("hs_route2"))
    await adapter.send(Notice(handoff_id="hs_route2", text="Taken by Kim.", about="taken", thread=other.thread))
    taken = fake.top_level(SAM_DM)[1]
    assert (action_ids(taken), texts(taken)[-1], fake.posts(SAM_DM, thread_ts=taken["ts"])) == ([], "Taken by Kim.", [])


async def test_the_persons_reply_and_presses_in_the_direct_message_come_back_with_the_receipts_thread_key(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    receipt = await adapter.send(direct())
    ts = receipt.message_id or ""
    [reply] = await events(adapter, message_event(channel=SAM_DM, text="on it", user="U0SAM", thread_ts=ts), "application/json")
    [claim] = await events(adapter, block_actions(channel=SAM_DM, user="U0SAM", user_name="sam", message_ts=ts,
                                                  value="hs_route1", action_id="handoff_claim", trigger_id="1.2.dm"))
    [release] = await events(adapter, block_actions(channel=SAM_DM, user="U0SAM", user_name="sam", message_ts=ts,
                                                    value="hs_route1"))
    assert isinstance(reply, RecipientText)
    assert isinstance(claim, ClaimPress)
    assert isinstance(release, ReleasePress)
    assert reply.thread_key == claim.thread_key == release.thread_key == receipt.thread_key == f"{SAM_DM}:{ts}"
    assert (reply.text, reply.user_id, reply.author) == ("on it", "U0SAM", "Sam")
    assert (claim.user_id, claim.dedupe_key) == ("U0SAM", "action:1.2.dm")


async def test_in_the_direct_message_only_thread_replies_belong_to_a_handoff_and_a_link_command_is_answered_there(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    receipt = await adapter.send(direct())
    ts = receipt.message_id or ""
    assert await events(adapter, message_event(channel=SAM_DM, text="hello?", user="U0SAM", thread_ts=None), "application/json") == []
    assert await events(adapter, message_event(channel=SAM_DM, text="ours", user=BOT["user_id"], thread_ts=ts,
                                               bot_id=BOT["bot_id"]), "application/json") == []
    # a channel the app is not in, that is not a direct message: not ours
    assert await events(adapter, message_event(channel="C0ELSE", text="hi", user="U0SAM", thread_ts=ts), "application/json") == []
    assert await events(adapter, block_actions(channel="C0ELSE", user="U0SAM", user_name="sam", message_ts=ts,
                                               value="hs_route1", action_id="handoff_claim")) == []
    [linked] = await events(adapter, message_event(channel=SAM_DM, text="link 7H3K9QXW", user="U0SAM", thread_ts=ts),
                            "application/json")
    assert isinstance(linked, LinkRequest)
    assert linked.reply_to == {"channel": SAM_DM, "thread_ts": None}


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("person", "error", "hint"), [
    ("U0GONE", "user_not_found", "no such user in this workspace"),
    (BOT["user_id"], "cannot_dm_bot", "is a bot"),
    ("U0KIM", "user_disabled", "deactivated"),
])
async def test_a_refused_direct_message_is_permanent_with_a_hint_naming_the_person(
    fake: FakeSlack, adapter: SlackChannel, person: str, error: str, hint: str,
) -> None:
    fake.disabled_users.add("U0KIM")
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(direct(to=person))
    assert error in str(refused.value)
    assert f"cannot open a direct message with Slack user {person}" in (refused.value.hint or "")
    assert hint in (refused.value.hint or "")
    assert fake.calls_to("chat.postMessage") == []


async def test_an_address_that_is_no_slack_user_id_is_refused_before_asking_slack(fake: FakeSlack, adapter: SlackChannel) -> None:
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(direct(to="sam@example.com"))
    assert "a Slack user id such as U0123ABCD was expected" in (refused.value.hint or "")
    assert fake.calls_to("conversations.open") == []


async def test_rate_limits_and_server_errors_on_the_way_are_transient(fake: FakeSlack, adapter: SlackChannel) -> None:
    fake.fail_next("conversations.open", Fault(status=429, error="ratelimited", headers={"Retry-After": "7"}),
                   Fault(status=503, error="service_unavailable"))
    with pytest.raises(TransientChannelError) as limited:
        await adapter.send(direct())
    with pytest.raises(TransientChannelError) as unavailable:
        await adapter.send(direct())
    assert (limited.value.retry_after, type(unavailable.value)) == (7.0, TransientChannelError)  # nothing posted: no doubt
    fake.fail_next("chat.postMessage", Fault(status=500, error="internal_error", lose_answer=False))
    with pytest.raises(UncertainDeliveryError):  # the post may have landed: looked for before a retry
        await adapter.send(direct())
    assert fake.top_level(SAM_DM) == []
    assert await adapter.find_sent(direct()) is None  # looked for in the direct message, not the room
    assert [c.args["channel"] for c in fake.calls_to("conversations.history")] == [SAM_DM]


async def test_a_direct_dispatch_whose_answer_was_lost_is_found_in_the_direct_message(fake: FakeSlack) -> None:
    adapter = SlackChannel(SlackConfig(id=2, label="Sales", bot_token=TOKEN, signing_secret=SIGNING_SECRET, channel=CHANNEL,
                                       api_base_url=fake.url, request_timeout=0.5))
    await adapter.start(standalone_context())
    try:
        fake.fail_next("chat.postMessage", Fault(lose_answer=True))
        with pytest.raises(UncertainDeliveryError):
            await adapter.send(direct())
        found = await adapter.find_sent(direct())
    finally:
        await adapter.stop()
    [posted] = fake.top_level(SAM_DM)
    assert found is not None
    assert (found.message_id, found.thread_key) == (posted["ts"], f"{SAM_DM}:{posted['ts']}")


# --------------------------------------------------------------------------- /handoff


async def test_handoff_away_becomes_an_availability_request_acknowledged_with_an_empty_200(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    body, path = fake.slash_command(text="away  on holiday until Monday", user="U0SAM", trigger_id="9.9.cmd")
    [away] = await events(adapter, body)
    back_body, _ = fake.slash_command(text="BACK", user="U0KIM", channel=SAM_DM)
    [back] = await events(adapter, back_body)
    assert isinstance(away, AvailabilityRequest)
    assert isinstance(back, AvailabilityRequest)
    assert (away.away, away.note, away.user_id, away.author, away.dedupe_key) == (
        True, "on holiday until Monday", "U0SAM", "Sam", "command:9.9.cmd")
    assert away.reply_to == {"response_url": fake.url.removesuffix("/api/") + path, "user": "U0SAM", "channel": CHANNEL}
    assert (back.away, back.note, back.user_id) == (False, None, "U0KIM")
    link_body, _ = fake.slash_command(text="link 7H3K 9QXW", user="U0SAM")
    [link] = await events(adapter, link_body)
    assert isinstance(link, LinkRequest)
    assert link.code == "7H3K 9QXW"


@pytest.mark.parametrize(("text", "says"), [
    ("", "`/handoff away [note]`"),
    ("holiday", "`/handoff back`"),
    ("away " + "x" * 201, "at most 200 characters; yours has 201"),
])
async def test_anything_else_after_handoff_gets_a_usage_line_only_the_person_sees(
    fake: FakeSlack, adapter: SlackChannel, text: str, says: str,
) -> None:
    body, _ = fake.slash_command(text=text, user="U0SAM")
    reply = await called(adapter, body)
    answer = json.loads(reply.body)
    assert (reply.status, reply.content_type, reply.messages) == (200, "application/json", [])
    assert answer["response_type"] == "ephemeral"
    assert says in answer["text"]


async def test_the_answer_goes_to_the_response_url_and_to_the_direct_message_once_that_expired(
    fake: FakeSlack, adapter: SlackChannel,
) -> None:
    body, path = fake.slash_command(text="away", user="U0SAM")
    [away] = await events(adapter, body)
    assert isinstance(away, AvailabilityRequest)
    await adapter.send(Answer(text="You are away <!here> from now.", to=away.reply_to))
    [answered] = fake.answers[path]
    escaped = "You are away &lt;!here&gt; from now."  # pings nobody
    assert (answered["response_type"], answered["text"], answered["blocks"][0]["text"]["text"]) == ("ephemeral", escaped, escaped)

    fake.expired.add(path)
    await adapter.send(Answer(text="You are available again.", to=away.reply_to))
    foreign = {**away.reply_to, "response_url": "https://evil.example.com/commands/1"}
    await adapter.send(Answer(text="Not to a stranger's URL.", to=foreign))
    assert [texts(m) for m in fake.top_level(SAM_DM)] == [["You are available again."], ["Not to a stranger's URL."]]
    assert len(fake.calls_to("response_url")) == 2  # the expired one was tried, the stranger's never

    fake.fail_next("response_url", Fault(status=503, error="unavailable"))
    with pytest.raises(TransientChannelError):
        await adapter.send(Answer(text="later", to=away.reply_to))


async def test_a_forged_slash_command_gets_401_and_nothing_is_stored(start_desk: StartDesk, fake: FakeSlack) -> None:
    h: Harness = await start_desk(channels=[slack_entry(fake)], delivery={"base_backoff": "10ms"})
    body, _ = fake.slash_command(text="away", user="U0SAM")
    forged = await h.client.post("/webhooks/2", content=body, headers=signed_headers("not-the-secret", body, content_type=FORM))
    stale = await h.client.post("/webhooks/2", content=body,
                                headers=signed_headers(SIGNING_SECRET, body, content_type=FORM, timestamp=1_000_000_000))
    assert (forged.status_code, stale.status_code, await inbound_count(h)) == (401, 401, 0)
    signed = await h.client.post("/webhooks/2", content=body, headers=signed_headers(SIGNING_SECRET, body, content_type=FORM))
    await h.desk.settle()
    assert (signed.status_code, signed.content, await inbound_count(h)) == (200, b"", 1)

"""A person reached directly on Discord, through the real discord.py client against the
fake Discord (tests/fake_discord.py): POST /users/@me/channels opens their direct message,
the dispatch and everything after it go there (relays and notices as replies to the
dispatch), and what the person writes or presses there comes back over the gateway and the
interactions endpoint under the dispatch's thread_key, `"{DM channel id}:{dispatch id}"`."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from bot.domain.rendering import Renderer
from channels.base import (
    ChannelContext,
    ClaimPress,
    Dispatch,
    InboundMessage,
    Notice,
    PermanentChannelError,
    RecipientText,
    Relay,
    ReleasePress,
    TransientChannelError,
    WebhookRequest,
)
from channels.discord import DiscordChannel, DiscordConfig, escape
from tests.fake_discord import KIM, OTHER_BOT, SAM, STAFF_CHANNEL, FakeDiscord, Fault
from tests.route_dispatches import FORM_URL, route_dispatch

TOKEN = "MTAwMDAwMDAwMDAwMDAwMDAw.GfAkE1.discord-bot-token-for-tests"
OPEN = "POST /users/@me/channels"


class Inbox:
    """What the adapter delivers, and a way to wait for the next of it."""

    def __init__(self) -> None:
        self.received: list[InboundMessage] = []
        self._changed = asyncio.Condition()

    async def __call__(self, message: InboundMessage) -> None:
        async with self._changed:
            self.received.append(message)
            self._changed.notify_all()

    async def count(self, n: int) -> list[InboundMessage]:
        async with asyncio.timeout(5), self._changed:
            await self._changed.wait_for(lambda: len(self.received) >= n)
        return self.received


@pytest.fixture
async def fake() -> AsyncIterator[FakeDiscord]:
    server = await FakeDiscord(token=TOKEN).start()
    yield server
    await server.stop()


async def started(fake: FakeDiscord, inbox: Inbox, **overrides: Any) -> DiscordChannel:
    channel = DiscordChannel(DiscordConfig(**{
        "id": 5, "label": "Discord", "bot_token": TOKEN, "channel_id": STAFF_CHANNEL, "api_base_url": fake.api_url,
        "gateway_url": fake.gateway_url, "application_public_key": fake.public_key, "request_timeout": 2, **overrides}))
    await channel.start(ChannelContext(public_url="http://desk.test", deliver_inbound=inbox, render=Renderer().render))
    return channel


@pytest.fixture
async def inbox() -> Inbox:
    return Inbox()


@pytest.fixture
async def adapter(fake: FakeDiscord, inbox: Inbox) -> AsyncIterator[DiscordChannel]:
    """The adapter with its gateway (for the person's messages) and its interactions endpoint."""
    channel = await started(fake, inbox)
    await fake.wait_connected()
    yield channel
    await channel.stop()


def direct(sid: str = "hs_route1", to: dict[str, Any] = SAM) -> Dispatch:
    return route_dispatch(sid).model_copy(update={"direct": to["id"]})


def labels(message: dict[str, Any]) -> list[str]:
    return [c["label"] for row in message.get("components") or [] for c in row["components"]]


async def clicked(adapter: DiscordChannel, fake: FakeDiscord, payload: dict[str, Any]) -> list[InboundMessage]:
    body, headers = fake.signed(payload)
    reply = await adapter.handle_webhook(WebhookRequest(body=body, headers=headers, query={}, url=""))
    assert reply.status == 200
    return reply.messages


# --------------------------------------------------------------------------- the dispatch and what follows it


async def test_a_direct_dispatch_lands_in_the_persons_direct_message_with_the_claim_button_and_form_link(
    fake: FakeDiscord, adapter: DiscordChannel,
) -> None:
    receipt = await adapter.send(direct())
    second = await adapter.send(direct("hs_route2"))
    dm = fake.dm_of(SAM)
    assert dm is not None
    first_post, second_post = fake.posts(dm)
    assert [c.json for c in fake.calls_to(OPEN)] == [{"recipient_id": int(SAM["id"])}]  # opened once, then known
    assert fake.posts(STAFF_CHANNEL) == []
    assert "guild_id" not in first_post
    assert labels(first_post) == ["I'm on it", "Fill return form", "Release"]
    assert first_post["components"][0]["components"][1]["url"] == FORM_URL
    assert first_post["request"]["allowed_mentions"] == {"parse": []}
    assert first_post["embeds"][0]["footer"]["text"].startswith("Reply to this message (or write here): Ana reads your replies")
    assert (receipt.message_id, receipt.thread_key, receipt.thread) == (
        first_post["id"], f"{dm}:{first_post['id']}", {"channel_id": str(dm), "message_id": first_post["id"], "direct": SAM["id"]})
    assert second.thread_key == f"{dm}:{second_post['id']}"
    assert fake.calls_to("POST /channels/{id}/messages/{id}/threads") == []  # a direct message has no threads
    assert DiscordChannel.capabilities.direct is True


async def test_a_relay_and_notices_reply_to_the_dispatch_and_taken_edits_it(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    receipt = await adapter.send(direct())
    relay = await adapter.send(Relay(handoff_id="hs_route1", text="Ana: still there?", author="Ana", body="still there?",
                                     thread=receipt.thread))
    await adapter.send(Notice(handoff_id="hs_route1", text="You claimed it.", about="claimed", thread=receipt.thread))
    dm = fake.dm_of(SAM)
    dispatch, relayed, claimed = fake.posts(dm or 0)
    assert [m["message_reference"]["message_id"] for m in (relayed, claimed)] == [dispatch["id"]] * 2
    assert (relayed["content"].endswith("still there?"), claimed["content"]) == (True, "You claimed it.")
    assert relay.thread_key == receipt.thread_key
    assert labels(dispatch) == ["Fill return form", "Release"]  # the claim button went

    other = await adapter.send(direct("hs_route2"))
    taken = await adapter.send(Notice(handoff_id="hs_route2", text="Taken by **Kim**.", about="taken", thread=other.thread))
    edited = fake.posts(dm or 0)[-1]
    assert (labels(edited), edited["content"].endswith(escape("Taken by **Kim**."))) == ([], True)
    assert taken.thread_key == other.thread_key


async def test_the_persons_replies_and_presses_come_back_with_the_dispatchs_thread_key(
    fake: FakeDiscord, adapter: DiscordChannel, inbox: Inbox,
) -> None:
    first = await adapter.send(direct())
    relay = await adapter.send(Relay(handoff_id="hs_route1", text="Ana: hi", author="Ana", body="hi", thread=first.thread))
    second = await adapter.send(direct("hs_route2"))
    dm = fake.dm_of(SAM) or 0
    dispatch = fake.posts(dm)[0]
    await fake.human_message(dm, "on the first one", reply_to=dispatch)
    await fake.human_message(dm, "answering Ana", reply_to={"id": relay.message_id})
    await fake.human_message(dm, "no reply: the newest")
    await fake.human_message(dm, "from a bot", author=OTHER_BOT)
    on_dispatch, on_relay, plain = await inbox.count(3)
    assert all(isinstance(m, RecipientText) for m in (on_dispatch, on_relay, plain))
    assert [m.thread_key for m in (on_dispatch, on_relay, plain)] == [first.thread_key, first.thread_key, second.thread_key]
    assert (on_dispatch.author, on_dispatch.user_id) == ("Sam", SAM["id"])

    [claim] = await clicked(adapter, fake, fake.button_click(dispatch, "handoff_claim:hs_route1", user=SAM))
    [release] = await clicked(adapter, fake, fake.button_click(dispatch, "handoff_release:hs_route1", user=SAM))
    assert isinstance(claim, ClaimPress)
    assert isinstance(release, ReleasePress)
    assert claim.thread_key == release.thread_key == first.thread_key
    assert (claim.author, claim.user_id) == ("Sam", SAM["id"])
    assert len(inbox.received) == 3  # the bot's message was not relayed


async def test_after_a_restart_a_plain_message_goes_to_the_newest_dispatch_read_back_from_the_conversation(
    fake: FakeDiscord, inbox: Inbox,
) -> None:
    first = await started(fake, inbox)
    try:
        await first.send(direct())
        newest = await first.send(direct("hs_route2"))
        await first.send(Relay(handoff_id="hs_route2", text="Ana: hi", author="Ana", body="hi", thread=newest.thread))
    finally:
        await first.stop()
    again = await started(fake, inbox)
    try:
        await fake.wait_connected()
        await fake.human_message(fake.dm_of(SAM) or 0, "still on it")
        [text] = await inbox.count(1)
    finally:
        await again.stop()
    assert isinstance(text, RecipientText)
    assert text.thread_key == newest.thread_key


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("person", "hint"), [
    ({"id": "900000000000000999"}, "Discord has no such user"),
    (OTHER_BOT, "they take no direct messages from the bot"),
    (KIM, "they take no direct messages from the bot"),  # open, but her settings refuse the post
])
async def test_a_person_out_of_reach_is_permanent_with_a_hint_naming_them(
    fake: FakeDiscord, adapter: DiscordChannel, person: dict[str, Any], hint: str,
) -> None:
    fake.dm_closed.add(KIM["id"])
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(direct(to=person))
    assert f"cannot send a direct message to Discord user {person['id']}: {hint}" in (refused.value.hint or "")
    assert all(not fake.posts(dm) for dm in fake.dms)


async def test_an_address_that_is_no_discord_user_id_is_refused_before_asking_discord(
    fake: FakeDiscord, adapter: DiscordChannel,
) -> None:
    with pytest.raises(PermanentChannelError) as refused:
        await adapter.send(route_dispatch().model_copy(update={"direct": "sam#1234"}))
    assert "a Discord user id (a snowflake" in (refused.value.hint or "")
    assert fake.calls_to(OPEN) == []


async def test_rate_limits_and_server_errors_on_the_way_are_transient(fake: FakeDiscord, adapter: DiscordChannel) -> None:
    fake.fail_next(OPEN, Fault(status=429, body={"message": "You are being rate limited.", "retry_after": 2.5, "global": False},
                               headers={"Retry-After": "3"}), Fault(status=502, body="<html>bad gateway</html>"))
    with pytest.raises(TransientChannelError) as limited:
        await adapter.send(direct())
    with pytest.raises(TransientChannelError):
        await adapter.send(direct())
    assert limited.value.retry_after == 2.5
    assert fake.dms == {}

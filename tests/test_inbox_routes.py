"""The owner inbox on a handoff that went to a route: who was asked where (and how each
dispatch went), the step, "Escalates in" while nobody has it and "Taken by" once someone
does, the Claim button (first claim wins, the others are told, a late one changes nothing,
CSRF required) and replies from the inbox, which claim the handoff through the route's
owner inbox thread. A real desk on a manual clock; the other recipients are scripted channels."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest

from bot.config import TeamConfig
from bot.runtime.clock import ManualClock
from bot.store.models import HandoffEvent, HandoffRecipient, HandoffSession
from bot.web.inbox_routes import OfferNames, masked_address, ordinal, passed_over, route_status, target_labels
from channels.base import PermanentChannelError, RecipientText
from tests.conftest import Harness, StartDesk
from tests.fakes import ScriptedChannel
from tests.test_inbox import csrf_of, list_updates, nonce_of, set_name
from tests.test_routes import BRIEF, MONDAY_NOON, SUPPORT, channel, dispatch_thread, escalate, notices

# SUPPORT (route 20) notifies 1 and 2 at once, then 3; here 1 is the owner inbox itself.
CHANNELS = [
    {"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
    {"id": 2, "kind": "owner_inbox", "label": "Telegram support"},
    {"id": 3, "kind": "owner_inbox", "label": "On-call phone"},
]
NO_INBOX = {**SUPPORT, "id": 21, "label": "Phones only", "steps": [{"notify": [2, 3], "claim_within": "5m"}]}


@pytest.fixture
def database_url(sqlite_url: str) -> str:
    """Page behaviour does not depend on the database: SQLite only."""
    return sqlite_url


async def inbox_route_desk(start_desk: StartDesk, **overrides: Any) -> Harness:
    """Channel 1 is the real owner inbox; 2 and 3 are scripted, so what they were sent shows."""
    return await start_desk(
        clock=ManualClock(MONDAY_NOON), adapters={2: ScriptedChannel, 3: ScriptedChannel},
        channels=CHANNELS, routes=[SUPPORT, NO_INBOX], **overrides,
    )


async def route_handoff(harness: Harness, route_id: int = 20) -> tuple[str, str]:
    cid = await harness.conversation()
    started = await harness.tool(cid, "handoff_request", {"channel_id": route_id, **BRIEF})
    assert started["ok"] is True, started
    await harness.desk.settle()
    return cid, started["handoff_session_id"]


async def page_of(harness: Harness, sid: str) -> str:
    response = await harness.client.get(f"/inbox/handoffs/{sid}")
    assert response.status_code == 200
    return response.text


async def updates_of(harness: Harness, sid: str) -> dict[str, Any]:
    response = await harness.client.get(f"/inbox/handoffs/{sid}/updates", params={"after": 0, "wait": 0})
    assert response.status_code == 200
    return dict(response.json())


async def claim_in_inbox(harness: Harness, sid: str, *, shown: bool = True) -> str:
    """Press Claim on the handoff page (`shown`: the page offers it; a late post from an
    older page does not need it to); returns the notice the page comes back with."""
    page = await page_of(harness, sid)
    assert (f'action="/inbox/handoffs/{sid}/claim"' in page) == shown
    pressed = await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": csrf_of(page)})
    assert pressed.status_code == 303
    location = pressed.headers["location"]
    assert location.startswith(f"/inbox/handoffs/{sid}?notice=")
    return unquote(location.split("notice=", 1)[1])


def recipients_of(body: dict[str, Any]) -> list[tuple[str, int, str]]:
    return [(r["label"], r["step"], r["words"]) for r in body["route"]["recipients"]]


# --------------------------------------------------------------------------- what the pages show


async def test_a_route_handoff_shows_who_was_asked_its_step_and_when_it_escalates(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    _, sid = await route_handoff(harness)
    page = await page_of(harness, sid)
    assert '<span class="pill" title="A route: its steps notify channels in turn until someone takes it">Support</span>' in page
    assert '<span class="pill" id="route-step">step 1 of 2</span>' in page
    assert ">Escalates in 5 min</span>" in page
    assert "min left" not in page  # the idle timer does not run before a claim
    assert '<span class="recipient-label">Owner inbox</span> <span class="pill">step 1</span> <span class="recipient-words">notified just now</span>' in page
    assert '<span class="recipient-label">Telegram support</span>' in page
    assert "On-call phone" not in page  # the second step has not run
    assert "Nobody has taken it yet." in page

    # the long-poll carries the same, and the countdown follows the clock
    harness.desk.clock.advance(timedelta(minutes=2))  # type: ignore[attr-defined]  # a ManualClock
    body = await updates_of(harness, sid)
    assert (body["time_left"], body["deadline"]) == ("", "")
    route = body["route"]
    assert (route["label"], route["step"], route["taken"], route["claimable"]) == ("Support", "step 1 of 2", "", True)
    assert route["countdown"]["text"] == "Escalates in 3 min"
    assert route["countdown"]["at"] == (MONDAY_NOON + timedelta(minutes=5)).isoformat()
    assert recipients_of(body) == [("Owner inbox", 1, "notified 2 min ago"), ("Telegram support", 1, "notified 2 min ago")]

    # the list card and its live updates
    listed = (await harness.client.get("/inbox")).text
    assert "Asked: Owner inbox (notified), Telegram support (notified)" in listed
    assert ">Escalates in 3 min</span>" in listed
    [card] = (await list_updates(harness.client))["handoffs"]
    assert (card["channel"], card["time_left"], card["deadline"]) == ("Support", "", "")
    assert card["route"]["countdown"]["text"] == "Escalates in 3 min"
    assert card["route"]["asked"] == "Asked: Owner inbox (notified), Telegram support (notified)"


async def test_after_an_escalation_the_next_step_shows_and_the_last_counts_down_to_the_hand_back(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    _, sid = await route_handoff(harness)
    await escalate(harness, timedelta(minutes=5))
    body = await updates_of(harness, sid)
    assert body["route"]["step"] == "step 2 of 2"
    assert body["route"]["countdown"]["text"] == "Back to the assistant in 10 min"
    assert recipients_of(body)[-1] == ("On-call phone", 2, "notified just now")
    assert ">Back to the assistant in 10 min</span>" in await page_of(harness, sid)


async def test_a_failed_dispatch_shows_its_error(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    channel(harness, 2).fail_next(PermanentChannelError("403 forbidden", hint="the bot was removed from the chat"))
    _, sid = await route_handoff(harness)
    body = await updates_of(harness, sid)
    assert recipients_of(body) == [("Owner inbox", 1, "notified just now"),
                                   ("Telegram support", 1, "failed just now: the bot was removed from the chat")]
    assert body["route"]["asked"] == "Asked: Owner inbox (notified), Telegram support (failed)"
    assert '<li class="recipient recipient-failed">' in await page_of(harness, sid)


async def test_a_handoff_straight_to_a_channel_has_no_route_state(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = await page_of(harness, sid)
    assert 'id="route-status"' not in page and "/claim" not in page
    assert "30 min left" in page
    body = await updates_of(harness, sid)
    assert body["route"] is None and body["time_left"] == "30 min left"
    [card] = (await list_updates(harness.client))["handoffs"]
    assert card["route"] is None and card["channel"] == "Owner inbox"


async def test_the_list_shows_each_routed_handoff_its_own_step_and_recipients(start_desk: StartDesk) -> None:
    """The list reads the recipients of all its routed handoffs at once: each card still
    gets its own (one escalated, one just asked, one straight to a channel)."""
    harness = await inbox_route_desk(start_desk)
    _, escalated = await route_handoff(harness)
    await escalate(harness, timedelta(minutes=5))
    _, fresh = await route_handoff(harness)
    straight = (await harness.start_handoff(await harness.conversation()))["handoff_session_id"]
    cards = {card["id"]: card for card in (await list_updates(harness.client))["handoffs"]}
    assert cards[escalated]["route"]["step"] == "step 2 of 2"
    assert cards[escalated]["route"]["asked"] == (
        "Asked: Owner inbox (notified), Telegram support (notified), On-call phone (notified)")
    assert cards[fresh]["route"]["step"] == "step 1 of 2"
    assert cards[fresh]["route"]["asked"] == "Asked: Owner inbox (notified), Telegram support (notified)"
    assert cards[straight]["route"] is None


# --------------------------------------------------------------------------- Claim


async def test_claim_takes_it_the_others_are_told_and_a_second_claim_changes_nothing(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid, sid = await route_handoff(harness)
    await set_name(harness.client, "Sam")
    assert await claim_in_inbox(harness, sid) == "You have it now; everyone else asked was told."
    await harness.desk.settle()
    handoff = await harness.handoff(sid)
    assert (handoff["claimed_by"], handoff["claimed_via"], handoff["channel_id"]) == ("Sam", "inbox", 1)
    assert handoff["escalate_at"] is None and handoff["idle_deadline"] is not None
    [taken] = notices(harness, 2, "taken")
    assert taken.text.startswith(f"Handoff {taken.short_code} was taken by Sam (Owner inbox) at 11:00 UTC.")

    page = await page_of(harness, sid)
    assert '<p class="taken" id="taken">Taken by Sam (Owner inbox) just now</p>' in page
    assert "/claim" not in page and 'id="escalates"' not in page
    assert "30 min left" in page  # the idle timer runs from the claim
    assert 'id="reply-text"' in page  # the subscriber's messages come to the inbox now
    assert "notified just now · has it" in page

    # the subscriber's next message goes to the claimer's thread only
    await harness.say(cid, "Thanks!")
    await harness.desk.settle()
    assert [o.body for o in channel(harness, 2).sent if o.purpose == "relay"] == []  # type: ignore[attr-defined]

    # a second press (another tab, a double click) is a no-op the trail records
    assert await claim_in_inbox(harness, sid, shown=False) == "Already taken by Sam; nothing changed."
    await harness.desk.settle()
    assert len(notices(harness, 2, "taken")) == 1
    kinds = await harness.kinds(sid)
    assert kinds.count("handoff_claimed") == 1 and kinds.count("claim_noop") == 1


async def test_someone_elses_claim_shows_who_has_it_and_the_inbox_cannot_take_or_answer_it(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid, sid = await route_handoff(harness)
    opened = await page_of(harness, sid)  # the owner opened it before Tom took it
    said = await harness.desk.inbound.submit_and_wait(
        2, RecipientText(thread_key=dispatch_thread(harness, 2), text="Hi Ana, Tom here.", author="Tom", user_id="u-tom"))
    assert said == "relayed"
    await harness.desk.settle()
    pressed = await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": csrf_of(opened)})
    assert "Already%20taken%20by%20Tom" in pressed.headers["location"]
    assert (await harness.handoff(sid))["claimed_by"] == "Tom"

    page = await page_of(harness, sid)
    assert "Taken by Tom (Telegram support) just now" in page
    assert 'id="reply-text"' not in page
    assert "Tom has this handoff; replies go through Telegram support." in page
    sent = await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": "n1", "text": "Me too"})
    assert "Tom%20has%20this%20handoff" in sent.headers["location"]
    assert ("Support", "Me too") not in await harness.human_texts(cid)
    assert (await updates_of(harness, sid))["route"]["taken"] == "Taken by Tom (Telegram support) just now"


async def test_claim_needs_the_csrf_token_and_this_site_and_get_changes_nothing(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    _, sid = await route_handoff(harness)
    page = await page_of(harness, sid)
    assert (await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={})).status_code == 403
    assert (await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": "forged"})).status_code == 403
    cross = await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": csrf_of(page)},
                                      headers={"Origin": "https://evil.example"})
    assert cross.status_code == 403
    assert (await harness.client.get(f"/inbox/handoffs/{sid}/claim")).status_code == 405
    handoff = await harness.handoff(sid)
    assert handoff["claimed_at"] is None and handoff["escalate_at"] is not None
    assert "claim_noop" not in await harness.kinds(sid)


async def test_a_handoff_straight_to_a_channel_has_nothing_to_claim(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid = await harness.conversation()
    sid = (await harness.start_handoff(cid))["handoff_session_id"]
    page = await page_of(harness, sid)
    pressed = await harness.client.post(f"/inbox/handoffs/{sid}/claim", data={"csrf": csrf_of(page)})
    assert "nothing%20to%20claim" in pressed.headers["location"]
    assert (await harness.handoff(sid))["claimed_at"] is None


# --------------------------------------------------------------------------- replies on a route


async def test_an_inbox_reply_on_a_route_claims_it_and_reaches_the_subscriber(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid, sid = await route_handoff(harness)
    await set_name(harness.client, "Sam")
    page = await page_of(harness, sid)
    assert 'id="reply-text"' in page  # unclaimed, and the route notified the owner inbox
    sent = await harness.client.post(
        f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": nonce_of(page), "text": "Hi Ana, Sam here."})
    assert sent.status_code == 303
    assert sent.headers["location"] == f"/inbox/handoffs/{sid}"  # relayed: no notice
    await harness.desk.settle()
    handoff = await harness.handoff(sid)
    assert (handoff["claimed_by"], handoff["claimed_via"], handoff["channel_id"]) == ("Sam", "channel:1", 1)
    assert ("Sam", "Hi Ana, Sam here.") in await harness.human_texts(cid)
    agent_said = [m["text"] for m in await harness.messages(cid) if m["role"] == "agent"]
    assert "Sam from our support team has joined the conversation." in agent_said
    [taken] = notices(harness, 2, "taken")
    assert "was taken by Sam (Owner inbox)" in taken.text
    assert "Taken by Sam (Owner inbox) just now" in await page_of(harness, sid)


async def test_a_route_that_did_not_notify_the_inbox_can_be_claimed_but_not_answered_here(start_desk: StartDesk) -> None:
    harness = await inbox_route_desk(start_desk)
    cid, sid = await route_handoff(harness, route_id=21)
    page = await page_of(harness, sid)
    refusal = "This route did not notify the owner inbox, so replies go through the channels it notified; " \
              "you can still claim or release it here."
    assert refusal in page and 'id="reply-text"' not in page
    assert "a claim here stops the others, but you cannot answer from here." in page
    sent = await harness.client.post(f"/inbox/handoffs/{sid}/reply", data={"csrf": csrf_of(page), "nonce": "n", "text": "Hello"})
    assert "did%20not%20notify%20the%20owner%20inbox" in sent.headers["location"]
    assert await harness.human_texts(cid) == []
    assert (await harness.handoff(sid))["claimed_at"] is None  # a refused reply claims nothing

    assert await claim_in_inbox(harness, sid) == "You have it now; everyone else asked was told."
    await harness.desk.settle()
    handoff = await harness.handoff(sid)
    assert (handoff["claimed_by"], handoff["claimed_via"]) == ("Support", "inbox")
    for cid_ in (2, 3):
        [taken] = notices(harness, cid_, "taken")
        assert "was taken by Support (inbox)" in taken.text
    page = await page_of(harness, sid)
    assert "Taken by Support (inbox) just now" in page
    assert "Taken here by Support, but this route did not notify the owner inbox, so there is no inbox thread to " \
           "answer from; release it when you are done." in page


# --------------------------------------------------------------------------- the words, without a desk


def routed(**values: Any) -> HandoffSession:
    return HandoffSession(
        id="hs_1", conversation_id="c_1", channel_id=2, channel_kind="scripted", channel_label="Telegram support",
        state="active", urgency="normal", summary="s", expected_action="e", created_at=MONDAY_NOON,
        **{"route_id": 20, "step": 0, **values},
    )


def recipient(rid: int, channel_id: int, label: str, state: str, **values: Any) -> HandoffRecipient:
    return HandoffRecipient(id=rid, handoff_session_id="hs_1", channel_id=channel_id, channel_kind="scripted",
                            channel_label=label, step=0, state=state, created_at=MONDAY_NOON, **values)


def ago(moment: Any) -> str:
    return "at noon" if moment is not None else ""


def test_a_route_since_removed_from_the_config_still_shows_its_id_and_step() -> None:
    status = route_status(routed(step=1, escalate_at=MONDAY_NOON + timedelta(seconds=40)), [], None, MONDAY_NOON, ago)
    assert status is not None
    assert (status.label, status.step_text, status.asked) == ("route 20", "step 2", "")
    assert status.countdown is not None and status.countdown.text == "Back to the assistant in 40 s"
    late = route_status(routed(escalate_at=MONDAY_NOON), [], None, MONDAY_NOON + timedelta(seconds=1), ago)
    assert late is not None and late.countdown is not None and late.countdown.text == "handing back now"


def test_who_took_it_is_named_by_their_thread_or_by_how_they_claimed() -> None:
    sent = [recipient(1, 1, "Slack support", "notified", notified_at=MONDAY_NOON),
            recipient(2, 2, "Telegram support", "failed", failed_at=MONDAY_NOON, error="403\n  forbidden")]
    by_thread = route_status(routed(claimed_at=MONDAY_NOON, claimed_by="Tom", claimed_via="channel:1", claimed_recipient_id=1),
                             sent, None, MONDAY_NOON, ago)
    assert by_thread is not None and by_thread.taken == "Taken by Tom (Slack support) at noon"
    assert [r.words for r in by_thread.recipients] == ["notified at noon · has it", "failed at noon: 403 forbidden"]
    assert by_thread.countdown is None and not by_thread.claimable
    by_form = route_status(routed(claimed_at=MONDAY_NOON, claimed_by="Kim", claimed_via="form"), sent, None, MONDAY_NOON, ago)
    assert by_form is not None and by_form.taken == "Taken by Kim (return form) at noon"
    gone = route_status(routed(claimed_at=MONDAY_NOON, claimed_by="Lu", claimed_via="channel:9"), sent, None, MONDAY_NOON, ago)
    assert gone is not None and gone.taken == "Taken by Lu (channel 9) at noon"
    assert route_status(routed(route_id=None), sent, None, MONDAY_NOON, ago) is None


# --------------------------------------------------------------------------- offers to people, in words


def test_an_address_is_masked_but_for_an_e_mail_s_first_letter_and_a_number_s_last_digits() -> None:
    assert masked_address("olga@example.com") == "o•••@example.com"
    assert masked_address("+4915112345678") == "+•••••••••5678"
    assert masked_address("whatsapp:+49 151 1234") == "whatsapp:+•• ••• ••34"
    assert masked_address("U0TOM") == "U0TOM"  # a provider's user id reaches nobody outside it
    assert masked_address(None) == ""


def test_turns_read_as_ordinals() -> None:
    assert [ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == [
        "1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_a_target_reads_by_its_config_label_and_by_its_id_once_the_config_has_none() -> None:
    names = OfferNames({"olga": "Olga Petrova"}, target_labels(
        [TeamConfig(id="support", label="Support desk", members=["olga"])], []))
    assert names.target("team:support") == "team Support desk"
    assert names.target("team:gone") == "team gone"
    assert names.target("oncall:nights") == "on call: nights"
    assert names.target("person:olga") == "named in the route"
    assert (names.person("olga"), names.person("sam")) == ("Olga Petrova", "sam")


def test_who_was_passed_over_is_named_once_each_with_why() -> None:
    def passed(pid: str, why: str) -> HandoffEvent:
        return HandoffEvent(kind="offer_passed_over", actor="ladder", person_id=pid, detail={"why": why}, created_at=MONDAY_NOON)

    events = [passed("ines", "away"), passed("sam", "at_capacity"), passed("ines", "away"),
              HandoffEvent(kind="handoff_offered", actor="ladder", person_id="olga", created_at=MONDAY_NOON)]
    assert passed_over(events, OfferNames({"ines": "Ines Duarte"})) == "Passed over: Ines Duarte (away), sam (at capacity)"
    assert passed_over(events[3:], OfferNames()) == ""

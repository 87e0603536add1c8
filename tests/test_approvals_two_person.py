"""The two-person rule (`approvals_required: 2`) and approvals asked through a route's ladder,
with the real desk: buttons pressed in channels go through the desk's inbound, the owner
decides through the API, the inbox's session and the decision page; the approvers' channels
are ScriptedChannels (or the real Slack and Telegram adapters against their fakes), the clock
is a ManualClock.

Two people means two people of the directory: a press counts as the person whose channel
identity is linked to them (the same person from two channels once), the owner token is a
service identity and never counts, and a press from an identity linked to nobody is refused.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any
from urllib.parse import unquote

import pytest
from sqlalchemy import func, select

from bot.domain.approval_votes import ANSWERS, DecisionOutcome, channel_voter, refusal
from bot.runtime.clock import ManualClock
from bot.store.models import ApprovalVote, HandoffEvent, OutboxItem
from channels.base import ApprovalClosed, ApprovalPrompt, Decision
from tests import approval_actions
from tests.approval_actions import refund_action
from tests.conftest import TELEGRAM_TOKEN, Harness, StartDesk, config_problem
from tests.fake_slack import FakeSlack, block_actions, signed_headers
from tests.fake_telegram import KIM, SAM, STAFF_CHAT_ID, FakeTelegram
from tests.fakes import ScriptedChannel
from tests.office_hours import CLOSED_HOURS, closed_clock

CHANNELS = [{"id": 1, "kind": "owner_inbox", "label": "Owner inbox"},
            {"id": 2, "kind": "owner_inbox", "label": "Approvers"},
            {"id": 3, "kind": "owner_inbox", "label": "On call"}]
SCRIPTED = {2: ScriptedChannel, 3: ScriptedChannel}
OWNER_TOKEN = "owner-token-0123456789abcdef"
LADDER = {"id": 20, "label": "Approvers on call", "steps": [
    {"notify": [2], "claim_within": "5m"}, {"notify": [3], "claim_within": "5m"}]}
# The people of these desks, and the user ids their channel identities have on channels 2
# and 3 (both of kind owner_inbox, so one identity each)
PEOPLE = {"kim": ("Kim", "U1"), "lee": ("Lee", "U2"), "max": ("Max", "U3")}


def two_person(**overrides: Any) -> dict[str, Any]:
    return refund_action(2, **{"policy": "ask_always", "approvals_required": 2, "approval_channels": [2, 3], **overrides})


@pytest.fixture(autouse=True)
def _fresh_calls() -> None:
    approval_actions.CALLS.clear()


async def person(harness: Harness, pid: str, name: str, *identities: tuple[str, str]) -> None:
    """A person of the directory, with the channel identities (kind, provider user id) linked to them."""
    people = harness.desk.people
    await people.add(pid=pid, name=name, email=f"{pid}@example.com", source="cli", actor="test")
    for kind, value in identities:
        await people.link(pid, kind, value, verified_via="cli", actor="test")


async def start(start_desk: StartDesk, action: dict[str, Any] | None = None, **overrides: Any) -> tuple[Harness, str, str]:
    """A desk whose agent has asked for `action` (two people by default), with `PEOPLE` linked
    on the scripted channels; the approval id."""
    harness = await start_desk(channels=CHANNELS, actions=[action or two_person()], adapters=SCRIPTED, **overrides)
    for pid, (name, user_id) in PEOPLE.items():
        await person(harness, pid, name, ("owner_inbox", user_id))
    cid = await harness.conversation()
    return harness, cid, await harness.ask_approval(cid, order_id="1234", amount=25)


async def press(harness: Harness, channel_id: int, aid: str, user_id: str | None, *, approve: bool = True,
                author: str = "Kim") -> str:
    """A person presses Approve or Deny in a channel; what the desk's inbound made of it."""
    return await harness.desk.inbound.submit_and_wait(channel_id, Decision(
        author=author, user_id=user_id, approval_id=aid, approve=approve))


def sent(harness: Harness, channel_id: int, kind: type[ApprovalPrompt] | type[ApprovalClosed]) -> list[str]:
    channel = harness.desk.channels.get(channel_id)
    assert isinstance(channel, ScriptedChannel)
    return [o.text for o in channel.sent if isinstance(o, kind)]


async def kinds(harness: Harness) -> list[str]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(HandoffEvent.kind).order_by(HandoffEvent.id))).all())


async def trail(harness: Harness, kind: str) -> list[HandoffEvent]:
    async with harness.desk.db.read() as session:
        return list((await session.scalars(select(HandoffEvent).where(HandoffEvent.kind == kind).order_by(HandoffEvent.id))).all())


async def decide_by_api(harness: Harness, aid: str, decision: str = "approve", **body: Any) -> Any:
    return await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": decision, **body},
                                     headers={"Authorization": f"Bearer {OWNER_TOKEN}"})


# --------------------------------------------------------------------------- two people


async def test_two_people_must_approve_and_the_same_person_twice_counts_once(start_desk: StartDesk) -> None:
    harness, cid, aid = await start(start_desk)
    [prompt] = sent(harness, 2, ApprovalPrompt)
    assert "Needs two people: two different people must approve it (each counts once); one denial denies." in prompt

    assert await press(harness, 2, aid, "U1", author="kim.ito") == ANSWERS[DecisionOutcome.FIRST_APPROVAL]
    assert await press(harness, 3, aid, "U1", author="Kim again") == ANSWERS[DecisionOutcome.SAME_PERSON]
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert (view["state"], view["approvals_required"]) == ("pending", 2)
    # the person's name, never the handle the channel gave
    assert [(v["voter"], v["name"], v["approve"]) for v in view["votes"]] == [("person:kim", "Kim", True)]
    assert approval_actions.CALLS == []

    assert await press(harness, 3, aid, "U2", author="lee.p") == "approval approved"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]  # once
    view = await harness.approval(aid)
    assert (view["state"], view["run_state"], view["receipt"]["decided_by"]) == ("approved", "succeeded", "Kim and Lee")
    assert [v["voter"] for v in view["votes"]] == ["person:kim", "person:lee"]
    assert "Approved by Kim and Lee" in sent(harness, 2, ApprovalClosed)[0]
    assert (await harness.system_texts(cid))[0].startswith("[Approval — refund_order was approved and ran")
    assert [(e.person_id, e.detail["approvals"]) for e in await trail(harness, "approval_vote")] == [("kim", 1), ("lee", 2)]
    [approved] = await trail(harness, "approval_approved")
    assert (approved.actor, approved.person_id, approved.detail["approved_by_people"]) == ("Kim and Lee", "lee", ["kim", "lee"])
    events = await kinds(harness)
    assert events.count("approval_vote_repeated") == 1
    assert events.index("approval_approved") > events.index("approval_vote_repeated")


async def test_one_denial_denies_at_once_even_after_an_approval(start_desk: StartDesk) -> None:
    harness, cid, aid = await start(start_desk)
    assert await press(harness, 2, aid, "U1") == ANSWERS[DecisionOutcome.FIRST_APPROVAL]
    assert await press(harness, 3, aid, "U2", approve=False, author="Lee") == "approval denied"
    assert await press(harness, 2, aid, "U3", author="Max") == f"approval {aid} is already denied"
    await harness.desk.settle()
    assert approval_actions.CALLS == []
    assert (await harness.approval(aid))["state"] == "denied"
    assert (await harness.system_texts(cid))[-1].startswith("[Approval — refund_order: PERMISSION_DENIED. A person denied it")


async def test_a_person_who_approved_and_then_denies_denies(start_desk: StartDesk) -> None:
    """A change of mind is a denial: fail closed. Their one vote row holds their last word."""
    harness, _, aid = await start(start_desk)
    await press(harness, 2, aid, "U1")
    assert await press(harness, 2, aid, "U1", approve=False) == "approval denied"
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert view["state"] == "denied"
    assert [(v["voter"], v["approve"]) for v in view["votes"]] == [("person:kim", False)]
    assert approval_actions.CALLS == []


async def test_a_decision_nobody_verified_is_refused_and_recorded(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk)
    assert await press(harness, 2, aid, None) == ANSWERS[DecisionOutcome.UNIDENTIFIED]
    # No owner.token, but the desk has people: a decision with no credential is nobody's, and
    # the API asks who is calling (a personal token decides as its person)
    refused = await harness.client.post(f"/api/approvals/{aid}/decision", json={"decision": "approve"})
    assert refused.status_code == 401
    assert refused.json()["error"] == "unauthorized"
    path = harness.desk.approvals.decision_url(aid).removeprefix("http://desk.test")
    page = await harness.client.get(path)
    assert "cannot count as one of the two" in page.text
    posted = await harness.client.post(path, data={"token": path.rsplit("/", 1)[1], "decision": "approve", "name": "Kim"})
    assert posted.status_code == 403
    assert "Not counted: this decision must come from a person of the desk" in posted.text
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert (view["state"], view["votes"]) == ("pending", [])
    assert (await kinds(harness)).count("approval_vote_refused") == 2  # the press and the page; the API asked who first
    assert approval_actions.CALLS == []


async def test_a_press_from_an_identity_linked_to_nobody_is_refused_approve_or_deny(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk)
    assert await press(harness, 2, aid, "U9", author="stranger") == ANSWERS[DecisionOutcome.UNLINKED]
    assert await press(harness, 3, aid, "U9", approve=False, author="stranger") == ANSWERS[DecisionOutcome.UNLINKED]
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert (view["state"], view["votes"]) == ("pending", [])
    refusals = await trail(harness, "approval_vote_refused")
    assert [(e.actor, e.detail["voter"], e.detail["decision"]) for e in refusals] == [
        ("stranger", "2:U9", "approve"), ("stranger", "3:U9", "deny")]
    assert all(e.detail["why"] == "a person must decide and this identity is linked to nobody" for e in refusals)


async def test_the_owner_token_is_not_a_person_through_the_api_the_inbox_or_the_page(start_desk: StartDesk) -> None:
    """Under owner.token the API, the inbox's owner-token session and a page opened with it are
    the desk's service identity: refused, saying why, and recorded; with one person's approval
    it stays pending, and only a second person runs it."""
    harness, _, aid = await start(start_desk, owner={"token": OWNER_TOKEN})
    assert await press(harness, 2, aid, "U1") == ANSWERS[DecisionOutcome.FIRST_APPROVAL]
    by_api = await decide_by_api(harness, aid, decided_by="Olga")
    assert (by_api.status_code, by_api.json()["error"]) == (403, "approval_needs_a_person")
    assert by_api.json()["details"]["hint"] == ANSWERS[DecisionOutcome.NOT_A_PERSON]

    logged_in = await harness.client.post("/inbox/login", data={"token": OWNER_TOKEN, "next": "/inbox"})
    assert logged_in.status_code == 303
    path = harness.desk.approvals.decision_url(aid).removeprefix("http://desk.test")
    page = await harness.client.get(path)
    assert "Approved by Kim, waiting for a second person." in page.text
    assert "cannot count as one of the two" in page.text  # the owner token is nobody
    posted = await harness.client.post(path, data={"token": path.rsplit("/", 1)[1], "decision": "approve"})
    assert posted.status_code == 403
    assert "the owner token is a service identity, not a person" in posted.text

    inbox = (await harness.client.get("/inbox")).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox)
    assert csrf is not None
    decided = await harness.client.post(f"/inbox/approvals/{aid}/decision", data={"csrf": csrf.group(1), "decision": "approve"})
    assert "the owner token is a service identity, not a person" in unquote(decided.headers["location"])
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert (view["state"], [v["voter"] for v in view["votes"]]) == ("pending", ["person:kim"])
    assert approval_actions.CALLS == []
    refusals = await trail(harness, "approval_vote_refused")
    assert [(e.detail["via"], e.detail["voter"]) for e in refusals] == [("api", "owner"), ("link", "owner"), ("inbox", "owner")]

    assert await press(harness, 3, aid, "U2", author="Lee") == "approval approved"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]
    assert [v["via"] for v in (await harness.approval(aid))["votes"]] == ["channel:2", "channel:3"]


async def test_a_person_signed_in_to_the_inbox_counts_as_themselves(start_desk: StartDesk) -> None:
    """The inbox's own person and the same person's channel identity are one voter."""
    harness, _, aid = await start(start_desk)
    token, _ = await harness.desk.sessions.open(await harness.desk.people.get("kim"), via="password")
    harness.client.cookies.set("handoff_session", token)
    inbox = (await harness.client.get("/inbox")).text
    csrf = re.search(r'name="csrf" value="([^"]+)"', inbox)
    assert csrf is not None
    decided = await harness.client.post(f"/inbox/approvals/{aid}/decision", data={"csrf": csrf.group(1), "decision": "approve"})
    assert "waiting for a second person" in unquote(decided.headers["location"])
    assert await press(harness, 2, aid, "U1") == ANSWERS[DecisionOutcome.SAME_PERSON]
    assert await press(harness, 2, aid, "U2", author="Lee") == "approval approved"
    await harness.desk.settle()
    view = await harness.approval(aid)
    assert [(v["voter"], v["via"]) for v in view["votes"]] == [("person:kim", "inbox"), ("person:lee", "channel:2")]
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]


async def test_no_second_approval_in_time_expires_and_never_runs(start_desk: StartDesk) -> None:
    harness, cid, aid = await start(start_desk, two_person(timeout="1m"))
    await press(harness, 2, aid, "U1")
    harness.desk.clock.advance(timedelta(seconds=61))  # type: ignore[attr-defined]
    assert await press(harness, 3, aid, "U2") == f"approval {aid} is already pending"  # past its deadline: not counted
    assert await harness.desk.approvals.expire_due() == 1
    await harness.desk.settle()
    assert (await harness.approval(aid))["state"] == "expired"
    assert approval_actions.CALLS == []
    assert (await harness.system_texts(cid))[-1].startswith("[Approval — refund_order: PERMISSION_DENIED. Nobody approved it in time.")


async def test_approvals_racing_run_it_once_and_never_on_one_persons_word(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk)
    approvals = harness.desk.approvals
    same = await asyncio.gather(*(approvals.decide(aid, approve=True, by="Kim", via=f"channel:{2 + n % 2}", voter="person:kim")
                                  for n in range(3)))
    assert sorted(r.outcome for r in same) == sorted([DecisionOutcome.FIRST_APPROVAL] + [DecisionOutcome.SAME_PERSON] * 2)
    others = await asyncio.gather(*(approvals.decide(aid, approve=True, by=f"P{n}", via="channel:3", voter=f"person:p{n}")
                                    for n in range(2, 6)))
    assert sorted(r.outcome for r in others) == sorted([DecisionOutcome.DECIDED] + [DecisionOutcome.CLOSED] * 3)
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]
    assert len((await harness.approval(aid))["votes"]) == 2


@pytest.mark.postgres
async def test_postgres_two_instances_count_two_people_once(start_desk: StartDesk, database_url: str) -> None:
    """Two instances on one database, pressed at once: the approval row queues the votes, so
    two people approve it once and the same person on both instances counts once."""
    if not database_url.startswith("postgres"):
        pytest.skip("the two instances share a PostgreSQL database")
    clock = ManualClock()
    one, _, aid = await start(start_desk, clock=clock)
    two = await start_desk(channels=CHANNELS, actions=[two_person()], adapters=SCRIPTED, clock=clock)
    same = await asyncio.gather(*(desk.desk.approvals.decide(aid, approve=True, by="Kim", via="channel:2", voter="person:kim")
                                  for desk in (one, two)))
    assert sorted(r.outcome for r in same) == [DecisionOutcome.FIRST_APPROVAL, DecisionOutcome.SAME_PERSON]
    both = await asyncio.gather(*(desk.desk.approvals.decide(aid, approve=True, by=f"P{n}", via="channel:3", voter=f"person:p{n}")
                                  for n, desk in enumerate((one, two))))
    assert sorted(r.outcome for r in both) == [DecisionOutcome.CLOSED, DecisionOutcome.DECIDED]
    await one.desk.settle()
    await two.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]
    async with one.desk.db.read() as session:
        assert await session.scalar(select(func.count()).select_from(ApprovalVote)) == 2


# --------------------------------------------------------------------------- one identity across providers

SLACK_TOKEN, SLACK_SECRET, SLACK_CHANNEL = "xoxb-test-token", "slack-signing-secret-for-tests", "C0APPROVE"
TELEGRAM_SECRET = "test_webhook-secret-1"


def provider_channels(slack: FakeSlack, telegram: FakeTelegram) -> list[dict[str, Any]]:
    return [
        {"id": 2, "kind": "slack", "label": "Approvers", "bot_token": SLACK_TOKEN, "signing_secret": SLACK_SECRET,
         "channel": SLACK_CHANNEL, "api_base_url": slack.url},
        {"id": 3, "kind": "telegram", "label": "Approvers on Telegram", "bot_token": TELEGRAM_TOKEN, "chat_id": STAFF_CHAT_ID,
         "api_base_url": telegram.base_url, "mode": "webhook", "webhook_secret": TELEGRAM_SECRET},
    ]


class Presses:
    """Approve pressed on the real Slack and Telegram prompts of one approval, signed as each provider signs."""

    def __init__(self, harness: Harness, slack: FakeSlack, telegram: FakeTelegram, aid: str) -> None:
        self.harness, self.slack, self.telegram, self.aid = harness, slack, telegram, aid
        self.slack_prompt = next(m for m in slack.top_level(SLACK_CHANNEL) if m["metadata"]["event_payload"]["handoff"] == aid)
        self.telegram_prompt = telegram.sent_to(STAFF_CHAT_ID)[-1]

    async def in_slack(self, user: str, name: str) -> None:
        body = block_actions(channel=SLACK_CHANNEL, user=user, user_name=name, message_ts=self.slack_prompt["ts"],
                             value=self.aid, action_id="approval_approve", block_id="approval_actions")
        answered = await self.harness.client.post("/webhooks/2", content=body, headers=signed_headers(
            SLACK_SECRET, body, content_type="application/x-www-form-urlencoded"))
        assert answered.status_code == 200, answered.text
        await self.harness.desk.settle()

    async def in_telegram(self, user: dict[str, Any]) -> None:
        update = self.telegram.callback_update(self.telegram_prompt["message_id"], user=user, data=f"ap:{self.aid}:y")
        answered = await self.harness.client.post("/webhooks/3", json=update,
                                                  headers={"X-Telegram-Bot-Api-Secret-Token": TELEGRAM_SECRET})
        assert answered.status_code == 200, answered.text
        await self.harness.desk.settle()


async def providers_desk(start_desk: StartDesk, slack: FakeSlack, telegram: FakeTelegram) -> tuple[Harness, Presses]:
    harness = await start_desk(channels=provider_channels(slack, telegram), actions=[two_person(approval_channels=[2, 3])],
                               delivery={"base_backoff": "10ms"})
    # Olga is Slack user U0OLGA and Telegram user 501 (SAM's id); Kim is Telegram user 502
    await person(harness, "olga", "Olga Petrova", ("slack", "U0OLGA"), ("telegram", str(SAM["id"])))
    await person(harness, "kim", "Kim Ito", ("telegram", str(KIM["id"])))
    cid = await harness.conversation()
    aid = await harness.ask_approval(cid, order_id="1234", amount=25)
    return harness, Presses(harness, slack, telegram, aid)


@pytest.fixture
async def slack() -> Any:
    fake = await FakeSlack(token=SLACK_TOKEN, channels=(SLACK_CHANNEL,),
                           users={"U0OLGA": "olga.p", "U0SAM": "Sam", "U0KIM": "Kim"}).start()
    yield fake
    await fake.stop()


async def test_one_person_from_slack_and_telegram_counts_once_and_a_second_person_runs_it_once(
    slack: FakeSlack, telegram: FakeTelegram, start_desk: StartDesk,
) -> None:
    """The issue's identity test: Olga approves in Slack and again in Telegram (two provider
    identities, one person): still pending. Kim approves in Telegram: it runs once, and the
    receipt and the audit trail name both people."""
    harness, presses = await providers_desk(start_desk, slack, telegram)
    aid = presses.aid
    await presses.in_slack("U0OLGA", "olga.p")
    await presses.in_telegram(SAM)  # Telegram user 501 is Olga too
    view = await harness.approval(aid)
    assert (view["state"], [(v["voter"], v["name"], v["via"]) for v in view["votes"]]) == (
        "pending", [("person:olga", "Olga Petrova", "channel:2")])
    assert approval_actions.CALLS == []
    assert "approval_vote_repeated" in await kinds(harness)

    await presses.in_telegram(KIM)
    await presses.in_telegram(KIM)  # a late press on the old prompt changes nothing
    view = await harness.approval(aid)
    assert (view["state"], view["run_state"], view["receipt"]["decided_by"]) == ("approved", "succeeded", "Olga Petrova and Kim Ito")
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]
    [approved] = await trail(harness, "approval_approved")
    assert (approved.actor, approved.detail["approved_by_people"]) == ("Olga Petrova and Kim Ito", ["olga", "kim"])
    assert [e.person_id for e in await trail(harness, "approval_vote")] == ["olga", "kim"]


async def test_an_unlinked_slack_user_is_refused_and_recorded_and_two_linked_ones_approve(
    slack: FakeSlack, telegram: FakeTelegram, start_desk: StartDesk,
) -> None:
    """The desk tells people apart by the identity the provider's signed call carries, linked to a
    person: Sam's Slack account is linked to nobody, so Sam's press is refused, however often."""
    harness, presses = await providers_desk(start_desk, slack, telegram)
    await presses.in_slack("U0SAM", "sam")
    await presses.in_slack("U0SAM", "sam")
    view = await harness.approval(presses.aid)
    assert (view["state"], view["votes"]) == ("pending", [])
    refusals = await trail(harness, "approval_vote_refused")
    assert [(e.actor, e.detail["voter"], e.person_id) for e in refusals] == [("Sam", "2:U0SAM", None)] * 2
    await presses.in_slack("U0OLGA", "olga.p")
    await presses.in_telegram(KIM)
    view = await harness.approval(presses.aid)
    assert (view["state"], [v["voter"] for v in view["votes"]]) == ("approved", ["person:olga", "person:kim"])
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]


# --------------------------------------------------------------------------- one person's approval


ONE_PERSON = refund_action(2, policy="ask_always", approval_channels=[2, 3])


async def test_one_person_approvals_take_a_press_from_an_identity_linked_to_nobody_by_default(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk, ONE_PERSON)
    assert await press(harness, 2, aid, "U9", author="stranger") == "approval approved"  # as before people: allow
    assert (await harness.approval(aid))["receipt"]["decided_by"] == "stranger"


async def test_one_person_approvals_refuse_unlinked_presses_and_bare_links_when_the_config_says_so(
    start_desk: StartDesk,
) -> None:
    refusing, _, aid = await start(start_desk, ONE_PERSON, sign_in={"approvals_from_unlinked": "refuse"})
    assert await press(refusing, 2, aid, "U9", author="stranger") == ANSWERS[DecisionOutcome.UNLINKED]
    path = refusing.desk.approvals.decision_url(aid).removeprefix("http://desk.test")
    bare_link = await refusing.client.post(path, data={"token": path.rsplit("/", 1)[1], "decision": "approve"})
    assert bare_link.status_code == 403
    assert (await refusing.approval(aid))["state"] == "pending"
    assert [e.detail["why"] for e in await trail(refusing, "approval_vote_refused")] == [
        "a person must decide and this identity is linked to nobody", "a person must decide and nobody verified who this was"]
    assert await press(refusing, 3, aid, "U1") == "approval approved"  # Kim is a person
    assert (await refusing.approval(aid))["receipt"]["decided_by"] == "Kim"


def test_who_may_decide() -> None:
    """`refusal`: the one rule, for each kind of voter."""
    for required, unlinked, person, owner, stranger, nobody in [
        (2, "allow", None, DecisionOutcome.NOT_A_PERSON, DecisionOutcome.UNLINKED, DecisionOutcome.UNIDENTIFIED),
        (2, "refuse", None, DecisionOutcome.NOT_A_PERSON, DecisionOutcome.UNLINKED, DecisionOutcome.UNIDENTIFIED),
        (1, "allow", None, None, None, None),
        (1, "refuse", None, None, DecisionOutcome.UNLINKED, DecisionOutcome.UNIDENTIFIED),
    ]:
        outcomes = [refusal(voter, approvals_required=required, unlinked=unlinked)
                    for voter in ("person:olga", "owner", "2:U1", None)]
        assert outcomes == [person, owner, stranger, nobody], (required, unlinked)


def test_a_channel_scopes_the_providers_user_id() -> None:
    assert channel_voter(2, "U1") == "2:U1"
    assert channel_voter(3, "U1") != channel_voter(2, "U1")  # the same number on two providers is two identities
    assert channel_voter(2, None) is None
    assert channel_voter(2, "") is None


# --------------------------------------------------------------------------- through a route


def on_route(**overrides: Any) -> dict[str, Any]:
    return refund_action(20, **{"policy": "ask_always", "timeout": "30m", **overrides})


async def test_a_route_asks_its_first_step_then_the_next_when_nobody_decides(start_desk: StartDesk) -> None:
    harness, cid, aid = await start(start_desk, on_route(), routes=[LADDER])
    assert (len(sent(harness, 2, ApprovalPrompt)), sent(harness, 3, ApprovalPrompt)) == (1, [])
    view = await harness.approval(aid)
    assert (view["channel_ids"], view["route_id"], view["step"]) == ([2], 20, 0)
    approvals = harness.desk.approvals
    harness.desk.clock.advance(timedelta(minutes=4))  # type: ignore[attr-defined]
    assert await approvals.escalate_due() == 0
    harness.desk.clock.advance(timedelta(minutes=1))  # type: ignore[attr-defined]
    assert await approvals.escalate_due() == 1
    assert await approvals.escalate_due() == 0  # fired once
    await harness.desk.settle()
    assert len(sent(harness, 3, ApprovalPrompt)) == 1
    view = await harness.approval(aid)
    assert (view["channel_ids"], view["step"], view["escalate_at"]) == ([2, 3], 1, None)  # the last step
    harness.desk.clock.advance(timedelta(minutes=10))  # type: ignore[attr-defined]
    assert await approvals.escalate_due() == 0  # past the last step nothing more is sent

    assert await press(harness, 2, aid, "U1") == "approval approved"  # the earlier prompt still answers; first wins
    assert await press(harness, 3, aid, "U2") == f"approval {aid} is already approved"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]
    assert len(sent(harness, 2, ApprovalClosed)) == len(sent(harness, 3, ApprovalClosed)) == 1
    assert "approval_escalated" in await kinds(harness)


async def test_nothing_escalates_after_a_decision(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk, on_route(), routes=[LADDER])
    assert await press(harness, 2, aid, "U1", approve=False) == "approval denied"
    harness.desk.clock.advance(timedelta(minutes=6))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.escalate_due() == 0
    await harness.desk.settle()
    assert sent(harness, 3, ApprovalPrompt) == []


async def test_a_route_past_its_last_step_still_expires_at_its_deadline(start_desk: StartDesk) -> None:
    harness, cid, aid = await start(start_desk, on_route(timeout="8m"), routes=[LADDER])
    harness.desk.clock.advance(timedelta(minutes=5))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.escalate_due() == 1
    harness.desk.clock.advance(timedelta(minutes=3))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.escalate_due() == 0
    assert await harness.desk.approvals.expire_due() == 1
    await harness.desk.settle()
    assert (await harness.approval(aid))["state"] == "expired"
    assert approval_actions.CALLS == []


async def test_a_step_outside_its_hours_is_skipped(start_desk: StartDesk) -> None:
    ladder = {**LADDER, "steps": [{"notify": [2], "claim_within": "5m", "hours": "mondays"}, {"notify": [3], "claim_within": "5m"}]}
    harness, _, aid = await start(start_desk, on_route(), routes=[ladder], hours=CLOSED_HOURS, clock=closed_clock())
    view = await harness.approval(aid)
    assert (view["channel_ids"], view["step"], view["escalate_at"]) == ([3], 1, None)
    assert (sent(harness, 2, ApprovalPrompt), len(sent(harness, 3, ApprovalPrompt))) == ([], 1)


async def test_a_later_step_outside_its_hours_is_not_asked_and_the_ladder_stops(start_desk: StartDesk) -> None:
    ladder = {**LADDER, "steps": [{"notify": [2], "claim_within": "5m"}, {"notify": [3], "claim_within": "5m", "hours": "mondays"}]}
    harness, _, aid = await start(start_desk, on_route(), routes=[ladder], hours=CLOSED_HOURS, clock=closed_clock())
    harness.desk.clock.advance(timedelta(minutes=5))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.escalate_due() == 0
    assert await harness.desk.approvals.escalate_due() == 0
    await harness.desk.settle()
    assert sent(harness, 3, ApprovalPrompt) == []
    view = await harness.approval(aid)
    assert (view["state"], view["channel_ids"], view["escalate_at"]) == ("pending", [2], None)
    assert (await kinds(harness)).count("approval_not_escalated") == 1


async def test_a_route_and_two_people_together(start_desk: StartDesk) -> None:
    harness, _, aid = await start(start_desk, on_route(approvals_required=2), routes=[LADDER])
    assert await press(harness, 2, aid, "U1") == ANSWERS[DecisionOutcome.FIRST_APPROVAL]
    harness.desk.clock.advance(timedelta(minutes=5))  # type: ignore[attr-defined]
    assert await harness.desk.approvals.escalate_due() == 1  # one approval is not a decision: the ladder goes on
    assert await press(harness, 3, aid, "U2") == "approval approved"
    await harness.desk.settle()
    assert approval_actions.CALLS == [{"order_id": "1234", "amount": 25}]


@pytest.mark.postgres
async def test_postgres_an_escalation_fires_once_with_two_desks(start_desk: StartDesk, database_url: str) -> None:
    if not database_url.startswith("postgres"):
        pytest.skip("the two desks share a PostgreSQL database")
    clock = ManualClock()
    one, _, aid = await start(start_desk, on_route(), routes=[LADDER], clock=clock)
    two = await start_desk(channels=CHANNELS, actions=[on_route()], adapters=SCRIPTED, routes=[LADDER], clock=clock)
    clock.advance(timedelta(minutes=5))
    fired = await asyncio.gather(one.desk.approvals.escalate_due(), two.desk.approvals.escalate_due())
    assert sorted(fired) == [0, 1]
    await one.desk.settle()
    await two.desk.settle()
    async with one.desk.db.read() as session:
        prompts_to_3 = await session.scalar(select(func.count()).select_from(OutboxItem).where(
            OutboxItem.channel_id == 3))  # the one message channel 3 gets: the escalated prompt
    assert prompts_to_3 == 1
    assert (await one.approval(aid))["channel_ids"] == [2, 3]


# --------------------------------------------------------------------------- check-config


def actions_problem(*actions: dict[str, Any], **sections: Any) -> str:
    channels = [*CHANNELS, {"id": 7, "kind": "agent", "label": "Sibling", "agent": {"kind": "rules"}}]
    return config_problem(channels=channels, actions=list(actions), **sections)


def test_approvals_from_unlinked_is_allow_or_refuse() -> None:
    assert "sign_in.approvals_from_unlinked: Input should be 'allow' or 'refuse'" in config_problem(
        sign_in={"approvals_from_unlinked": "sometimes"})


def test_two_people_needs_ask_always() -> None:
    report = actions_problem(refund_action(2, approvals_required=2))
    assert report.splitlines()[0].startswith("actions[0].approvals_required: 2 needs policy: ask_always")
    assert "actions[0].approvals_required: Input should be 1 or 2" in actions_problem(
        refund_action(2, policy="ask_always", approvals_required=3))


def test_approval_channels_accept_a_route_and_name_what_is_wrong() -> None:
    from tests.conftest import make_config

    config = make_config("sqlite:///x.db", channels=CHANNELS, routes=[LADDER], actions=[on_route(approvals_required=2)])
    assert config.actions[0].approval_channels == [20]
    second = {"id": 21, "label": "Others", "steps": [{"notify": [3], "claim_within": "5m"}]}
    report = actions_problem(on_route(approval_channels=[20, 21, 9]), routes=[LADDER, second])
    assert report.splitlines() == [
        "actions[0].approval_channels[1]: a second route (20 is one already); name one route at most",
        "actions[0].approval_channels[2]: no channel with id 9 (configured: 1, 2, 3, 7; routes: 20, 21)",
    ]

